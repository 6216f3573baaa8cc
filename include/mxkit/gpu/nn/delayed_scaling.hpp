// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fused delayed-scaling update on the device, the twin of ref/nn/delayed_scaling.hpp: the
// rule of nn::update_scale_row (the same function, so the scales are the host's bit for bit)
// for every row of a scaling table (nn/delayed_scaling.hpp), one kernel per training step,
// a block a row.
#include <cmath>
#include <cstddef>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/config.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/delayed_scaling_rule.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int update_scales_threads = 256;

// A block per table row (a thread walking a whole row's history alone took longer than the casts
// the table serves: docs/perf/training.md). The amax: each thread folds columns tid,
// tid + Threads, ... with nn::record_amax, then a fixed tree over the threads (a max in which
// NaN wins, so the scale is the host's). The shift: chunks of Threads columns from the end down,
// each read whole before it is written, so every column moves from its old left neighbour.
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) update_scales_kernel(float* history, float* scale, const float* fp8_max, std::size_t rows,
                                                               std::size_t H, float headroom, nn::amax_algorithm algorithm) {
  __shared__ float part[Threads];
  const int tid = static_cast<int>(threadIdx.x);
  for (std::size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* h = history + r * H;
    const std::size_t span = algorithm == nn::amax_algorithm::max ? H : 1;
    float amax = 0.0f;
    if (static_cast<std::size_t>(tid) < span) {
      amax = h[tid];
      for (std::size_t k = static_cast<std::size_t>(tid) + Threads; k < span; k += Threads) nn::record_amax(amax, h[k]);
    }
    part[tid] = amax;
    sync_threads();
    for (int n = Threads / 2; n > 0; n /= 2) {
      if (tid < n) nn::record_amax(part[tid], part[tid + n]);
      sync_threads();
    }
    if (tid == 0) nn::scale_from_amax(part[0], scale[r], fp8_max[r], headroom);
    for (std::size_t end = H; end > 1;) {  // columns [first, end) take columns [first - 1, end - 1)
      const std::size_t first = end > Threads + 1 ? end - Threads : 1, k = first + static_cast<std::size_t>(tid);
      const float v = k < end ? h[k - 1] : 0.0f;
      sync_threads();
      if (k < end) h[k] = v;
      sync_threads();
      end = first;
    }
    if (tid == 0) h[0] = 0.0f;
    sync_threads();  // part[] and the row are free for the next row
  }
}

}  // namespace detail

// The fused delayed-scaling update of a whole scaling table (nn/delayed_scaling.hpp):
// history (rows, H), scale and fp8_max (rows). Asynchronous on `stream`.
inline void update_scales(float* history, float* scale, const float* fp8_max, std::size_t rows, std::size_t H,
                          const nn::delayed_scaling_config& c, stream_t stream) {
  if (rows == 0) return;
  constexpr int threads = detail::update_scales_threads;
  const float headroom = static_cast<float>(std::ldexp(1.0, c.margin));
  const unsigned blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);  // a block a row, strided beyond
  detail::update_scales_kernel<threads><<<blocks, threads, 0, stream>>>(history, scale, fp8_max, rows, H, headroom, c.algorithm);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace gpu
MXKIT_END_NAMESPACE
