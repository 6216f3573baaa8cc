// SPDX-License-Identifier: Apache-2.0
// Argument checks of the tensor types (tensor/): shapes whose sizes wrap around 64 bits, buffers
// that do not match their declared shape, enum values cast from integers outside the enum, and
// FP8 scales that have no finite inverse. Each is refused with std::invalid_argument naming the
// argument, its value and the limit, before anything is allocated, read or written.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

#include "../catch.hpp"

namespace {
using namespace mxkit;
using mxkit_test::contains;
constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
constexpr std::size_t two32 = std::size_t{1} << 32, two40 = std::size_t{1} << 40;

// What a caller can do to an mx_tensor's buffers: element access yes, a new size no.
template <class T>
constexpr bool data_resizable = requires(T& t) { t.data().resize(1); };
template <class T>
constexpr bool scales_resizable = requires(T& t) { t.scales().resize(1); };
template <class T>
constexpr bool data_reassignable = requires(T& t, std::vector<std::uint8_t>& v) { t.data() = v; };
template <class T>
constexpr bool scales_reassignable = requires(T& t, std::vector<std::uint8_t>& v) { t.scales() = v; };
template <class T>
constexpr bool data_writable = requires(T& t) { t.data()[0] = std::uint8_t{1}; };
}  // namespace

// ---- item 1: sizes that wrap --------------------------------------------------------------------

TEST_CASE("mx_tensor: a layout whose byte or scale count wraps is refused before allocating", "[tensor][sizes]") {
  // 2^40 x 2^40 FP4 elements: 2^79 bytes wrap to 0, and a 0-byte buffer would be written.
  REQUIRE_THROWS_WITH(mx_tensor({formats::mxfp4, block_axis::rowwise, two40, two40}, {}),
                      contains("mx_tensor: rows 1099511627776 x padded cols 1099511627776 exceeds the largest std::size_t "
                               "18446744073709551615"));
  // Columnwise: the lines are the columns and the block axis runs along the rows.
  REQUIRE_THROWS_WITH(mx_tensor({formats::mxfp8_e4m3, block_axis::columnwise, two40, two40}, {}),
                      contains("cols 1099511627776 x padded rows 1099511627776 exceeds"));
  // The block axis rounded up to 32 wraps to 0 first.
  REQUIRE_THROWS_WITH(mx_tensor({formats::mxfp8_e4m3, block_axis::columnwise, max - 2, 4}, {}),
                      contains("rows 18446744073709551613 rounded up to a multiple of 32 exceeds the largest std::size_t"));
  REQUIRE_THROWS_WITH(mx_tensor({formats::mxint8, block_axis::rowwise, 1, max - 30}, {}),
                      contains("cols 18446744073709551585 rounded up to a multiple of 32"));
  // Large but representable shapes with a zero dimension are fine (nothing to allocate).
  CHECK(mx_tensor({formats::mxfp4, block_axis::rowwise, 0, max - 31}, {}).bytes() == 0);
  CHECK(mx_tensor({formats::mxfp4, block_axis::columnwise, max - 31, 0}, {}).bytes() == 0);
}

TEST_CASE("matrix_view: rows x leading dimension must fit, or row 1 is read before the buffer", "[tensor][sizes]") {
  const std::vector<float> x(4 * 8, 1.0f);
  // ld = 2^64 - 4: element (1, c) is x[c - 4] once r * ld wraps.
  REQUIRE_THROWS_WITH(quantize_fp8(matrix_view<const float>{x.data(), 2, 4, max - 3}, fp8_type::e4m3, 1.0f),
                      contains("quantize_fp8: view: rows 2 x leading dimension 18446744073709551612 exceeds the largest std::size_t"));
  // rows x ld = 2^63 elements fits in std::size_t, but not in bytes: 4 * 2^62 wraps to 0 and row
  // 1 aliases row 0.
  REQUIRE_THROWS_WITH(quantize_fp8(matrix_view<const float>{x.data(), 2, 4, std::size_t{1} << 62}, fp8_type::e4m3, 1.0f),
                      contains("quantize_fp8: view: rows x leading dimension 9223372036854775808 x 4 bytes exceeds the largest "
                               "object size 9223372036854775807 bytes"));
  // The leading dimension still may not be smaller than cols.
  REQUIRE_THROWS_WITH(quantize_fp8(matrix_view<const float>{x.data(), 2, 8, 4}, fp8_type::e4m3, 1.0f),
                      contains("leading dimension 4 is smaller than cols 8"));
  CHECK(quantize_fp8(matrix_view<const float>{x.data(), 4, 8, 8}, fp8_type::e4m3, 1.0f).data.size() == 32);
}

TEST_CASE("quantize_fp8 and the FP8 consumers refuse shapes whose element count wraps", "[tensor][sizes]") {
  const std::vector<float> x(16, 1.0f);
  // A 2^32 x 2^32 input: 2^64 codes wrap to 0. (The view check fires first: rows x ld.)
  REQUIRE_THROWS_WITH(quantize_fp8(matrix_view<const float>{x.data(), two32, two32}, fp8_type::e4m3, 1.0f),
                      contains("rows 4294967296 x leading dimension 4294967296 exceeds the largest std::size_t"));
  // An fp8_tensor that claims 2^32 x 2^32 with no codes: rows * cols wraps to 0 == data.size().
  const fp8_tensor huge{fp8_type::e4m3, two32, two32, 1.0f, 0.0f, {}};
  REQUIRE_THROWS_WITH(transpose(huge), contains("transpose: rows 4294967296 x cols 4294967296 exceeds the largest std::size_t"));
  REQUIRE_THROWS_WITH(dequantize(huge), contains("dequantize: rows 4294967296 x cols 4294967296 exceeds"));
}

TEST_CASE("scale layouts: padded extents that wrap are refused", "[tensor][sizes]") {
  const std::uint8_t one = 127;
  // 2^64 - 11 lines rounded up to 128 wraps to 0.
  REQUIRE_THROWS_WITH(to_scale_layout(&one, max - 10, 1, scale_layout::cublas_128x4),
                      contains("to_scale_layout: lines 18446744073709551605 rounded up to a multiple of 128 exceeds the largest "
                               "std::size_t"));
  REQUIRE_THROWS_WITH(to_scale_layout(&one, 1, max - 2, scale_layout::aiter_shuffle),
                      contains("blocks 18446744073709551613 rounded up to a multiple of 8"));
  // Row-major: 2^32 x 2^32 scales.
  REQUIRE_THROWS_WITH(to_scale_layout(&one, two32, two32, scale_layout::row_major),
                      contains("to_scale_layout: lines 4294967296 x blocks 4294967296 exceeds"));
  REQUIRE_THROWS_WITH(to_row_major_scales(&one, two32, two32, scale_layout::row_major),
                      contains("to_row_major_scales: lines 4294967296 x blocks 4294967296 exceeds"));
  // (2^32 + 1) x (2^32 - 3) scales fit; padded to 128 lines and 4 blocks they do not.
  REQUIRE_THROWS_WITH(to_row_major_scales(&one, two32 + 1, two32 - 3, scale_layout::cublas_128x4),
                      contains("to_row_major_scales: padded lines 4294967424 x padded blocks 4294967296 exceeds"));
  CHECK(to_scale_layout(&one, 1, 1, scale_layout::cublas_128x4).size() == 512);
}

// ---- item 2: buffers that do not match the declared shape ---------------------------------------

TEST_CASE("mx_tensor: the buffers keep the layout's sizes (no resize, no reassignment)", "[tensor][buffers]") {
  // A resized buffer would be read out of bounds by every consumer (dequantize, the GEMMs), which
  // trust the layout; the type makes that impossible instead of checking it everywhere.
  CHECK_FALSE(data_resizable<mx_tensor>);
  CHECK_FALSE(scales_resizable<mx_tensor>);
  CHECK_FALSE(data_reassignable<mx_tensor>);
  CHECK_FALSE(scales_reassignable<mx_tensor>);
  CHECK_FALSE(data_reassignable<const mx_tensor>);
  CHECK(data_writable<mx_tensor>);  // the elements stay writable (tests build tensors by hand)
  CHECK_FALSE(data_writable<const mx_tensor>);
  mx_tensor t({formats::mxfp4, block_axis::rowwise, 3, 40}, {});
  CHECK(t.data().size() == 3 * 32);  // 64 padded FP4 elements per line, two per byte
  CHECK(t.scales().size() == 3 * 2);
  t.data()[5] = 0x21;
  CHECK(t.view().code(0, 10) == 0x1);
  CHECK(t.view().code(0, 11) == 0x2);
}

TEST_CASE("mx_tensor: set_data and set_scales take only buffers of the layout's size", "[tensor][buffers]") {
  mx_tensor t({formats::mxfp8_e4m3, block_axis::rowwise, 2, 40}, {});  // 2 lines of 64 bytes, 2 scales each
  REQUIRE_THROWS_WITH(t.set_data(std::vector<std::uint8_t>(100)),
                      contains("mx_tensor::set_data: 100 bytes for a rowwise 2x40 mxfp8_e4m3 tensor, expected 128"));
  REQUIRE_THROWS_WITH(t.set_scales(std::vector<std::uint8_t>(5)),
                      contains("mx_tensor::set_scales: 5 scales for a rowwise 2x40 mxfp8_e4m3 tensor, expected 4"));
  CHECK(t.data().size() == 128);  // unchanged by a refused call
  std::vector<std::uint8_t> bytes(128, 0x38);
  t.set_data(std::move(bytes));
  t.set_scales({127, 128, 126, 127});
  CHECK(t.view().code(1, 63) == 0x38);
  CHECK(t.view().scale(1, 0) == 126);
}

TEST_CASE("fp8_tensor: every consumer checks the codes against rows x cols", "[tensor][buffers]") {
  fp8_tensor t{fp8_type::e4m3, 3, 4, 1.0f, 0.0f, std::vector<std::uint8_t>(5)};
  REQUIRE_THROWS_WITH(dequantize(t), contains("dequantize: 5 codes for a 3x4 FP8 tensor, expected 12"));
  REQUIRE_THROWS_WITH(transpose(t), contains("transpose: 5 codes for a 3x4 FP8 tensor, expected 12"));
  t.data.assign(13, 0);  // too many is a mismatch too: the shape is wrong somewhere
  REQUIRE_THROWS_WITH(dequantize(t), contains("13 codes for a 3x4 FP8 tensor, expected 12"));
  t.data.assign(12, 0x38);  // 1.0
  for (const float v : dequantize(t)) CHECK(v == 1.0f);
}

// ---- item 4: enum values outside the enum -------------------------------------------------------

TEST_CASE("mx_tensor: a format that is not MX, unknown block_axis, scale_rule or rounding values are refused", "[tensor][enums]") {
  // The format is a value: an unknown element kind, another block or scale, or NVFP4's are no MX format.
  mxkit::block_format bad = mxkit::formats::mxfp8_e4m3;
  bad.element = static_cast<mxkit::element_kind>(9);
  REQUIRE_THROWS_WITH(mx_tensor({bad, block_axis::rowwise, 2, 32}, {}),
                      contains("mx_tensor: unknown block format (unknown elements, 1 x 32 blocks, e8m0 scales, tensor scale none) is not an MX format"));
  bad = mxkit::formats::mxfp4;
  bad.block.cols = 16;
  REQUIRE_THROWS_WITH(mx_tensor({bad, block_axis::rowwise, 2, 32}, {}), contains("mx_tensor: unknown block format (e2m1 elements, 1 x 16 blocks"));
  bad = mxkit::formats::mxfp4;
  bad.scale = mxkit::block_scale_type::e4m3;
  REQUIRE_THROWS_WITH(mx_tensor({bad, block_axis::rowwise, 2, 32}, {}), contains("e4m3 scales, tensor scale none) is not an MX format"));
  REQUIRE_THROWS_WITH(mx_tensor({mxkit::formats::nvfp4_2d, block_axis::rowwise, 2, 32}, {}),
                      contains("mx_tensor: nvfp4_2d (e2m1 elements, 16 x 16 blocks, e4m3 scales, tensor scale fp32) is not an MX format"));
  REQUIRE_THROWS_WITH(mx_tensor({mxkit::formats::mxfp4, static_cast<block_axis>(2), 2, 32}, {}),
                      contains("mx_tensor: unknown block_axis value 2 (valid: 0 to 1, rowwise to columnwise)"));
  quantize_options o;
  o.rule = static_cast<scale_rule>(4);
  REQUIRE_THROWS_WITH(mx_tensor({formats::mxfp4, block_axis::rowwise, 2, 32}, o),
                      contains("mx_tensor: unknown scale_rule value 4 (valid: 0 to 3, floor to ceil)"));
  o = {};
  o.round = static_cast<rounding>(200);
  REQUIRE_THROWS_WITH(mx_tensor({formats::mxfp4, block_axis::rowwise, 2, 32}, o),
                      contains("unknown rounding value 200 (valid: 0 to 3, nearest_even to stochastic)"));
  // name_of says so too, instead of naming a neighbour.
  CHECK(std::string(name_of(static_cast<block_axis>(2))) == "unknown");
  CHECK(std::string(name_of(static_cast<fp8_type>(2))) == "unknown");
  CHECK(std::string(name_of(static_cast<overflow>(2))) == "unknown");
}

TEST_CASE("FP8 cast and decode: unknown fp8_type or overflow values are refused", "[tensor][enums]") {
  const std::vector<float> x(4, 1.0f);
  const matrix_view<const float> in{x.data(), 2, 2};
  REQUIRE_THROWS_WITH(quantize_fp8(in, static_cast<fp8_type>(2), 1.0f),
                      contains("quantize_fp8: unknown fp8_type value 2 (valid: 0 to 1, e4m3 to e5m2)"));
  REQUIRE_THROWS_WITH(quantize_fp8(in, fp8_type::e4m3, 1.0f, static_cast<overflow>(7)),
                      contains("quantize_fp8: unknown overflow value 7 (valid: 0 to 1, saturate to propagate)"));
  fp8_tensor t = quantize_fp8(in, fp8_type::e4m3, 1.0f);
  t.type = static_cast<fp8_type>(5);
  REQUIRE_THROWS_WITH(dequantize(t), contains("dequantize: unknown fp8_type value 5"));
  REQUIRE_THROWS_WITH(transpose(t), contains("transpose: unknown fp8_type value 5"));
}

TEST_CASE("scale layouts: an unknown scale_layout value is refused", "[tensor][enums]") {
  const std::uint8_t s[6] = {1, 2, 3, 4, 5, 6};
  REQUIRE_THROWS_WITH(to_scale_layout(s, 3, 2, static_cast<scale_layout>(3)),
                      contains("to_scale_layout: unknown scale_layout value 3 (valid: 0 to 2, row_major to aiter_shuffle)"));
  REQUIRE_THROWS_WITH(to_row_major_scales(s, 3, 2, static_cast<scale_layout>(9)),
                      contains("to_row_major_scales: unknown scale_layout value 9"));
}

// ---- item 10: FP8 scales without a finite inverse -----------------------------------------------

TEST_CASE("dequantize(fp8_tensor): a zero, negative, non-finite or subnormal scale is refused", "[tensor][nan]") {
  const std::vector<float> x(4, 2.0f);
  fp8_tensor t = quantize_fp8(matrix_view<const float>{x.data(), 2, 2}, fp8_type::e5m2, 1.0f);
  for (const float s : {0.0f, -0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    t.scale = s;
    INFO("scale " << s);
    REQUIRE_THROWS_AS(dequantize(t), std::invalid_argument);
  }
  t.scale = 0.0f;
  REQUIRE_THROWS_WITH(dequantize(t), contains("dequantize: FP8 scale 0 must be finite and positive"));
  // 1e-45 is positive, but 1 / 1e-45 overflows: every code would decode to Inf (0 to NaN).
  t.scale = 1e-45f;
  REQUIRE_THROWS_WITH(dequantize(t), contains("dequantize: FP8 scale 1.4013e-45 has no finite inverse"));
  t.scale = 0.5f;
  for (const float v : dequantize(t)) CHECK(v == 4.0f);
  t.scale = std::numeric_limits<float>::max();  // the largest scale delayed scaling sets: inverse 2^-128, fine
  for (const float v : dequantize(t)) CHECK(std::isfinite(v));
}
