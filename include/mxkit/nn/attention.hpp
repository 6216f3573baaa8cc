#pragma once
// Causal multi-head attention with grouped-query heads (Ainslie et al. 2023, "GQA"): n_heads
// query heads share n_kv_heads key/value heads, query head h reads kv head h / (n_heads /
// n_kv_heads). Exact softmax attention in the activation dtype with double accumulation; the
// probabilities are saved for backward (a device kernel would recompute them, flash style).
//   forward   S = q k^T / sqrt(D) (u <= t),  P = softmax(S),  O = P v
//   backward  dP = dO v^T,  dS = P * (dP - rowsum(P * dP)),  dq = dS k / sqrt(D),
//             dk = dS^T q / sqrt(D),  dv = P^T dO
#include <cmath>
#include <cstddef>
#include <vector>

#include <mxkit/nn/backend.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {
class causal_attention {
 public:
  // qkv (B*T, qkv_dim) -> out (B*T, n_heads*D); keeps qkv and the probabilities for backward.
  void forward(backend& be, const tensor& qkv, tensor& out, const head_shape& s) {
    require_shape(qkv, s.tokens(), s.qkv_dim(), "attention qkv");
    require_shape(out, s.tokens(), s.q_dim(), "attention output");
    qkv_ = qkv;
    probs_ = be.alloc(s.batch * s.n_heads, s.seq * s.seq, qkv.type(), mem_tag::activation);  // (B*H, T*T)
    be.attention_forward(qkv, out, probs_, s);
  }
  void backward(backend& be, const tensor& dout, tensor& dqkv, const head_shape& s) {
    require_shape(dout, s.tokens(), s.q_dim(), "attention backward dO");
    require_shape(dqkv, s.tokens(), s.qkv_dim(), "attention backward dqkv");
    be.attention_backward(dout, qkv_, probs_, dqkv, s);
  }
  void release_saved() noexcept {
    qkv_.reset();
    probs_.reset();
  }

 private:
  tensor qkv_, probs_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
