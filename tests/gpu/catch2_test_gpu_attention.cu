// SPDX-License-Identifier: Apache-2.0
// mxkit:sm90a (built for sm_90a beside the generic targets, as the project's Hopper tests)
// gpu::attention_forward / attention_backward (include/mxkit/gpu/nn/attention.hpp) against the
// host reference (include/mxkit/ref/nn/attention.hpp) instantiated in double on the same
// bf16-rounded inputs, so every bound below is the device's own error. Causal GQA, B = 2, T not
// a multiple of the 64-row tile, H / Hkv = 1 and 4, D = 64 and 128, a row stride with padding
// (poisoned: a read of it shows as NaN, a write of it is caught). Outputs are poisoned (all-ones
// bytes: NaN in bf16 and float), so an unwritten element fails. Three paths run: the tensor-core
// one (mma.sync), the portable one the AMD build uses (its emulation of the same instruction), and
// on an sm_90a device the Hopper kernels (wgmma and TMA, gpu/nn/attention/sm90/).
//
// Bounds (u = 2^-8, bf16's unit roundoff; u32 = 2^-24). The kernels round P (forward, dV) and dS
// (dQ, dK) to bf16 to feed the tensor cores (Dao 2023), so each output is a sum whose terms are
// each off by at most u relative, and the normalizer l sums the unrounded p: to first order the
// error of y = sum_j w_j x_j is at most 2 u sum_j |w_j| |x_j| ("abs" below, computed here in
// double from the exact P and dS), plus u |y| for the bf16 store. fp32 accumulation adds
// gamma_n u32 (n <= T + D) of the same magnitude sum, under 1% of u for these shapes, and the
// fp32 dP - Delta difference is off by u sum|dO||O| (Delta reads the stored bf16 O, as Dao 2023)
// plus (D + 16) u32 (sum|dO||v| + sum|dO||O|) per dS element: an absolute error, not relative to
// dS (where dS is exactly 0, as in row 0 of dq, only it remains), so it is added to |dS| in abs
// with a factor 2. Bound: u |y| + 4 u abs (margin 2 over the first-order 2 u).
// LSE: the fp32 score is off by at most gamma_D scale sum_i |q_i k_i| <= D u32 scale |q| max|k|
// (Cauchy-Schwarz), the row sum by T u32 relative (T u32 absolute in the log), exp2/log2 by a
// few ulp: bound 2 (D + T + 16) u32 (scale |q| max|k| + |lse| + 1).
// Determinism: every output is run twice and must be the same bits.
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/attention.hpp>
#include <mxkit/ref/nn/attention.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "gpu_test_util.hpp"

namespace {

namespace gpu = mxkit::gpu;
using mxkit::bfloat16;
using mxkit::nn::head_shape;
using gpu_test::poisoned;
using gpu_test::same_bits;
using gpu_test::upload;

constexpr double u16 = 0x1p-8, u32 = 0x1p-24;

double widen(bfloat16 x) { return x.to_float(); }
double widen(float x) { return x; }

std::string compare(const char* what, const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& bound) {
  if (got.size() != want.size()) return std::string(what) + ": sizes differ";
  std::size_t bad = 0, first = 0;
  double worst = 0;  // largest error / bound
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= bound[i]) && bad++ == 0) first = i;
    if (err / bound[i] > worst) worst = err / bound[i];
  }
  if (bad == 0) return "";
  std::ostringstream s;
  s.precision(10);
  s << what << ": " << bad << " of " << got.size() << " outside the bound; first at " << first << ": device " << got[first]
    << ", reference " << want[first] << ", error " << std::fabs(got[first] - want[first]) << ", bound " << bound[first]
    << "; worst error/bound " << worst;
  return s.str();
}

using kernels_t = gpu::detail::attention_kernels;
const char* name(kernels_t k) { return k == kernels_t::sm90 ? "sm90" : k == kernels_t::tensor_core ? "mma" : "portable"; }

void check_attention(kernels_t kernels, std::size_t batch, std::size_t seq, std::size_t heads, std::size_t kv_heads, std::size_t dim,
                     std::size_t pad, double sd, std::uint64_t seed) {
  INFO(name(kernels) << " attention B " << batch << " T " << seq << " H " << heads << " Hkv " << kv_heads << " D " << dim
                     << " stride pad " << pad << " sd " << sd);
  const head_shape s{batch, seq, heads, kv_heads, dim};
  const std::size_t row = s.qkv_dim(), stride = row + pad, N = s.tokens(), od = s.q_dim(), group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, sd), unit(0.0, 1.0);
  const bfloat16 nan_bf16 = bfloat16::from_bits(0xFFFF);
  std::vector<bfloat16> qkv_t(N * stride, nan_bf16), dout_t(N * od);
  std::vector<double> qkv(N * row), dout(N * od);
  for (std::size_t r = 0; r < N; ++r)
    for (std::size_t c = 0; c < row; ++c) {
      qkv_t[r * stride + c] = bfloat16::from_float(static_cast<float>(normal(gen)));
      qkv[r * row + c] = widen(qkv_t[r * stride + c]);
    }
  for (std::size_t i = 0; i < dout.size(); ++i) {
    dout_t[i] = bfloat16::from_float(static_cast<float>(unit(gen)));
    dout[i] = widen(dout_t[i]);
  }

  // Reference, and the magnitude sums of the bounds.
  std::vector<double> out(N * od), probs(batch * heads * seq * seq), dqkv(N * row);
  std::vector<double> ref_lse(batch * heads * seq);
  mxkit::ref::attention_forward(qkv.data(), out.data(), ref_lse.data(), s);
  mxkit::ref::attention_backward(dout.data(), qkv.data(), out.data(), ref_lse.data(), dqkv.data(), s);
  // The probabilities the bounds weigh by, from the reference's log-sum-exp (the reference saves
  // no (T, T) matrix): P[t][u] = exp(q_t . k_u / sqrt(D) - lse_t) for u <= t, 0 above.
  {
    const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(dim));
    for (std::size_t b = 0; b < batch; ++b)
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t tq = 0; tq < seq; ++tq)
          for (std::size_t u = 0; u <= tq; ++u) {
            const double* q = qkv.data() + (b * seq + tq) * row + h * dim;
            const double* k = qkv.data() + (b * seq + u) * row + od + (h / group) * dim;
            double dot = 0;
            for (std::size_t i = 0; i < dim; ++i) dot += q[i] * k[i];
            probs[((b * heads + h) * seq + tq) * seq + u] = std::exp(dot * inv_sqrt_d - ref_lse[(b * heads + h) * seq + tq]);
          }
  }
  std::vector<double> lse(batch * heads * seq), lse_bound(lse.size()), o_abs(N * od, 0.0), d_abs(N * row, 0.0);
  double kmax = 0;
  for (std::size_t r = 0; r < N; ++r)
    for (std::size_t kv = 0; kv < kv_heads; ++kv) {
      double n2 = 0;
      for (std::size_t i = 0; i < dim; ++i) n2 += qkv[r * row + od + kv * dim + i] * qkv[r * row + od + kv * dim + i];
      kmax = std::max(kmax, std::sqrt(n2));
    }
  std::vector<double> dp(seq), ds(seq);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t kc = od + (h / group) * dim, vc = od + s.kv_dim() + (h / group) * dim;
      const double* P = probs.data() + (b * heads + h) * seq * seq;
      for (std::size_t t = 0; t < seq; ++t) {
        const double* q = &qkv[(b * seq + t) * row + h * dim];
        const double* dO = &dout[(b * seq + t) * od + h * dim];
        double mx = -INFINITY, qn = 0;
        std::vector<double> sc(t + 1);
        for (std::size_t i = 0; i < dim; ++i) qn += q[i] * q[i];
        for (std::size_t u = 0; u <= t; ++u) {
          double d = 0;
          for (std::size_t i = 0; i < dim; ++i) d += q[i] * qkv[(b * seq + u) * row + kc + i];
          sc[u] = d * scale;
          mx = std::max(mx, sc[u]);
        }
        double sum = 0;
        for (std::size_t u = 0; u <= t; ++u) sum += std::exp(sc[u] - mx);
        const std::size_t li = (b * heads + h) * seq + t;
        lse[li] = mx + std::log(sum);
        lse_bound[li] = 2.0 * static_cast<double>(dim + seq + 16) * u32 * (scale * std::sqrt(qn) * kmax + std::fabs(lse[li]) + 1.0);
        double pdp = 0;
        for (std::size_t u = 0; u <= t; ++u) {
          double d = 0;
          for (std::size_t i = 0; i < dim; ++i) d += dO[i] * qkv[(b * seq + u) * row + vc + i];
          dp[u] = d;
          pdp += P[t * seq + u] * d;
        }
        double dOO = 0;  // sum |dO| |O|: Delta is computed from the stored bf16 O
        for (std::size_t i = 0; i < dim; ++i) dOO += std::fabs(dO[i]) * std::fabs(out[(b * seq + t) * od + h * dim + i]);
        for (std::size_t u = 0; u <= t; ++u) {
          const double pr = P[t * seq + u];
          double dOv = 0;
          for (std::size_t i = 0; i < dim; ++i) dOv += std::fabs(dO[i]) * std::fabs(qkv[(b * seq + u) * row + vc + i]);
          // |dS| plus the absolute error of the fp32 dP - Delta (O's bf16 rounding, u, and the
          // fp32 dot products, (D + 16) u32), divided by 4 u to ride in the 4 u abs term.
          const double e = pr * (2 * u16 * dOO + 2 * static_cast<double>(dim + 16) * u32 * (dOv + dOO)) / (4 * u16);
          ds[u] = (std::fabs(pr * (dp[u] - pdp)) + e) * scale;
          for (std::size_t i = 0; i < dim; ++i) {
            o_abs[(b * seq + t) * od + h * dim + i] += pr * std::fabs(qkv[(b * seq + u) * row + vc + i]);
            d_abs[(b * seq + t) * row + h * dim + i] += ds[u] * std::fabs(qkv[(b * seq + u) * row + kc + i]);
            d_abs[(b * seq + u) * row + kc + i] += ds[u] * std::fabs(q[i]);
            d_abs[(b * seq + u) * row + vc + i] += pr * std::fabs(dO[i]);
          }
        }
      }
    }
  std::vector<double> o_bound(out.size()), d_bound(dqkv.size());
  for (std::size_t i = 0; i < out.size(); ++i) o_bound[i] = u16 * std::fabs(out[i]) + 4 * u16 * o_abs[i] + 1e-30;
  for (std::size_t i = 0; i < dqkv.size(); ++i) d_bound[i] = u16 * std::fabs(dqkv[i]) + 4 * u16 * d_abs[i] + 1e-30;

  // Device: forward, backward, each twice.
  auto g_qkv = upload(qkv_t), g_dout = upload(dout_t);
  gpu::device_buffer<std::byte> fws(gpu::attention_forward_workspace(s)), bws(gpu::attention_backward_workspace(s));
  std::vector<bfloat16> out_h[2], dqkv_h[2];
  std::vector<float> lse_h[2];
  for (int run = 0; run < 2; ++run) {
    auto g_out = poisoned<bfloat16>(N * od), g_dqkv = poisoned<bfloat16>(N * stride);
    auto g_lse = poisoned<float>(lse.size());
    gpu::detail::attention_forward_impl(g_qkv.data(), stride, g_out.data(), g_lse.data(), s, {fws.data(), fws.size()}, kernels, nullptr);
    gpu::detail::attention_backward_impl(g_dout.data(), g_qkv.data(), stride, g_out.data(), g_lse.data(), g_dqkv.data(), s,
                                         {bws.data(), bws.size()}, kernels, nullptr);
    out_h[run] = g_out.to_host();
    lse_h[run] = g_lse.to_host();
    dqkv_h[run] = g_dqkv.to_host();
  }
  CHECK(same_bits(out_h[0], out_h[1]));
  CHECK(same_bits(lse_h[0], lse_h[1]));
  CHECK(same_bits(dqkv_h[0], dqkv_h[1]));

  std::vector<double> got_out(out.size()), got_lse(lse.size()), got_d(dqkv.size());
  for (std::size_t i = 0; i < out.size(); ++i) got_out[i] = widen(out_h[0][i]);
  for (std::size_t i = 0; i < lse.size(); ++i) got_lse[i] = widen(lse_h[0][i]);
  std::size_t pad_written = 0;
  for (std::size_t r = 0; r < N; ++r) {
    for (std::size_t c = 0; c < row; ++c) got_d[r * row + c] = widen(dqkv_h[0][r * stride + c]);
    for (std::size_t c = row; c < stride; ++c) pad_written += dqkv_h[0][r * stride + c].bits() != 0xFFFF;
  }
  CHECK(pad_written == 0);
  CHECK(compare("out", got_out, out, o_bound) == "");
  CHECK(compare("lse", got_lse, lse, lse_bound) == "");
  // dq, dk, dv separately, so a failure names its part.
  for (int part = 0; part < 3; ++part) {
    const std::size_t c0 = part == 0 ? 0 : part == 1 ? od : od + s.kv_dim(), c1 = part == 0 ? od : c0 + s.kv_dim();
    std::vector<double> g, w, bd;
    for (std::size_t r = 0; r < N; ++r)
      for (std::size_t c = c0; c < c1; ++c) {
        g.push_back(got_d[r * row + c]);
        w.push_back(dqkv[r * row + c]);
        bd.push_back(d_bound[r * row + c]);
      }
    CHECK(compare(part == 0 ? "dq" : part == 1 ? "dk" : "dv", g, w, bd) == "");
  }
}

}  // namespace

TEST_CASE("gpu attention, tensor cores: causal GQA forward and backward against the reference", "[gpu][attention][small]") {
  check_attention(kernels_t::tensor_core, 2, 77, 4, 1, 64, 0, 1.0, 1);
  check_attention(kernels_t::tensor_core, 2, 77, 2, 2, 128, 8, 1.0, 2);
  check_attention(kernels_t::tensor_core, 2, 33, 1, 1, 64, 16, 1.0, 3);
  check_attention(kernels_t::tensor_core, 2, 1, 4, 1, 128, 0, 1.0, 4);
  check_attention(kernels_t::tensor_core, 2, 100, 4, 1, 128, 8, 2.0, 5);  // sharper softmax: scores of sd ~ 4
}

TEST_CASE("gpu attention, tensor cores: several tiles", "[gpu][attention]") {
  check_attention(kernels_t::tensor_core, 2, 200, 8, 2, 64, 0, 1.0, 6);
  check_attention(kernels_t::tensor_core, 2, 190, 4, 4, 128, 0, 1.0, 7);
}

// The Hopper kernels (wgmma, TMA): tiles of 128 query rows and 128 or 64 keys, so these shapes
// cover one tile, a ragged tile, several tiles (the two-stage ring wraps) and GQA groups of 1-4.
TEST_CASE("gpu attention, sm90 wgmma kernels: against the reference", "[gpu][attention][sm90]") {
  if (gpu::detail::attention_default_kernels() != kernels_t::sm90) {
    WARN("no sm_90a device: the sm90 attention kernels are not exercised");
    return;
  }
  check_attention(kernels_t::sm90, 2, 77, 4, 1, 64, 0, 1.0, 21);
  check_attention(kernels_t::sm90, 2, 77, 2, 2, 128, 8, 1.0, 22);
  check_attention(kernels_t::sm90, 2, 1, 4, 1, 128, 0, 1.0, 23);
  check_attention(kernels_t::sm90, 2, 100, 4, 1, 128, 8, 2.0, 24);
  check_attention(kernels_t::sm90, 2, 200, 8, 2, 64, 0, 1.0, 25);
  check_attention(kernels_t::sm90, 1, 520, 4, 1, 128, 0, 1.0, 26);
  check_attention(kernels_t::sm90, 2, 384, 4, 2, 64, 8, 1.0, 27);
}

TEST_CASE("gpu attention: a workspace smaller than asked for is refused before any launch", "[gpu][attention]") {
  const head_shape s{1, 16, 2, 1, 64};
  gpu::device_buffer<bfloat16> qkv(s.tokens() * s.qkv_dim()), out(s.tokens() * s.q_dim()), dqkv(s.tokens() * s.qkv_dim());
  gpu::device_buffer<float> lse(s.batch * s.n_heads * s.seq);
  gpu::device_buffer<std::byte> ws(gpu::attention_backward_workspace(s));
  // The forward reads every operand in place (no workspace); the backward needs Delta, B*H*T floats.
  REQUIRE(gpu::attention_forward_workspace(s) == 0);
  const std::size_t b = gpu::attention_backward_workspace(s);
  REQUIRE(b == s.batch * s.n_heads * s.seq * sizeof(float));
  CHECK_THROWS_WITH(gpu::attention_backward(out.data(), qkv.data(), s.qkv_dim(), out.data(), lse.data(), dqkv.data(), s, {ws.data(), b - 1}),
                    mxkit_test::contains("workspace of " + std::to_string(b - 1) + " bytes, need " + std::to_string(b)));
  CHECK_NOTHROW(gpu::attention_forward(qkv.data(), s.qkv_dim(), out.data(), lse.data(), s, {}));
  CHECK(gpu::device_synchronize() == gpu::success);
}

TEST_CASE("gpu attention, portable path (the AMD build's): against the reference", "[gpu][attention][small]") {
  check_attention(kernels_t::portable, 2, 77, 4, 1, 64, 8, 1.0, 11);
  check_attention(kernels_t::portable, 2, 70, 2, 2, 128, 0, 1.0, 12);
}
