// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal multi-head attention with grouped-query heads (Ainslie et al. 2023, "GQA"): n_heads
// query heads share n_kv_heads key/value heads, query head h reads kv head h / (n_heads /
// n_kv_heads). Exact softmax attention with double accumulation. Nothing of size (T, T) is
// saved: the forward pass keeps the log-sum-exp of each score row, and the backward pass
// recomputes the probabilities from q, k and it, as FlashAttention-2 does (Dao 2023):
//   forward   S = q k^T / sqrt(D) (u <= t),  L = logsumexp(S),  P = exp(S - L),  O = P v
//   backward  P = exp(S - L),  dP = dO v^T,  Dt = rowsum(dO * O),  dS = P * (dP - Dt),
//             dq = dS k / sqrt(D),  dk = dS^T q / sqrt(D),  dv = P^T dO
// (rowsum(dO * O) = rowsum(P * dP) because O = P v.) P is rounded to the activation type T in both
// passes before it multiplies v or dO, as a kernel holding P in registers of that type does.
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cmath>
#include <cstddef>
#include <vector>

#include <mxkit/nn/kernel_args.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// qkv (B*T, qkv_dim); out (B*T, n_heads*D); lse (B*n_heads, T), S the statistics type.
template <class T, class S>
void attention_forward(const T* qkv, T* out, S* lse, const nn::head_shape& s) {
  const std::size_t D = s.head_dim, T_ = s.seq, row = s.qkv_dim(), group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> score(T_);
  std::vector<T> p(T_);
  for (std::size_t b = 0; b < s.batch; ++b)
    for (std::size_t h = 0; h < s.n_heads; ++h) {
      const std::size_t kq = s.q_dim() + (h / group) * D, vq = s.q_dim() + s.kv_dim() + (h / group) * D;
      for (std::size_t t = 0; t < T_; ++t) {
        const T* q = qkv + (b * T_ + t) * row + h * D;
        double mx = -INFINITY;
        for (std::size_t u = 0; u <= t; ++u) {
          const T* k = qkv + (b * T_ + u) * row + kq;
          double d = 0.0;
          for (std::size_t i = 0; i < D; ++i) d += static_cast<double>(q[i]) * k[i];
          score[u] = d * scale;
          mx = score[u] > mx ? score[u] : mx;
        }
        double sum = 0.0;
        for (std::size_t u = 0; u <= t; ++u) sum += (score[u] = std::exp(score[u] - mx));
        lse[(b * s.n_heads + h) * T_ + t] = static_cast<S>(mx + std::log(sum));
        for (std::size_t u = 0; u <= t; ++u) p[u] = static_cast<T>(score[u] / sum);
        T* o = out + (b * T_ + t) * s.q_dim() + h * D;
        for (std::size_t i = 0; i < D; ++i) {
          double acc = 0.0;
          for (std::size_t u = 0; u <= t; ++u) acc += static_cast<double>(p[u]) * qkv[(b * T_ + u) * row + vq + i];
          o[i] = static_cast<T>(acc);
        }
      }
    }
}

// dqkv is overwritten.
template <class T, class S>
void attention_backward(const T* dout, const T* qkv, const T* out, const S* lse, T* dqkv, const nn::head_shape& s) {
  const std::size_t D = s.head_dim, T_ = s.seq, row = s.qkv_dim(), group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (std::size_t i = 0; i < s.tokens() * row; ++i) dqkv[i] = T(0);
  for (std::size_t b = 0; b < s.batch; ++b)
    for (std::size_t h = 0; h < s.n_heads; ++h) {
      const std::size_t kq = s.q_dim() + (h / group) * D, vq = s.q_dim() + s.kv_dim() + (h / group) * D;
      for (std::size_t t = 0; t < T_; ++t) {
        const T* dO = dout + (b * T_ + t) * s.q_dim() + h * D;
        const T* o = out + (b * T_ + t) * s.q_dim() + h * D;
        const T* q = qkv + (b * T_ + t) * row + h * D;
        T* dq = dqkv + (b * T_ + t) * row + h * D;
        const double L = static_cast<double>(lse[(b * s.n_heads + h) * T_ + t]);
        double rowsum = 0.0;  // Dt = rowsum(dO * O)
        for (std::size_t i = 0; i < D; ++i) rowsum += static_cast<double>(dO[i]) * o[i];
        for (std::size_t u = 0; u <= t; ++u) {
          const T* k = qkv + (b * T_ + u) * row + kq;
          const T* v = qkv + (b * T_ + u) * row + vq;
          double d = 0.0, dp = 0.0;
          for (std::size_t i = 0; i < D; ++i) {
            d += static_cast<double>(q[i]) * k[i];
            dp += static_cast<double>(dO[i]) * v[i];
          }
          const double p = static_cast<double>(static_cast<T>(std::exp(d * scale - L)));
          const double ds = p * (dp - rowsum) * scale;
          T* dk = dqkv + (b * T_ + u) * row + kq;
          T* dv = dqkv + (b * T_ + u) * row + vq;
          for (std::size_t i = 0; i < D; ++i) {
            dq[i] += static_cast<T>(ds * k[i]);
            dk[i] += static_cast<T>(ds * q[i]);
            dv[i] += static_cast<T>(p * dO[i]);
          }
        }
      }
    }
}

}  // namespace ref
MXKIT_END_NAMESPACE
