// SPDX-License-Identifier: Apache-2.0
// Attention with the log-sum-exp contract (ref/nn/attention.hpp): the forward output is the
// output of the probability-saving math it replaced, bit for bit; the backward pass, which
// recomputes the probabilities from q, k and the log-sum-exp (FlashAttention-2), matches the
// probability-saving backward to double precision in f64 and to float rounding in f32 (the
// tolerances below say why); and a finite-difference check of the attention alone, in double.
#include <cmath>
#include <vector>

#include <mxkit/host/host_backend.hpp>
#include <mxkit/ref/nn/attention.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;

namespace {

// The math the attention kernels used before: probabilities (B*H, T*T) saved by the forward
// pass, read by the backward pass (the version of ref/nn/attention.hpp before the log-sum-exp).
template <class T>
void probs_forward(const T* qkv, T* out, T* probs, const head_shape& s) {
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
void probs_backward(const T* dout, const T* qkv, const T* probs, T* dqkv, const head_shape& s) {
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

// max |a - b| / max |b|
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}

template <class T>
std::vector<double> as_doubles(const std::vector<T>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

TEST_CASE("attention: the log-sum-exp path against the probability-saving math", "[nn][attention]") {
  const head_shape s{2, 9, 4, 2, 8};  // grouped: two query heads per kv head
  for (const dtype t : {dtype::f64, dtype::f32}) {
    INFO(name_of(t));
    host_backend be;
    tensor qkv = random_tensor(be, s.tokens(), s.qkv_dim(), 3, 1.5, t), dout = random_tensor(be, s.tokens(), s.q_dim(), 4, 1.0, t);
    tensor out = be.alloc(s.tokens(), s.q_dim(), t, mem_tag::activation), lse = be.alloc(s.batch * s.n_heads, s.seq, t, mem_tag::activation);
    tensor dqkv = be.alloc(s.tokens(), s.qkv_dim(), t, mem_tag::activation);
    be.attention_forward(qkv, out, lse, s);
    be.attention_backward(dout, qkv, out, lse, dqkv, s);
    const std::vector<double> q = be.read(qkv), dO = be.read(dout);
    std::vector<double> want_out(s.tokens() * s.q_dim()), want_dqkv(s.tokens() * s.qkv_dim());
    if (t == dtype::f64) {
      std::vector<double> probs(s.batch * s.n_heads * s.seq * s.seq);
      probs_forward(q.data(), want_out.data(), probs.data(), s);
      probs_backward(dO.data(), q.data(), probs.data(), want_dqkv.data(), s);
      CHECK(be.read(out) == want_out);  // the forward output is unchanged, bit for bit
      // Recomputed P = exp(S - L) against saved P = exp(S - max) / sum: both exact to double
      // rounding, and D = rowsum(dO * O) equals rowsum(P * dP) to the same rounding.
      CHECK(relative_error(be.read(dqkv), want_dqkv) < 1e-12);
    } else {
      std::vector<float> qf(q.begin(), q.end()), dOf(dO.begin(), dO.end()), outf(want_out.size()), dq(want_dqkv.size());
      std::vector<float> probs(s.batch * s.n_heads * s.seq * s.seq);
      probs_forward(qf.data(), outf.data(), probs.data(), s);
      probs_backward(dOf.data(), qf.data(), probs.data(), dq.data(), s);
      CHECK(floats(be, out) == outf);  // bit for bit: P rounded to float before P v, as before
      // The probabilities differ in the last bits: the log-sum-exp is stored in f32 (|L| ~ 3
      // here, so exp(S - L) carries a relative error up to ~2^-22 against ~2^-24 for the float
      // P that was saved), and D comes from the f32 output instead of the f32 P. Both enter dS
      // through dP - D, which cancels. Measured: 1.7e-7 of the largest gradient; 1e-6 bounds it
      // with room (a few float ulps of the largest entry).
      CHECK(relative_error(be.read(dqkv), as_doubles(dq)) < 1e-6);
      CHECK(relative_error(be.read(dqkv), as_doubles(dq)) > 0.0);  // (a different computation, not a copy)
    }
    // Nothing (T, T)-sized was allocated: the saved state is (B*H, T).
    CHECK(lse.size() == s.batch * s.n_heads * s.seq);
  }
}

TEST_CASE("attention: finite-difference gradient check in double", "[nn][attention][gradcheck]") {
  const head_shape s{2, 5, 4, 2, 4};
  host_backend be;
  tensor qkv = random_tensor(be, s.tokens(), s.qkv_dim(), 7, 1.0, dtype::f64);
  tensor r = random_tensor(be, s.tokens(), s.q_dim(), 8, 1.0, dtype::f64);  // loss = sum(out * r)
  tensor out = be.alloc(s.tokens(), s.q_dim(), dtype::f64, mem_tag::activation);
  tensor lse = be.alloc(s.batch * s.n_heads, s.seq, dtype::f64, mem_tag::activation);
  tensor dqkv = be.alloc(s.tokens(), s.qkv_dim(), dtype::f64, mem_tag::activation);
  be.attention_forward(qkv, out, lse, s);
  be.attention_backward(r, qkv, out, lse, dqkv, s);
  const std::vector<double> analytic = be.read(dqkv), x0 = be.read(qkv), R = be.read(r);
  auto loss = [&](const std::vector<double>& x) {
    be.write(qkv, x);
    be.attention_forward(qkv, out, lse, s);
    double l = 0.0;
    const std::vector<double> o = be.read(out);
    for (std::size_t i = 0; i < o.size(); ++i) l += o[i] * R[i];
    return l;
  };
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < x0.size(); ++i) {  // every entry of q, k and v
    std::vector<double> x = x0;
    const double h = 1e-5;
    x[i] = x0[i] + h;
    const double up = loss(x);
    x[i] = x0[i] - h;
    const double down = loss(x);
    worst = std::max(worst, std::fabs((up - down) / (2 * h) - analytic[i]));
    scale = std::max(scale, std::fabs(analytic[i]));
  }
  INFO("max |fd - analytic| = " << worst << ", max |grad| = " << scale);
  CHECK(scale > 0.1);
  CHECK(worst <= 1e-8 * std::max(1.0, scale));
}
