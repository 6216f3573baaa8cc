// SPDX-License-Identifier: Apache-2.0
#pragma once
// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") on a frozen
// base linear: y = X W^T + s * (X A^T) B^T with A (r, K), B (N, r), s = alpha / r. B starts at
// zero so training starts from the base model. The adapter GEMMs run in the recipe's high
// precision (as LoRA adapters stay in bf16 in FP8/FP4 training stacks); they are tiny.
//   forward   h = X A^T (M, r),  Y += s h B^T
//   backward  dB += s dY^T h,  dh = s dY B,  dA += dh^T X,  dX += dh A
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/parameter.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct lora_config {
  std::size_t rank = 16;
  double alpha = 32.0;
};

class lora_adapter {
 public:
  lora_adapter(backend& be, const std::string& prefix, std::size_t in, std::size_t out, const lora_config& c, dtype type,
               std::uint64_t seed)
      : config_(c) {
    detail::require(c.rank >= 1 && c.rank <= (in < out ? in : out), "lora '", prefix, "': rank ", c.rank, " must be in [1, min(", in,
                    ", ", out, ")]");
    a_ = make_parameter(be, prefix + ".lora_a", c.rank, in, type);   // (r, K)
    b_ = make_parameter(be, prefix + ".lora_b", out, c.rank, type);  // (N, r), zero
    // Kaiming-uniform bound 1/sqrt(K), as common LoRA implementations initialize A.
    be.write(a_.value, uniform_values(a_.value.size(), seed, mix_stream(seed, 0x10A), 1.0 / std::sqrt(static_cast<double>(in))));
  }

  double scale() const noexcept { return config_.alpha / static_cast<double>(config_.rank); }
  const lora_config& config() const noexcept { return config_; }
  parameter& a() noexcept { return a_; }
  parameter& b() noexcept { return b_; }
  const parameter& a() const noexcept { return a_; }
  const parameter& b() const noexcept { return b_; }

  // y (M, N) += s * (x A^T) B^T
  void forward(backend& be, const operand_spec& high, const tensor& x, tensor& y, bool training) {
    const std::size_t M = x.rows(), r = config_.rank;
    const float s = static_cast<float>(scale());
    qpair qx;
    if (training) qx = be.quantize_both(x, request(high, block_axis::rowwise), request(high, block_axis::columnwise));
    else qx.rowwise = be.quantize(x, request(high, block_axis::rowwise));
    tensor h = be.alloc(M, r, x.type(), mem_tag::activation);  // (M, r)
    be.gemm(gemm_product::fprop, qx.rowwise, be.quantize(a_.value, request(high, block_axis::rowwise)), h);
    qpair qh;
    if (training) qh = be.quantize_both(h, request(high, block_axis::rowwise), request(high, block_axis::columnwise));
    else qh.rowwise = be.quantize(h, request(high, block_axis::rowwise));
    be.gemm(gemm_product::fprop, qh.rowwise, be.quantize(b_.value, request(high, block_axis::rowwise)), y, s, 1.0f);
    x_col_ = qx.columnwise;  // (K, M) stored: dA
    h_col_ = qh.columnwise;  // (r, M) stored: dB
  }

  // dA, dB accumulate; dx (M, K) += the adapter's input gradient when given.
  void backward(backend& be, const operand_spec& high, const tensor& dy, tensor* dx) {
    detail::require(x_col_.defined(), "lora backward without a training forward");
    const std::size_t M = dy.rows(), r = config_.rank;
    const float s = static_cast<float>(scale());
    const qpair qdy = be.quantize_both(dy, request(high, block_axis::rowwise), request(high, block_axis::columnwise));
    if (b_.trainable) be.gemm(gemm_product::wgrad, qdy.columnwise, h_col_, b_.grad, s, grad_beta(b_));  // (N, r)
    tensor dh = be.alloc(M, r, dy.type(), mem_tag::activation);                              // (M, r)
    be.gemm(gemm_product::dgrad, qdy.rowwise, be.quantize(b_.value, request(high, block_axis::columnwise)), dh, s, 0.0f);
    const qpair qdh = be.quantize_both(dh, request(high, block_axis::rowwise), request(high, block_axis::columnwise));
    if (a_.trainable) be.gemm(gemm_product::wgrad, qdh.columnwise, x_col_, a_.grad, 1.0f, grad_beta(a_));  // (r, K)
    if (dx) be.gemm(gemm_product::dgrad, qdh.rowwise, be.quantize(a_.value, request(high, block_axis::columnwise)), *dx, 1.0f, 1.0f);
    release_saved();
  }

  void release_saved() noexcept {
    x_col_.reset();
    h_col_.reset();
  }

 private:
  static quant_request request(const operand_spec& high, block_axis axis) {
    quant_request q;
    q.spec = high;
    q.axis = axis;
    q.use = operand_use::adapter;
    q.tag = mem_tag::quantized_activation;
    return q;
  }

  lora_config config_;
  parameter a_, b_;
  qtensor x_col_, h_col_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
