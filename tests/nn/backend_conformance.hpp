// SPDX-License-Identifier: Apache-2.0
#pragma once
// The backend conformance suite: every operation of nn::backend (include/mxkit/nn/backend.hpp)
// run on the backend under test and on ref::host_backend, the oracle, from the same values
// written with write(), and what each stores read back and compared. A new backend inherits the
// checks by naming a subject and one macro line:
//
//   struct my_subject {
//     using backend_type = my_backend;
//     static std::unique_ptr<my_backend> make();                                   // a fresh backend
//     static backend_conformance::copy_bytes read_copy(const my_backend&, const qtensor&);  // a copy's bytes
//   };
//   MXKIT_BACKEND_CONFORMANCE_TESTS(my_subject, "my backend", "[my][nn][backend]")
//
// Instantiated for the device backend (tests/gpu/catch2_test_device_backend.cu, on a GPU) and for
// ref::host_backend itself (tests/nn/catch2_test_backend_conformance.cpp: the suite's own check,
// run in CI; the oracle must agree with itself from a fresh backend).
//
// What is compared, on small and ragged shapes (1x1, 3x37, 67x96, 130x64, ...):
//   - quantize / quantize_both / transpose (MX with and without the Hadamard rotation, random
//     signs, stochastic rounding; MXFP8 E4M3 round-up; NVFP4 1 x 16 (also rotated, random signs,
//     stochastic) and 16 x 16, with the tensor scale; FP8 through a scaling table with amax
//     recording; bf16 rowwise and columnwise) and export_fp8 / import_fp8 (the healing stash),
//     from f32 and bf16 inputs: byte for byte (codes, scales, the FP8 copy's scale and amax, the
//     history the casts wrote).
//   - pack_copy / assemble_copy (the copy gather, parallel/copy_gather.hpp, where the backend has
//     one): a copy assembled from slabs of rows is the oracle's whole copy.
//   - gemm, every precision and product (fprop, dgrad, wgrad on the copies the layers use), f32
//     and bf16 D, alpha/beta with a separate C and with C = D: within the GEMM tests' bound.
//   - update_scales after casts (max and most_recent, margin 2, a NaN amax, a row never cast):
//     history and scale exactly equal.
//   - rmsnorm (forward, fused quantize, backward with and without dw), rope, attention (head_dim
//     64 and 128, GQA), swiglu (forward, fused quantize, backward, the backward's quantize),
//     embedding, cross_entropy, global_norm, adamw_step (and a skipped step), fill / copy / axpy /
//     amax: within the bounds stated at each check. The fused producers are checked against the
//     backend's own unfused output byte for byte (the contract: the bytes quantize() gives on the
//     stored output), since the backend's and the oracle's outputs may differ by rounding.
//
// Bounds. u32 = 2^-24 and u16 = 2^-8 are float's and bf16's unit roundoff. The bounds were
// derived for the device's kernels (catch2_test_nn_kernels.cu, catch2_test_gpu_attention.cu,
// catch2_test_gemm.cu: the error against the exact result) plus the oracle's own error (its
// kernels accumulate in double and round once or twice to float), so |backend - oracle| <=
// backend bound + oracle bound: what a backend computing in fp32 with bf16 tensor-core inputs
// must meet. A result stored in bf16 is rounded by both: two correctly rounded neighbours of
// nearly the same value are at most one bf16 ulp apart, so bf16 outputs add 2 u16 of the
// magnitude. Every comparison records its worst error / bound; each check prints them (WARN), so
// the margins can be read off a run. Native operands and f64 data are the oracle's: the suite
// uses f32 and bf16 activations (f64 only where an operation takes it on every backend).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/train/training.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/host/host_backend.hpp>
#include <mxkit/parallel/copy_gather.hpp>
#include <mxkit/ref/nn/attention.hpp>

#include "../byte_compare.hpp"
#include "../catch.hpp"
#include "../ref/gemm_test_util.hpp"
#include "../ref/nvfp4_gemm_test_util.hpp"
#include "nn_test_helpers.hpp"

namespace backend_conformance {
using namespace nn_test;  // mxkit, mxkit::nn, host_backend

inline constexpr double u32 = 0x1p-24;  // float's unit roundoff
inline constexpr double u16 = 0x1p-8;   // bf16's unit roundoff
inline const double nan_value = std::numeric_limits<double>::quiet_NaN();

// ------------------------------------------------------------------------------------- reporting

// The worst error / bound of each kind of comparison, printed at the end of a test case.
struct tally {
  std::map<std::string, double> worst;
  void note(const std::string& what, double ratio) {
    double& w = worst[what];
    if (!(ratio <= w)) w = ratio;  // NaN and Inf stick
  }
  std::string str() const {
    std::ostringstream s;
    s.precision(3);
    for (const auto& [what, ratio] : worst) s << "\n  " << what << ": " << ratio;
    return s.str();
  }
};

// "" when |got - want| <= bound everywhere (equal values, equal infinities and two NaNs pass),
// else how many fail and the first.
inline std::string within(tally& tl, const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                   const std::vector<double>& bound) {
  if (got.size() != want.size() || bound.size() != want.size()) return what + ": sizes differ";
  std::size_t bad = 0, first = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if ((std::isnan(got[i]) && std::isnan(want[i])) || got[i] == want[i]) continue;
    const double err = std::fabs(got[i] - want[i]);
    const double ratio = bound[i] > 0.0 ? err / bound[i] : HUGE_VAL;
    if (!(ratio <= worst)) worst = std::isnan(ratio) ? HUGE_VAL : ratio;
    if (!(err <= bound[i]) && bad++ == 0) first = i;
  }
  tl.note(what, worst);
  if (bad == 0) return "";
  std::ostringstream s;
  s.precision(10);
  s << what << ": " << bad << " of " << got.size() << " outside the bound; first at " << first << ": backend " << got[first]
    << ", oracle " << want[first] << ", error " << std::fabs(got[first] - want[first]) << ", bound " << bound[first]
    << "; worst error/bound " << worst;
  return s.str();
}

// "" when the values are the same bits (any two NaNs count as equal), else the first difference.
inline std::string same_values(const std::string& what, const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return what + ": sizes differ";
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (mxkit::bit_cast<std::uint64_t>(got[i]) != mxkit::bit_cast<std::uint64_t>(want[i]) && bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  std::ostringstream s;
  s.precision(17);
  s << what << ": " << bad << " of " << got.size() << " differ; first at " << first << ": backend " << got[first] << ", oracle "
    << want[first];
  return s.str();
}

// ------------------------------------------------------------------------------------ inputs

// n normal(mean, sd) values (std::mt19937_64: independent of the library's Philox).
inline std::vector<double> normals(std::size_t n, std::uint64_t seed, double mean = 0.0, double sd = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> d(mean, sd);
  std::vector<double> v(n);
  for (double& x : v) x = d(gen);
  return v;
}
// The same, rounded to bf16: exact in an f32 and in a bf16 tensor alike.
inline std::vector<double> bf16_normals(std::size_t n, std::uint64_t seed, double sd = 1.0) {
  std::vector<double> v = normals(n, seed, 0.0, sd);
  for (double& x : v) x = mxkit::bfloat16::from_float(static_cast<float>(x)).to_float();
  return v;
}
// Values over many binades with outliers (the GEMM tests' matrices): blocks get different scales.
inline std::vector<double> spread_values(std::size_t rows, std::size_t cols, std::uint64_t seed, int spread = 6) {
  const std::vector<float> f = gemm_test::random_matrix(rows, cols, seed, spread);
  return {f.begin(), f.end()};
}
inline std::vector<std::int32_t> token_ids(std::size_t n, std::size_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = static_cast<std::int32_t>(gen() % 3 == 0 ? vocab / 3 : gen() % vocab);  // a third one frequent id
  return ids;
}

// One tensor in the oracle (h) and one in the backend under test (d), holding the same values
// (none: zero-filled).
struct twin {
  tensor h, d;
};
template <class B>
twin make_twin(host_backend& h, B& d, std::size_t rows, std::size_t cols, dtype t, const std::vector<double>& v = {},
               mem_tag tag = mem_tag::activation) {
  twin x{h.alloc(rows, cols, t, tag), d.alloc(rows, cols, t, tag)};
  if (!v.empty()) {
    h.write(x.h, v);
    d.write(x.d, v);
  }
  return x;
}
template <class B>
twin make_tokens(host_backend& h, B& d, const std::vector<std::int32_t>& ids, std::size_t vocab) {
  twin x{h.alloc(ids.size(), 1, dtype::i32, mem_tag::activation), d.alloc(ids.size(), 1, dtype::i32, mem_tag::activation)};
  h.write_tokens(x.h, ids, vocab);
  d.write_tokens(x.d, ids, vocab);
  return x;
}

// ------------------------------------------------------------------------- quantized copies


inline std::string layout_text(const qtensor& q) {
  std::ostringstream s;
  s << name_of(q.kind()) << " " << name_of(q.axis()) << " " << q.rows() << "x" << q.cols();
  return s.str();
}

inline std::string bytes_mismatch(const char* what, std::span<const std::uint8_t> got, std::span<const std::uint8_t> want, std::size_t row) {
  const std::string d = mxkit_test::first_difference(got, want, row, "backend", "oracle");
  return d.empty() ? "" : std::string(what) + ": " + d;
}

// The bytes of one quantized copy, as a subject reads them from its backend (S::read_copy).
struct copy_bytes {
  std::vector<std::uint8_t> codes;   // MX or FP8 codes, or the bf16 bits of the [lines, length] values
  std::vector<std::uint8_t> scales;  // MX scales ([lines, blocks])
  float fp8_scale = 0.0f;            // FP8: the scale the codes were made with; NVFP4: the tensor scale
  std::size_t code_line = 0, scale_line = 0;  // bytes per line (names a difference's line)
};
inline copy_bytes mx_bytes(const mx_tensor& t) {
  return {{t.data().begin(), t.data().end()}, {t.scales().begin(), t.scales().end()}, 0.0f, t.layout().line_bytes(),
          t.layout().blocks_per_line()};
}
inline copy_bytes nvfp4_bytes(const nvfp4_tensor& t) {
  return {{t.data().begin(), t.data().end()}, {t.scales().begin(), t.scales().end()}, t.tensor_scale(), t.layout().line_bytes(),
          t.layout().blocks_per_line()};
}
inline copy_bytes fp8_bytes(const fp8_tensor& t) { return {t.data, {}, t.scale, t.cols, 0}; }
inline copy_bytes bf16_bytes(const std::vector<bfloat16>& v, std::size_t length) {
  copy_bytes b;
  b.codes.resize(v.size() * sizeof(bfloat16));
  if (!v.empty()) std::memcpy(b.codes.data(), v.data(), b.codes.size());
  b.code_line = length * sizeof(bfloat16);
  return b;
}
// The oracle's copy.
inline copy_bytes oracle_bytes(const qtensor& q) {
  switch (q.kind()) {
    case precision::mx:
      return q.request().spec.block_scaled().is_nvfp4() ? nvfp4_bytes(host_backend::nvfp4(q)) : mx_bytes(host_backend::mx(q));
    case precision::fp8: return fp8_bytes(host_backend::fp8(q));
    case precision::bf16: return bf16_bytes(host_backend::bf16(q), q.length());
    case precision::native: break;
  }
  mxkit::detail::fail("oracle_bytes: a native copy");
}
// "" when two copies of the same layout hold the same bytes: MX codes and scales, FP8 codes and
// the scale the cast used, bf16 bits.
inline std::string bytes_mismatch(const qtensor& q, const copy_bytes& a, const copy_bytes& b) {
  switch (q.kind()) {
    case precision::mx: {
      std::string m = bytes_mismatch("mx codes", a.codes, b.codes, a.code_line);
      if (m.empty()) m = bytes_mismatch("mx scales", a.scales, b.scales, a.scale_line);
      if (m.empty() && q.request().spec.block_scaled().is_nvfp4() &&
          mxkit::bit_cast<std::uint32_t>(a.fp8_scale) != mxkit::bit_cast<std::uint32_t>(b.fp8_scale)) {
        std::ostringstream s;
        s << "nvfp4 tensor scale: backend " << a.fp8_scale << ", oracle " << b.fp8_scale;
        return s.str();
      }
      return m;
    }
    case precision::fp8: {
      if (mxkit::bit_cast<std::uint32_t>(a.fp8_scale) != mxkit::bit_cast<std::uint32_t>(b.fp8_scale)) {
        std::ostringstream s;
        s << "fp8 scale: backend " << a.fp8_scale << ", oracle " << b.fp8_scale;
        return s.str();
      }
      return bytes_mismatch("fp8 codes", a.codes, b.codes, a.code_line);
    }
    case precision::bf16: return bytes_mismatch("bf16 bits", a.codes, b.codes, a.code_line);
    case precision::native: break;
  }
  return "a native copy";
}
inline std::string layouts_differ(const qtensor& a, const qtensor& b) {
  if (!a.defined() || !b.defined()) return "a copy is missing";
  if (a.kind() != b.kind() || a.axis() != b.axis() || a.rows() != b.rows() || a.cols() != b.cols())
    return "backend " + layout_text(a) + ", oracle " + layout_text(b);
  return "";
}
// "" when the backend's copy qd holds the oracle's copy qh's bytes.
template <class S>
std::string copy_mismatch(const typename S::backend_type& d, const qtensor& qd, const qtensor& qh) {
  const std::string l = layouts_differ(qd, qh);
  return l.empty() ? bytes_mismatch(qd, S::read_copy(d, qd), oracle_bytes(qh)) : l;
}
// "" when two copies of the backend hold the same bytes (a fused producer's against quantize()).
template <class S>
std::string self_copy_mismatch(const typename S::backend_type& d, const qtensor& a, const qtensor& b) {
  const std::string l = layouts_differ(a, b);
  return l.empty() ? bytes_mismatch(a, S::read_copy(d, a), S::read_copy(d, b)) : l;
}

inline quant_request mx_request(const operand_spec& spec, block_axis axis, bool hadamard, bool random_signs, std::uint32_t stream) {
  quant_request r;
  r.spec = spec;
  r.axis = axis;
  r.block.hadamard = hadamard;
  r.block.random_signs = random_signs;
  r.block.seed = 0x4D58465034ull;
  r.block.stream = stream;
  r.use = axis == block_axis::rowwise ? operand_use::fprop_x : operand_use::wgrad_x;
  return r;
}
inline quant_request fp8_request(scaling_table* t, std::size_t row, block_axis axis, bool record) {
  quant_request r;
  r.spec = recipes::mma_operand(t->type(row));
  r.axis = axis;
  r.fp8 = {t, row, record};
  r.use = axis == block_axis::rowwise ? operand_use::fprop_x : operand_use::wgrad_x;
  return r;
}
inline quant_request plain_request(const operand_spec& spec, block_axis axis) {
  quant_request r;
  r.spec = spec;
  r.axis = axis;
  return r;
}

// ------------------------------------------------------------------------------------- GEMM

// The stored [lines, length] values of a host FP8 or bf16 copy.
inline std::vector<float> stored_values(const qtensor& q) {
  std::vector<float> v;
  if (q.kind() == precision::fp8) {
    const fp8_tensor& t = host_backend::fp8(q);
    for (const std::uint8_t c : t.data) v.push_back(fp8_decode(c, t.type) / t.scale);
  } else {
    for (const bfloat16 x : host_backend::bf16(q)) v.push_back(x.to_float());
  }
  return v;
}
inline std::vector<double> magnitude(const qtensor& a, const qtensor& b) {
  const std::size_t P = a.lines(), Q = b.lines(), R = a.length();
  if (a.kind() == precision::mx && a.request().spec.block_scaled().is_nvfp4())
    return nvfp4_gemm_test::magnitude(host_backend::nvfp4(a), host_backend::nvfp4(b));
  if (a.kind() == precision::mx) {
    const mx_tensor aa = gemm_test::abs_copy(host_backend::mx(a)), bb = gemm_test::abs_copy(host_backend::mx(b));
    std::vector<float> s(P * Q);
    mxkit::ref::gemm(aa.view(), bb.view(), matrix_view<float>{s.data(), P, Q});
    return {s.begin(), s.end()};
  }
  return gemm_test::oracle_tn(stored_values(a), stored_values(b), P, Q, R).s;
}


// The oracle as a subject: the suite's own check (a fresh host_backend against the oracle).
struct host_subject {
  using backend_type = host_backend;
  static std::unique_ptr<host_backend> make() { return std::make_unique<host_backend>(); }
  static copy_bytes read_copy(const host_backend&, const qtensor& q) { return oracle_bytes(q); }
};

// --------------------------------------------------------------------------------- attention

// Bounds of the device's attention against the exact result (catch2_test_gpu_attention.cu), from the
// inputs in double: out u16 |o| + 4 u16 sum_u P_tu |v_u| (P and dS are rounded to bf16 to feed
// the tensor cores), dqkv u16 |d| + 4 u16 (sum |dS| |k or q| + sum P |dO|, the absolute error of
// dP - Delta folded in), lse 2 (D + T + 16) u32 (scale |q| max|k| + |lse| + 1). The host backend
// computes in float from double sums: its error is a few u32 of the same magnitudes, inside the
// margin; both store bf16 outputs rounded (bf16 activations) and the device also rounds f32
// outputs to bf16, so the |o| and |d| terms are doubled, and the lse bound is doubled for the
// host's float lse.
struct attention_bound {
  std::vector<double> out, lse, dqkv;
};
inline attention_bound attention_bounds(const std::vector<double>& qkv, const std::vector<double>& dout, const head_shape& s) {
  const std::size_t batch = s.batch, seq = s.seq, heads = s.n_heads, dim = s.head_dim, row = s.qkv_dim(), N = s.tokens(), od = s.q_dim(),
                    group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<double> out(N * od), ref_lse(batch * heads * seq), dqkv(N * row);
  mxkit::ref::attention_forward(qkv.data(), out.data(), ref_lse.data(), s);
  mxkit::ref::attention_backward(dout.data(), qkv.data(), out.data(), ref_lse.data(), dqkv.data(), s);
  double kmax = 0;
  for (std::size_t r = 0; r < N; ++r)
    for (std::size_t kv = 0; kv < s.n_kv_heads; ++kv) {
      double n2 = 0;
      for (std::size_t i = 0; i < dim; ++i) n2 += qkv[r * row + od + kv * dim + i] * qkv[r * row + od + kv * dim + i];
      kmax = std::max(kmax, std::sqrt(n2));
    }
  std::vector<double> lse_bound(ref_lse.size()), o_abs(N * od, 0.0), d_abs(N * row, 0.0), sc(seq), pr(seq), dp(seq);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t kc = od + (h / group) * dim, vc = od + s.kv_dim() + (h / group) * dim;
      for (std::size_t t = 0; t < seq; ++t) {
        const double* q = &qkv[(b * seq + t) * row + h * dim];
        const double* dO = &dout[(b * seq + t) * od + h * dim];
        const std::size_t li = (b * heads + h) * seq + t;
        double qn = 0;
        for (std::size_t i = 0; i < dim; ++i) qn += q[i] * q[i];
        for (std::size_t u = 0; u <= t; ++u) {
          double d = 0;
          for (std::size_t i = 0; i < dim; ++i) d += q[i] * qkv[(b * seq + u) * row + kc + i];
          sc[u] = d * scale;
          pr[u] = std::exp(sc[u] - ref_lse[li]);
        }
        lse_bound[li] = 4.0 * static_cast<double>(dim + seq + 16) * u32 * (scale * std::sqrt(qn) * kmax + std::fabs(ref_lse[li]) + 1.0);
        double pdp = 0;
        for (std::size_t u = 0; u <= t; ++u) {
          double d = 0;
          for (std::size_t i = 0; i < dim; ++i) d += dO[i] * qkv[(b * seq + u) * row + vc + i];
          dp[u] = d;
          pdp += pr[u] * d;
        }
        double dOO = 0;
        for (std::size_t i = 0; i < dim; ++i) dOO += std::fabs(dO[i]) * std::fabs(out[(b * seq + t) * od + h * dim + i]);
        for (std::size_t u = 0; u <= t; ++u) {
          double dOv = 0;
          for (std::size_t i = 0; i < dim; ++i) dOv += std::fabs(dO[i]) * std::fabs(qkv[(b * seq + u) * row + vc + i]);
          const double e = pr[u] * (2 * u16 * dOO + 2 * static_cast<double>(dim + 16) * u32 * (dOv + dOO)) / (4 * u16);
          const double ds = (std::fabs(pr[u] * (dp[u] - pdp)) + e) * scale;
          for (std::size_t i = 0; i < dim; ++i) {
            o_abs[(b * seq + t) * od + h * dim + i] += pr[u] * std::fabs(qkv[(b * seq + u) * row + vc + i]);
            d_abs[(b * seq + t) * row + h * dim + i] += ds * std::fabs(qkv[(b * seq + u) * row + kc + i]);
            d_abs[(b * seq + u) * row + kc + i] += ds * std::fabs(q[i]);
            d_abs[(b * seq + u) * row + vc + i] += pr[u] * std::fabs(dO[i]);
          }
        }
      }
    }
  attention_bound r{std::vector<double>(out.size()), lse_bound, std::vector<double>(dqkv.size())};
  for (std::size_t i = 0; i < out.size(); ++i) r.out[i] = 2 * u16 * std::fabs(out[i]) + 4 * u16 * o_abs[i] + 1e-30;
  for (std::size_t i = 0; i < dqkv.size(); ++i) r.dqkv[i] = 2 * u16 * std::fabs(dqkv[i]) + 4 * u16 * d_abs[i] + 1e-30;
  return r;
}


// ============================================================================== the checks

// Quantized copies are the oracle's, byte for byte.
template <class S>
void quantized_copies() {
  host_backend h;
  const auto made = S::make();
  auto& d = *made;
  const std::size_t shapes[][2] = {{1, 1}, {3, 37}, {67, 96}, {130, 64}, {192, 200}};
  struct mx_case {
    const char* name;
    operand_spec spec;
    bool hadamard, random_signs;
  };
  const mx_case mx_cases[] = {
      {"mxfp4 (even)", recipes::mx_operand(mx_type::mxfp4, scale_rule::even), false, false},
      {"mxfp4 (even), hadamard", recipes::mx_operand(mx_type::mxfp4, scale_rule::even), true, false},
      {"mxfp4 (even), hadamard, random signs, stochastic rounding",
       recipes::mx_operand(mx_type::mxfp4, scale_rule::even, rounding::stochastic), true, true},
      {"mxfp8 e4m3 (round up)", recipes::mx_operand(mx_type::mxfp8_e4m3, scale_rule::round_up), false, false},
      {"nvfp4", recipes::block_scaled_operand(formats::nvfp4, scale_rule::floor), false, false},
      {"nvfp4, hadamard, random signs, stochastic rounding", recipes::block_scaled_operand(formats::nvfp4, scale_rule::floor, rounding::stochastic),
       true, true},
      {"nvfp4_2d", recipes::block_scaled_operand(formats::nvfp4_2d, scale_rule::floor), false, false}};
  // FP8: a 2-row table (E4M3, E5M2) on each backend, the same non-unit scales (3.5 saturates the
  // largest E4M3 inputs: the clamp is compared too).
  const delayed_scaling_config cfg{4, amax_algorithm::max, 0};
  const std::shared_ptr<scaling_table> th = h.make_scaling_table(cfg, {fp8_type::e4m3, fp8_type::e5m2});
  const std::shared_ptr<scaling_table> td = d.make_scaling_table(cfg, {fp8_type::e4m3, fp8_type::e5m2});
  h.write(th->scale(), {3.5, 0.0625});
  d.write(td->scale(), {3.5, 0.0625});
  std::uint32_t stream = 1;
  for (const auto& sh : shapes)
    for (const dtype t : {dtype::f32, dtype::bf16}) {
      const std::size_t rows = sh[0], cols = sh[1];
      INFO(name_of(t) << " input " << rows << "x" << cols);
      const twin x = make_twin(h, d, rows, cols, t, spread_values(rows, cols, 100 + stream));
      for (const mx_case& c : mx_cases) {
        INFO(c.name);
        const quant_request r = mx_request(c.spec, block_axis::rowwise, c.hadamard, c.random_signs, stream);
        const quant_request col = mx_request(c.spec, block_axis::columnwise, c.hadamard, c.random_signs, stream);
        CHECK(copy_mismatch<S>(d, d.quantize(x.d, r), h.quantize(x.h, r)) == "");
        CHECK(copy_mismatch<S>(d, d.quantize(x.d, col), h.quantize(x.h, col)) == "");
        const qpair pd = d.quantize_both(x.d, r, col), ph = h.quantize_both(x.h, r, col);
        CHECK(copy_mismatch<S>(d, pd.rowwise, ph.rowwise) == "");
        CHECK(copy_mismatch<S>(d, pd.columnwise, ph.columnwise) == "");
      }
      {
        INFO("fp8 through the scaling table");
        h.fill(th->history(), 0.0);
        d.fill(td->history(), 0.0);
        // Rowwise E4M3 (row 0), columnwise E5M2 (row 1), both copies of row 0, the transpose.
        const qtensor rd = d.quantize(x.d, fp8_request(td.get(), 0, block_axis::rowwise, true));
        const qtensor rh = h.quantize(x.h, fp8_request(th.get(), 0, block_axis::rowwise, true));
        CHECK(copy_mismatch<S>(d, rd, rh) == "");
        CHECK(copy_mismatch<S>(d, d.quantize(x.d, fp8_request(td.get(), 1, block_axis::columnwise, true)),
                            h.quantize(x.h, fp8_request(th.get(), 1, block_axis::columnwise, true))) == "");
        const qpair pd = d.quantize_both(x.d, fp8_request(td.get(), 0, block_axis::rowwise, true),
                                         fp8_request(td.get(), 0, block_axis::columnwise, true));
        const qpair ph = h.quantize_both(x.h, fp8_request(th.get(), 0, block_axis::rowwise, true),
                                         fp8_request(th.get(), 0, block_axis::columnwise, true));
        CHECK(copy_mismatch<S>(d, pd.rowwise, ph.rowwise) == "");
        CHECK(copy_mismatch<S>(d, pd.columnwise, ph.columnwise) == "");
        CHECK(copy_mismatch<S>(d, d.transpose(rd, operand_use::dgrad_w, mem_tag::quantized_weight),
                            h.transpose(rh, operand_use::dgrad_w, mem_tag::quantized_weight)) == "");
        // The amaxes the casts max-combined into column 0, and nothing else.
        const std::vector<double> hist = h.read(th->history());
        CHECK(same_values("history", d.read(td->history()), hist) == "");
        CHECK(hist[0] > 0.0);
        CHECK(hist[cfg.history_length] > 0.0);
        CHECK(same_values("scale", d.read(td->scale()), h.read(th->scale())) == "");
      }
      {
        INFO("bf16 copies");
        const quant_request r = plain_request(recipes::bf16_operand(), block_axis::rowwise);
        const quant_request col = plain_request(recipes::bf16_operand(), block_axis::columnwise);
        CHECK(copy_mismatch<S>(d, d.quantize(x.d, r), h.quantize(x.h, r)) == "");
        CHECK(copy_mismatch<S>(d, d.quantize(x.d, col), h.quantize(x.h, col)) == "");
        const qpair pd = d.quantize_both(x.d, r, col), ph = h.quantize_both(x.h, r, col);
        CHECK(copy_mismatch<S>(d, pd.rowwise, ph.rowwise) == "");
        CHECK(copy_mismatch<S>(d, pd.columnwise, ph.columnwise) == "");
      }
      {
        INFO("the healing stash: export_fp8, import_fp8 and its transpose");
        for (const fp8_type ft : {fp8_type::e4m3, fp8_type::e5m2}) {
          const host_fp8 ed = d.export_fp8(x.d, ft, 0.75f), eh = h.export_fp8(x.h, ft, 0.75f);
          const fp8_tensor a = ed.to_tensor(), b = eh.to_tensor();
          CHECK(bytes_mismatch("exported codes", a.data, b.data, cols) == "");
          CHECK(a.rows == b.rows);
          CHECK(a.cols == b.cols);
          CHECK(a.scale == b.scale);
          CHECK(mxkit::bit_cast<std::uint32_t>(a.amax) == mxkit::bit_cast<std::uint32_t>(b.amax));
          const qtensor qd = d.import_fp8(eh, operand_use::fprop_w, mem_tag::quantized_weight);
          const qtensor qh = h.import_fp8(eh, operand_use::fprop_w, mem_tag::quantized_weight);
          CHECK(copy_mismatch<S>(d, qd, qh) == "");
          CHECK(copy_mismatch<S>(d, d.transpose(qd, operand_use::dgrad_w, mem_tag::quantized_weight),
                              h.transpose(qh, operand_use::dgrad_w, mem_tag::quantized_weight)) == "");
        }
      }
      ++stream;
    }
  CHECK(d.counters().copies(operand_use::wgrad_x) == h.counters().copies(operand_use::wgrad_x));
}

// A weight's copies gathered from slabs of rows (full sharding, parallel/data_parallel.hpp, through
// the backend's copy_gatherer(), parallel/copy_gather.hpp): each slab quantized (quantize_both on a
// view of its rows), packed into one wire buffer (pack_copy), and the whole copy assembled
// (assemble_copy) equals the oracle's copy of the whole tensor, byte for byte; for FP8 and bf16,
// which travel rowwise, its transpose equals the oracle's columnwise copy. Slabs of whole 32-row
// blocks but the last (ragged for the rowwise, FP8 and bf16 copies); bf16 slabs from f32 values
// and from bf16 values (a copy that is its source: may_alias_input).
template <class S>
void gathered_copies() {
  host_backend h;
  const auto made = S::make();
  auto& d = *made;
  copy_gather* const g = d.copy_gatherer();  // the seam data_parallel gathers through
  if (!g || !g->gathers_copies()) return;
  const delayed_scaling_config cfg{4, amax_algorithm::max, 0};
  const std::shared_ptr<scaling_table> th = h.make_scaling_table(cfg, {fp8_type::e4m3});
  const std::shared_ptr<scaling_table> td = d.make_scaling_table(cfg, {fp8_type::e4m3});
  h.write(th->scale(), {3.5});
  d.write(td->scale(), {3.5});
  struct copy_case {
    const char* name;
    quant_request row, col;  // col: MX only (an FP8 or bf16 dgrad copy is the rowwise one's transpose)
    std::size_t rows;        // a multiple of 32 where a columnwise copy is gathered
    dtype source = dtype::f32;
  };
  quant_request bf16_aliasing = plain_request(recipes::bf16_operand(), block_axis::rowwise);
  bf16_aliasing.may_alias_input = true;  // (a bf16 master weight is its own bf16 copy)
  const operand_spec fp4 = recipes::mx_operand(mx_type::mxfp4, scale_rule::even), fp8e = recipes::mx_operand(mx_type::mxfp8_e4m3, scale_rule::round_up);
  const operand_spec nv = recipes::block_scaled_operand(formats::nvfp4, scale_rule::floor),
                     nv2 = recipes::block_scaled_operand(formats::nvfp4_2d, scale_rule::floor);
  const copy_case cases[] = {
      {"nvfp4", mx_request(nv, block_axis::rowwise, false, false, 11), mx_request(nv, block_axis::columnwise, false, false, 11), 160},
      {"nvfp4 16 x 16", mx_request(nv2, block_axis::rowwise, false, false, 12), mx_request(nv2, block_axis::columnwise, false, false, 12), 96},
      {"nvfp4, hadamard, random signs (each copy its own amax)", mx_request(nv, block_axis::rowwise, true, true, 13),
       mx_request(nv, block_axis::columnwise, true, true, 13), 224},
      {"nvfp4 16 x 16 from bf16 values", mx_request(nv2, block_axis::rowwise, false, false, 14), mx_request(nv2, block_axis::columnwise, false, false, 14),
       128, dtype::bf16},
      {"nvfp4 rowwise, ragged last slab", mx_request(nv, block_axis::rowwise, false, false, 15), {}, 200},
      {"mxfp4, hadamard, random signs", mx_request(fp4, block_axis::rowwise, true, true, 7), mx_request(fp4, block_axis::columnwise, true, true, 7), 224},
      {"mxfp4", mx_request(fp4, block_axis::rowwise, false, false, 8), mx_request(fp4, block_axis::columnwise, false, false, 8), 160},
      {"mxfp8 e4m3", mx_request(fp8e, block_axis::rowwise, false, false, 9), mx_request(fp8e, block_axis::columnwise, false, false, 9), 96},
      {"mxfp4 rowwise, ragged last slab", mx_request(fp4, block_axis::rowwise, true, false, 10), {}, 200},
      {"fp8 e4m3, ragged last slab", fp8_request(td.get(), 0, block_axis::rowwise, false), {}, 200},
      {"bf16, ragged last slab", plain_request(recipes::bf16_operand(), block_axis::rowwise), {}, 200},
      {"bf16 from bf16 values", bf16_aliasing, {}, 128, dtype::bf16}};
  for (const std::size_t cols : {std::size_t{64}, std::size_t{96}})
    for (const copy_case& c : cases) {
      INFO(c.name << ", " << c.rows << "x" << cols);
      const bool col = c.col.spec.kind() == precision::mx;
      const twin x = make_twin(h, d, c.rows, cols, c.source, spread_values(c.rows, cols, 300 + cols));
      const std::size_t cuts[] = {0, 32, 96, c.rows};  // slabs of 32, 64 and the rest of the rows
      std::vector<copy_slab> row_slabs, col_slabs;
      std::size_t bytes = 0;
      for (std::size_t k = 0; k + 1 < std::size(cuts); ++k) {
        const std::size_t n = cuts[k + 1] - cuts[k];
        if (n == 0) continue;
        row_slabs.push_back({bytes, cuts[k], n});
        bytes += copy_gather::copy_wire_bytes(c.row, n, cols);
        if (col) {
          col_slabs.push_back({bytes, cuts[k], n});
          bytes += copy_gather::copy_wire_bytes(c.col, n, cols);
        }
      }
      // NVFP4: each slab quantized with the whole tensor's amax, the maximum of the slabs' amaxes
      // (as data_parallel's ranks reduce them), which is the whole tensor's copy_amax and the host's.
      quant_request slab_row = c.row, slab_col = c.col;
      for (quant_request* q : {&slab_row, &slab_col}) {
        if (!has_tensor_scale(*q)) continue;
        INFO(name_of(q->axis) << " amax");
        tensor part = d.alloc(1, 1, dtype::f32, mem_tag::quantized_weight), whole = d.alloc(1, 1, dtype::f32, mem_tag::quantized_weight);
        tensor host_whole = h.alloc(1, 1, dtype::f32, mem_tag::quantized_weight);
        double most = 0.0;
        for (const copy_slab& s : row_slabs) {
          d.copy_amax(view_of(x.d, s.first_row * cols, s.rows, cols), *q, part);
          most = std::max(most, d.read(part)[0]);
        }
        d.copy_amax(x.d, *q, whole);
        h.copy_amax(x.h, *q, host_whole);
        CHECK(most > 0.0);
        CHECK(d.read(whole)[0] == most);
        CHECK(h.read(host_whole)[0] == most);
        d.write(part, {most});
        q->tensor_amax = part;
      }
      tensor wire = d.alloc(1, (bytes + 3) / 4, dtype::f32, mem_tag::quantized_weight);
      for (std::size_t k = 0; k < row_slabs.size(); ++k) {
        const tensor slab = view_of(x.d, row_slabs[k].first_row * cols, row_slabs[k].rows, cols);
        if (col) {
          const qpair q = d.quantize_both(slab, slab_row, slab_col);
          g->pack_copy(q.rowwise, wire, row_slabs[k].byte_offset);
          g->pack_copy(q.columnwise, wire, col_slabs[k].byte_offset);
        } else {
          g->pack_copy(d.quantize(slab, slab_row), wire, row_slabs[k].byte_offset);
        }
      }
      quant_request want_row = c.row;
      if (c.row.spec.kind() == precision::fp8) want_row.fp8.table = th.get();
      const qtensor row = g->assemble_copy(slab_row, c.rows, cols, wire, row_slabs);
      CHECK(copy_mismatch<S>(d, row, h.quantize(x.h, want_row)) == "");
      if (col) CHECK(copy_mismatch<S>(d, g->assemble_copy(slab_col, c.rows, cols, wire, col_slabs), h.quantize(x.h, c.col)) == "");
      if (backend::columnwise_is_transpose(c.row.spec.kind())) {
        quant_request want_col = want_row;
        want_col.axis = block_axis::columnwise;
        CHECK(copy_mismatch<S>(d, d.transpose(row, operand_use::dgrad_w, mem_tag::quantized_weight), h.quantize(x.h, want_col)) == "");
      }
    }
  // FP8 and bf16 copies travel rowwise; native operands do not travel (the weight is gathered).
  {
    const twin x = make_twin(h, d, 64, 64, dtype::f32, spread_values(64, 64, 5));
    tensor wire = d.alloc(1, 4096, dtype::f32, mem_tag::quantized_weight);
    const quant_request bf16_col = plain_request(recipes::bf16_operand(), block_axis::columnwise);
    const copy_slab all[] = {{0, 0, 64}};
    CHECK_THROWS_AS(g->pack_copy(d.quantize(x.d, bf16_col), wire, 0), std::invalid_argument);
    CHECK_THROWS_AS(g->assemble_copy(bf16_col, 64, 64, wire, all), std::invalid_argument);
    CHECK_THROWS_AS(copy_gather::copy_wire_bytes(plain_request(recipes::native_operand(), block_axis::rowwise), 64, 64), std::invalid_argument);
    // An NVFP4 slab travels with the whole tensor's amax only: with its own, the slabs' tensor
    // scales would differ. Its wire bytes: codes, E4M3 scales, the fp32 tensor scale.
    quant_request nv = mx_request(recipes::block_scaled_operand(formats::nvfp4_2d, scale_rule::floor), block_axis::rowwise, false, false, 1);
    CHECK(copy_gather::copy_wire_bytes(nv, 64, 64) == 64 * 64 / 2 + 64 * 4 + 4);
    CHECK_THROWS_WITH(g->pack_copy(d.quantize(x.d, nv), wire, 0),
                      mxkit_test::contains("pack_copy: an nvfp4_2d slab quantized with its own tensor scale"));
    // A given amax belongs to NVFP4 requests, as a (1, 1) f32 tensor; copy_amax to NVFP4 copies.
    tensor amax = d.alloc(1, 1, dtype::f32, mem_tag::quantized_weight), amax64 = d.alloc(1, 1, dtype::f64, mem_tag::quantized_weight);
    quant_request mx_with_amax = mx_request(recipes::mx_operand(mx_type::mxfp4, scale_rule::even), block_axis::rowwise, false, false, 1);
    mx_with_amax.tensor_amax = amax;
    CHECK_THROWS_WITH(d.quantize(x.d, mx_with_amax), mxkit_test::contains("quantize: a given tensor amax is for NVFP4 requests") &&
                                                         mxkit_test::contains("not mxfp4"));
    CHECK_THROWS_WITH(d.copy_amax(x.d, plain_request(recipes::bf16_operand(), block_axis::rowwise), amax),
                      mxkit_test::contains("copy_amax: bf16 copies have no tensor scale"));
    CHECK_THROWS_AS(d.copy_amax(x.d, nv, amax64), std::invalid_argument);
    nv.tensor_amax = amax64;
    CHECK_THROWS_AS(d.quantize(x.d, nv), std::invalid_argument);
    nv.tensor_amax = d.alloc(1, 2, dtype::f32, mem_tag::quantized_weight);
    CHECK_THROWS_AS(d.quantize(x.d, nv), std::invalid_argument);
    CHECK(copy_gather::copy_wire_bytes(plain_request(recipes::bf16_operand(), block_axis::rowwise), 64, 64) == 2 * 64 * 64);
    CHECK_THROWS_AS(g->pack_copy(d.quantize(x.d, plain_request(recipes::bf16_operand(), block_axis::rowwise)), wire, 4 * 4096 - 2 * 64 * 64 + 2),
                    std::invalid_argument);
  }
  // Slabs that leave rows out, or an MX columnwise slab off a 32-row boundary, are refused.
  tensor wire = d.alloc(1, 4096, dtype::f32, mem_tag::quantized_weight);
  const quant_request r = mx_request(recipes::mx_operand(mx_type::mxfp4, scale_rule::even), block_axis::columnwise, false, false, 1);
  const copy_slab gap[] = {{0, 0, 32}, {2048, 64, 32}}, off[] = {{0, 0, 16}, {2048, 16, 48}};
  CHECK_THROWS_AS(g->assemble_copy(r, 96, 64, wire, gap), std::invalid_argument);
  CHECK_THROWS_AS(g->assemble_copy(r, 64, 64, wire, off), std::invalid_argument);
  // A 16 x 16 tile's rows lie in one slab, rowwise copies too.
  const copy_slab half_tile[] = {{0, 0, 8}, {1024, 8, 56}};
  const quant_request tiles = mx_request(recipes::block_scaled_operand(formats::nvfp4_2d, scale_rule::floor), block_axis::rowwise, false, false, 1);
  CHECK_THROWS_WITH(g->assemble_copy(tiles, 64, 64, wire, half_tile),
                    mxkit_test::contains("assemble_copy: a rowwise nvfp4_2d slab starts at row 8, not a multiple of 16"));
}

// Every GEMM product within the fp32 accumulation bound.
template <class S>
void gemm_products() {
  // Bound, as catch2_test_gemm.cu: |D_device - D_host| <= rel S + (bf16 D) 2^-7 S, with
  // S = |alpha| sum_k |a_k b_k| + |beta C| from the stored copies (scales applied). The host's D is
  // ref::product in fp32 (itself within (R + 2) u32 S of the exact product, far inside rel):
  //   MX, FP8   rel = 2^-9: tensor cores sum a block (or a k-group of FP8) with fewer bits than
  //             fp32 (the GEMM tests' realistic-data bound; the portable path's (2 nb + 40) u32 is
  //             smaller for these K);
  //   bf16      rel = (2 R + 8) u32: bf16 products are exact in fp32, only the R additions round.
  //   bf16 D    both round acc + beta C to bf16: one ulp apart at most, 2^-7 of |D| <= S.
  tally tl;
  struct shape {
    std::size_t m, n, k;
  };
  const std::vector<shape> mx_shapes = {{64, 96, 160}, {32, 32, 32}};
  const std::vector<shape> other_shapes = {{64, 96, 160}, {37, 45, 77}, {1, 3, 5}};
  const std::vector<recipe> recipes_ = {recipes::bf16(), recipes::fp8_delayed(), recipes::mxfp8(), recipes::mxfp4_amd(),
                                        recipes::mxfp4_nvidia_style(), recipes::nvfp4()};
  std::uint64_t seed = 1000;
  for (const recipe& r : recipes_) {
    const bool is_mx = r.fprop.a.kind() == precision::mx;
    for (const shape sh : is_mx ? mx_shapes : other_shapes)
      for (const dtype out : {dtype::f32, dtype::bf16}) {
        INFO(r.name << ": M " << sh.m << ", N " << sh.n << ", K " << sh.k << ", D " << name_of(out));
        host_backend h;
        const auto made = S::make();
        auto& d = *made;
        // FP8: X, W, dY rows of a table with fixed scales (no amax recorded: the copies only).
        const std::array<fp8_type, 3> types = linear::scaling_types(r);
        const std::shared_ptr<scaling_table> th = h.make_scaling_table({}, {types.begin(), types.end()});
        const std::shared_ptr<scaling_table> td = d.make_scaling_table({}, {types.begin(), types.end()});
        h.write(th->scale(), {0.5, 0.5, 1.0});  // |x|, |w| < 2^3 4 16: no saturation
        d.write(td->scale(), {0.5, 0.5, 1.0});
        const twin x = make_twin(h, d, sh.m, sh.k, dtype::f32, spread_values(sh.m, sh.k, seed++, 3));
        const twin w = make_twin(h, d, sh.n, sh.k, dtype::f32, spread_values(sh.n, sh.k, seed++, 3));
        const twin dy = make_twin(h, d, sh.m, sh.n, dtype::f32, spread_values(sh.m, sh.n, seed++, 3));
        // The request of operand a or b of GEMM g (linear.hpp's request(); rows 0 X, 1 W, 2 dY).
        auto req = [&](gemm_product gp, bool b, block_axis axis, std::size_t row, scaling_table* t, std::uint32_t stream) {
          const gemm_spec& s = r.gemm(gp);
          quant_request q;
          q.spec = b ? s.b : s.a;
          q.axis = axis;
          q.block.hadamard = s.hadamard;
          q.block.random_signs = s.random_signs;
          q.block.seed = s.seed;
          q.block.stream = stream;
          q.fp8 = {t, row, false};
          return q;
        };
        struct product_case {
          gemm_product p;
          const twin *a, *b;
          block_axis axis_a, axis_b;
          std::size_t row_a, row_b;
          std::size_t rows, cols;
        };
        const product_case cases[] = {
            {gemm_product::fprop, &x, &w, block_axis::rowwise, block_axis::rowwise, 0, 1, sh.m, sh.n},
            {gemm_product::dgrad, &dy, &w, block_axis::rowwise, block_axis::columnwise, 2, 1, sh.m, sh.k},
            {gemm_product::wgrad, &dy, &x, block_axis::columnwise, block_axis::columnwise, 2, 0, sh.n, sh.k}};
        for (const product_case& pc : cases) {
          INFO(name_of(pc.p));
          const std::uint32_t sa = 11 + static_cast<std::uint32_t>(pc.row_a), sb = 11 + static_cast<std::uint32_t>(pc.row_b);
          const qtensor ah = h.quantize(pc.a->h, req(pc.p, false, pc.axis_a, pc.row_a, th.get(), sa));
          const qtensor bh = h.quantize(pc.b->h, req(pc.p, true, pc.axis_b, pc.row_b, th.get(), sb));
          const qtensor ad = d.quantize(pc.a->d, req(pc.p, false, pc.axis_a, pc.row_a, td.get(), sa));
          const qtensor bd = d.quantize(pc.b->d, req(pc.p, true, pc.axis_b, pc.row_b, td.get(), sb));
          const std::string ma = copy_mismatch<S>(d, ad, ah), mb = copy_mismatch<S>(d, bd, bh);
          CHECK(ma == "");  // the GEMMs below read the same operands
          CHECK(mb == "");
          if (!ma.empty() || !mb.empty()) continue;
          const std::vector<double> s0 = magnitude(ah, bh);
          struct epilogue {
            float alpha, beta;
            int c;  // 0: none, 1: a separate C, 2: C = D
          };
          for (const epilogue e : {epilogue{1.0f, 0.0f, 0}, epilogue{1.5f, -0.5f, 1}, epilogue{-1.0f, 1.0f, 2}}) {
            INFO("alpha " << e.alpha << ", beta " << e.beta << (e.c == 1 ? ", C" : e.c == 2 ? ", C = D" : ""));
            const std::vector<double> cv = spread_values(pc.rows, pc.cols, seed++, 2);
            twin c = make_twin(h, d, pc.rows, pc.cols, out, cv);
            // D: NaN where it must not be read (no C, or a separate C), C's values where C = D.
            twin dd = make_twin(h, d, pc.rows, pc.cols, out, e.c == 2 ? cv : std::vector<double>(pc.rows * pc.cols, nan_value));
            const std::vector<double> cstored = h.read(c.h);
            h.gemm(pc.p, ah, bh, dd.h, e.alpha, e.beta, e.c == 1 ? &c.h : e.c == 2 ? &dd.h : nullptr);
            d.gemm(pc.p, ad, bd, dd.d, e.alpha, e.beta, e.c == 1 ? &c.d : e.c == 2 ? &dd.d : nullptr);
            std::vector<double> s(s0);
            for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::fabs(e.alpha) * s0[i] + (e.c ? std::fabs(e.beta * cstored[i]) : 0.0);
            double rel = r.fprop.a.kind() == precision::bf16 ? (2.0 * static_cast<double>(ah.length()) + 8) * u32 : 0x1p-9;
            if (out == dtype::bf16) rel += 0x1p-7;
            const mxkit::ref::gemm_validation_report rep = gemm_test::compare(d.read(dd.d), h.read(dd.h), s, rel, pc.cols);
            tl.note(r.name + " " + name_of(pc.p) + " D " + name_of(out), rep.max_ratio);
            INFO(rep);
            CHECK(rep.over_bound == 0);
          }
        }
      }
  }
  WARN("gemm, worst error / bound:" << tl.str());
}

// Update_scales gives the oracle's histories and scales exactly.
template <class S>
void update_scales() {
  // The same function (nn::update_scale_row) runs on both: bit for bit, NaN and zero amaxes included.
  const delayed_scaling_config configs[] = {{4, amax_algorithm::max, 0}, {4, amax_algorithm::most_recent, 0}, {3, amax_algorithm::max, 2}};
  for (const delayed_scaling_config& cfg : configs) {
    INFO(name_of(cfg.algorithm) << ", history " << cfg.history_length << ", margin " << cfg.margin);
    host_backend h;
    const auto made = S::make();
    auto& d = *made;
    const std::vector<fp8_type> types = {fp8_type::e4m3, fp8_type::e5m2, fp8_type::e4m3, fp8_type::e4m3};  // row 3: never cast
    const std::shared_ptr<scaling_table> th = h.make_scaling_table(cfg, types), td = d.make_scaling_table(cfg, types);
    for (int step = 0; step < 5; ++step) {
      INFO("step " << step);
      for (std::size_t row = 0; row < 3; ++row) {
        std::vector<double> v = normals(67 * 37, 50 + 10 * step + row, 0.0, std::ldexp(1.0, 3 * step - 4 + 2 * static_cast<int>(row)));
        if (row == 2 && step == 2) v[1234] = nan_value;  // a NaN amax: the scale is kept
        const twin x = make_twin(h, d, 67, 37, dtype::f32, v);
        // The cast reads the scale the last update wrote (through the pointer on the device).
        CHECK(copy_mismatch<S>(d, d.quantize(x.d, fp8_request(td.get(), row, block_axis::rowwise, true)),
                            h.quantize(x.h, fp8_request(th.get(), row, block_axis::rowwise, true))) == "");
      }
      CHECK(same_values("history before the update", d.read(td->history()), h.read(th->history())) == "");
      h.update_scales(*th);
      d.update_scales(*td);
      const std::vector<double> scale = h.read(th->scale());
      CHECK(same_values("history", d.read(td->history()), h.read(th->history())) == "");
      CHECK(same_values("scale", d.read(td->scale()), scale) == "");
      CHECK(scale[0] != 1.0);  // the rows cast moved
      CHECK(scale[3] == 1.0);  // zero amax: kept
    }
  }
  // A history longer than a block: the device folds the amax over 256 threads and shifts the
  // columns in chunks of 256 from the end (600 columns: three chunks), so every column is filled.
  const delayed_scaling_config cfg{600, amax_algorithm::max, 1};
  INFO("history 600, every column filled");
  host_backend h;
  const auto made = S::make();
  auto& d = *made;
  const std::vector<fp8_type> types = {fp8_type::e4m3, fp8_type::e5m2, fp8_type::e4m3};
  const std::shared_ptr<scaling_table> th = h.make_scaling_table(cfg, types), td = d.make_scaling_table(cfg, types);
  std::vector<double> history = normals(3 * 600, 77, 0.0, 1.0);
  for (double& v : history) v = std::fabs(v);  // amaxes are magnitudes
  history[600 + 599] = 40.0;                   // row 1's largest in the last column: it leaves after one shift
  history[2 * 600 + 300] = nan_value;          // row 2: NaN wins, the scale is kept
  h.write(th->history(), history);
  d.write(td->history(), history);
  for (int step = 0; step < 2; ++step) {
    INFO("update " << step);
    h.update_scales(*th);
    d.update_scales(*td);
    CHECK(same_values("history", d.read(td->history()), h.read(th->history())) == "");
    CHECK(same_values("scale", d.read(td->scale()), h.read(th->scale())) == "");
  }
  CHECK(h.read(th->scale())[2] == 1.0);
}

// Rmsnorm forward, fused quantize and backward.
template <class S>
void rmsnorm() {
  // Forward (catch2_test_nn_kernels.cu): the device's sum of squares is C / 32 + 32 roundings
  // deep, rstd and y a few more: (C / 32 + 32) u32 relative; the host rounds rstd once and y
  // twice from double: 2 u32. Bound (C / 32 + 36) u32 |y| (+ 2 u16 |y| for bf16 y), rstd
  // (C / 32 + 34) u32 rstd.
  // Backward: the device's dx is within (C / 16 + 48) u32 of |dx0| + |r w dy| + r^3 / C
  // sum_i |w_i dy_i x_i| |x|, the host's within 2 u32 (one rounding of a double sum, one add):
  // (C / 16 + 52) u32 (+ 2 u16 bf16). dw: the device (2 (32 + G) + 16) u32 of |dw0| + sum_r |dy x r|
  // (G = ceil(R / 32) groups), the host adds R float roundings in row order: + (R + 2) u32. Both
  // backends get the same rstd (the host's), so the backward is compared alone.
  tally tl;
  const std::size_t shapes[][2] = {{1, 1}, {3, 37}, {67, 96}, {130, 64}};
  std::uint64_t seed = 2000;
  for (const auto& sh : shapes)
    for (const dtype t : {dtype::f32, dtype::bf16}) {
      const std::size_t R = sh[0], C = sh[1];
      INFO(name_of(t) << " rmsnorm " << R << "x" << C);
      const double out_u = t == dtype::bf16 ? 2 * u16 : 0.0;
      host_backend h;
      const auto made = S::make();
      auto& d = *made;
      std::vector<double> xv = normals(R * C, seed++);
      for (std::size_t i = 0; i < xv.size(); ++i) xv[i] *= std::ldexp(1.0, static_cast<int>((i / C) % 13) - 6);  // rows of different scale
      twin x = make_twin(h, d, R, C, t, xv);
      twin w = make_twin(h, d, 1, C, dtype::f32, normals(C, seed++, 1.0, 0.5), mem_tag::parameter);
      twin y = make_twin(h, d, R, C, t), rstd = make_twin(h, d, R, 1, dtype::f32);
      h.rmsnorm_forward(x.h, w.h, y.h, rstd.h, 1e-5);
      d.rmsnorm_forward(x.d, w.d, y.d, rstd.d, 1e-5);
      const std::vector<double> yh = h.read(y.h), rh = h.read(rstd.h), xs = h.read(x.h), ws = h.read(w.h);
      std::vector<double> by(yh.size()), br(rh.size());
      for (std::size_t i = 0; i < yh.size(); ++i) by[i] = ((static_cast<double>(C) / 32 + 36) * u32 + out_u) * std::fabs(yh[i]);
      for (std::size_t i = 0; i < rh.size(); ++i) br[i] = (static_cast<double>(C) / 32 + 34) * u32 * rh[i];
      CHECK(within(tl, "rmsnorm y", d.read(y.d), yh, by) == "");
      CHECK(within(tl, "rmsnorm rstd", d.read(rstd.d), rh, br) == "");

      // Fused: the bytes quantize() gives on the device's own stored y, and y itself.
      {
        const std::shared_ptr<scaling_table> t1 = d.make_scaling_table({4, amax_algorithm::max, 0}, {fp8_type::e4m3});
        const std::shared_ptr<scaling_table> t2 = d.make_scaling_table({4, amax_algorithm::max, 0}, {fp8_type::e4m3});
        const operand_spec fp4 = recipes::mx_operand(mx_type::mxfp4, scale_rule::even, rounding::stochastic);
        quant_plan mx_plan{mx_request(fp4, block_axis::rowwise, true, true, 5), mx_request(fp4, block_axis::columnwise, true, true, 5), true};
        quant_plan fp8_plan{fp8_request(t1.get(), 0, block_axis::rowwise, true), fp8_request(t1.get(), 0, block_axis::columnwise, true), true};
        quant_plan bf16_plan{plain_request(recipes::bf16_operand(), block_axis::rowwise), {}, false};
        for (int k = 0; k < 3; ++k) {
          INFO("fused rmsnorm_quantize, plan " << k);
          const quant_plan& fused = k == 0 ? mx_plan : k == 1 ? fp8_plan : bf16_plan;
          quant_plan unfused = fused;
          if (k == 1) unfused.rowwise.fp8.table = unfused.columnwise.fp8.table = t2.get();
          tensor yf = d.alloc(R, C, t, mem_tag::activation), rf = d.alloc(R, 1, dtype::f32, mem_tag::activation);
          const qpair q = d.rmsnorm_quantize(x.d, w.d, rf, 1e-5, fused, k == 0 ? &yf : nullptr);
          const qpair u = unfused.columnwise_wanted ? d.quantize_both(y.d, unfused.rowwise, unfused.columnwise)
                                                    : qpair{d.quantize(y.d, unfused.rowwise), {}};
          CHECK(self_copy_mismatch<S>(d, q.rowwise, u.rowwise) == "");
          if (fused.columnwise_wanted) CHECK(self_copy_mismatch<S>(d, q.columnwise, u.columnwise) == "");
          CHECK(same_values("fused rstd", d.read(rf), d.read(rstd.d)) == "");
          if (k == 0) CHECK(same_values("fused y", d.read(yf), d.read(y.d)) == "");
          if (k == 1) CHECK(same_values("fused amax history", d.read(t1->history()), d.read(t2->history())) == "");
        }
      }

      // Backward, with and without dw.
      twin rs = make_twin(h, d, R, 1, dtype::f32, rh);
      const std::vector<double> dyv = normals(R * C, seed++), dx0 = normals(R * C, seed++, 0.0, 0.1), dw0 = normals(C, seed++, 0.0, 0.1);
      twin dy = make_twin(h, d, R, C, t, dyv);
      const std::vector<double> dys = h.read(dy.h);
      for (const bool with_dw : {true, false}) {
        INFO("backward, dw " << (with_dw ? "accumulated" : "null (frozen)"));
        twin dx = make_twin(h, d, R, C, t, dx0), dw = make_twin(h, d, 1, C, dtype::f32, dw0, mem_tag::gradient);
        const std::vector<double> dx0s = h.read(dx.h);
        h.rmsnorm_backward(dy.h, x.h, w.h, rs.h, dx.h, with_dw ? &dw.h : nullptr);
        d.rmsnorm_backward(dy.d, x.d, w.d, rs.d, dx.d, with_dw ? &dw.d : nullptr);
        std::vector<double> bdx(R * C), bdw(C);
        const double rel_dx = (static_cast<double>(C) / 16 + 52) * u32 + out_u;
        for (std::size_t r = 0; r < R; ++r) {
          const double s = rh[r];
          double dot = 0.0;
          for (std::size_t c = 0; c < C; ++c) dot += std::fabs(ws[c] * dys[r * C + c] * xs[r * C + c]);
          for (std::size_t c = 0; c < C; ++c) {
            const std::size_t i = r * C + c;
            bdx[i] = rel_dx * (std::fabs(dx0s[i]) + std::fabs(s * ws[c] * dys[i]) + s * s * s * dot / static_cast<double>(C) * std::fabs(xs[i]));
          }
        }
        const double groups = std::ceil(static_cast<double>(R) / 32);
        const double rel_dw = (2 * (32 + groups) + 16 + static_cast<double>(R) + 2) * u32;
        for (std::size_t c = 0; c < C; ++c) {
          double mag = std::fabs(dw0[c]);
          for (std::size_t r = 0; r < R; ++r) mag += std::fabs(dys[r * C + c] * xs[r * C + c] * rh[r]);
          bdw[c] = rel_dw * mag;
        }
        CHECK(within(tl, "rmsnorm dx", d.read(dx.d), h.read(dx.h), bdx) == "");
        if (with_dw) CHECK(within(tl, "rmsnorm dw", d.read(dw.d), h.read(dw.h), bdw) == "");
        else CHECK(same_values("untouched dw", d.read(dw.d), h.read(dw.h)) == "");
      }
    }
  WARN("rmsnorm, worst error / bound:" << tl.str());
}

// The bound of a rope output against the host's: each output is x1 c -+ x2 s, the device within
// 8 u32 (|x1| + |x2|) (catch2_test_nn_kernels.cu), the host (c, s rounded to float from double,
// two products and a sum in float) within 5 u32: 16 u32 (|x1| + |x2|) (+ 2 u16 of it for bf16),
// for both elements of a rotated pair. v heads are not touched: bound 0, equal.
inline std::vector<double> rope_bound(const std::vector<double>& in, const head_shape& s, dtype t) {
  std::vector<double> bound(in.size(), 0.0);
  const std::size_t D = s.head_dim, half = D / 2;
  const double rel = 16 * u32 + (t == dtype::bf16 ? 2 * u16 : 0.0);
  for (std::size_t tok = 0; tok < s.tokens(); ++tok)
    for (std::size_t hd = 0; hd < s.n_heads + s.n_kv_heads; ++hd)
      for (std::size_t i = 0; i < half; ++i) {
        const std::size_t a = tok * s.qkv_dim() + hd * D + i, b = a + half;
        bound[a] = bound[b] = rel * (std::fabs(in[a]) + std::fabs(in[b]));
      }
  return bound;
}

// Rope forward and inverse.
template <class S>
void rope() {
  // Bounds: rope_bound above.
  tally tl;
  const head_shape shapes[] = {{2, 5, 4, 2, 8}, {1, 37, 3, 1, 64}, {3, 17, 2, 2, 6}, {2, 64, 2, 1, 64}};
  std::uint64_t seed = 3000;
  for (const head_shape& s : shapes)
    for (const double theta : {10000.0, 500000.0})
      for (const dtype t : {dtype::f32, dtype::bf16})
        for (const bool inverse : {false, true}) {
          INFO(name_of(t) << " rope batch " << s.batch << " seq " << s.seq << " heads " << s.n_heads << "/" << s.n_kv_heads << " dim "
                          << s.head_dim << " theta " << theta << (inverse ? " inverse" : ""));
          host_backend h;
          const auto made = S::make();
          auto& d = *made;
          twin x = make_twin(h, d, s.tokens(), s.qkv_dim(), t, normals(s.tokens() * s.qkv_dim(), seed++));
          const std::vector<double> in = h.read(x.h);
          h.rope(x.h, s, theta, inverse);
          d.rope(x.d, s, theta, inverse);
          const std::vector<double> bound = rope_bound(in, s, t);
          CHECK(within(tl, "rope", d.read(x.d), h.read(x.h), bound) == "");
        }
  WARN("rope, worst error / bound:" << tl.str());
}

// Attention forward and backward, head_dim 64 and 128, GQA.
template <class S>
void attention() {
  // Bounds: attention_bounds above. Inputs are bf16 values (exact in f32 tensors too), so the
  // device's conversion of f32 activations to bf16 loses nothing; the backward of both backends
  // takes the host forward's out and log-sum-exp, so it is compared alone.
  tally tl;
  const head_shape shapes[] = {{2, 37, 2, 1, 64}, {2, 70, 4, 2, 64}, {1, 20, 2, 2, 128}, {2, 33, 4, 1, 128}};
  std::uint64_t seed = 4000;
  for (const head_shape& s : shapes)
    for (const dtype t : {dtype::f32, dtype::bf16}) {
      INFO(name_of(t) << " attention B " << s.batch << " T " << s.seq << " H " << s.n_heads << " Hkv " << s.n_kv_heads << " D " << s.head_dim);
      host_backend h;
      const auto made = S::make();
      auto& d = *made;
      const std::size_t N = s.tokens(), row = s.qkv_dim(), od = s.q_dim();
      const std::vector<double> qkv = bf16_normals(N * row, seed++), dout = bf16_normals(N * od, seed++);
      const attention_bound b = attention_bounds(qkv, dout, s);
      twin x = make_twin(h, d, N, row, t, qkv);
      twin o = make_twin(h, d, N, od, t, std::vector<double>(N * od, nan_value));
      twin lse = make_twin(h, d, s.batch * s.n_heads, s.seq, dtype::f32, std::vector<double>(s.batch * s.n_heads * s.seq, nan_value));
      h.attention_forward(x.h, o.h, lse.h, s);
      d.attention_forward(x.d, o.d, lse.d, s);
      const std::vector<double> oh = h.read(o.h), lh = h.read(lse.h);
      CHECK(within(tl, std::string("attention out ") + name_of(t), d.read(o.d), oh, b.out) == "");
      CHECK(within(tl, "attention lse", d.read(lse.d), lh, b.lse) == "");

      twin dO = make_twin(h, d, N, od, t, dout), O = make_twin(h, d, N, od, t, oh);
      twin L = make_twin(h, d, s.batch * s.n_heads, s.seq, dtype::f32, lh);
      twin dq = make_twin(h, d, N, row, t, std::vector<double>(N * row, nan_value));  // overwritten
      h.attention_backward(dO.h, x.h, O.h, L.h, dq.h, s);
      d.attention_backward(dO.d, x.d, O.d, L.d, dq.d, s);
      const std::vector<double> gh = h.read(dq.h), gd = d.read(dq.d);
      for (int part = 0; part < 3; ++part) {  // dq, dk, dv: a failure names its part
        const std::size_t c0 = part == 0 ? 0 : part == 1 ? od : od + s.kv_dim(), c1 = part == 0 ? od : c0 + s.kv_dim();
        std::vector<double> got, want, bound;
        for (std::size_t r = 0; r < N; ++r)
          for (std::size_t c = c0; c < c1; ++c) {
            got.push_back(gd[r * row + c]);
            want.push_back(gh[r * row + c]);
            bound.push_back(b.dqkv[r * row + c]);
          }
        CHECK(within(tl, std::string("attention ") + (part == 0 ? "dq " : part == 1 ? "dk " : "dv ") + name_of(t), got, want, bound) == "");
      }
    }
  WARN("attention, worst error / bound:" << tl.str());
}

// Swiglu forward, fused quantize and backward.
template <class S>
void swiglu() {
  // The device (catch2_test_nn_kernels.cu): out within 16 u32 |out|, dgate within 32 u32
  // |dout up sig| (1 + |g|), dup within 16 u32 |dup|; the host computes in double and rounds once:
  // + 1 u32. bf16 outputs + 2 u16 of the magnitude; results below float's normal range + 1e-37.
  tally tl;
  const std::size_t shapes[][2] = {{1, 2}, {3, 74}, {67, 192}, {130, 64}};  // rows x 2F
  std::uint64_t seed = 5000;
  for (const auto& sh : shapes)
    for (const dtype t : {dtype::f32, dtype::bf16}) {
      const std::size_t R = sh[0], F = sh[1] / 2;
      INFO(name_of(t) << " swiglu " << R << "x" << 2 * F);
      const double out_u = t == dtype::bf16 ? 2 * u16 : 0.0, tiny = 1e-37;
      host_backend h;
      const auto made = S::make();
      auto& d = *made;
      std::vector<double> guv = normals(R * 2 * F, seed++, 0.0, 3.0);
      const double extremes[] = {0.0, -0.0, 30.0, -30.0, 100.0, -100.0, 1.0e-30, -1.2785};
      for (std::size_t k = 0; k < std::size(extremes) && k < R * F; ++k) {
        const std::size_t i = (k * 7919) % (R * F);
        guv[(i / F) * 2 * F + i % F] = extremes[k];
      }
      twin gu = make_twin(h, d, R, 2 * F, t, guv), out = make_twin(h, d, R, F, t);
      h.swiglu_forward(gu.h, out.h);
      d.swiglu_forward(gu.d, out.d);
      const std::vector<double> oh = h.read(out.h), gs = h.read(gu.h);
      std::vector<double> bo(oh.size());
      for (std::size_t i = 0; i < oh.size(); ++i) bo[i] = (17 * u32 + out_u) * std::fabs(oh[i]) + tiny;
      CHECK(within(tl, "swiglu out", d.read(out.d), oh, bo) == "");

      {
        INFO("fused swiglu_quantize");
        const operand_spec fp4 = recipes::mx_operand(mx_type::mxfp4, scale_rule::even);
        const quant_plan plan{mx_request(fp4, block_axis::rowwise, true, false, 9), mx_request(fp4, block_axis::columnwise, true, false, 9), true};
        tensor of = d.alloc(R, F, t, mem_tag::activation);
        const qpair q = d.swiglu_quantize(gu.d, plan, &of);
        const qpair u = d.quantize_both(out.d, plan.rowwise, plan.columnwise);
        CHECK(self_copy_mismatch<S>(d, q.rowwise, u.rowwise) == "");
        CHECK(self_copy_mismatch<S>(d, q.columnwise, u.columnwise) == "");
        CHECK(same_values("fused out", d.read(of), d.read(out.d)) == "");
        const quant_plan bf{plain_request(recipes::bf16_operand(), block_axis::rowwise), {}, false};
        CHECK(self_copy_mismatch<S>(d, d.swiglu_quantize(gu.d, bf, nullptr).rowwise, d.quantize(out.d, bf.rowwise)) == "");
      }
      // FP8 copies written straight from gu (the output never stored), against the cast of the
      // stored output: the same codes, scale and amax history. Scale 37.5 saturates the extremes.
      const auto fp8_tables = [&](fp8_type type) {
        std::array<std::shared_ptr<scaling_table>, 2> t;
        for (auto& e : t) {
          e = d.make_scaling_table({4, amax_algorithm::max, 0}, {type});
          d.write(e->scale(), {37.5});
        }
        return t;
      };
      const auto fp8_plans = [&](const std::array<std::shared_ptr<scaling_table>, 2>& t, bool both) {
        std::array<quant_plan, 2> p;
        for (int k = 0; k < 2; ++k)
          p[k] = {fp8_request(t[k].get(), 0, block_axis::rowwise, true), fp8_request(t[k].get(), 0, block_axis::columnwise, true), both};
        return p;
      };
      for (const bool both : {true, false}) {
        INFO("FP8 swiglu_quantize, " << (both ? "both copies" : "rowwise"));
        const auto tf = fp8_tables(fp8_type::e4m3);
        const auto p = fp8_plans(tf, both);
        const qpair q = d.swiglu_quantize(gu.d, p[0], nullptr);
        const qpair u = both ? d.quantize_both(out.d, p[1].rowwise, p[1].columnwise) : qpair{d.quantize(out.d, p[1].rowwise), {}};
        CHECK(self_copy_mismatch<S>(d, q.rowwise, u.rowwise) == "");
        if (both) CHECK(self_copy_mismatch<S>(d, q.columnwise, u.columnwise) == "");
        CHECK(same_values("amax history", d.read(tf[0]->history()), d.read(tf[1]->history())) == "");
      }

      twin dout = make_twin(h, d, R, F, t, normals(R * F, seed++));
      twin dgu = make_twin(h, d, R, 2 * F, t, std::vector<double>(R * 2 * F, nan_value));  // overwritten
      h.swiglu_backward(dout.h, gu.h, dgu.h);
      d.swiglu_backward(dout.d, gu.d, dgu.d);
      const std::vector<double> dh = h.read(dgu.h), ds = h.read(dout.h);
      std::vector<double> bd(dh.size());
      for (std::size_t r = 0; r < R; ++r)
        for (std::size_t j = 0; j < F; ++j) {
          const double gv = gs[r * 2 * F + j], uv = gs[r * 2 * F + F + j], dv = ds[r * F + j], sig = 1.0 / (1.0 + std::exp(-gv));
          bd[r * 2 * F + j] = (33 * u32 + out_u) * std::fabs(dv * uv * sig) * (1.0 + std::fabs(gv)) + tiny;
          bd[r * 2 * F + F + j] = (17 * u32 + out_u) * std::fabs(dh[r * 2 * F + F + j]) + tiny;
        }
      CHECK(within(tl, "swiglu dgate_up", d.read(dgu.d), dh, bd) == "");
      // The gradient's copies (swiglu_backward_quantize, which consumes dout and gu: each call
      // gets copies of its own), against quantizing the stored gradient: FP8 in both types, MX
      // and bf16.
      const auto fresh = [&](const tensor& src) {
        tensor c = d.alloc(src.rows(), src.cols(), t, mem_tag::activation);
        d.copy(src, c);
        return c;
      };
      for (const fp8_type type : {fp8_type::e5m2, fp8_type::e4m3}) {
        INFO("FP8 swiglu_backward_quantize, " << name_of(type));
        const auto tb = fp8_tables(type);
        const auto p = fp8_plans(tb, true);
        tensor dd = fresh(dout.d), gd = fresh(gu.d);
        const qpair q = d.swiglu_backward_quantize(dd, gd, p[0]);
        CHECK(!dd.defined());
        CHECK(!gd.defined());
        const qpair u = d.quantize_both(dgu.d, p[1].rowwise, p[1].columnwise);
        CHECK(self_copy_mismatch<S>(d, q.rowwise, u.rowwise) == "");
        CHECK(self_copy_mismatch<S>(d, q.columnwise, u.columnwise) == "");
        CHECK(same_values("amax history", d.read(tb[0]->history()), d.read(tb[1]->history())) == "");
      }
      {
        INFO("MX and bf16 swiglu_backward_quantize");
        const operand_spec fp4 = recipes::mx_operand(mx_type::mxfp4, scale_rule::even, rounding::stochastic);
        const quant_plan mx{mx_request(fp4, block_axis::rowwise, true, true, 9), mx_request(fp4, block_axis::columnwise, true, true, 9), true};
        const quant_plan bf{plain_request(recipes::bf16_operand(), block_axis::rowwise), {}, false};
        for (const quant_plan* plan : {&mx, &bf}) {
          tensor dd = fresh(dout.d), gd = fresh(gu.d);
          const qpair q = d.swiglu_backward_quantize(dd, gd, *plan);
          const qpair u = plan->columnwise_wanted ? d.quantize_both(dgu.d, plan->rowwise, plan->columnwise)
                                                  : qpair{d.quantize(dgu.d, plan->rowwise), {}};
          CHECK(self_copy_mismatch<S>(d, q.rowwise, u.rowwise) == "");
          if (plan->columnwise_wanted) CHECK(self_copy_mismatch<S>(d, q.columnwise, u.columnwise) == "");
        }
      }
      // Written over gu itself (nn::swiglu::backward_in_place): the same bits.
      d.swiglu_backward(dout.d, gu.d, gu.d);
      CHECK(same_values("swiglu dgate_up in place", d.read(gu.d), d.read(dgu.d)) == "");
    }
  WARN("swiglu, worst error / bound:" << tl.str());
}

// Embedding forward and backward, bit for bit.
template <class S>
void embedding() {
  // Forward copies table rows (rounded to nearest even for bf16 activations, as the host's store
  // does); the backward adds the dout rows in token order into the f32 table in float, dout
  // widened exactly from bf16: the same additions in the same order as the host. Bit for bit.
  const std::size_t shapes[][3] = {{1, 1, 1}, {67, 37, 33}, {130, 256, 64}, {3, 5, 96}};  // tokens, vocab, width
  std::uint64_t seed = 6000;
  for (const auto& sh : shapes)
    for (const dtype t : {dtype::f32, dtype::bf16}) {
      const std::size_t n = sh[0], V = sh[1], C = sh[2];
      INFO(name_of(t) << " embedding: " << n << " tokens, vocab " << V << ", width " << C);
      host_backend h;
      const auto made = S::make();
      auto& d = *made;
      const twin ids = make_tokens(h, d, token_ids(n, V, seed++), V);
      twin table = make_twin(h, d, V, C, dtype::f32, normals(V * C, seed++), mem_tag::parameter);
      twin out = make_twin(h, d, n, C, t, std::vector<double>(n * C, nan_value));
      h.embedding_forward(ids.h, table.h, out.h);
      d.embedding_forward(ids.d, table.d, out.d);
      CHECK(same_values("embedding out", d.read(out.d), h.read(out.h)) == "");
      twin dout = make_twin(h, d, n, C, t, normals(n * C, seed++));
      twin dtable = make_twin(h, d, V, C, dtype::f32, normals(V * C, seed++, 0.0, 0.1), mem_tag::gradient);
      h.embedding_backward(ids.h, dout.h, dtable.h);
      d.embedding_backward(ids.d, dout.d, dtable.d);
      CHECK(same_values("embedding dtable", d.read(dtable.d), h.read(dtable.h)) == "");
    }
}

// Cross-entropy loss and in-place gradient.
template <class S>
void cross_entropy() {
  // The device (catch2_test_nn_kernels.cu): the normalizer s is within rel_s = (3 k + 32 +
  // E[M - z]) u32, k = ceil(V / (256 N)) N terms per thread (N = 16 / element bytes); the loss,
  // stored as float, within 2 (max rel_s + 4 u32 (2 max|z| + log V)); the gradient within
  // 2 (p (rel_s + (M - z + 8) u32) + u32 (p + onehot)) / rows (+ the bf16 rounding). The host
  // computes in double from the same logits and rounds the gradient once: + (u32 or 2 u16) |g|.
  tally tl;
  const std::size_t shapes[][2] = {{1, 1}, {7, 17}, {67, 256}, {33, 4099}};
  std::uint64_t seed = 7000;
  for (const auto& sh : shapes)
    for (const dtype t : {dtype::f32, dtype::bf16}) {
      const std::size_t rows = sh[0], V = sh[1];
      INFO(name_of(t) << " cross-entropy " << rows << "x" << V);
      host_backend h;
      const auto made = S::make();
      auto& d = *made;
      std::vector<double> zv = normals(rows * V, seed++, 0.0, 3.0);
      for (std::size_t r = 1; r < rows; r += 3)
        for (std::size_t j = 0; j < V; ++j) zv[r * V + j] += 60.0;  // the max must be subtracted
      std::vector<std::int32_t> tg(rows);
      std::mt19937_64 gen(seed++);
      for (auto& x : tg) x = static_cast<std::int32_t>(gen() % V);
      twin z = make_twin(h, d, rows, V, t, zv);
      const twin targets = make_tokens(h, d, tg, V);
      twin loss = make_twin(h, d, 1, 1, dtype::f64);
      const std::vector<double> zs = h.read(z.h);
      // Bounds.
      const double N = t == dtype::bf16 ? 8 : 4, k = std::ceil(static_cast<double>(V) / (256.0 * N)) * N;
      const double out_u = t == dtype::bf16 ? u16 : 0.0;
      double zmax = 0.0, worst_rel_s = 0.0;
      for (const double v : zs) zmax = std::max(zmax, std::fabs(v));
      std::vector<double> gb(rows * V);
      for (std::size_t r = 0; r < rows; ++r) {
        const double* zr = zs.data() + r * V;
        const double m = *std::max_element(zr, zr + V);
        double sum = 0.0, weighted = 0.0;
        for (std::size_t j = 0; j < V; ++j) {
          sum += std::exp(zr[j] - m);
          weighted += std::exp(zr[j] - m) * (m - zr[j]);
        }
        const double rel_s = (3 * k + 32 + weighted / sum) * u32;
        worst_rel_s = std::max(worst_rel_s, rel_s);
        for (std::size_t j = 0; j < V; ++j) {
          const double onehot = static_cast<std::size_t>(tg[r]) == j ? 1.0 : 0.0, p = std::exp(zr[j] - m) / sum;
          gb[r * V + j] = (2 * (p * (rel_s + (m - zr[j] + 8) * u32) + u32 * (p + onehot)) + 2 * out_u * std::fabs(p - onehot) +
                           (u32 + out_u) * std::fabs(p - onehot)) /
                          static_cast<double>(rows);
        }
      }
      const std::vector<double> lb{2 * (worst_rel_s + 4 * u32 * (2 * zmax + std::log(static_cast<double>(V))))};
      // Loss only: the logits stay.
      h.cross_entropy(z.h, targets.h, loss.h, false);
      d.cross_entropy(z.d, targets.d, loss.d, false);
      CHECK(within(tl, "cross-entropy loss", d.read(loss.d), h.read(loss.h), lb) == "");
      CHECK(same_values("logits without a gradient", d.read(z.d), zs) == "");
      // Loss and the gradient in place.
      h.fill(loss.h, nan_value);
      d.fill(loss.d, nan_value);
      h.cross_entropy(z.h, targets.h, loss.h, true);
      d.cross_entropy(z.d, targets.d, loss.d, true);
      CHECK(within(tl, "cross-entropy loss", d.read(loss.d), h.read(loss.h), lb) == "");
      CHECK(within(tl, std::string("cross-entropy gradient ") + name_of(t), d.read(z.d), h.read(z.h), gb) == "");
    }
  WARN("cross-entropy, worst error / bound:" << tl.str());
}

// Global norm, clip factor and AdamW.
template <class S>
void optimizer() {
  // global_norm: the device sums squares in double and rounds the norm to float (2 u32, as
  // catch2_test_nn_kernels.cu); the host's double norm is exact to far better. Both clip by
  // nn::clip_factor (max_norm / norm above max_norm): the device's factor, formed from its float
  // norm and stored as a float, is within 4 u32 of the host's. AdamW: the device's float update against the reference (catch2_test_nn_kernels.cu:
  // m 8 u32, v 16 u32, param 32 u32 of their magnitudes, lr and clip read as floats), the host's
  // float-stored double update within 1 u32 of each: 10, 18 and 40 u32. Step counts exact.
  tally tl;
  host_backend h;
  const auto made = S::make();
  auto& d = *made;
  const std::size_t shapes[][2] = {{3, 7}, {1, 5}, {67, 96}, {130, 64}};
  std::vector<twin> grads;
  std::uint64_t seed = 8000;
  for (const auto& sh : shapes) grads.push_back(make_twin(h, d, sh[0], sh[1], dtype::f32, normals(sh[0] * sh[1], seed++, 0.0, 0.3), mem_tag::gradient));
  std::vector<const tensor*> gh, gd;
  for (const twin& x : grads) {
    gh.push_back(&x.h);
    gd.push_back(&x.d);
  }
  twin norm = make_twin(h, d, 1, 1, dtype::f64), clip = make_twin(h, d, 1, 1, dtype::f64);
  h.global_norm(gh, 0.0, norm.h, clip.h);
  const double n = h.read_scalar(norm.h);
  for (const double max_norm : {0.0, 2.0 * n, 0.25 * n}) {
    INFO("max_norm " << max_norm << " (norm " << n << ")");
    h.global_norm(gh, max_norm, norm.h, clip.h);
    d.global_norm(gd, max_norm, norm.d, clip.d);
    CHECK(within(tl, "norm", d.read(norm.d), h.read(norm.h), {2 * u32 * n}) == "");
    const double want = mxkit::nn::clip_factor(n, max_norm);
    CHECK(within(tl, "clip (device formula)", d.read(clip.d), {want}, {4 * u32 * want}) == "");
    CHECK(within(tl, "clip (host formula)", d.read(clip.d), h.read(clip.h), {4 * u32 * want}) == "");
    if (max_norm != 0.25 * n) CHECK(d.read_scalar(clip.d) == 1.0);
  }
  for (const double bad : {nan_value, HUGE_VAL}) {
    INFO("a gradient element " << bad);
    std::vector<double> v = h.read(grads[2].h);
    v[100] = bad;
    h.write(grads[2].h, v);
    d.write(grads[2].d, v);
    h.global_norm(gh, 1.0, norm.h, clip.h);
    d.global_norm(gd, 1.0, norm.d, clip.d);
    // Both non-finite (the device writes NaN for an Inf norm too, the host Inf), so adamw_step
    // skips on both; the device's clip factor is then 1 (gpu/nn/global_norm.hpp), the host's
    // max_norm / Inf = 0 for an Inf norm: unused either way, only the device's is checked.
    CHECK_FALSE(std::isfinite(d.read_scalar(norm.d)));
    CHECK_FALSE(std::isfinite(h.read_scalar(norm.h)));
    CHECK(d.read_scalar(clip.d) == 1.0);
  }

  // AdamW over three parameters, the same norm and clip factor written into both backends.
  struct slot {
    twin p, g, m, v;
    double wd;
  };
  std::vector<slot> slots;
  const std::size_t pshapes[][2] = {{2, 5}, {3, 5}, {67, 96}};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::size_t r = pshapes[i][0], c = pshapes[i][1];
    std::vector<double> v = normals(r * c, seed++, 0.0, 1e-3);
    for (double& x : v) x = std::fabs(x);
    slots.push_back({make_twin(h, d, r, c, dtype::f32, normals(r * c, seed++), mem_tag::parameter),
                     make_twin(h, d, r, c, dtype::f32, normals(r * c, seed++, 0.0, 0.3), mem_tag::gradient),
                     make_twin(h, d, r, c, dtype::f32, normals(r * c, seed++, 0.0, 0.01), mem_tag::optimizer),
                     make_twin(h, d, r, c, dtype::f32, v, mem_tag::optimizer), i == 1 ? 0.0 : 0.1});
  }
  std::vector<adamw_slot_ref> rh, rd;
  for (slot& s : slots) {
    rh.push_back({&s.p.h, &s.g.h, &s.m.h, &s.v.h, s.wd});
    rd.push_back({&s.p.d, &s.g.d, &s.m.d, &s.v.d, s.wd});
  }
  const adamw_args args{2e-2, 0.9, 0.95, 1e-8};
  const double clip_factor = 0.3;
  twin state = make_twin(h, d, 1, 2, dtype::f64, {3.0, 1.0}, mem_tag::optimizer);  // 3 steps taken, 1 skipped
  h.write(norm.h, {1.5});
  d.write(norm.d, {1.5});
  h.write(clip.h, {clip_factor});
  d.write(clip.d, {clip_factor});
  std::vector<std::vector<double>> p0, m0, v0, g0;
  for (const slot& s : slots) {
    p0.push_back(h.read(s.p.h));
    m0.push_back(h.read(s.m.h));
    v0.push_back(h.read(s.v.h));
    g0.push_back(h.read(s.g.h));
  }
  h.adamw_step(rh, args, norm.h, clip.h, state.h);
  d.adamw_step(rd, args, norm.d, clip.d, state.d);
  CHECK(d.read(state.d) == std::vector<double>{4.0, 1.0});
  CHECK(h.read(state.h) == std::vector<double>{4.0, 1.0});
  const double step = 4.0, bc1 = 1.0 - std::pow(args.beta1, step), bc2 = 1.0 - std::pow(args.beta2, step);
  for (std::size_t k = 0; k < slots.size(); ++k) {
    INFO("parameter " << k);
    const std::vector<double> ph = h.read(slots[k].p.h), mh = h.read(slots[k].m.h), vh = h.read(slots[k].v.h);
    std::vector<double> bp(ph.size()), bm(ph.size()), bv(ph.size());
    for (std::size_t i = 0; i < ph.size(); ++i) {
      const double gc = std::fabs(g0[k][i] * clip_factor), mmag = args.beta1 * std::fabs(m0[k][i]) + (1 - args.beta1) * gc;
      bm[i] = 10 * u32 * mmag;
      bv[i] = 18 * u32 * (args.beta2 * v0[k][i] + (1 - args.beta2) * gc * gc);
      const double a = mmag / bc1 / (std::sqrt(vh[i] / bc2) + args.eps);
      bp[i] = 40 * u32 * (std::fabs(p0[k][i]) + args.lr * (a + slots[k].wd * std::fabs(p0[k][i])));
    }
    CHECK(within(tl, "adamw param", d.read(slots[k].p.d), ph, bp) == "");
    CHECK(within(tl, "adamw m", d.read(slots[k].m.d), mh, bm) == "");
    CHECK(within(tl, "adamw v", d.read(slots[k].v.d), vh, bv) == "");
  }
  // A non-finite norm: nothing written, the skip counted on the device.
  std::vector<std::vector<double>> before;
  for (const slot& s : slots)
    for (const twin* x : {&s.p, &s.m, &s.v}) before.push_back(d.read(x->d));
  for (const double bad : {nan_value, HUGE_VAL}) {
    h.write(norm.h, {bad});
    d.write(norm.d, {bad});
    h.adamw_step(rh, args, norm.h, clip.h, state.h);
    d.adamw_step(rd, args, norm.d, clip.d, state.d);
  }
  CHECK(d.read(state.d) == std::vector<double>{4.0, 3.0});
  CHECK(h.read(state.h) == std::vector<double>{4.0, 3.0});
  std::size_t i = 0;
  for (const slot& s : slots)
    for (const twin* x : {&s.p, &s.m, &s.v}) CHECK(same_values("skipped step", d.read(x->d), before[i++]) == "");
  WARN("global norm and adamw, worst error / bound:" << tl.str());
}

// Fill, copy, axpy, amax.
template <class S>
void memory_ops() {
  // fill and copy are exact (fill rounds the value to the element type as write() does); amax is
  // exact (a max of magnitudes) and a NaN wins. axpy: y + alpha x in float (double for f64); the
  // device may fuse the multiply-add (one rounding), the host rounds twice: |device - host| <=
  // 2 u (|y| + |alpha x|) with u the arithmetic's unit roundoff, + 2 u16 of it for bf16 y.
  tally tl;
  host_backend h;
  const auto made = S::make();
  auto& d = *made;
  std::uint64_t seed = 9000;
  const std::size_t shapes[][2] = {{1, 1}, {3, 37}, {130, 64}};
  for (const auto& sh : shapes)
    for (const dtype t : {dtype::f32, dtype::bf16, dtype::f64, dtype::i32}) {
      const std::size_t R = sh[0], C = sh[1];
      INFO(name_of(t) << " " << R << "x" << C);
      twin f = make_twin(h, d, R, C, t);
      h.fill(f.h, t == dtype::i32 ? -7.0 : 0.1);
      d.fill(f.d, t == dtype::i32 ? -7.0 : 0.1);
      CHECK(same_values("fill", d.read(f.d), h.read(f.h)) == "");
      std::vector<double> v = normals(R * C, seed++);
      if (t == dtype::i32)
        for (double& x : v) x = std::round(100 * x);
      const twin src = make_twin(h, d, R, C, t, v);
      twin dst = make_twin(h, d, R, C, t);
      h.copy(src.h, dst.h);
      d.copy(src.d, dst.d);
      CHECK(same_values("copy", d.read(dst.d), h.read(dst.h)) == "");
      if (t == dtype::i32) continue;
      const double alpha = -0.3;
      twin y = make_twin(h, d, R, C, t, normals(R * C, seed++));
      const std::vector<double> y0 = h.read(y.h), xs = h.read(src.h);
      h.axpy(alpha, src.h, y.h);
      d.axpy(alpha, src.d, y.d);
      const double u = t == dtype::f64 ? 0x1p-53 : u32, out_u = t == dtype::bf16 ? 2 * u16 : 0.0;
      std::vector<double> b(y0.size());
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = (2 * u + out_u) * (std::fabs(y0[i]) + std::fabs(alpha * xs[i]));
      CHECK(within(tl, std::string("axpy ") + name_of(t), d.read(y.d), h.read(y.h), b) == "");
      if (t == dtype::f64) continue;  // amax takes activations (f32, bf16) on the device
      twin out = make_twin(h, d, 1, 1, dtype::f64);
      h.amax(src.h, out.h);
      d.amax(src.d, out.d);
      CHECK(same_values("amax", d.read(out.d), h.read(out.h)) == "");
      std::vector<double> with_nan = v;
      with_nan[with_nan.size() / 2] = nan_value;
      const twin n = make_twin(h, d, R, C, t, with_nan);
      h.amax(n.h, out.h);
      d.amax(n.d, out.d);
      CHECK(std::isnan(d.read_scalar(out.d)));
      CHECK(std::isnan(h.read_scalar(out.h)));
    }
  WARN("axpy, worst error / bound:" << tl.str());
}

}  // namespace backend_conformance

// Every check above as one Catch2 test case named "<name>: <check>", tagged `tags`.
#define MXKIT_BACKEND_CONFORMANCE_TESTS(Subject, name, tags) \
  TEST_CASE(name ": quantized copies are the oracle's, byte for byte", tags "") { backend_conformance::quantized_copies<Subject>(); } \
  TEST_CASE(name ": a weight's copies gathered from slabs are the oracle's, byte for byte", tags "") { backend_conformance::gathered_copies<Subject>(); } \
  TEST_CASE(name ": every GEMM product within the fp32 accumulation bound", tags "[gemm]") { backend_conformance::gemm_products<Subject>(); } \
  TEST_CASE(name ": update_scales gives the oracle's histories and scales exactly", tags "") { backend_conformance::update_scales<Subject>(); } \
  TEST_CASE(name ": rmsnorm forward, fused quantize and backward", tags "") { backend_conformance::rmsnorm<Subject>(); } \
  TEST_CASE(name ": rope forward and inverse", tags "") { backend_conformance::rope<Subject>(); } \
  TEST_CASE(name ": attention forward and backward, head_dim 64 and 128, GQA", tags "[attention]") { backend_conformance::attention<Subject>(); } \
  TEST_CASE(name ": swiglu forward, fused quantize and backward", tags "") { backend_conformance::swiglu<Subject>(); } \
  TEST_CASE(name ": embedding forward and backward, bit for bit", tags "") { backend_conformance::embedding<Subject>(); } \
  TEST_CASE(name ": cross-entropy loss and in-place gradient", tags "") { backend_conformance::cross_entropy<Subject>(); } \
  TEST_CASE(name ": global norm, clip factor and AdamW", tags "") { backend_conformance::optimizer<Subject>(); } \
  TEST_CASE(name ": fill, copy, axpy, amax", tags "") { backend_conformance::memory_ops<Subject>(); }
