// SPDX-License-Identifier: Apache-2.0
// The host reference GEMM (ref/gemm.hpp), the oracle of every device kernel, against an fp64
// product of the dequantized inputs: every MX element-type pair (mixed pairs too), per-tensor FP8,
// bf16, alpha/beta, bf16 output, the three named training products, and the errors for bad
// shapes, axes, K % 32 and rotations.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <mxkit/gemm/product.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/ref/quantize.hpp>

#include "../catch.hpp"
#include "gemm_test_util.hpp"

namespace {
using namespace mxkit;
constexpr double u = 0x1p-24;

mx_tensor quantized(std::size_t rows, std::size_t cols, mx_type t, block_axis axis, std::uint64_t seed) {
  const std::vector<float> x = gemm_test::random_matrix(rows, cols, seed);
  return ref::quantize(matrix_view<const float>{x.data(), rows, cols}, t, axis);
}

// ref vs fp64 oracle on the dequantized copies; bound (nb + 3) u S (see ref/gemm.hpp).
void check_mx_pair(mx_type ta, mx_type tb, std::size_t p, std::size_t q, std::size_t r, std::uint64_t seed) {
  const mx_tensor a = quantized(p, r, ta, block_axis::rowwise, seed);
  const mx_tensor b = quantized(q, r, tb, block_axis::rowwise, seed + 1);
  std::vector<float> d(p * q, std::numeric_limits<float>::quiet_NaN());
  ref::gemm(a.view(), b.view(), matrix_view<float>{d.data(), p, q});
  const auto o = gemm_test::oracle_tn(gemm_test::dequantized_lines(a), gemm_test::dequantized_lines(b), p, q, r);
  const double nb = static_cast<double>(r / 32);
  const auto c = gemm_test::compare(d, o.d, o.s, (nb + 3) * u, q);
  INFO(name_of(ta) << " x " << name_of(tb) << " " << p << "x" << q << "x" << r << ": worst " << c);
  CHECK(c.over_bound == 0);
}
}  // namespace

TEST_CASE("ref::gemm: every MX element-type pair matches fp64 on the dequantized inputs", "[gemm]") {
  std::uint64_t seed = 100;
  for (const mx_type ta : all_mx_types)
    for (const mx_type tb : all_mx_types) check_mx_pair(ta, tb, 7, 9, 96, seed += 2);
  // Longer reductions, the training pairs: MXFP4, MXFP8 E4M3, and the HYBRID E4M3 x E5M2.
  check_mx_pair(mx_type::mxfp4, mx_type::mxfp4, 5, 6, 1024, 7);
  check_mx_pair(mx_type::mxfp8_e4m3, mx_type::mxfp8_e4m3, 5, 6, 1024, 8);
  check_mx_pair(mx_type::mxfp8_e4m3, mx_type::mxfp8_e5m2, 5, 6, 1024, 9);
  check_mx_pair(mx_type::mxfp8_e5m2, mx_type::mxfp8_e4m3, 5, 6, 1024, 10);
}

TEST_CASE("ref::gemm: one block is exact; blocks add in fp32 in order", "[gemm]") {
  // Two 1x96 MXFP8 rows built by hand: block sums 2^24, 1 and 1. Added in fp32 in block order
  // each 1 is lost (2^24 + 1 ties to even), so the result is 2^24, not the exact 2^24 + 2.
  mx_tensor a({formats::mxfp8_e4m3, block_axis::rowwise, 1, 96}, {});
  mx_tensor b({formats::mxfp8_e4m3, block_axis::rowwise, 1, 96}, {});
  const std::uint8_t c1 = e4m3::from_float(1.0f).bits();
  for (std::size_t i = 0; i < 96; ++i) a.data()[i] = b.data()[i] = (i < 32 || i == 32 || i == 64) ? c1 : 0;
  a.set_scales({127 + 12, 127, 127});  // block 0: 32 * 2^12 * 2^7 = 2^24
  b.set_scales({127 + 7, 127, 127});
  float d = 0;
  const mx_tensor &ca = a, &cb = b;
  ref::gemm(ca.view(), cb.view(), matrix_view<float>{&d, 1, 1});
  CHECK(d == 0x1p24f);
  // A NaN scale makes its block NaN, and the result.
  a.scales()[1] = 0xFF;
  ref::gemm(ca.view(), cb.view(), matrix_view<float>{&d, 1, 1});
  CHECK(std::isnan(d));
}

TEST_CASE("ref::gemm: alpha, beta and bf16 output", "[gemm]") {
  const std::size_t p = 6, q = 10, r = 128;
  const mx_tensor a = quantized(p, r, mx_type::mxfp8_e4m3, block_axis::rowwise, 31);
  const mx_tensor b = quantized(q, r, mx_type::mxfp4, block_axis::rowwise, 32);
  const auto o = gemm_test::oracle_tn(gemm_test::dequantized_lines(a), gemm_test::dequantized_lines(b), p, q, r);
  const std::vector<float> c = gemm_test::random_matrix(p, q, 33, 2);
  const float alpha = -0.75f, beta = 1.5f;
  std::vector<float> d = c;
  ref::gemm(a.view(), b.view(), matrix_view<float>{d.data(), p, q}, alpha, beta);
  std::vector<double> want(p * q), s(p * q);
  for (std::size_t i = 0; i < want.size(); ++i) {
    want[i] = alpha * o.d[i] + beta * static_cast<double>(c[i]);
    s[i] = std::fabs(alpha) * o.s[i] + std::fabs(beta * c[i]);
  }
  const auto cmp = gemm_test::compare(d, want, s, (r / 32 + 4) * u, q);
  INFO("worst " << cmp);
  CHECK(cmp.over_bound == 0);

  // bf16 output: the fp32 result rounded once to nearest-even, beta reading the bf16 C.
  std::vector<bfloat16> d16(p * q), c16(p * q);
  for (std::size_t i = 0; i < c16.size(); ++i) d16[i] = c16[i] = bfloat16::from_float(c[i]);
  ref::gemm(a.view(), b.view(), matrix_view<bfloat16>{d16.data(), p, q}, alpha, beta);
  std::vector<float> c16f(p * q);
  for (std::size_t i = 0; i < c16.size(); ++i) c16f[i] = c16[i].to_float();
  std::vector<float> d32 = c16f;
  ref::gemm(a.view(), b.view(), matrix_view<float>{d32.data(), p, q}, alpha, beta);
  for (std::size_t i = 0; i < d16.size(); ++i) {
    INFO("element " << i);
    CHECK(d16[i].bits() == bfloat16::from_float(d32[i]).bits());
  }

  // beta == 0 never reads D: NaN there does not leak.
  std::vector<float> dn(p * q, std::numeric_limits<float>::quiet_NaN());
  ref::gemm(a.view(), b.view(), matrix_view<float>{dn.data(), p, q}, 2.0f, 0.0f);
  for (float v : dn) CHECK_FALSE(std::isnan(v));
}

TEST_CASE("ref::gemm: per-tensor FP8 and bf16 operands", "[gemm]") {
  const std::size_t p = 5, q = 7, r = 77;  // no block structure: any R
  const std::vector<float> xa = gemm_test::random_matrix(p, r, 41, 2), xb = gemm_test::random_matrix(q, r, 42, 2);
  for (const fp8_type ta : {fp8_type::e4m3, fp8_type::e5m2})
    for (const fp8_type tb : {fp8_type::e4m3, fp8_type::e5m2}) {
      const fp8_tensor a = quantize_fp8(matrix_view<const float>{xa.data(), p, r}, ta, 8.0f);
      const fp8_tensor b = quantize_fp8(matrix_view<const float>{xb.data(), q, r}, tb, 0.5f);
      std::vector<float> d(p * q);
      ref::gemm(a, b, matrix_view<float>{d.data(), p, q}, 2.0f);
      const std::vector<float> da = dequantize(a), db = dequantize(b);
      auto o = gemm_test::oracle_tn(da, db, p, q, r);
      for (auto& v : o.d) v *= 2.0;
      for (auto& v : o.s) v *= 2.0;
      const auto c = gemm_test::compare(d, o.d, o.s, (r + 3) * u, q);
      INFO(name_of(ta) << " x " << name_of(tb) << " worst " << c);
      CHECK(c.over_bound == 0);
    }
  std::vector<bfloat16> ha(p * r), hb(q * r);
  std::vector<float> fa(p * r), fb(q * r);
  for (std::size_t i = 0; i < ha.size(); ++i) fa[i] = (ha[i] = bfloat16::from_float(xa[i])).to_float();
  for (std::size_t i = 0; i < hb.size(); ++i) fb[i] = (hb[i] = bfloat16::from_float(xb[i])).to_float();
  std::vector<float> d(p * q);
  ref::gemm(matrix_view<const bfloat16>{ha.data(), p, r}, matrix_view<const bfloat16>{hb.data(), q, r},
                 matrix_view<float>{d.data(), p, q});
  const auto o = gemm_test::oracle_tn(fa, fb, p, q, r);
  const auto c = gemm_test::compare(d, o.d, o.s, (r + 2) * u, q);
  INFO("bf16 worst " << c);
  CHECK(c.over_bound == 0);
}

TEST_CASE("ref::gemm: fprop, dgrad and wgrad take the copies the quantizer writes", "[gemm]") {
  // X [M,K], W [N,K], dY [M,N]; every reduction axis is a different logical axis.
  const std::size_t M = 64, N = 96, K = 128;
  const std::vector<float> x = gemm_test::random_matrix(M, K, 51), w = gemm_test::random_matrix(N, K, 52),
                           dy = gemm_test::random_matrix(M, N, 53);
  const auto X = ref::quantize_both(matrix_view<const float>{x.data(), M, K}, mx_type::mxfp8_e4m3);
  const auto W = ref::quantize_both(matrix_view<const float>{w.data(), N, K}, mx_type::mxfp4);
  const auto DY = ref::quantize_both(matrix_view<const float>{dy.data(), M, N}, mx_type::mxfp8_e5m2);

  // Logical fp64 products of the dequantized copies each product consumes.
  const std::vector<float> xr = dequantize(X.rowwise), xc = dequantize(X.columnwise), wr = dequantize(W.rowwise),
                           wc = dequantize(W.columnwise), dyr = dequantize(DY.rowwise), dyc = dequantize(DY.columnwise);
  const auto y = gemm_test::oracle_tn(xr, wr, M, N, K);                                                   // X.W^T
  const auto dx = gemm_test::oracle_tn(dyr, gemm_test::transposed(wc, N, K), M, K, N);                     // dY.W
  const auto dw = gemm_test::oracle_tn(gemm_test::transposed(dyc, M, N), gemm_test::transposed(xc, M, K), N, K, M);  // dY^T.X

  const std::vector<float> got_y = ref::fprop(X.rowwise, W.rowwise);
  const std::vector<float> got_dx = ref::dgrad(DY.rowwise, W.columnwise);
  const std::vector<float> got_dw = ref::wgrad(DY.columnwise, X.columnwise);
  const auto cy = gemm_test::compare(got_y, y.d, y.s, (K / 32 + 3) * u, N);
  const auto cx = gemm_test::compare(got_dx, dx.d, dx.s, (N / 32 + 3) * u, K);
  const auto cw = gemm_test::compare(got_dw, dw.d, dw.s, (M / 32 + 3) * u, K);
  INFO("fprop " << cy << " | dgrad " << cx << " | wgrad " << cw);
  CHECK(cy.over_bound == 0);
  CHECK(cx.over_bound == 0);
  CHECK(cw.over_bound == 0);

  // The view form with an epilogue and bf16 output agrees with the vector form.
  std::vector<bfloat16> y16(M * N);
  ref::product(gemm_product::fprop, X.rowwise.view(), W.rowwise.view(), matrix_view<bfloat16>{y16.data(), M, N}, {0.5f, 0.0f});
  for (std::size_t i = 0; i < y16.size(); ++i) CHECK(y16[i].bits() == bfloat16::from_float(0.5f * got_y[i]).bits());
}

TEST_CASE("ref::gemm: bad shapes, axes, K % 32 and rotations are clear errors", "[gemm]") {
  using mxkit_test::contains;
  const mx_tensor x_r = quantized(8, 64, mx_type::mxfp4, block_axis::rowwise, 61);
  const mx_tensor x_c = quantized(8, 64, mx_type::mxfp4, block_axis::columnwise, 62);
  const mx_tensor w_r = quantized(16, 64, mx_type::mxfp4, block_axis::rowwise, 63);
  const mx_tensor w_c = quantized(16, 64, mx_type::mxfp4, block_axis::columnwise, 64);
  const mx_tensor w_k96 = quantized(16, 96, mx_type::mxfp4, block_axis::rowwise, 65);
  REQUIRE_THROWS_WITH(ref::fprop(x_c, w_r), contains("fprop: X must be the rowwise copy, got the columnwise copy"));
  REQUIRE_THROWS_WITH(ref::fprop(x_r, w_c), contains("fprop: W must be the rowwise copy"));
  REQUIRE_THROWS_WITH(ref::fprop(x_r, w_k96), contains("fprop: X is 8x64 but W is 16x96 (K must match)"));
  REQUIRE_THROWS_WITH(ref::dgrad(x_r, w_r), contains("dgrad: W must be the columnwise copy"));
  // dY [8,64] rowwise with W^T of a [16,64] W: N is 64 vs 16.
  REQUIRE_THROWS_WITH(ref::dgrad(x_r, w_c), contains("dgrad: dY is 8x64 but W is 16x64 (N must match)"));
  REQUIRE_THROWS_WITH(ref::wgrad(x_r, w_c), contains("wgrad: dY must be the columnwise copy"));
  REQUIRE_THROWS_WITH(ref::wgrad(x_c, w_c), contains("wgrad: dY is 8x64 but X is 16x64 (M must match)"));

  // K = 40: the storage pads to 64, but a GEMM over the padding would be meaningless.
  const mx_tensor a40 = quantized(4, 40, mx_type::mxfp8_e4m3, block_axis::rowwise, 66);
  const mx_tensor b40 = quantized(5, 40, mx_type::mxfp8_e4m3, block_axis::rowwise, 67);
  REQUIRE_THROWS_WITH(ref::gemm(a40, b40), contains("reduction length K=40 is not a multiple of the MX block size 32"));
  REQUIRE_THROWS_WITH(ref::fprop(a40, b40), contains("K=40 is not a multiple"));
  REQUIRE_THROWS_WITH(ref::gemm(x_r, w_k96), contains("gemm: reduction lengths differ: A has 64"));

  std::vector<float> small(3);
  REQUIRE_THROWS_WITH(ref::gemm(x_r.view(), w_r.view(), matrix_view<float>{small.data(), 1, 3}),
                      contains("gemm: output is 1x3, expected 8x16"));
  std::vector<float> d(8 * 16);
  REQUIRE_THROWS_WITH(ref::gemm(x_r.view(), w_r.view(), matrix_view<float>{d.data(), 8, 16, 4}),
                      contains("output leading dimension 4 is smaller than cols 16"));

  quantize_options rot;
  rot.hadamard = true;
  const std::vector<float> xx = gemm_test::random_matrix(16, 64, 68);
  const mx_tensor w_rot = ref::quantize(matrix_view<const float>{xx.data(), 16, 64}, mx_type::mxfp4, block_axis::rowwise, rot);
  REQUIRE_THROWS_WITH(ref::fprop(x_r, w_rot), contains("operands were rotated differently"));

  const std::vector<float> f = gemm_test::random_matrix(4, 10, 69);
  const fp8_tensor fa = quantize_fp8(matrix_view<const float>{f.data(), 4, 10}, fp8_type::e4m3, 1.0f);
  const fp8_tensor fb = quantize_fp8(matrix_view<const float>{f.data(), 5, 8}, fp8_type::e4m3, 1.0f);
  std::vector<float> fd(4 * 5);
  REQUIRE_THROWS_WITH(ref::product(gemm_product::dgrad, as_view(fa), as_view(fb), matrix_view<float>{fd.data(), 4, 5}),
                      contains("dgrad: reduction lengths differ: dY [M,N] is 4x10, W^T [K,N] is 5x8"));
  fp8_view bad = as_view(fa);
  bad.scale = 0.0f;
  REQUIRE_THROWS_WITH(ref::gemm(bad, as_view(fa), matrix_view<float>{fd.data(), 4, 4}), contains("A has scale 0"));
}

TEST_CASE("ref::gemm: empty shapes", "[gemm]") {
  // P = 0 or Q = 0: nothing is written. R = 0: D = beta * D (an empty sum is 0).
  const mx_tensor a0 = quantized(0, 64, mx_type::mxfp4, block_axis::rowwise, 71);
  const mx_tensor b = quantized(3, 64, mx_type::mxfp4, block_axis::rowwise, 72);
  CHECK(ref::gemm(a0, b).empty());
  CHECK(ref::gemm(b, a0).empty());
  const mx_tensor k0a = quantized(2, 0, mx_type::mxfp8_e4m3, block_axis::rowwise, 73);
  const mx_tensor k0b = quantized(3, 0, mx_type::mxfp8_e4m3, block_axis::rowwise, 74);
  std::vector<float> d(6, 2.0f);
  ref::gemm(k0a.view(), k0b.view(), matrix_view<float>{d.data(), 2, 3}, 1.0f, 0.5f);
  for (float v : d) CHECK(v == 1.0f);
}

TEST_CASE("slice_lines and gather_lines pick lines of a copy", "[gemm]") {
  const mx_tensor a = quantized(40, 64, mx_type::mxfp4, block_axis::columnwise, 81);  // 64 lines of 40 (padded 64)
  REQUIRE(a.layout().lines() == 64);
  const mx_const_view s = slice_lines(a.view(), 10, 5);
  CHECK(s.layout.lines() == 5);
  CHECK(s.layout.cols == 5);
  CHECK(s.code(0, 3) == a.view().code(10, 3));
  CHECK(s.scale(4, 1) == a.view().scale(14, 1));
  const mx_tensor g = gather_lines(a.view(), {7, 3, 63});
  CHECK(g.layout().lines() == 3);
  for (std::size_t p = 0; p < 40; ++p) CHECK(g.view().code(1, p) == a.view().code(3, p));
  CHECK(g.view().scale(2, 0) == a.view().scale(63, 0));
  REQUIRE_THROWS_WITH(slice_lines(a.view(), 60, 5), mxkit_test::contains("exceed the 64 lines"));
}

TEST_CASE("slice_lines and gather_lines: a wrapping range and null storage are refused", "[gemm]") {
  using mxkit_test::contains;
  const mx_tensor a = quantized(8, 64, mx_type::mxfp8_e4m3, block_axis::rowwise, 82);  // 8 lines
  // begin + count wraps around to 1 <= 8; the view would point far outside the copy.
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  REQUIRE_THROWS_WITH(slice_lines(a.view(), huge, 2), contains("exceed the 8 lines"));
  REQUIRE_THROWS_WITH(slice_lines(a.view(), 9, 0), contains("exceed the 8 lines"));
  CHECK(slice_lines(a.view(), 8, 0).layout.lines() == 0);
  mx_const_view no_data = a.view();
  no_data.data = nullptr;
  REQUIRE_THROWS_WITH(gather_lines(no_data, {1}), contains("gather_lines: the copy has null data or scales"));
  mx_const_view no_scales = a.view();
  no_scales.scales = nullptr;
  REQUIRE_THROWS_AS(gather_lines(no_scales, {1}), std::invalid_argument);
  CHECK(gather_lines(no_data, {}).layout().lines() == 0);
}

TEST_CASE("ref::gemm: null MX storage and short leading dimensions are refused", "[gemm]") {
  using mxkit_test::contains;
  const mx_tensor a = quantized(4, 64, mx_type::mxfp4, block_axis::rowwise, 83);
  const mx_tensor b = quantized(3, 64, mx_type::mxfp4, block_axis::rowwise, 84);
  std::vector<float> d(4 * 3);
  const matrix_view<float> dv{d.data(), 4, 3};
  mx_const_view a_null = a.view();
  a_null.data = nullptr;
  REQUIRE_THROWS_WITH(ref::gemm(a_null, b.view(), dv), contains("gemm: A has null data or scales"));
  mx_const_view b_null = b.view();
  b_null.scales = nullptr;
  REQUIRE_THROWS_WITH(ref::gemm(a.view(), b_null, dv), contains("gemm: B has null data or scales"));

  const std::vector<float> x(4 * 8, 1.0f), y(3 * 8, 1.0f);
  REQUIRE_THROWS_WITH(ref::gemm(matrix_view<const float>{x.data(), 4, 8, 6}, matrix_view<const float>{y.data(), 3, 8}, dv),
                      contains("gemm: A leading dimension 6 is smaller than cols 8"));
  REQUIRE_THROWS_WITH(ref::gemm(matrix_view<const float>{x.data(), 4, 8}, matrix_view<const float>{y.data(), 3, 8, 2}, dv),
                      contains("gemm: B leading dimension 2 is smaller than cols 8"));
  ref::gemm(matrix_view<const float>{x.data(), 4, 8}, matrix_view<const float>{y.data(), 3, 8}, dv);
  for (float v : d) CHECK(v == 8.0f);
}

TEST_CASE("ref::gemm: every finite positive FP8 scale that quantize_fp8 accepts is accepted", "[gemm]") {
  // Delayed scaling clamps an overflowing scale to the largest float (nn/delayed_scaling.hpp);
  // quantize_fp8 takes it, so the GEMM must too. Codes saturate to 448; 448^2 / FLT_MAX^2 is 0.
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> x(2 * 4, 1.0f);
  const fp8_tensor fa = quantize_fp8(matrix_view<const float>{x.data(), 2, 4}, fp8_type::e4m3, big);
  REQUIRE(fp8_decode(fa.data[0], fa.type) == 448.0f);
  std::vector<float> d(2 * 2, -1.0f);
  REQUIRE_NOTHROW(ref::gemm(fa, fa, matrix_view<float>{d.data(), 2, 2}));
  for (float v : d) CHECK(v == 0.0f);
  fp8_view inf = as_view(fa);
  inf.scale = std::numeric_limits<float>::infinity();
  REQUIRE_THROWS_WITH(ref::gemm(inf, as_view(fa), matrix_view<float>{d.data(), 2, 2}), mxkit_test::contains("A has scale inf"));
  fp8_view nan = as_view(fa);
  nan.scale = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_THROWS_WITH(ref::gemm(as_view(fa), nan, matrix_view<float>{d.data(), 2, 2}), mxkit_test::contains("B has scale nan"));
}

TEST_CASE("fp8 transpose: codes that do not fill rows x cols are refused", "[gemm]") {
  fp8_tensor t{fp8_type::e4m3, 3, 4, 1.0f, 0.0f, std::vector<std::uint8_t>(5)};
  REQUIRE_THROWS_WITH(transpose(t), mxkit_test::contains("transpose: 5 codes for a 3x4 FP8 tensor"));
  t.data.assign(12, 0);
  t.data[1] = 7;  // (0, 1)
  CHECK(transpose(t).data[1 * 3 + 0] == 7);
}
