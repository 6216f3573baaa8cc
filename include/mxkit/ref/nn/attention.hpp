#pragma once
// Causal multi-head attention with grouped-query heads (Ainslie et al. 2023, "GQA"): n_heads
// query heads share n_kv_heads key/value heads, query head h reads kv head h / (n_heads /
// n_kv_heads). Exact softmax attention in the activation dtype with double accumulation; the
// probabilities are saved for backward (a device kernel would recompute them, flash style).
//   forward   S = q k^T / sqrt(D) (u <= t),  P = softmax(S),  O = P v
//   backward  dP = dO v^T,  dS = P * (dP - rowsum(P * dP)),  dq = dS k / sqrt(D),
//             dk = dS^T q / sqrt(D),  dv = P^T dO
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cmath>
#include <cstddef>
#include <vector>

#include <mxkit/nn/kernel_args.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {


// qkv (B*T, qkv_dim); out (B*T, n_heads*D); probs (B*n_heads, T*T), zero above the diagonal.
template <class T>
void attention_forward(const T* qkv, T* out, T* probs, const nn::head_shape& s) {
  const std::size_t D = s.head_dim, T_ = s.seq, row = s.qkv_dim(), group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> score(T_);
  for (std::size_t b = 0; b < s.batch; ++b)
    for (std::size_t h = 0; h < s.n_heads; ++h) {
      const std::size_t kq = s.q_dim() + (h / group) * D, vq = s.q_dim() + s.kv_dim() + (h / group) * D;
      T* P = probs + (b * s.n_heads + h) * T_ * T_;
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
        for (std::size_t u = 0; u < T_; ++u) P[t * T_ + u] = u <= t ? static_cast<T>(score[u] / sum) : T(0);
        T* o = out + (b * T_ + t) * s.q_dim() + h * D;
        for (std::size_t i = 0; i < D; ++i) {
          double acc = 0.0;
          for (std::size_t u = 0; u <= t; ++u) acc += static_cast<double>(P[t * T_ + u]) * qkv[(b * T_ + u) * row + vq + i];
          o[i] = static_cast<T>(acc);
        }
      }
    }
}

template <class T>
void attention_backward(const T* dout, const T* qkv, const T* probs, T* dqkv, const nn::head_shape& s) {
  const std::size_t D = s.head_dim, T_ = s.seq, row = s.qkv_dim(), group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (std::size_t i = 0; i < s.tokens() * row; ++i) dqkv[i] = T(0);
  std::vector<double> dp(T_);
  for (std::size_t b = 0; b < s.batch; ++b)
    for (std::size_t h = 0; h < s.n_heads; ++h) {
      const std::size_t kq = s.q_dim() + (h / group) * D, vq = s.q_dim() + s.kv_dim() + (h / group) * D;
      const T* P = probs + (b * s.n_heads + h) * T_ * T_;
      for (std::size_t t = 0; t < T_; ++t) {
        const T* dO = dout + (b * T_ + t) * s.q_dim() + h * D;
        const T* q = qkv + (b * T_ + t) * row + h * D;
        T* dq = dqkv + (b * T_ + t) * row + h * D;
        double pdp = 0.0;
        for (std::size_t u = 0; u <= t; ++u) {
          const T* v = qkv + (b * T_ + u) * row + vq;
          double d = 0.0;
          for (std::size_t i = 0; i < D; ++i) d += static_cast<double>(dO[i]) * v[i];
          dp[u] = d;
          pdp += static_cast<double>(P[t * T_ + u]) * d;
        }
        for (std::size_t u = 0; u <= t; ++u) {
          const double p = P[t * T_ + u], ds = p * (dp[u] - pdp) * scale;
          const T* k = qkv + (b * T_ + u) * row + kq;
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
