// SPDX-License-Identifier: Apache-2.0
#pragma once
// AdamW (Loshchilov and Hutter 2019, decoupled weight decay) as one multi-tensor update of every
// fp32 master weight, the kernel of ref/nn/adamw.hpp in float:
//   g' = g * clip,  m = b1 m + (1 - b1) g',  v = b2 v + (1 - b2) g'^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)
// Everything that changes from step to step is read from device memory, so a training step
// needs no host round trip: the learning rate (a schedule kernel or a copy may write it), the
// clipping factor and non-finite flag of gpu/nn/global_norm.hpp, and the step count. A step
// whose norm is not finite is skipped: nothing is written and `skipped` counts it, as nn::adamw
// does; otherwise t = taken + 1 and `taken` becomes t. The counts are bumped by a one-thread
// kernel after the update (the update's blocks all read `taken` first; a block of the update
// itself could not bump it without racing them).
// Element-wise: each thread owns 4-element chunks (16-byte accesses of param, m and v where
// aligned), chunks grid-strided over each tensor. Bias corrections are formed once per thread
// in double, as the reference does, and rounded to float.
// Bytes moved: (12 + sizeof(G)) per element read and 12 written.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/nn/global_norm.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// One parameter tensor of the update (lives in device memory, in an array the caller fills).
template <class G>
struct adamw_tensor {
  float* param;        // (count) fp32 master weights, updated
  const G* grad;       // (count) float or bf16 gradient
  float* m;            // (count) first moment, updated
  float* v;            // (count) second moment, updated
  std::size_t count;
  float weight_decay;  // 0 for tensors without decay (norm weights, biases)
  // Member by member: the 4 bytes of padding after weight_decay are indeterminate, so two equal
  // lists need not be equal bytes (gpu/nn/backend_adapters.hpp compares a step's list with the last).
  friend bool operator==(const adamw_tensor&, const adamw_tensor&) = default;
};

// Step counts in device memory: `taken` updates done (the bias-correction step t of the next is
// taken + 1) and `skipped` steps skipped for a non-finite norm (nn::adamw's steps() and
// skipped_steps()).
struct adamw_step_counts {
  std::uint64_t taken;
  std::uint64_t skipped;
};

// The hyperparameters fixed for a run (nn::adamw_config's defaults).
struct adamw_settings {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
};

namespace detail {

inline constexpr int adamw_threads = 256;
inline constexpr int adamw_chunk = 4;

template <class G>
struct adamw_params {
  const adamw_tensor<G>* tensors;  // (n_tensors)
  std::size_t n_tensors;
  const float* lr;
  const grad_norm_result* norm;  // null: no clipping, never skipped
  const adamw_step_counts* counts;
  float beta1, beta2, eps;
};

template <class G>
MXKIT_GLOBAL void __launch_bounds__(adamw_threads) adamw_kernel(const adamw_params<G> p) {
  constexpr int N = adamw_chunk;
  if (p.norm && p.norm->nonfinite) return;
  const float lr = *p.lr, clip = p.norm ? p.norm->clip : 1.0f;
  const double t = static_cast<double>(p.counts->taken + 1);
  const float bc1 = static_cast<float>(1.0 - pow(static_cast<double>(p.beta1), t));
  const float bc2 = static_cast<float>(1.0 - pow(static_cast<double>(p.beta2), t));
  const float b1 = p.beta1, b2 = p.beta2, c1 = 1.0f - p.beta1, c2 = 1.0f - p.beta2;
  const std::size_t first = (blockIdx.x * static_cast<std::size_t>(adamw_threads) + threadIdx.x) * N;
  const std::size_t step = gridDim.x * static_cast<std::size_t>(adamw_threads) * N;
  for (std::size_t k = 0; k < p.n_tensors; ++k) {
    const adamw_tensor<G> d = p.tensors[k];
    for (std::size_t c = first; c < d.count; c += step) {
      float w[N], g[N], m[N], v[N];
      load_chunk(d.param, c, d.count, w);
      load_chunk(d.grad, c, d.count, g);
      load_chunk(d.m, c, d.count, m);
      load_chunk(d.v, c, d.count, v);
      for (int e = 0; e < N; ++e) {
        const float gc = g[e] * clip;
        m[e] = b1 * m[e] + c1 * gc;
        v[e] = b2 * v[e] + c2 * gc * gc;
        const float update = (m[e] / bc1) / (sqrtf(v[e] / bc2) + p.eps) + d.weight_decay * w[e];
        w[e] = w[e] - lr * update;
      }
      store_chunk(d.param, c, d.count, w);
      store_chunk(d.m, c, d.count, m);
      store_chunk(d.v, c, d.count, v);
    }
  }
}

// One thread (a template, as every kernel here: see embedding_count_kernel).
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) adamw_count_kernel(const grad_norm_result* norm, adamw_step_counts* counts) {
  if (norm && norm->nonfinite) ++counts->skipped;
  else ++counts->taken;
}

// The update's grid: what is resident (the element count is in device memory, unknown here).
inline constexpr std::size_t adamw_unbounded_work = ~std::size_t{0};

}  // namespace detail

// One AdamW step over the `n_tensors` tensors of the device array `tensors`, with the learning
// rate *lr, the clipping factor and skip flag of *norm (from global_norm; null: no clipping,
// never skipped), and the step counts *counts, updated. All pointers are device memory.
// Asynchronous on `stream`.
template <layer_element G>
void adamw_update(const adamw_tensor<G>* tensors, std::size_t n_tensors, const float* lr, const grad_norm_result* norm,
                  adamw_step_counts* counts, const adamw_settings& s = {}, stream_t stream = nullptr) {
  mxkit::detail::require(s.beta1 >= 0.0f && s.beta1 < 1.0f && s.beta2 >= 0.0f && s.beta2 < 1.0f, "gpu::adamw_update: betas must be in [0, 1), got ",
                         s.beta1, ", ", s.beta2);
  mxkit::detail::require(std::isfinite(s.eps) && s.eps >= 0.0f, "gpu::adamw_update: eps must be finite and >= 0, got ", s.eps);
  mxkit::detail::require(lr && counts, "gpu::adamw_update: null pointer (lr ", lr != nullptr, ", counts ", counts != nullptr, ")");
  mxkit::detail::require(n_tensors == 0 || tensors != nullptr, "gpu::adamw_update: null descriptor array for ", n_tensors, " tensors");
  const detail::adamw_params<G> p{tensors, n_tensors, lr, norm, counts, s.beta1, s.beta2, s.eps};
  const int grid = detail::persistent_grid<detail::adamw_kernel<G>>(detail::adamw_threads, detail::adamw_unbounded_work);
  detail::adamw_kernel<G><<<grid, detail::adamw_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
  detail::adamw_count_kernel<1><<<1, 1, 0, stream>>>(norm, counts);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace gpu
MXKIT_END_NAMESPACE
