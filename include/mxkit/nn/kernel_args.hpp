// SPDX-License-Identifier: Apache-2.0
#pragma once
// Arguments the layer kernels of every backend share (nn/backend.hpp, ref/nn/): the attention
// geometry and one parameter's AdamW update (ref::adamw_update; backend::adamw_step forms one per
// parameter from its host arguments and the clip factor and step counter in backend memory).
#include <cstddef>
#include <cstdint>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// Attention geometry: tokens are rows b*seq + t; a qkv row is [q heads | k heads | v heads].
struct head_shape {
  std::size_t batch = 1, seq = 1;
  std::size_t n_heads = 1, n_kv_heads = 1, head_dim = 1;

  std::size_t tokens() const noexcept { return batch * seq; }
  std::size_t q_dim() const noexcept { return n_heads * head_dim; }
  std::size_t kv_dim() const noexcept { return n_kv_heads * head_dim; }
  std::size_t qkv_dim() const noexcept { return q_dim() + 2 * kv_dim(); }
};

// The gradient clipping factor of a global norm (Pascanu et al. 2013): max_norm / norm when
// clipping is on (max_norm > 0) and the norm exceeds it, else 1 (a non-finite norm fails the
// comparison: 1, and the optimizer skips the step). One rule for the host and the device
// (ref::host_backend, gpu/nn/global_norm.hpp).
MXKIT_HD constexpr double clip_factor(double norm, double max_norm) noexcept {
  return max_norm > 0.0 && norm > max_norm && norm - norm == 0.0 ? max_norm / norm : 1.0;
}

struct adamw_hyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  double grad_scale = 1.0;  // gradient clipping factor, applied before the moments
  std::uint64_t step = 1;   // 1-based, for bias correction
};

}  // namespace nn
MXKIT_END_NAMESPACE
