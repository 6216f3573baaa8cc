// SPDX-License-Identifier: Apache-2.0
// The host NVFP4 GEMM reference (ref/nvfp4_gemm.hpp), the device NVFP4 GEMM's oracle, against a
// double product of the dequantized copies (ref::dequantize: e2m1 x e4m3 x t):
//  - exact data (narrow scales, power-of-two tensor scales): every partial sum is exact in fp32,
//    so the reference equals the double product bit for bit;
//  - quantized Gaussian data: within (R/16 + 2) u S of it (one rounding per block and per add);
//  - the special cases: zero-scale blocks with non-zero codes (zero), NaN scales (NaN in exactly
//    the row or column they touch), scales at E4M3's extremes, extreme tensor scales, 16 x 16
//    weight blocks, alpha and beta and bf16 output;
//  - the three training products and the refusals (axis, K, rotation, null data, tensor scale).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <mxkit/ref/nvfp4_gemm.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>

#include "../catch.hpp"
#include "gemm_test_util.hpp"
#include "nvfp4_gemm_test_util.hpp"

namespace nvfp4_gemm_ref_test {
using namespace mxkit;
using nvfp4_gemm_test::dequantized_lines;
using nvfp4_gemm_test::exact_nvfp4;
constexpr double unit_roundoff = 0x1p-24;

// The reference's fp32 [P, Q] product of two stored copies, and the double one of their dequantized values.
std::vector<float> reference(const nvfp4_tensor& a, const nvfp4_tensor& b) { return ref::gemm(a, b); }
gemm_test::oracle_result exact_product(const nvfp4_tensor& a, const nvfp4_tensor& b) {
  return gemm_test::oracle_tn(dequantized_lines(a), dequantized_lines(b), a.layout().lines(), b.layout().lines(),
                              a.layout().line_length());
}

}  // namespace nvfp4_gemm_ref_test

using namespace nvfp4_gemm_ref_test;

TEST_CASE("nvfp4 gemm reference: exact data equals the double product of the dequantized copies", "[ref][gemm][nvfp4]") {
  std::mt19937_64 rng(11);
  for (const std::size_t k : {16u, 48u, 64u}) {
    // Scales in [1, 2) (spread 0): block sums are multiples of 2^-8 below 2^11, and four of them
    // add exactly in fp32; tensor scales are powers of two, so the dequantized values are exact.
    const nvfp4_tensor a = exact_nvfp4(9, k, 0.25f, rng, 0), b = exact_nvfp4(13, k, 8.0f, rng, 0);
    const std::vector<float> got = reference(a, b);
    const gemm_test::oracle_result want = exact_product(a, b);
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("K " << k << " element " << i);
      REQUIRE(static_cast<double>(got[i]) == want.d[i]);
    }
  }
}

TEST_CASE("nvfp4 gemm reference: quantized data is within one rounding per block and per add", "[ref][gemm][nvfp4]") {
  const std::size_t m = 37, n = 29, k = 96;
  const std::vector<float> x = gemm_test::random_matrix(m, k, 5), w = gemm_test::random_matrix(n, k, 6);
  const nvfp4_tensor qx = ref::quantize(matrix_view<const float>{x.data(), m, k}, formats::nvfp4, block_axis::rowwise);
  const nvfp4_tensor qw = ref::quantize(matrix_view<const float>{w.data(), n, k}, formats::nvfp4_2d, block_axis::rowwise);
  const std::vector<float> got = reference(qx, qw);
  const gemm_test::oracle_result want = exact_product(qx, qw);
  // The dequantized values carry one rounding of their own (x t): 2u more per product.
  const auto report = gemm_test::compare(got, want.d, want.s, (static_cast<double>(k / 16) + 6) * unit_roundoff, n);
  INFO(report.summary());
  CHECK(report.over_bound == 0);
  // And the bound can fail: a swapped pair of scales moves the result far beyond it.
  nvfp4_tensor bad = qw;
  std::swap(bad.scales()[0], bad.scales()[1]);
  const auto broken = gemm_test::compare(reference(qx, bad), want.d, want.s, (static_cast<double>(k / 16) + 6) * unit_roundoff, n);
  CHECK(broken.over_bound > 0);
}

TEST_CASE("nvfp4 gemm reference: zero and NaN scales, E4M3 extremes, tensor scales", "[ref][gemm][nvfp4]") {
  std::mt19937_64 rng(3);
  const std::size_t k = 64;
  SECTION("a zero scale zeroes its block whatever its codes; a NaN scale makes its row NaN") {
    nvfp4_tensor a = exact_nvfp4(4, k, 1.0f, rng, 0), b = exact_nvfp4(5, k, 1.0f, rng, 0);
    const std::vector<float> before = reference(a, b);
    nvfp4_tensor z = a;  // block 2 of line 1 scaled by zero (+0 and the foreign -0)
    z.scales()[1 * 4 + 2] = 0x00;
    z.scales()[2 * 4 + 0] = 0x80;
    nvfp4_tensor zero_block = a;  // the same blocks with zero codes and their scales kept
    for (std::size_t byte = 0; byte < 8; ++byte) {
      zero_block.data()[1 * 32 + 2 * 8 + byte] = 0;
      zero_block.data()[2 * 32 + 0 * 8 + byte] = 0;
    }
    CHECK(reference(z, b) == reference(zero_block, b));
    CHECK(reference(z, b) != before);
    nvfp4_tensor nan = a;
    nan.scales()[3 * 4 + 1] = 0x7F;
    nvfp4_tensor nan_b = b;
    nan_b.scales()[0 * 4 + 3] = 0xFF;
    const std::vector<float> d = reference(nan, nan_b);
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 5; ++j) {
        INFO(i << ", " << j);
        CHECK(std::isnan(d[i * 5 + j]) == (i == 3 || j == 0));
        if (i != 3 && j != 0) CHECK(d[i * 5 + j] == before[i * 5 + j]);
      }
  }
  SECTION("scales at E4M3's least subnormal and largest value, products exact") {
    nvfp4_tensor a = exact_nvfp4(3, k, 1.0f, rng, 0), b = exact_nvfp4(3, k, 1.0f, rng, 0);
    for (std::size_t i = 0; i < a.scales().size(); ++i) a.scales()[i] = i % 2 ? 0x01 : 0x7E;  // 2^-9, 448
    for (std::size_t i = 0; i < b.scales().size(); ++i) b.scales()[i] = i % 3 ? 0x7E : 0x01;
    const std::vector<float> got = reference(a, b);
    const gemm_test::oracle_result want = exact_product(a, b);
    const auto report = gemm_test::compare(got, want.d, want.s, (static_cast<double>(k / 16) + 2) * unit_roundoff, 3);
    INFO(report.summary());
    CHECK(report.over_bound == 0);
  }
  SECTION("tensor scales multiply the sum once, as fl(t_a t_b), alpha and beta after it") {
    const nvfp4_tensor a = exact_nvfp4(6, k, 1.0f, rng), b = exact_nvfp4(7, k, 1.0f, rng);
    const std::vector<float> unit = reference(a, b);
    for (const auto& [ta, tb] : {std::pair{0x1p60f, 0x1p-70f}, std::pair{3.0f, 1.0f / 7.0f}, std::pair{0x1p-126f, 0x1p100f}}) {
      nvfp4_tensor sa(a.layout(), a.options(), ta, false), sb(b.layout(), b.options(), tb, false);
      std::copy(a.data().begin(), a.data().end(), sa.data().begin());
      std::copy(a.scales().begin(), a.scales().end(), sa.scales().begin());
      std::copy(b.data().begin(), b.data().end(), sb.data().begin());
      std::copy(b.scales().begin(), b.scales().end(), sb.scales().begin());
      const std::vector<float> got = reference(sa, sb);
      std::vector<float> d(6 * 7, 2.0f);
      ref::gemm(std::as_const(sa).view(), std::as_const(sb).view(), matrix_view<float>{d.data(), 6, 7}, 1.5f, -0.5f);
      std::vector<bfloat16> h(6 * 7);
      ref::gemm(std::as_const(sa).view(), std::as_const(sb).view(), matrix_view<bfloat16>{h.data(), 6, 7});
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO(ta << " x " << tb << " element " << i);
        CHECK(got[i] == unit[i] * (ta * tb));
        CHECK(d[i] == 1.5f * got[i] + -0.5f * 2.0f);
        CHECK(h[i].bits() == bfloat16::from_float(got[i], rounding::nearest_even, overflow::propagate).bits());
      }
    }
  }
}

TEST_CASE("nvfp4 gemm reference: fprop, dgrad and wgrad take the quantizer's copies; bad calls are refused", "[ref][gemm][nvfp4]") {
  const std::size_t m = 48, n = 32, k = 80;  // every reduction a multiple of 16, not all of 32
  const std::vector<float> x = gemm_test::random_matrix(m, k, 21), w = gemm_test::random_matrix(n, k, 22),
                           dy = gemm_test::random_matrix(m, n, 23);
  const auto qx = ref::quantize_both(matrix_view<const float>{x.data(), m, k}, formats::nvfp4);
  const auto qw = ref::quantize_both(matrix_view<const float>{w.data(), n, k}, formats::nvfp4_2d);
  const auto qdy = ref::quantize_both(matrix_view<const float>{dy.data(), m, n}, formats::nvfp4);
  struct run {
    gemm_product p;
    const nvfp4_tensor *a, *b;
  };
  for (const run& r : {run{gemm_product::fprop, &qx.rowwise, &qw.rowwise}, run{gemm_product::dgrad, &qdy.rowwise, &qw.columnwise},
                       run{gemm_product::wgrad, &qdy.columnwise, &qx.columnwise}}) {
    INFO(name_of(r.p));
    const std::vector<float> got = ref::product(r.p, *r.a, *r.b);
    CHECK(got == reference(*r.a, *r.b));  // the product is the TN GEMM of the named copies
    const gemm_test::oracle_result want = exact_product(*r.a, *r.b);
    const auto report = gemm_test::compare(got, want.d, want.s, (static_cast<double>(r.a->layout().line_length() / 16) + 6) * unit_roundoff,
                                           r.b->layout().lines());
    INFO(report.summary());
    CHECK(report.over_bound == 0);
  }
  std::vector<float> d(m * n);
  const matrix_view<float> y{d.data(), m, n};
  using mxkit_test::contains;
  REQUIRE_THROWS_WITH(ref::fprop(qx.rowwise.view(), qw.columnwise.view(), y), contains("fprop: W must be the rowwise copy"));
  REQUIRE_THROWS_WITH(ref::wgrad(qx.rowwise.view(), qx.columnwise.view(), y), contains("wgrad: dY must be the columnwise copy"));
  REQUIRE_THROWS_WITH(ref::fprop(qx.rowwise.view(), qdy.rowwise.view(), y), contains("(K must match)"));
  // K = 40: whole copies (padded to 48) but not whole blocks of the logical K.
  const auto q40 = ref::quantize(matrix_view<const float>{x.data(), m, 40, k}, formats::nvfp4, block_axis::rowwise);
  REQUIRE_THROWS_WITH(ref::gemm(q40, q40), contains("reduction length K=40 is not a multiple of the NVFP4 block size 16"));
  nvfp4_options rotated;
  rotated.hadamard = true;
  rotated.hadamard_signs = 0x1234;
  const auto qr = ref::quantize(matrix_view<const float>{x.data(), m, k}, formats::nvfp4, block_axis::rowwise, rotated);
  REQUIRE_THROWS_WITH(ref::gemm(qr, qx.rowwise), contains("operands were rotated differently"));
  CHECK_NOTHROW(ref::gemm(qr, qr));
  nvfp4_const_view null_scales = qx.rowwise.view();
  null_scales.scales = nullptr;
  std::vector<float> dd(m * m);
  REQUIRE_THROWS_WITH(ref::gemm(null_scales, qx.rowwise.view(), matrix_view<float>{dd.data(), m, m}),
                      contains("gemm: A has null data or scales (data set, scales null)"));
  nvfp4_const_view bad_t = qx.rowwise.view();
  bad_t.tensor_scale = 0.0f;
  REQUIRE_THROWS_WITH(ref::gemm(qx.rowwise.view(), bad_t, matrix_view<float>{dd.data(), m, m}), contains("gemm: B: tensor scale 0"));
  REQUIRE_THROWS_WITH(ref::gemm(qx.rowwise.view(), qx.rowwise.view(), matrix_view<float>{dd.data(), m, m - 1}),
                      contains("output is 48x47, expected 48x48"));
}
