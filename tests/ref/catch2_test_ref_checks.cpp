// SPDX-License-Identifier: Apache-2.0
// Argument checks of the host reference entry points (quantize, dequantize, validate, the GEMMs):
// shapes whose sizes wrap around 64 bits, FP8 codes that do not fill their shape, enum values
// cast from integers outside the enum, and messages that say what differs. Each bad call is
// refused with std::invalid_argument naming the argument, its value and the limit.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <mxkit/gemm/product.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/validation/validate.hpp>

#include "../catch.hpp"

namespace {
using namespace mxkit;
using mxkit_test::contains;
constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
constexpr std::size_t two32 = std::size_t{1} << 32, two40 = std::size_t{1} << 40;

mx_tensor quantized(std::size_t rows, std::size_t cols, mx_type t, block_axis axis, const quantize_options& o = {}) {
  std::vector<float> x(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) - 6.0f;
  return ref::quantize(matrix_view<const float>{x.data(), rows, cols}, t, axis, o);
}

std::string hex4(std::uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%04x", static_cast<unsigned>(v));
  return s;
}
}  // namespace

// ---- item 1: sizes that wrap --------------------------------------------------------------------

TEST_CASE("quantize: an input whose copy size wraps is refused before anything is written", "[ref][sizes]") {
  const std::vector<float> x(64, 1.0f);
  // 2^40 x 2^40: the FP4 copy's 2^79 bytes wrap to 0; the old code wrote into a 0-byte buffer.
  REQUIRE_THROWS_WITH(ref::quantize_rowwise(matrix_view<const float>{x.data(), two40, two40}, mx_type::mxfp4),
                      contains("quantize: view: rows 1099511627776 x leading dimension 1099511627776 exceeds the largest std::size_t"));
  REQUIRE_THROWS_AS(ref::quantize_both(matrix_view<const float>{x.data(), two40, two40}, mx_type::mxfp8_e4m3), std::invalid_argument);
}

TEST_CASE("dequantize: a view whose layout sizes wrap is refused (the null check is not skipped)", "[ref][sizes]") {
  // 2^32 x 2^32 bytes wrap to 0, which used to skip the null-pointer check and read from null.
  mx_const_view v{{formats::mxfp8_e4m3, block_axis::rowwise, two32, two32}, {}, nullptr, nullptr};
  REQUIRE_THROWS_WITH(dequantize(v), contains("dequantize: rows 4294967296 x padded cols 4294967296 exceeds the largest std::size_t"));
  v.layout = {formats::mxfp4, block_axis::columnwise, max - 5, 1};
  REQUIRE_THROWS_WITH(dequantize(v), contains("dequantize: rows 18446744073709551610 rounded up to a multiple of 32 exceeds"));
}

TEST_CASE("validate: a layout whose sizes wrap is refused", "[ref][sizes]") {
  const std::vector<float> x(64, 1.0f);
  const matrix_view<const float> in{x.data(), two32, two32};
  const mx_const_view v{{formats::mxfp8_e4m3, block_axis::rowwise, two32, two32}, {}, nullptr, nullptr};
  REQUIRE_THROWS_WITH(ref::validate(in, v), contains("validate: rows 4294967296 x padded cols 4294967296 exceeds"));
}

TEST_CASE("ref::gemm: operand and output sizes that wrap are refused", "[ref][sizes]") {
  const std::uint8_t byte = 0x38;
  float out = 0.0f;
  // A: 2^58 FP8 lines of 64 bytes = 2^64 bytes, 0 after wrapping: the decoded copy had 0 entries.
  const mx_const_view a{{formats::mxfp8_e4m3, block_axis::rowwise, std::size_t{1} << 58, 64}, {}, &byte, &byte};
  const mx_const_view b{{formats::mxfp8_e4m3, block_axis::rowwise, 1, 64}, {}, &byte, &byte};
  REQUIRE_THROWS_WITH(ref::gemm(a, b, matrix_view<float>{&out, std::size_t{1} << 58, 1}),
                      contains("gemm: A: rows 288230376151711744 x padded cols 64 exceeds the largest std::size_t"));
  // The output view: 2^33 x 2^33 floats.
  const mx_const_view big{{formats::mxfp8_e4m3, block_axis::rowwise, std::size_t{1} << 33, 64}, {}, &byte, &byte};
  REQUIRE_THROWS_WITH(ref::gemm(big, big, matrix_view<float>{&out, std::size_t{1} << 33, std::size_t{1} << 33}),
                      contains("gemm: output view: rows 8589934592 x leading dimension 8589934592 exceeds"));
  // Per-tensor FP8 views: rows x cols codes.
  const fp8_view f{fp8_type::e4m3, two32, two32, 1.0f, &byte};
  const fp8_view g{fp8_type::e4m3, 1, two32, 1.0f, &byte};
  REQUIRE_THROWS_WITH(ref::gemm(f, g, matrix_view<float>{&out, two32, 1}), contains("gemm: A: rows 4294967296 x cols 4294967296 exceeds"));
}

// ---- item 2: FP8 codes that do not fill the shape ------------------------------------------------

TEST_CASE("ref::gemm and as_view: FP8 tensors with too few or too many codes are refused", "[ref][buffers]") {
  const std::vector<float> x(3 * 32, 0.5f);
  fp8_tensor a = quantize_fp8(matrix_view<const float>{x.data(), 3, 32}, fp8_type::e4m3, 1.0f);
  const fp8_tensor b = a;
  std::vector<float> d(3 * 3);
  a.data.resize(40);  // the GEMM read 96 codes from these 40
  REQUIRE_THROWS_WITH(ref::gemm(a, b, matrix_view<float>{d.data(), 3, 3}), contains("gemm: A: 40 codes for a 3x32 FP8 tensor, expected 96"));
  REQUIRE_THROWS_WITH(ref::gemm(b, a, matrix_view<float>{d.data(), 3, 3}), contains("gemm: B: 40 codes for a 3x32 FP8 tensor"));
  REQUIRE_THROWS_WITH(as_view(a), contains("as_view: 40 codes for a 3x32 FP8 tensor, expected 96"));
  a.data.resize(97);
  REQUIRE_THROWS_AS(ref::gemm(a, b, matrix_view<float>{d.data(), 3, 3}), std::invalid_argument);
  ref::gemm(b, b, matrix_view<float>{d.data(), 3, 3});
  for (const float v : d) CHECK(v == 8.0f);
}

// ---- item 4: enum values outside the enum -------------------------------------------------------

TEST_CASE("quantize: unknown scale_rule, rounding or block_axis values are refused", "[ref][enums]") {
  const std::vector<float> x(2 * 32, 1.0f);
  const matrix_view<const float> in{x.data(), 2, 32};
  quantize_options o;
  o.rule = static_cast<scale_rule>(9);
  REQUIRE_THROWS_WITH(ref::quantize_rowwise(in, mx_type::mxfp4, o), contains("quantize: unknown scale_rule value 9 (valid: 0 to 3"));
  o = {};
  o.round = static_cast<rounding>(4);
  REQUIRE_THROWS_WITH(ref::quantize_columnwise(in, mx_type::mxfp4, o), contains("quantize: unknown rounding value 4"));
  REQUIRE_THROWS_WITH(ref::quantize(in, mx_type::mxfp4, static_cast<block_axis>(3)), contains("quantize: unknown block_axis value 3"));
  REQUIRE_THROWS_WITH(ref::quantize_rowwise(in, static_cast<mx_type>(6)), contains("quantize: unknown mx_type value 6 (valid: 0 to 5"));
}

TEST_CASE("dequantize and validate: a view whose format is not MX, or with an unknown block_axis, is refused", "[ref][enums]") {
  const std::vector<float> x(2 * 32, 3.0f);
  const matrix_view<const float> in{x.data(), 2, 32};
  const mx_tensor t = ref::quantize_rowwise(in, mx_type::mxfp8_e4m3);
  // An 8-bit copy with a type value past the enum used to decode as FP4 (half the bytes, garbage).
  mx_const_view v = t.view();
  v.layout.format.element = static_cast<element_kind>(6);
  REQUIRE_THROWS_WITH(dequantize(v), contains("dequantize: unknown block format (unknown elements, 1 x 32 blocks, e8m0 scales, tensor "
                                              "scale none) is not an MX format"));
  REQUIRE_THROWS_WITH(ref::validate(in, v), contains("validate: unknown block format (unknown elements"));
  // NVFP4's value in an MX view: 16-element blocks read with E8M0 scales would be garbage.
  v = t.view();
  v.layout.format = formats::nvfp4;
  REQUIRE_THROWS_WITH(dequantize(v), contains("dequantize: nvfp4 (e2m1 elements, 1 x 16 blocks, e4m3 scales, tensor scale fp32) is not an MX format"));
  v = t.view();
  v.layout.format.block.cols = 64;
  REQUIRE_THROWS_WITH(ref::validate(in, v), contains("validate: unknown block format (e4m3 elements, 1 x 64 blocks"));
  v = t.view();
  v.layout.axis = static_cast<block_axis>(2);
  REQUIRE_THROWS_WITH(dequantize(v), contains("dequantize: unknown block_axis value 2"));
  v = t.view();
  v.options.rule = static_cast<scale_rule>(5);
  REQUIRE_THROWS_WITH(ref::validate(in, v), contains("validate: unknown scale_rule value 5"));
  for (const float y : dequantize(t)) CHECK(y == 3.0f);
}

TEST_CASE("ref GEMMs: a format that is not MX, unknown fp8_type or gemm_product values are refused", "[ref][enums]") {
  const mx_tensor x = quantized(4, 64, mx_type::mxfp8_e4m3, block_axis::rowwise);
  const mx_tensor w = quantized(3, 64, mx_type::mxfp8_e4m3, block_axis::rowwise);
  std::vector<float> d(4 * 3);
  const matrix_view<float> dv{d.data(), 4, 3};
  mx_const_view bad = x.view();
  bad.layout.format.scale = static_cast<block_scale_type>(11);
  REQUIRE_THROWS_WITH(ref::gemm(bad, w.view(), dv), contains("gemm: A: unknown block format (e4m3 elements, 1 x 32 blocks, unknown scales"));
  REQUIRE_THROWS_WITH(ref::gemm(x.view(), bad, matrix_view<float>{d.data(), 4, 4}), contains("gemm: B: unknown block format"));
  REQUIRE_THROWS_WITH(ref::fprop(bad, w.view(), dv), contains("is not an MX format"));
  REQUIRE_THROWS_WITH(ref::product(static_cast<gemm_product>(3), x.view(), w.view(), dv),
                      contains("unknown gemm_product value 3 (valid: 0 to 2, fprop to wgrad)"));
  const std::vector<float> f(4 * 32, 1.0f);
  const fp8_tensor fa = quantize_fp8(matrix_view<const float>{f.data(), 4, 32}, fp8_type::e4m3, 1.0f);
  fp8_view fv = as_view(fa);
  fv.type = static_cast<fp8_type>(2);
  REQUIRE_THROWS_WITH(ref::gemm(as_view(fa), fv, matrix_view<float>{d.data(), 4, 4}), contains("gemm: B: unknown fp8_type value 2"));
  REQUIRE_THROWS_WITH(ref::product(static_cast<gemm_product>(7), as_view(fa), as_view(fa), matrix_view<float>{d.data(), 4, 4}),
                      contains("unknown gemm_product value 7"));
}

// ---- item 11: messages --------------------------------------------------------------------------

TEST_CASE("ref::gemm: a rotation mismatch says what differs, random signs included", "[ref][messages]") {
  quantize_options a, b;
  a.hadamard = b.hadamard = true;
  a.random_signs = b.random_signs = true;
  a.seed = 1;
  b.seed = 2;
  REQUIRE(a.sign_mask() != b.sign_mask());
  const mx_tensor x = quantized(4, 64, mx_type::mxfp4, block_axis::rowwise, a);
  const mx_tensor w = quantized(3, 64, mx_type::mxfp4, block_axis::rowwise, b);
  // Both operands are "Hadamard 1": the message must name the signs that differ.
  REQUIRE_THROWS_WITH(ref::fprop(x, w), contains("gemm: operands were rotated differently: A with Hadamard and random signs " +
                                                  hex4(a.sign_mask()) + " (seed 1), B with Hadamard and random signs " +
                                                  hex4(b.sign_mask()) + " (seed 2)"));
  quantize_options plain;
  const mx_tensor w0 = quantized(3, 64, mx_type::mxfp4, block_axis::rowwise, plain);
  quantize_options h;
  h.hadamard = true;
  const mx_tensor xh = quantized(4, 64, mx_type::mxfp4, block_axis::rowwise, h);
  REQUIRE_THROWS_WITH(ref::fprop(xh, w0), contains("A with Hadamard and no random signs, B without rotation"));
}

TEST_CASE("gather_lines: an out-of-range line names the index and the line count", "[ref][messages]") {
  const mx_tensor a = quantized(8, 64, mx_type::mxfp4, block_axis::rowwise);
  REQUIRE_THROWS_WITH(gather_lines(a.view(), {1, 8}), contains("gather_lines: line 8 is out of range: the copy has 8 lines"));
}
