// SPDX-License-Identifier: Apache-2.0
#pragma once
// The global gradient norm over every trainable tensor as one multi-tensor reduction, and the
// clipping factor, both left in device memory for gpu/nn/adamw.hpp: no host round trip per
// step (the host reads the result only when it wants to log it).
//   norm = sqrt(sum over tensors and elements of g^2)
//   clip = max_norm / norm when norm > max_norm > 0, else 1   (nn::clip_factor, the host's rule;
//          PyTorch's clip_grad_norm_ divides by norm + 1e-6 instead, a relative 1e-6 / norm)
// A norm that is Inf or NaN (an Inf or NaN in some gradient, or squares past double's range)
// sets `nonfinite`: the AdamW update skips the step, as nn::adamw does.
//
// Deterministic: kernel 1 runs a fixed grid of global_norm_blocks blocks whatever the device;
// within each tensor, thread k of the grid owns chunks k, k + grid threads, ... (gpu/nn/chunk.hpp:
// by index, not by address), sums their squares in double (the square of a float is exact in
// double, so only the additions round) and the block reduces in a fixed order into its slot of
// the caller's workspace. Kernel 2, one block, adds the slots in a fixed order. The same
// gradients give the same bits on every run, and on any device of the same warp width (the
// grid does not follow the device's size; the warp butterfly does follow the warp width).
// Bytes moved: each gradient element once (4 or 2 bytes), 16 bytes per descriptor per block
// (from cache), 8 * global_norm_blocks of workspace.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/nn/reduce.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/kernel_args.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// One tensor of the norm (lives in device memory, in an array the caller fills).
template <class G>
struct norm_tensor {
  const G* data;      // device
  std::size_t count;  // elements
  friend bool operator==(const norm_tensor&, const norm_tensor&) = default;
};

// What global_norm writes (device memory) and adamw_update reads.
struct grad_norm_result {
  float norm;              // the global norm (computed in double, rounded to float; Inf past float's range)
  float clip;              // the factor gradients are multiplied by; 1 when clipping is off or the norm is not finite
  std::int32_t nonfinite;  // 1: the norm is Inf or NaN and the step must be skipped
};

// Blocks of the sum-of-squares kernel, and doubles of workspace global_norm needs (one per block).
inline constexpr int global_norm_blocks = 1024;
inline constexpr std::size_t global_norm_workspace = global_norm_blocks;

namespace detail {

inline constexpr int global_norm_threads = 256;

template <class G>
struct global_norm_params {
  const norm_tensor<G>* tensors;  // (n_tensors)
  std::size_t n_tensors;
  double* partial;  // (global_norm_blocks)
};

template <class G>
MXKIT_GLOBAL void __launch_bounds__(global_norm_threads) global_norm_kernel(const global_norm_params<G> p) {
  constexpr int N = chunk_elements<G>;
  __shared__ double part[global_norm_threads / warp_size];
  const std::size_t first = (blockIdx.x * static_cast<std::size_t>(global_norm_threads) + threadIdx.x) * N;
  const std::size_t step = gridDim.x * static_cast<std::size_t>(global_norm_threads) * N;
  double acc = 0.0;
  for (std::size_t t = 0; t < p.n_tensors; ++t) {
    const norm_tensor<G> d = p.tensors[t];
    for (std::size_t c = first; c < d.count; c += step) {
      float v[N];
      load_chunk(d.data, c, d.count, v);
      for (int k = 0; k < N; ++k) acc = fma(static_cast<double>(v[k]), static_cast<double>(v[k]), acc);
    }
  }
  acc = block_sum<global_norm_threads>(acc, part);
  if (threadIdx.x == 0) p.partial[blockIdx.x] = acc;
}

// One block of Threads (a template, as every kernel here: see embedding_count_kernel).
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) global_norm_finish_kernel(const double* partial, float max_norm, grad_norm_result* out) {
  __shared__ double part[Threads / warp_size];
  double acc = 0.0;
  for (int b = static_cast<int>(threadIdx.x); b < global_norm_blocks; b += Threads) acc += partial[b];
  acc = block_sum<Threads>(acc, part);
  if (threadIdx.x == 0) {
    const double norm = sqrt(acc);
    const bool finite = finite_bits(norm);
    const double clip = nn::clip_factor(norm, static_cast<double>(max_norm));
    *out = grad_norm_result{static_cast<float>(norm), static_cast<float>(clip), finite ? 0 : 1};
  }
}

}  // namespace detail

// Writes *out: the norm of all `n_tensors` tensors together, the clipping factor for
// `max_norm` (0: no clipping) and the non-finite flag. tensors: a device array of descriptors;
// workspace: global_norm_workspace doubles of device memory. Asynchronous on `stream`.
template <layer_element G>
void global_norm(const norm_tensor<G>* tensors, std::size_t n_tensors, float max_norm, grad_norm_result* out, std::span<double> workspace,
                 stream_t stream = nullptr) {
  mxkit::detail::require(std::isfinite(max_norm) && max_norm >= 0.0f, "gpu::global_norm: max_norm must be finite and >= 0, got ", max_norm);
  mxkit::detail::require(out != nullptr, "gpu::global_norm: null output");
  mxkit::detail::require(n_tensors == 0 || tensors != nullptr, "gpu::global_norm: null descriptor array for ", n_tensors, " tensors");
  mxkit::detail::require(workspace.data() != nullptr && workspace.size() >= global_norm_workspace, "gpu::global_norm: workspace of ",
                         workspace.size(), " doubles, need ", global_norm_workspace);
  const detail::global_norm_params<G> p{tensors, n_tensors, workspace.data()};
  detail::global_norm_kernel<G><<<global_norm_blocks, detail::global_norm_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
  detail::global_norm_finish_kernel<detail::global_norm_threads><<<1, detail::global_norm_threads, 0, stream>>>(workspace.data(), max_norm, out);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace gpu
MXKIT_END_NAMESPACE
