// SPDX-License-Identifier: Apache-2.0
// mxkit::ref::validate_gemm (validation/validate_gemm.hpp): a "foreign" GEMM output, summed in another order
// (fp64 over the dequantized operands, then rounded), passes for MX operands in peers' layouts,
// per-tensor FP8 and bf16 operands, fp32 and bf16 outputs; planted errors, NaNs and real kernel
// bugs (a dropped block, a wrong scale) are reported with their position and bound; sampled rows
// check what they say; the derived bound is the documented formula; bad calls throw.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/validation/peer_presets.hpp>
#include <mxkit/validation/validate_gemm.hpp>

#include "../catch.hpp"
#include "../ref/gemm_test_util.hpp"

namespace {
using mxkit::block_axis;
using mxkit::matrix_view;
using mxkit::mx_type;
constexpr double unit_roundoff = 0x1p-24;

// The foreign kernel's output: fp64 sums of the dequantized copies' products, rounded once.
template <class Out>
std::vector<Out> foreign_product(const mxkit::mx_foreign_view& a, const mxkit::mx_foreign_view& b) {
  const mxkit::mx_tensor ta = mxkit::to_mx_tensor(a), tb = mxkit::to_mx_tensor(b);
  const std::size_t p = ta.layout().lines(), q = tb.layout().lines(), r = ta.layout().line_length();
  const auto o = gemm_test::oracle_tn(gemm_test::dequantized_lines(ta), gemm_test::dequantized_lines(tb), p, q, r);
  std::vector<Out> d(p * q);
  for (std::size_t i = 0; i < d.size(); ++i) {
    if constexpr (std::is_same_v<Out, float>) d[i] = static_cast<float>(o.d[i]);
    else d[i] = mxkit::bfloat16::from_float(static_cast<float>(o.d[i]));
  }
  return d;
}

}  // namespace

TEST_CASE("validate_gemm: a foreign wgrad on TE-style copies passes; planted errors are reported", "[validate][gemm]") {
  // wgrad dW[N,K] = dY[M,N]^T . X[M,K]: both operands are columnwise copies (blocks along M),
  // which TE stores not transposed, with cuBLAS scales.
  const std::size_t M = 128, N = 48, K = 80;
  const std::vector<float> dy = gemm_test::random_matrix(M, N, 1), x = gemm_test::random_matrix(M, K, 2);
  const mxkit::ref::peer_preset te = mxkit::ref::peers::te_mxfp8(mx_type::mxfp8_e4m3, mxkit::scale_layout::cublas_128x4);
  const mxkit::mx_foreign_buffers a = mxkit::ref::quantize_like(te, matrix_view<const float>{dy.data(), M, N}, block_axis::columnwise);
  const mxkit::mx_foreign_buffers b = mxkit::ref::quantize_like(te, matrix_view<const float>{x.data(), M, K}, block_axis::columnwise);
  std::vector<float> d = foreign_product<float>(a.view(), b.view());
  const matrix_view<const float> dv{d.data(), N, K};

  mxkit::ref::gemm_validate_options o;
  const mxkit::ref::gemm_validation_report r = mxkit::ref::validate_gemm(a.view(), b.view(), dv, o);
  INFO(mxkit::ref::to_string(r));
  CHECK(r.ok());
  CHECK(r.rows_checked == N);
  CHECK(r.elements_checked == N * K);
  CHECK(r.operands == "mxfp8_e4m3 x mxfp8_e4m3 -> fp32");
  CHECK(r.relative_bound == mxkit::ref::gemm_relative_bound(true, M, mxkit::ref::gemm_accumulation::tensor_core, false, 1.0f));
  CHECK(r.summary().rfind("PASS gemm 48x80x128 mxfp8_e4m3 x mxfp8_e4m3 -> fp32: 48 rows, 3840 elements", 0) == 0);
  // An exact sum is within the fp32 bound as well.
  o.accumulation = mxkit::ref::gemm_accumulation::fp32;
  CHECK(mxkit::ref::validate_gemm(a.view(), b.view(), dv, o).ok());

  // Plant: (5, 7) off by 10 bounds, (30, 79) NaN. The bound of (5, 7): rel * sum_k |a_k b_k|.
  const mxkit::mx_tensor ta = mxkit::to_mx_tensor(a.view()), tb = mxkit::to_mx_tensor(b.view());
  const std::vector<float> la = gemm_test::dequantized_lines(ta), lb = gemm_test::dequantized_lines(tb);
  double s57 = 0;
  for (std::size_t k = 0; k < M; ++k) s57 += std::fabs(static_cast<double>(la[5 * M + k]) * lb[7 * M + k]);
  const double bound_57 = mxkit::ref::gemm_relative_bound(true, M, o.accumulation, false, 1.0f) * s57;
  d[5 * K + 7] += static_cast<float>(10 * bound_57);
  d[30 * K + 79] = std::numeric_limits<float>::quiet_NaN();
  const mxkit::ref::gemm_validation_report bad = mxkit::ref::validate_gemm(a.view(), b.view(), dv, o);
  INFO(mxkit::ref::to_string(bad));
  CHECK(bad.over_bound == 2);
  CHECK(bad.nan_mismatches == 1);
  REQUIRE(bad.worst.size() >= 2);
  CHECK(bad.worst[0].row == 30);  // the NaN: infinitely over
  CHECK(bad.worst[0].col == 79);
  CHECK(std::isinf(bad.worst[0].ratio));
  CHECK(bad.worst[1].row == 5);
  CHECK(bad.worst[1].col == 7);
  CHECK(bad.worst[1].ratio == mxkit_test::approx(10.0).epsilon(0.01));
  CHECK(bad.worst[2].ratio <= 1.0);
  const std::string text = mxkit::ref::to_string(bad);
  CHECK(text.rfind("FAIL gemm 48x80x128 mxfp8_e4m3 x mxfp8_e4m3 -> fp32: 2 of 3840 elements (48 rows) over", 0) == 0);
  CHECK(text.find("(1 NaN mismatches)") != std::string::npos);
  CHECK(text.find("(row 5, col 7): got") != std::string::npos);
}

TEST_CASE("validate_gemm: real kernel bugs exceed the bound", "[validate][gemm]") {
  // fprop on MXFP4 (ROCm-style storage: transposed, AITER-shuffled scales, Hadamard on both).
  const std::size_t M = 40, N = 36, K = 256;
  const std::vector<float> x = gemm_test::random_matrix(M, K, 3), w = gemm_test::random_matrix(N, K, 4);
  const mxkit::ref::peer_preset rocm = mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::software, mxkit::scale_layout::aiter_shuffle);
  const mxkit::mx_foreign_buffers a = mxkit::ref::quantize_like(rocm, matrix_view<const float>{x.data(), M, K}, block_axis::rowwise);
  const mxkit::mx_foreign_buffers b = mxkit::ref::quantize_like(rocm, matrix_view<const float>{w.data(), N, K}, block_axis::rowwise);
  CHECK(mxkit::ref::validate_gemm(a.view(), b.view(), matrix_view<const float>{foreign_product<float>(a.view(), b.view()).data(), M, N}).ok());
  // Bug 1: the kernel drops the last block of the reduction (a loop bound off by one).
  mxkit::mx_foreign_buffers a_short = a;
  for (std::size_t line = 0; line < M; ++line)
    for (std::size_t p = K - 32; p < K; ++p) {
      std::uint8_t& byte = a_short.data[line * a.view().data_ld() + p / 2];
      byte = 0;  // zero codes: the last block contributes nothing
    }
  const std::vector<float> dropped = foreign_product<float>(a_short.view(), b.view());
  const mxkit::ref::gemm_validation_report r1 = mxkit::ref::validate_gemm(a.view(), b.view(), matrix_view<const float>{dropped.data(), M, N});
  INFO(mxkit::ref::to_string(r1));
  CHECK(r1.over_bound > M * N / 2);
  // Bug 2: one block of A read with its neighbour's scale.
  mxkit::mx_foreign_buffers a_scale = a;
  const mxkit::mx_foreign_view av = a.view();
  a_scale.scales[av.scale_offset_of(11, 3)] = a.scales[av.scale_offset_of(11, 4)] + 1;
  const std::vector<float> wrong = foreign_product<float>(a_scale.view(), b.view());
  const mxkit::ref::gemm_validation_report r2 = mxkit::ref::validate_gemm(a.view(), b.view(), matrix_view<const float>{wrong.data(), M, N});
  INFO(mxkit::ref::to_string(r2));
  CHECK(r2.over_bound > 0);
  for (const auto& e : r2.worst) CHECK(e.row == 11);  // only row 11 can be off
}

TEST_CASE("validate_gemm: sampled rows", "[validate][gemm]") {
  const std::size_t P = 64, Q = 300, R = 64;
  const std::vector<float> xa = gemm_test::random_matrix(P, R, 5), xb = gemm_test::random_matrix(Q, R, 6);
  const mxkit::mx_tensor a = mxkit::ref::quantize_rowwise(matrix_view<const float>{xa.data(), P, R}, mx_type::mxfp8_e5m2);
  const mxkit::mx_tensor b = mxkit::ref::quantize_rowwise(matrix_view<const float>{xb.data(), Q, R}, mx_type::mxfp6_e3m2);
  std::vector<mxkit::bfloat16> d = foreign_product<mxkit::bfloat16>(mxkit::foreign_view(a.view()), mxkit::foreign_view(b.view()));
  d[17 * Q + 299] = mxkit::bfloat16::from_float(d[17 * Q + 299].to_float() * 2 + 1);  // row 17
  const matrix_view<const mxkit::bfloat16> dv{d.data(), P, Q};
  mxkit::ref::gemm_validate_options o;
  o.sample_rows = 4;
  o.seed = 3;
  const mxkit::ref::gemm_validation_report s = mxkit::ref::validate_gemm(a.view(), b.view(), dv, o);
  CHECK(s.rows_checked == 4);
  CHECK(s.elements_checked == 4 * Q);
  const std::vector<std::size_t> rows = mxkit::detail::gemm_rows_to_check(P, o);
  REQUIRE(rows.size() == 4);
  CHECK(rows.front() == 0);  // the first and the last row are always in the sample
  CHECK(rows.back() == P - 1);
  const bool has_17 = std::find(rows.begin(), rows.end(), std::size_t{17}) != rows.end();
  CHECK(s.ok() != has_17);
  o.rows = {17, 3};
  const mxkit::ref::gemm_validation_report e = mxkit::ref::validate_gemm(a.view(), b.view(), dv, o);
  CHECK(e.rows_checked == 2);
  CHECK(e.over_bound == 1);
  REQUIRE_FALSE(e.worst.empty());
  CHECK(e.worst[0].row == 17);
  CHECK(e.worst[0].col == 299);
  CHECK(e.operands == "mxfp8_e5m2 x mxfp6_e3m2 -> bf16");
  o.rows = {};
  o.sample_rows = 0;  // every row
  CHECK(mxkit::ref::validate_gemm(a.view(), b.view(), dv, o).over_bound == 1);
}

TEST_CASE("validate_gemm: per-tensor FP8 and high-precision operands", "[validate][gemm]") {
  const std::size_t P = 9, Q = 300, R = 77;
  const std::vector<float> xa = gemm_test::random_matrix(P, R, 7, 2), xb = gemm_test::random_matrix(Q, R, 8, 2);
  const mxkit::fp8_tensor fa = mxkit::quantize_fp8(matrix_view<const float>{xa.data(), P, R}, mxkit::fp8_type::e4m3, 8.0f);
  const mxkit::fp8_tensor fb = mxkit::quantize_fp8(matrix_view<const float>{xb.data(), Q, R}, mxkit::fp8_type::e5m2, 0.5f);
  const auto o8 = gemm_test::oracle_tn(mxkit::dequantize(fa), mxkit::dequantize(fb), P, Q, R);
  std::vector<float> d8(P * Q);
  for (std::size_t i = 0; i < d8.size(); ++i) d8[i] = static_cast<float>(-2.0 * o8.d[i]);
  mxkit::ref::gemm_validate_options o;
  o.alpha = -2.0f;
  o.accumulation = mxkit::ref::gemm_accumulation::fp32;
  const mxkit::ref::gemm_validation_report r8 =
      mxkit::ref::validate_gemm(mxkit::as_view(fa), mxkit::as_view(fb), matrix_view<const float>{d8.data(), P, Q}, o);
  INFO(mxkit::ref::to_string(r8));
  CHECK(r8.ok());
  CHECK(r8.operands == "fp8 e4m3 x e5m2 -> fp32");
  d8[4 * Q + 250] *= 1.01f;
  CHECK(mxkit::ref::validate_gemm(mxkit::as_view(fa), mxkit::as_view(fb), matrix_view<const float>{d8.data(), P, Q}, o).over_bound == 1);

  // bf16 operands with leading dimensions, bf16 output.
  const std::size_t lda = R + 3;
  std::vector<mxkit::bfloat16> ha(P * lda), hb(Q * R);
  std::vector<float> fa32(P * R), fb32(Q * R);
  for (std::size_t i = 0; i < P; ++i)
    for (std::size_t k = 0; k < R; ++k) fa32[i * R + k] = (ha[i * lda + k] = mxkit::bfloat16::from_float(xa[i * R + k])).to_float();
  for (std::size_t i = 0; i < hb.size(); ++i) fb32[i] = (hb[i] = mxkit::bfloat16::from_float(xb[i])).to_float();
  const auto oh = gemm_test::oracle_tn(fa32, fb32, P, Q, R);
  std::vector<mxkit::bfloat16> dh(P * Q);
  for (std::size_t i = 0; i < dh.size(); ++i) dh[i] = mxkit::bfloat16::from_float(static_cast<float>(oh.d[i]));
  const mxkit::ref::gemm_validation_report rh =
      mxkit::ref::validate_gemm(matrix_view<const mxkit::bfloat16>{ha.data(), P, R, lda}, matrix_view<const mxkit::bfloat16>{hb.data(), Q, R},
                           matrix_view<const mxkit::bfloat16>{dh.data(), P, Q});
  INFO(mxkit::ref::to_string(rh));
  CHECK(rh.ok());
  CHECK(rh.operands == "bf16 x bf16 -> bf16");
}

TEST_CASE("validate_gemm: the derived bound and argument errors", "[validate][gemm]") {
  using mxkit::ref::gemm_accumulation;
  CHECK(mxkit::ref::gemm_relative_bound(true, 256, gemm_accumulation::fp32, false, 1.0f) == (2 * 8 + 34) * unit_roundoff);
  CHECK(mxkit::ref::gemm_relative_bound(true, 256, gemm_accumulation::tensor_core, false, 1.0f) == (2 * 8 + 34) * unit_roundoff + 0x1p-9);
  CHECK(mxkit::ref::gemm_relative_bound(false, 100, gemm_accumulation::fp32, true, 2.0f) == (2 * 100 + 4) * unit_roundoff + unit_roundoff + 0x1p-7);

  const std::vector<float> x = gemm_test::random_matrix(8, 64, 9);
  const mxkit::mx_tensor a = mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), 8, 64}, mx_type::mxfp4);
  mxkit::quantize_options rot;
  rot.hadamard = true;
  const mxkit::mx_tensor ar = mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), 8, 64}, mx_type::mxfp4, rot);
  const mxkit::mx_tensor a96 = mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), 8, 48, 64}, mx_type::mxfp4);
  std::vector<float> d(64);
  const matrix_view<const float> d88{d.data(), 8, 8};
  CHECK_THROWS_WITH(mxkit::ref::validate_gemm(a.view(), a.view(), matrix_view<const float>{d.data(), 8, 7}),
                    mxkit_test::contains("validate_gemm: D is 8x7, expected 8x8"));
  CHECK_THROWS_WITH(mxkit::ref::validate_gemm(a.view(), ar.view(), d88), mxkit_test::contains("operands were rotated differently"));
  CHECK_THROWS_WITH(mxkit::ref::validate_gemm(a.view(), a96.view(), d88), mxkit_test::contains("reduction lengths differ"));
  CHECK_THROWS_WITH(mxkit::ref::validate_gemm(a96.view(), a96.view(), d88), mxkit_test::contains("not a multiple of the MX block size 32"));
  mxkit::ref::gemm_validate_options o;
  o.rows = {8};
  CHECK_THROWS_WITH(mxkit::ref::validate_gemm(a.view(), a.view(), d88, o), mxkit_test::contains("row 8 is outside the 8 rows of D"));
  CHECK_THROWS_WITH(mxkit::ref::validate_gemm(a.view(), a.view(), matrix_view<const float>{nullptr, 8, 8}),
                    mxkit_test::contains("D has null data"));
  // The element-wise check alone.
  const std::vector<double> s(6, 1.0);
  const std::vector<float> got{1, 2, 3, 4, 5, 6}, want{1, 2, 3, 4, 5, 6.5f};
  const mxkit::ref::gemm_validation_report c = mxkit::ref::compare_within_bound(got.data(), want.data(), s.data(), 6, 3, 0.1);
  CHECK(c.over_bound == 1);
  CHECK(c.worst.at(0).row == 1);
  CHECK(c.worst.at(0).col == 2);
  CHECK(c.worst.at(0).ratio == mxkit_test::approx(5.0));
  CHECK_THROWS_WITH(mxkit::ref::compare_within_bound(got.data(), want.data(), s.data(), 6, 4, 0.1),
                    mxkit_test::contains("6 values are not whole rows of 4 columns"));
}

// ---- Issue #33 item 3: D's rows x ld must fit (fails on 144c4cb) ---------------------------------

TEST_CASE("validate_gemm: an output view whose rows x ld wraps is refused", "[validate][gemm]") {
  // With ld = 2^62 floats, row i starts 2^64 i bytes in: every row's address wraps back onto row 0,
  // so an unchecked read compares row 0 three times and reports PASS.
  const std::vector<float> x = gemm_test::random_matrix(3, 64, 33);
  const mxkit::mx_tensor a = mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), 3, 64}, mx_type::mxfp8_e4m3);
  std::vector<float> d = foreign_product<float>(mxkit::foreign_view(a.view()), mxkit::foreign_view(a.view()));
  for (std::size_t j = 0; j < 3; ++j) d[1 * 3 + j] = d[2 * 3 + j] = d[j];  // row 0 three times over
  constexpr std::size_t ld = std::size_t{1} << 62;
  CHECK_THROWS_WITH(mxkit::ref::validate_gemm(a.view(), a.view(), matrix_view<const float>{d.data(), 3, 3, ld}),
                    mxkit_test::contains("validate_gemm: D") && mxkit_test::contains("leading dimension 4611686018427387904"));
  CHECK_THROWS_WITH(mxkit::ref::validate_gemm(matrix_view<const float>{x.data(), 3, 64}, matrix_view<const float>{x.data(), 3, 64},
                                         matrix_view<const float>{d.data(), 3, 3, ld}),
                    mxkit_test::contains("leading dimension 4611686018427387904"));
  // 2^63 + 1 floats: rows x ld wraps in std::size_t itself.
  CHECK_THROWS_WITH(mxkit::ref::validate_gemm(a.view(), a.view(), matrix_view<const float>{d.data(), 3, 3, (std::size_t{1} << 63) + 1}),
                    mxkit_test::contains("exceeds the largest std::size_t"));
}
