// SPDX-License-Identifier: Apache-2.0
// validation/nvfp4_presets.hpp: TransformerEngine's and torchao's NVFP4 quantizers reproduced byte
// for byte. The expected bytes are worked out here from the libraries' published rules, restated
// as models in long double with one cast to float per fp32 operation, E4M3 and E2M1 found in the
// tables of tests/format/spec_oracle.hpp, the Hadamard matrix from its definition with TE's sign
// vector as TE lists it, and every byte placed by hand (low nibble first; TE's padded row-major
// scale_inv; cuBLAS's 128x4 tiles as TE's reference unswizzles them: a (M/128, N/4, 32, 4, 4)
// view). The inputs hold the blocks where the libraries part ways: zero blocks, blocks whose
// scale rounds to zero, amaxes where the fp32 orders of operations round to different E4M3 codes,
// elements where a rounded reciprocal moves the E2M1 code, RHT values that need bf16 rounding.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <mxkit/validation/nvfp4_presets.hpp>

#include "../catch.hpp"
#include "../format/spec_oracle.hpp"

namespace nvfp4_presets_test {
using mxkit::block_axis;
using mxkit::matrix_view;
using mxkit::rounding;

float f32(long double x) { return static_cast<float>(x); }
constexpr float flt_max = std::numeric_limits<float>::max();
std::uint8_t e4m3_code(long double v) {  // nearest even, saturating at 448
  const oracle::table& t = oracle::table_of(oracle::e4m3_spec);
  const std::size_t i = oracle::round_index(t, v, rounding::nearest_even);
  return static_cast<std::uint8_t>(i == t.finite.size() ? t.finite.back().code : t.finite[i].code);
}
long double e4m3_value(std::uint8_t c) { return oracle::decode(oracle::e4m3_spec, c).magnitude; }
std::uint8_t e2m1_code(float y) {  // nearest even, saturating at 6, the sign kept
  return static_cast<std::uint8_t>(oracle::encode(oracle::e2m1_spec, oracle::table_of(oracle::e2m1_spec), y, 0, rounding::nearest_even,
                                                  mxkit::overflow::saturate));
}
float bf16(float x) {  // nearest even bf16, from the bf16 table
  const std::uint32_t c = oracle::encode(oracle::bfloat16_spec, oracle::table_of(oracle::bfloat16_spec), x, 0, rounding::nearest_even,
                                         mxkit::overflow::propagate);
  return oracle::float_from_bits(c << 16);
}

// TransformerEngine (core_nvfp4.cuh, quantize_transpose_nvfp4.cuh): S_enc = 2688 / amax (at most
// FLT_MAX; 1 for amax 0), S_dec = 1 / S_enc; scale = e4m3(amax_b x (S_enc x (1/6))); element =
// e2m1(x x min(1 / (scale x S_dec), FLT_MAX)).
struct te_model {
  float s_enc = 1.0f, s_dec = 1.0f;
  explicit te_model(float amax) {
    if (amax > 0) s_enc = std::min(f32(2688.0L / amax), flt_max);
    s_dec = f32(1.0L / s_enc);
  }
  std::uint8_t scale(float a) const { return e4m3_code(f32(a * static_cast<long double>(f32(s_enc * static_cast<long double>(f32(1.0L / 6)))))); }
  std::uint8_t code(float x, std::uint8_t e) const {
    const float d = f32(e4m3_value(e) * s_dec);
    const float m = d == 0 ? flt_max : std::min(f32(1.0L / d), flt_max);
    return e2m1_code(f32(static_cast<long double>(x) * m));
  }
  float stored(float amax) const { return amax; }
};
// torchao (nvfp4_quantize): P = amax / 2688; scale = e4m3(clamp(amax_b / 6 / P, 2^-6, 448));
// element = e2m1(clamp(x x ((1 / P) / scale), -6, 6)).
struct torchao_model {
  float p = 1.0f;
  explicit torchao_model(float amax, bool two_level = true) : p(two_level ? f32(amax / 2688.0L) : 1.0f) {}
  std::uint8_t scale(float a) const {
    const float v = f32(f32(a / 6.0L) / static_cast<long double>(p));
    return e4m3_code(std::clamp(v, 0.015625f, 448.0f));
  }
  std::uint8_t code(float x, std::uint8_t e) const {
    return e2m1_code(f32(static_cast<long double>(x) * f32(f32(1.0L / p) / e4m3_value(e))));
  }
  float stored(float) const { return p; }
};
// mxkit (block/nvfp4_scale.hpp): t = amax / 2688; scale = e4m3(amax_b / 6 / t); element = e2m1(x / (scale x t)).
struct mxkit_model {
  float t = 1.0f;
  explicit mxkit_model(float amax) : t(amax > 0 ? std::max(f32(amax / 2688.0L), 0x1p-126f) : 1.0f) {}
  std::uint8_t scale(float a) const { return e4m3_code(f32(f32(a / 6.0L) / static_cast<long double>(t))); }
  std::uint8_t code(float x, std::uint8_t e) const {
    if (e4m3_value(e) == 0) return std::signbit(x) ? 0x8 : 0x0;
    return e2m1_code(f32(x / static_cast<long double>(f32(e4m3_value(e) * t))));
  }
  float stored(float) const { return t; }
};

// The expected codes ([lines, len]) and scales ([lines, len / 16]) of a copy whose values, line
// by line along the block axis, are v (already rotated), with tiles of `tile` lines.
struct expected_copy {
  std::size_t lines = 0, len = 0;
  std::vector<std::uint8_t> codes, scales;
  float stored = 0;
};
template <class Model>
expected_copy model_copy(const std::vector<float>& v, std::size_t lines, std::size_t len, std::size_t tile, const Model& m, float amax) {
  expected_copy e{lines, len, std::vector<std::uint8_t>(lines * len), std::vector<std::uint8_t>(lines * len / 16), m.stored(amax)};
  for (std::size_t l0 = 0; l0 < lines; l0 += tile)
    for (std::size_t b = 0; b < len / 16; ++b) {
      float a = 0;
      for (std::size_t l = l0; l < l0 + tile; ++l)
        for (std::size_t i = 0; i < 16; ++i) a = std::max(a, std::fabs(v[l * len + b * 16 + i]));
      for (std::size_t l = l0; l < l0 + tile; ++l) {
        const std::uint8_t s = m.scale(a);
        e.scales[l * (len / 16) + b] = s;
        for (std::size_t i = 0; i < 16; ++i) e.codes[l * len + b * 16 + i] = m.code(v[l * len + b * 16 + i], s);
      }
    }
  return e;
}
// Codes packed two per byte along the lines, element 2i in the low nibble.
std::vector<std::uint8_t> packed(const expected_copy& e) {
  std::vector<std::uint8_t> out(e.lines * e.len / 2);
  for (std::size_t i = 0; i < e.codes.size(); i += 2) out[i / 2] = static_cast<std::uint8_t>(e.codes[i] | (e.codes[i + 1] << 4));
  return out;
}
std::size_t padded_to(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }
// cuBLAS's 128x4 tiles: the swizzled buffer is a (M/128, N/4, 32, 4, 4) array whose element
// [tm][tn][r % 32][r / 32 % 4][c % 4] is scale (tm * 128 + r, tn * 4 + c) (TE's
// _recover_swizzled_scales permutes (0, 3, 2, 1, 4) back to [M, N]).
std::size_t swizzled_offset(std::size_t row, std::size_t col, std::size_t padded_cols) {
  const std::size_t tm = row / 128, tn = col / 4, r = row % 128, c = col % 4;
  return (((tm * (padded_cols / 4) + tn) * 32 + r % 32) * 4 + r / 32) * 4 + c;
}

// Values of a column line-major copy: v[c * rows + r] = x[r * cols + c].
std::vector<float> transposed(const std::vector<float>& x, std::size_t rows, std::size_t cols) {
  std::vector<float> t(x.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}
float amax_of(const std::vector<float>& v) {
  float a = 0;
  for (const float x : v) a = std::max(a, std::fabs(x));
  return a;
}

// Amaxes where models A and B give different block scales: searched within 2^12 floats of every
// E4M3 rounding midpoint (times 6 t, where the scale's argument crosses it), up to `n` of them.
template <class A, class B>
std::vector<float> amaxes_where_scales_differ(const A& a, const B& b, float t, std::size_t n) {
  std::vector<float> out;
  const oracle::table& tab = oracle::table_of(oracle::e4m3_spec);
  for (std::size_t i = 20; i + 1 < tab.finite.size() && out.size() < n; ++i) {
    const float near = f32((tab.finite[i].value + tab.finite[i + 1].value) / 2 * 6 * t);
    std::uint32_t u;
    std::memcpy(&u, &near, 4);
    for (std::uint32_t k = u - 4096; k < u + 4096; ++k) {
      const float x = oracle::float_from_bits(k);
      if (a.scale(x) != b.scale(x)) {
        out.push_back(x);
        break;
      }
    }
  }
  return out;
}

}  // namespace nvfp4_presets_test

TEST_CASE("nvfp4 presets: TransformerEngine, 1 x 16 blocks, rowwise, compact and swizzled scales", "[nvfp4_peers]") {
  using namespace nvfp4_presets_test;
  const std::size_t rows = 16, cols = 64;
  std::mt19937 g(1);
  std::normal_distribution<float> d;
  std::vector<float> x(rows * cols);
  for (float& v : x) v = d(g);
  x[0] = 1000.0f;  // the tensor's amax: S_enc = fl(2688 / 1000)
  const te_model te(1000.0f);
  const mxkit_model mx(1000.0f);
  // Row 1, block 0: all zeros (TE 0x00; the codes zeros). Block 1: a scale that rounds to 0 in
  // TE, whose elements TE multiplies by FLT_MAX (saturating), where mxkit writes signed zeros.
  for (std::size_t i = 0; i < 32; ++i) x[cols + i] = 0.0f;
  x[cols + 16] = 1e-4f;
  x[cols + 17] = -3e-5f;
  x[cols + 18] = -1e-38f;
  CHECK(te.scale(1e-4f) == 0);
  CHECK(te.code(1e-4f, 0) == 0x7);
  CHECK(mx.code(1e-4f, 0) == 0x0);
  // Rows 2..5, block 0: amaxes where TE's fold amax x (S_enc x 1/6) and the paper's order
  // amax / 6 / t round to different E4M3 codes.
  const std::vector<float> parted = amaxes_where_scales_differ(te, mx, mx.t, 4);
  REQUIRE(parted.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO(oracle::describe(parted[i]));
    CHECK(parted[i] < 1000.0f);  // the tensor's amax stays x[0]
    for (std::size_t j = 0; j < 16; ++j) x[(2 + i) * cols + j] = f32(parted[i] * (j == 0 ? 1.0L : (static_cast<long double>(j) - 7.5L) / 8));
  }
  const matrix_view<const float> in{x.data(), rows, cols};
  const expected_copy want = model_copy(x, rows, cols, 1, te, 1000.0f);
  for (const mxkit::scale_layout layout : {mxkit::scale_layout::row_major, mxkit::scale_layout::cublas_128x4}) {
    const mxkit::ref::nvfp4_preset p = mxkit::ref::peers::te_nvfp4(false, false, layout);
    INFO(p.name << ", " << mxkit::name_of(layout));
    const mxkit::nvfp4_foreign_buffers got = mxkit::ref::quantize_like(p, in, block_axis::rowwise);
    CHECK(got.tensor_scale == 1000.0f);  // TE stores the amax
    CHECK(got.data == packed(want));
    const std::size_t padded_rows = padded_to(rows, 128), padded_blocks = padded_to(cols / 16, 4);
    REQUIRE(got.scales.size() == padded_rows * padded_blocks);
    std::vector<std::uint8_t> placed(got.scales.size(), 0);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t b = 0; b < cols / 16; ++b) {
        const std::size_t at = layout == mxkit::scale_layout::row_major ? r * padded_blocks + b : swizzled_offset(r, b, padded_blocks);
        INFO("scale (" << r << ", " << b << ")");
        REQUIRE(got.scales[at] == want.scales[r * (cols / 16) + b]);
        placed[at] = want.scales[r * (cols / 16) + b];
      }
    // The bytes placed by hand, with TE's amax, pass validation under the preset ...
    const mxkit::ref::nvfp4_validation_report r = mxkit::ref::validate(in, p.view(block_axis::rowwise, rows, cols, packed(want), placed, 1000.0f), p.validation());
    INFO(mxkit::ref::to_string(r));
    CHECK(r.ok());
    CHECK(r.scales_checked == rows * cols / 16);
    // ... and fail under mxkit's formula: the four scales, the tiny block's codes, the tensor scale.
    const mxkit::ref::nvfp4_validation_report m = mxkit::ref::validate(in, p.view(block_axis::rowwise, rows, cols, packed(want), placed, 1000.0f));
    CHECK(m.tensor_scale_mismatches == 1);
    CHECK(m.scale_mismatches >= 4);
    CHECK(m.element_mismatches >= 3);
  }
}

TEST_CASE("nvfp4 presets: TransformerEngine's RHT on the columnwise copy, in bf16, with its sign vector", "[nvfp4_peers]") {
  using namespace nvfp4_presets_test;
  const std::size_t rows = 48, cols = 32;  // columnwise: 32 lines of 48 (3 blocks)
  std::mt19937 g(2);
  std::uniform_int_distribution<int> k(-64, 64);
  std::vector<float> x(rows * cols);
  for (float& v : x) v = static_cast<float>(k(g)) / 16.0f;  // bf16 values whose rotated sums are exact in float
  std::vector<mxkit::bfloat16> xb;
  for (const float v : x) xb.push_back(mxkit::bfloat16::from_float(v));
  // TE's get_wgrad_sign_vector, as listed there; rotated = bf16(sum_j H[i][j] s_j x_j / 4).
  const std::array<int, 16> sign = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  const std::vector<float> lines = transposed(x, rows, cols);
  std::vector<float> rotated(lines.size());
  bool needed_rounding = false;
  for (std::size_t b = 0; b < lines.size(); b += 16)
    for (int i = 0; i < 16; ++i) {
      long double s = 0;
      for (int j = 0; j < 16; ++j) s += ((__builtin_popcount(static_cast<unsigned>(i & j)) & 1) ? -1 : 1) * sign[static_cast<std::size_t>(j)] * static_cast<long double>(lines[b + static_cast<std::size_t>(j)]);
      rotated[b + static_cast<std::size_t>(i)] = bf16(f32(s / 4));
      needed_rounding |= rotated[b + static_cast<std::size_t>(i)] != f32(s / 4);
    }
  REQUIRE(needed_rounding);  // the bf16 rounding is exercised
  const float amax = amax_of(rotated);
  const expected_copy want = model_copy(rotated, cols, rows, 1, te_model(amax), amax);
  const mxkit::ref::nvfp4_preset p = mxkit::ref::peers::te_nvfp4(true);
  const matrix_view<const mxkit::bfloat16> in{xb.data(), rows, cols};
  const mxkit::nvfp4_foreign_buffers got = mxkit::ref::quantize_like(p, in, block_axis::columnwise);
  CHECK(got.tensor_scale == amax);  // the post-RHT amax
  CHECK(got.data == packed(want));  // transposed: [K, M/2]
  const std::size_t padded_blocks = padded_to(rows / 16, 4);
  REQUIRE(got.scales.size() == padded_to(cols, 128) * padded_blocks);
  for (std::size_t l = 0; l < cols; ++l)
    for (std::size_t b = 0; b < rows / 16; ++b) REQUIRE(got.scales[l * padded_blocks + b] == want.scales[l * (rows / 16) + b]);
  CHECK(mxkit::ref::validate(in, got.view(), p.validation()).ok());
  // Without the bf16 rounding (mxkit's float rotation) the bytes differ.
  mxkit::ref::nvfp4_validate_options no_bf16 = p.validation();
  no_bf16.quirks.rotated_bf16 = false;
  CHECK_FALSE(mxkit::ref::validate(in, got.view(), no_bf16).ok());
  // The rowwise copy is not rotated and keeps the input's amax.
  const mxkit::nvfp4_foreign_buffers row = mxkit::ref::quantize_like(p, in, block_axis::rowwise);
  CHECK(row.tensor_scale == amax_of(x));
  CHECK(row.data == packed(model_copy(x, rows, cols, 1, te_model(amax_of(x)), amax_of(x))));
}

TEST_CASE("nvfp4 presets: TransformerEngine's 2-D weights, both copies", "[nvfp4_peers]") {
  using namespace nvfp4_presets_test;
  const std::size_t rows = 32, cols = 48;
  std::mt19937 g(3);
  std::normal_distribution<float> d;
  std::vector<float> x(rows * cols);
  for (float& v : x) v = d(g) * 0.05f;
  x[17 * cols + 40] = 3.0f;  // one tile with a far larger amax
  const float amax = amax_of(x);
  const mxkit::ref::nvfp4_preset p = mxkit::ref::peers::te_nvfp4(false, true);
  const matrix_view<const float> in{x.data(), rows, cols};
  for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
    const bool rowwise = axis == block_axis::rowwise;
    const std::vector<float> v = rowwise ? x : transposed(x, rows, cols);
    const std::size_t lines = rowwise ? rows : cols, len = rowwise ? cols : rows;
    const expected_copy want = model_copy(v, lines, len, 16, te_model(amax), amax);
    const mxkit::nvfp4_foreign_buffers got = mxkit::ref::quantize_like(p, in, axis);
    INFO(mxkit::name_of(axis));
    CHECK(got.data == packed(want));
    const std::size_t padded_blocks = padded_to(len / 16, 4);
    for (std::size_t l = 0; l < lines; ++l)
      for (std::size_t b = 0; b < len / 16; ++b) REQUIRE(got.scales[l * padded_blocks + b] == want.scales[l * (len / 16) + b]);
    CHECK(mxkit::ref::validate(in, got.view(), p.validation()).ok());
  }
}

TEST_CASE("nvfp4 presets: torchao, two-level and one-level, row-major and swizzled scales", "[nvfp4_peers]") {
  using namespace nvfp4_presets_test;
  const std::size_t rows = 16, cols = 48;
  std::mt19937 g(4);
  std::normal_distribution<float> d;
  std::vector<float> x(rows * cols);
  for (float& v : x) v = d(g) * 3.0f;
  x[5] = 40.0f;  // the amax: P = fl(40 / 2688)
  for (std::size_t i = 0; i < 16; ++i) x[cols + i] = 0.0f;  // row 1, block 0: zero (torchao 0x08)
  x[2 * cols] = 1e-6f;                                     // row 2, block 0: clamped up to 2^-6
  for (std::size_t i = 1; i < 16; ++i) x[2 * cols + i] = 0.0f;
  const torchao_model ao(40.0f);
  const mxkit_model mx(40.0f);
  CHECK(ao.scale(0.0f) == 0x08);
  CHECK(mx.scale(0.0f) == 0x00);
  CHECK(ao.scale(1e-6f) == 0x08);
  // Row 3: elements where 1 / P / scale, rounded, moves the code (mxkit divides by scale x t).
  const std::uint8_t s3 = ao.scale(30.0f);
  x[3 * cols] = 30.0f;
  int found = 0;
  const float unit = f32(e4m3_value(s3) * static_cast<long double>(mx.t));
  for (const float mid : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    for (int k = -64; k < 64 && found < 12; ++k) {
      const float e = std::nextafter(f32(mid * static_cast<long double>(unit)), 0.0f) + static_cast<float>(k) * std::numeric_limits<float>::epsilon() * unit;
      if (ao.code(e, s3) != mx.code(e, s3)) {
        x[3 * cols + 1 + static_cast<std::size_t>(found++)] = e;
        break;
      }
    }
  INFO("elements where torchao's reciprocal and mxkit's division part: " << found);
  REQUIRE(found >= 1);
  const matrix_view<const float> in{x.data(), rows, cols};
  for (const bool two_level : {true, false}) {
    const torchao_model m(40.0f, two_level);
    const expected_copy want = model_copy(x, rows, cols, 1, m, 40.0f);
    for (const mxkit::scale_layout layout : {mxkit::scale_layout::row_major, mxkit::scale_layout::cublas_128x4}) {
      const mxkit::ref::nvfp4_preset p = mxkit::ref::peers::torchao_nvfp4(layout, two_level);
      INFO(p.name << ", " << mxkit::name_of(layout));
      const mxkit::nvfp4_foreign_buffers got = mxkit::ref::quantize_like(p, in, block_axis::rowwise);
      CHECK(got.tensor_scale == m.p);
      CHECK(got.data == packed(want));
      std::vector<std::uint8_t> placed;
      if (layout == mxkit::scale_layout::row_major) {
        placed = want.scales;  // [M, K/16], no padding
      } else {
        const std::size_t pr = padded_to(rows, 128), pb = padded_to(cols / 16, 4);
        placed.assign(pr * pb, 0);  // to_blocked pads with zeros
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t b = 0; b < cols / 16; ++b) placed[swizzled_offset(r, b, pb)] = want.scales[r * (cols / 16) + b];
      }
      CHECK(got.scales == placed);
      const mxkit::ref::nvfp4_validation_report r =
          mxkit::ref::validate(in, p.view(block_axis::rowwise, rows, cols, packed(want), placed, m.p), p.validation());
      INFO(mxkit::ref::to_string(r));
      CHECK(r.ok());
      // mxkit's formula parts from it: the zero and clamped blocks' scales, row 3's elements.
      const mxkit::ref::nvfp4_validation_report o = mxkit::ref::validate(
          in, p.view(block_axis::rowwise, rows, cols, packed(want), placed, m.p), mxkit::ref::nvfp4_validate_options{});
      CHECK(o.scale_mismatches >= 2);
      if (two_level) CHECK(o.element_mismatches >= static_cast<std::size_t>(found));
    }
  }
  // One-level takes no tensor scale.
  CHECK_THROWS_WITH(mxkit::ref::quantize_like(mxkit::ref::peers::torchao_nvfp4(mxkit::scale_layout::row_major, false), in, block_axis::rowwise, 0.5f),
                    mxkit_test::contains("has no tensor scale"));
  // torchao's own scale of an all-zero tensor is 0, which it divides by: refused by name.
  const std::vector<float> zeros(rows * cols, 0.0f);
  CHECK_THROWS_WITH(mxkit::ref::quantize_like(mxkit::ref::peers::torchao_nvfp4(), matrix_view<const float>{zeros.data(), rows, cols}, block_axis::rowwise),
                    mxkit_test::contains("per_tensor_scale 0"));
}

TEST_CASE("nvfp4 presets: argument checks name the bad value", "[nvfp4_peers]") {
  using namespace nvfp4_presets_test;
  using mxkit_test::contains;
  CHECK_THROWS_WITH(mxkit::ref::peers::te_nvfp4(false, false, mxkit::scale_layout::aiter_shuffle), contains("not aiter_shuffle"));
  CHECK_THROWS_WITH(mxkit::ref::peers::torchao_nvfp4(mxkit::scale_layout::aiter_shuffle), contains("not aiter_shuffle"));
  const std::vector<float> x(16 * 16, 1.0f);
  const matrix_view<const float> in{x.data(), 16, 16};
  const mxkit::ref::nvfp4_preset p = mxkit::ref::peers::te_nvfp4();
  const mxkit::nvfp4_foreign_buffers b = mxkit::ref::quantize_like(p, in, block_axis::rowwise);
  mxkit::nvfp4_foreign_view v = p.view(block_axis::rowwise, 16, 16, b.data, b.scales, -1.0f);
  CHECK(mxkit::ref::validate(in, v, p.validation()).tensor_scale_mismatches == 1);  // checked against the input's amax
  v.tensor_scale_from_amax = false;  // given: read as it is, and TE's formula cannot read a negative amax
  CHECK_THROWS_WITH(mxkit::ref::validate(in, v, p.validation()), contains("stored amax -1"));
  CHECK_THROWS_WITH(mxkit::ref::validate(in, p.view(block_axis::rowwise, 16, 16, b.data, std::span<const std::uint8_t>(b.scales).first(10), 1.0f), p.validation()),
                    contains("scale buffer of 10 bytes"));
}
