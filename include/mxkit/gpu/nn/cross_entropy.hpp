// SPDX-License-Identifier: Apache-2.0
#pragma once
// Softmax cross-entropy over the vocabulary fused with its gradient, the kernel of
// ref/nn/cross_entropy.hpp with float statistics:
//   loss = mean_r (logsumexp(z_r) - z_r[target_r]),  dz_r = (softmax(z_r) - onehot(target_r)) / rows
// The gradient overwrites the logits in place (llm.c's fused classifier): the (rows, vocab)
// logits are the largest activation of a language model, and nothing reads them afterwards.
// One block per row. Pass 1 reads the row once with the online normalizer (Milakov and
// Gimelshein 2018, "Online normalizer calculation for softmax"): each thread keeps a running
// max m and sum s of exp(z - m); the (m, s) pairs merge across the block in a fixed order
// (gpu/nn/reduce.hpp's butterfly, then warps in order). Pass 2 reads the row again (from L2
// while the row is resident) and writes the gradient. Per-row losses go to a caller workspace;
// a one-block kernel adds them in a fixed order, in double, into the mean: the same bits every
// run.
// A target outside [0, vocab) sets *error to 1 (sticky), makes that row's loss (and so the
// mean) NaN, and its gradient row is the softmax without the one-hot; nothing outside the row
// is read.
// Bytes moved (s = sizeof(T)): rows * vocab * s read, and with the gradient another read and a
// write of as much; 8 bytes a row for the target and the row's loss.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/device.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/nn/reduce.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int cross_entropy_threads = 256;

template <class T>
struct cross_entropy_params {
  T* logits;                    // (rows, vocab); the gradient when `gradient`
  const std::int32_t* targets;  // (rows)
  float* row_loss;              // (rows) workspace
  int* error;
  std::size_t rows, vocab;
  bool gradient;
};

// (m, s) <- the normalizer of both sets: max of the maxima, sums rescaled to it. Symmetric in
// its two arguments, bit for bit (fmax and + are commutative), as the butterfly needs. An
// empty set (s = 0, m = -Inf) contributes 0 without forming -Inf - -Inf.
__device__ inline void merge_normalizer(float& m, float& s, float om, float os) noexcept {
  const float nm = fmaxf(m, om);
  s = (s == 0.0f ? 0.0f : s * expf(m - nm)) + (os == 0.0f ? 0.0f : os * expf(om - nm));
  m = nm;
}

template <class T>
MXKIT_GLOBAL void __launch_bounds__(cross_entropy_threads) cross_entropy_kernel(const cross_entropy_params<T> p) {
  constexpr int N = chunk_elements<T>, warps = cross_entropy_threads / warp_size;
  constexpr std::size_t step = static_cast<std::size_t>(cross_entropy_threads) * N;
  __shared__ float part_m[warps], part_s[warps];
  for (std::size_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    T* z = p.logits + r * p.vocab;
    const std::int32_t target = p.targets[r];
    const bool valid = target >= 0 && static_cast<std::size_t>(target) < p.vocab;
    // Read before any thread of the block writes the row (the barriers below come first).
    const float zt = threadIdx.x == 0 && valid ? load_float(z[target]) : 0.0f;
    float m = -INFINITY, s = 0.0f;
    for (std::size_t c = threadIdx.x * static_cast<std::size_t>(N); c < p.vocab; c += step) {
      float v[N];
      load_chunk(z, c, p.vocab, v, -INFINITY);
      for (int k = 0; k < N; ++k) {
        if (v[k] > m) {
          s = s * expf(m - v[k]) + 1.0f;
          m = v[k];
        } else if (!(v[k] == -INFINITY)) {  // -Inf adds exp(-Inf) = 0; NaN goes in (and out as NaN)
          s += expf(v[k] - m);
        }
      }
    }
    for (int o = warp_size / 2; o > 0; o /= 2) {
      const float om = shfl_xor(m, o), os = shfl_xor(s, o);
      merge_normalizer(m, s, om, os);
    }
    if (lane_id() == 0) part_m[threadIdx.x / warp_size] = m, part_s[threadIdx.x / warp_size] = s;
    sync_threads();
    m = part_m[0], s = part_s[0];
    for (int w = 1; w < warps; ++w) merge_normalizer(m, s, part_m[w], part_s[w]);
    sync_threads();  // part_* are rewritten by the next row
    if (threadIdx.x == 0) {
      p.row_loss[r] = valid ? logf(s) + m - zt : bit_cast<float>(0x7FC00000u);
      if (!valid) atomic_max(reinterpret_cast<unsigned*>(p.error), 1u);
    }
    if (p.gradient) {
      const float rows = static_cast<float>(p.rows);
      const std::size_t t = valid ? static_cast<std::size_t>(target) : p.vocab;
      for (std::size_t c = threadIdx.x * static_cast<std::size_t>(N); c < p.vocab; c += step) {
        float v[N];
        load_chunk(z, c, p.vocab, v);
        for (int k = 0; k < N; ++k) v[k] = (expf(v[k] - m) / s - (c + static_cast<std::size_t>(k) == t ? 1.0f : 0.0f)) / rows;
        store_chunk(z, c, p.vocab, v);
      }
    }
  }
}

// *loss = (sum of row_loss in a fixed order, in double) / rows. One block of Threads.
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) cross_entropy_mean_kernel(const float* row_loss, std::size_t rows, float* loss) {
  __shared__ double partial[Threads / warp_size];
  double acc = 0.0;
  for (std::size_t r = threadIdx.x; r < rows; r += Threads) acc += static_cast<double>(row_loss[r]);
  acc = block_sum<Threads>(acc, partial);
  if (threadIdx.x == 0) *loss = static_cast<float>(acc / static_cast<double>(rows));
}

}  // namespace detail

// Floats of workspace cross_entropy needs: one loss per row.
inline constexpr std::size_t cross_entropy_workspace(std::size_t rows) noexcept { return rows; }

// *loss = mean over rows of logsumexp(logits[r]) - logits[r][targets[r]], and, when `gradient`,
// logits[r] = (softmax(logits[r]) - onehot(targets[r])) / rows in place. logits (rows, vocab);
// targets (rows); loss: one float; error: one int (set to 1 on a target outside [0, vocab));
// workspace: cross_entropy_workspace(rows) floats. All device pointers. Asynchronous on `stream`.
template <layer_element T>
void cross_entropy(T* logits, const std::int32_t* targets, std::size_t rows, std::size_t vocab, bool gradient, float* loss, int* error,
                   std::span<float> workspace, stream_t stream = nullptr) {
  mxkit::detail::require(rows > 0, "gpu::cross_entropy: rows is 0 (the mean of no losses)");
  mxkit::detail::require(vocab > 0 && vocab <= 0x7FFFFFFFu, "gpu::cross_entropy: vocab ", vocab, " is outside [1, ", 0x7FFFFFFF,
                         "] (int32 targets)");
  mxkit::detail::require(logits && targets && loss && error, "gpu::cross_entropy: null pointer (logits ", logits != nullptr,
                         ", targets ", targets != nullptr, ", loss ", loss != nullptr, ", error ", error != nullptr, ")");
  mxkit::detail::require(workspace.data() != nullptr && workspace.size() >= cross_entropy_workspace(rows), "gpu::cross_entropy: workspace of ",
                         workspace.size(), " floats, need ", cross_entropy_workspace(rows), " (one per row)");
  const detail::cross_entropy_params<T> p{logits, targets, workspace.data(), error, rows, vocab, gradient};
  const int grid = detail::persistent_grid<detail::cross_entropy_kernel<T>>(detail::cross_entropy_threads, rows);
  detail::cross_entropy_kernel<T><<<grid, detail::cross_entropy_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
  detail::cross_entropy_mean_kernel<detail::cross_entropy_threads><<<1, detail::cross_entropy_threads, 0, stream>>>(workspace.data(), rows, loss);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace gpu
MXKIT_END_NAMESPACE
