// SPDX-License-Identifier: Apache-2.0
#pragma once
// RMSNorm (Zhang and Sennrich 2019), Llama's normalization: y = x / sqrt(mean(x^2) + eps) * g.
// The host kernels are in ref/nn/rmsnorm.hpp. Reductions accumulate in double.
//   forward   r = 1 / sqrt(mean_j x_j^2 + eps),  y_j = g_j x_j r
//   backward  dx_j += r g_j dy_j - r^3 / C * x_j * sum_i g_i dy_i x_i,   dg_j += sum_rows dy_j x_j r
//             (or dx_j = dr_j + ..., from the residual stream's gradient dr: no copy of dr first)
// forward_quantized is the fused producer: the backend writes the next linear's quantized copies
// of y directly (backend::rmsnorm_quantize), and y itself only when asked for.
#include <cmath>
#include <cstddef>
#include <string>

#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/parameter.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {
class rmsnorm {
 public:
  rmsnorm() = default;
  rmsnorm(backend& be, std::string name, std::size_t dim, dtype type, double eps = 1e-5) : be_(&be), eps_(eps) {
    weight_ = make_parameter(be, std::move(name), 1, dim, type, /*decay=*/false);
    initialize(be, weight_, parameter_init::constant(1.0));
  }

  // x (M, C) -> y (M, C); keeps x and rstd for backward.
  void forward(const tensor& x, tensor& y) {
    save(x);
    be_->rmsnorm_forward(x, weight_.value, y, rstd_, eps_);
  }
  // x (M, C) -> the copies of y that `plan` asks for (and y when given); keeps x and rstd.
  qpair forward_quantized(const tensor& x, const quant_plan& plan, tensor* y) {
    save(x);
    return be_->rmsnorm_quantize(x, weight_.value, rstd_, eps_, plan, y);
  }
  // dx (M, C) += input gradient, or dx = dr + input gradient when dr is given (the gradient
  // that reaches x by the residual path); weight gradient accumulated when trainable.
  void backward(const tensor& dy, tensor& dx, const tensor* dr = nullptr) {
    if (weight_.trainable) materialize_grad(*be_, weight_);
    be_->rmsnorm_backward(dy, x_, weight_.value, rstd_, dx, weight_.trainable ? &weight_.grad : nullptr, dr);
  }
  void release_saved() noexcept {
    x_.reset();
    rstd_.reset();
  }

  std::size_t dim() const noexcept { return weight_.cols(); }
  parameter& weight() noexcept { return weight_; }
  const parameter& weight() const noexcept { return weight_; }

 private:
  void save(const tensor& x) {
    x_ = x;
    rstd_ = be_->alloc_uninitialized(x.rows(), 1, stat_type(x.type()), mem_tag::activation);  // (M, 1), written by the forward
  }

  backend* be_ = nullptr;
  double eps_ = 1e-5;
  parameter weight_;  // (1, C)
  tensor x_, rstd_;   // saved: (M, C), (M, 1)
};

}  // namespace nn
MXKIT_END_NAMESPACE
