// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal multi-head attention with grouped-query heads (Ainslie et al. 2023, "GQA"): n_heads
// query heads share n_kv_heads key/value heads, query head h reads kv head h / (n_heads /
// n_kv_heads). The layer saves qkv, the output and the log-sum-exp of every score row
// (batch*n_heads, seq), never the (seq, seq) probabilities; the backward pass recomputes them
// (FlashAttention-2, Dao 2023; the math is in ref/nn/attention.hpp).
//   forward   S = q k^T / sqrt(D) (u <= t),  L = logsumexp(S),  O = exp(S - L) v
//   backward  P = exp(S - L),  dP = dO v^T,  dS = P * (dP - rowsum(dO * O)),  dq = dS k / sqrt(D),
//             dk = dS^T q / sqrt(D),  dv = P^T dO
#include <cmath>
#include <cstddef>

#include <mxkit/nn/backend.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {
class causal_attention {
 public:
  // qkv (B*T, qkv_dim) -> out (B*T, n_heads*D); keeps qkv, out and the log-sum-exp for backward.
  void forward(backend& be, const tensor& qkv, tensor& out, const head_shape& s) {
    lse_ = be.alloc_uninitialized(s.batch * s.n_heads, s.seq, stat_type(qkv.type()), mem_tag::activation);  // (B*H, T), written
    be.attention_forward(qkv, out, lse_, s);
    qkv_ = qkv;
    out_ = out;
  }
  // dqkv (B*T, qkv_dim) overwritten.
  void backward(backend& be, const tensor& dout, tensor& dqkv, const head_shape& s) {
    be.attention_backward(dout, qkv_, out_, lse_, dqkv, s);
  }
  void release_saved() noexcept {
    qkv_.reset();
    out_.reset();
    lse_.reset();
  }

 private:
  tensor qkv_, out_, lse_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
