// SPDX-License-Identifier: Apache-2.0
// mxkit::ref::validate on output of a foreign kernel (foreign_quantizer.hpp: a plain quantizer written
// from the peers' published rules, sharing no code with mxkit): correct output passes in every
// layout the peers write; planted errors are pinpointed by position, kind and bytes; NaN blocks
// are don't-care unless strict; stochastic rounding validates exactly with the kernel's own bits.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <mxkit/validation/validate.hpp>

#include "../catch.hpp"
#include "foreign_quantizer.hpp"

namespace {
using mxkit::block_axis;
using mxkit::matrix_view;
using mxkit::mx_type;

// [rows, cols] values over many binades (per 8x8 tile), with an all-zero 32x32 tile at rows
// 0..31, cols 32..63 (zero blocks in both directions) and, in matrices of more than 40 rows,
// row 40 holding exact ties of FP4 and FP8 (x.5 steps under a power-of-two scale).
std::vector<float> test_matrix(std::size_t rows, std::size_t cols, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-8, 8);
  std::vector<float> x(rows * cols);
  std::vector<int> tile((rows / 8 + 1) * (cols / 8 + 1));
  for (int& t : tile) t = e(g);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) x[r * cols + c] = std::ldexp(n(g), tile[(r / 8) * (cols / 8 + 1) + c / 8]);
  for (std::size_t r = 0; r < 32 && r < rows; ++r)
    for (std::size_t c = 32; c < 64 && c < cols; ++c) x[r * cols + c] = 0.0f;
  const float ties[] = {6.0f, 5.0f, -3.5f, 2.5f, -0.75f, 0.25f, 1.25f, -1.75f, 4.5f, 0.125f};
  if (rows > 40)
    for (std::size_t c = 0; c < cols; ++c) x[40 * cols + c] = ties[c % 10] * std::ldexp(1.0f, static_cast<int>(c / 32) - 1);
  return x;
}

mx_type mx_type_of(foreign::element e) {
  return e == foreign::element::e2m1 ? mx_type::mxfp4 : e == foreign::element::e4m3 ? mx_type::mxfp8_e4m3 : mx_type::mxfp8_e5m2;
}
mxkit::scale_rule rule_of(foreign::scale_mode m) {
  switch (m) {
    case foreign::scale_mode::floor: return mxkit::scale_rule::floor;
    case foreign::scale_mode::ceil: return mxkit::scale_rule::ceil;
    case foreign::scale_mode::even: return mxkit::scale_rule::even;
    case foreign::scale_mode::rceil: break;
  }
  return mxkit::scale_rule::round_up;
}

// The mx_storage that describes what the foreign kernel wrote with layout l.
mxkit::mx_storage storage_of(const foreign::layout& l) {
  mxkit::mx_storage s;
  s.columnwise = l.transposed ? mxkit::columnwise_storage::transposed : mxkit::columnwise_storage::not_transposed;
  s.nibbles = l.high_nibble_first ? mxkit::nibble_order::high_first : mxkit::nibble_order::low_first;
  s.data_ld = l.data_ld;
  switch (l.scales) {
    case foreign::scale_placement::row_major:
      if (l.scale_ld) {
        s.scale_line_stride = l.scale_ld;
        s.scale_block_stride = 1;
      }
      break;
    case foreign::scale_placement::block_major:
      s.scale_line_stride = 1;
      s.scale_block_stride = l.scale_ld;  // set by the caller (the line count when packed)
      break;
    case foreign::scale_placement::cublas_128x4: s.scales = mxkit::scale_layout::cublas_128x4; break;
    case foreign::scale_placement::aiter_shuffle: s.scales = mxkit::scale_layout::aiter_shuffle; break;
  }
  s.padding_scale = l.scale_padding;
  return s;
}

struct foreign_case {
  foreign::options o;
  foreign::layout l;
  std::size_t rows, cols;
  std::vector<float> x;
  foreign::output out;

  mxkit::mx_foreign_view view() const {
    mxkit::quantize_options q;
    q.rule = rule_of(o.mode);
    q.round = o.round == foreign::rounding::nearest_away ? mxkit::rounding::nearest_away
              : o.round == foreign::rounding::nearest_even ? mxkit::rounding::nearest_even
                                                           : mxkit::rounding::stochastic;
    q.hadamard = o.hadamard;
    return {{mxkit::format_of(mx_type_of(o.type)), l.columnwise ? block_axis::columnwise : block_axis::rowwise, rows, cols},
            q,
            storage_of(l),
            out.data,
            out.scales};
  }
  mxkit::ref::validate_options validation() const {
    mxkit::ref::validate_options v;
    v.quirks.zero_block_scale = o.zero_scale;
    return v;
  }
  mxkit::ref::mx_validation_report validate(mxkit::ref::validate_options v) const {
    return mxkit::ref::validate(matrix_view<const float>{x.data(), rows, cols}, view(), v);
  }
};

foreign_case run_foreign(const foreign::options& o, foreign::layout l, std::size_t rows, std::size_t cols, std::uint64_t seed) {
  foreign_case c{o, l, rows, cols, test_matrix(rows, cols, seed), {}};
  if (c.l.scales == foreign::scale_placement::block_major && c.l.scale_ld == 0) c.l.scale_ld = l.columnwise ? cols : rows;
  c.out = foreign::quantize(c.x, rows, cols, o, c.l);
  return c;
}

}  // namespace

TEST_CASE("validate foreign: a correct kernel passes in every layout", "[validate][foreign]") {
  // (element, rule, rounding, rotation, zero-block byte): TE-like, torchao-like, ROCm-TE-like, ...
  struct config {
    foreign::element type;
    foreign::scale_mode mode;
    foreign::rounding round;
    bool hadamard;
    std::uint8_t zero_scale;
  };
  const config configs[] = {
      {foreign::element::e4m3, foreign::scale_mode::rceil, foreign::rounding::nearest_even, false, 0x00},
      {foreign::element::e2m1, foreign::scale_mode::floor, foreign::rounding::nearest_even, false, 0x00},
      {foreign::element::e5m2, foreign::scale_mode::ceil, foreign::rounding::nearest_even, false, 0x00},
      {foreign::element::e2m1, foreign::scale_mode::even, foreign::rounding::nearest_away, true, 0x7F},
      {foreign::element::e4m3, foreign::scale_mode::even, foreign::rounding::nearest_even, true, 0x7F},
  };
  const foreign::scale_placement placements[] = {foreign::scale_placement::row_major, foreign::scale_placement::block_major,
                                                 foreign::scale_placement::cublas_128x4, foreign::scale_placement::aiter_shuffle};
  int index = 0;
  for (const config& cf : configs)
    for (const int axis : {0, 1, 2})  // rowwise, columnwise transposed, columnwise not transposed
      for (const foreign::scale_placement p : placements)
        for (const bool padded_ld : {false, true}) {
          ++index;
          foreign::options o;
          o.type = cf.type;
          o.mode = cf.mode;
          o.round = cf.round;
          o.hadamard = cf.hadamard;
          o.zero_scale = cf.zero_scale;
          foreign::layout l;
          l.columnwise = axis != 0;
          l.transposed = axis != 2;
          l.high_nibble_first = index % 2 == 0;
          l.scales = p;
          l.scale_padding = p == foreign::scale_placement::aiter_shuffle ? 127 : 0;
          const std::size_t rows = 64, cols = 96;
          const std::size_t row_bytes = (axis == 2 ? cols : (axis == 0 ? cols : rows)) * (cf.type == foreign::element::e2m1 ? 1 : 2) / 2;
          if (padded_ld) {
            l.data_ld = row_bytes + 16;
            if (p == foreign::scale_placement::row_major) l.scale_ld = (axis == 0 ? cols : rows) / 32 + 3;
            if (p == foreign::scale_placement::block_major) l.scale_ld = (axis == 0 ? rows : cols) + 5;
          }
          const foreign_case c = run_foreign(o, l, rows, cols, 100 + static_cast<std::uint64_t>(index));
          const mxkit::ref::mx_validation_report r = c.validate(c.validation());
          INFO("case " << index << ": " << mxkit::ref::to_string(r));
          CHECK(r.ok());
          CHECK(r.elements_checked == rows * cols);
          CHECK(r.scales_checked == rows * cols / 32);
          CHECK(r.nan_blocks_skipped == 0);
          // The zero block's byte is the kernel's policy: with mxkit's (0x7F) where the kernel
          // writes 0x00, exactly the zero blocks differ (32 lines x 1 block of the zero tile).
          if (cf.zero_scale != 0x7F) {
            const mxkit::ref::mx_validation_report plain = c.validate({});
            CHECK(plain.scale_mismatches == 32);
            CHECK(plain.element_mismatches == 0);
          }
        }
}

TEST_CASE("validate foreign: planted errors in a TE-style MXFP8 columnwise copy are pinpointed", "[validate][foreign]") {
  // NVIDIA TE's MXFP8 columnwise copy: data [M, K] not transposed, scales in cuBLAS's 128x4 tiles
  // keyed by (column, block); RCEIL, E4M3.
  foreign::options o;
  o.type = foreign::element::e4m3;
  o.mode = foreign::scale_mode::rceil;
  o.zero_scale = 0x00;
  foreign::layout l;
  l.columnwise = true;
  l.transposed = false;
  l.scales = foreign::scale_placement::cublas_128x4;
  const std::size_t M = 96, K = 160;
  foreign_case c = run_foreign(o, l, M, K, 7);
  REQUIRE(c.validate(c.validation()).ok());

  // 1. A scale byte: column 70, block 2 (rows 64..95). Offset by cuBLAS's rule: tile 0 (line
  //    70 < 128, block 2 < 4), (70 % 32) * 16 + (70 / 32) * 4 + 2 = 6 * 16 + 8 + 2 = 106.
  const std::uint8_t scale_before = c.out.scales[106];
  c.out.scales[106] = static_cast<std::uint8_t>(scale_before + 1);
  // 2. An element: row 45, column 9, at data[45 * K + 9] (not transposed).
  const std::uint8_t code_before = c.out.data[45 * K + 9];
  c.out.data[45 * K + 9] = static_cast<std::uint8_t>(code_before ^ 0x01);
  // 3. A padded scale entry: line 200 (lines 160..255 are padding), block 1: tile 1 (lines
  //    128..255) at (200 % 32) * 16 + (200 % 128 / 32) * 4 + 1 = 8 * 16 + 2 * 4 + 1 = 137.
  c.out.scales[512 + 137] = 0x7F;

  const mxkit::ref::mx_validation_report r = c.validate(c.validation());
  const std::string text = mxkit::ref::to_string(r);
  INFO(text);
  CHECK(r.scale_mismatches == 1);
  CHECK(r.element_mismatches == 1);
  CHECK(r.padding_mismatches == 1);
  REQUIRE(r.mismatches.size() == 3);
  // Line order: column 9's element, column 70's scale, then the padded scale entry.
  const mxkit::ref::mx_mismatch &e = r.mismatches[0], &s = r.mismatches[1], &p = r.mismatches[2];
  CHECK(e.kind() == mxkit::ref::mismatch_kind::element);
  CHECK(e.row == 45);
  CHECK(e.col == 9);
  CHECK(e.line == 9);
  CHECK(e.block == 1);
  CHECK(e.index == 13);
  CHECK(e.expected == code_before);
  CHECK(e.actual == (code_before ^ 0x01));
  CHECK(e.value == c.x[45 * K + 9]);  // no rotation: the value quantized is the input
  CHECK(s.kind() == mxkit::ref::mismatch_kind::scale);
  CHECK(s.line == 70);
  CHECK(s.block == 2);
  CHECK(s.row == 64);
  CHECK(s.col == 70);
  CHECK(s.expected == scale_before);
  CHECK(s.actual == scale_before + 1);
  float amax = 0;
  for (std::size_t row = 64; row < 96; ++row) amax = std::max(amax, std::fabs(c.x[row * K + 70]));
  CHECK(s.value == amax);
  CHECK(p.kind() == mxkit::ref::mismatch_kind::padding);
  CHECK(p.is_scale);
  CHECK(p.line == 200);
  CHECK(p.block == 1);
  CHECK(p.expected == 0);
  CHECK(p.actual == 0x7F);
  // The text a person reads, and the one-line summary.
  CHECK(text.find("element (row 45, col 9; line 9, block 1, index 13)") != std::string::npos);
  CHECK(text.find("scale (row 64, col 70; line 70, block 2)") != std::string::npos);
  CHECK(text.find("padding scale (line 200, block 1): expected 0x0 (2^-127), actual 0x7f (2^0)") != std::string::npos);
  CHECK(text.find("not transposed; cublas_128x4 scales") != std::string::npos);
  CHECK(r.summary().rfind("FAIL mxfp8_e4m3 columnwise 96x160", 0) == 0);
  CHECK(r.summary().find("1 scale, 1 element, 1 padding mismatches; first: element (row 45, col 9)") != std::string::npos);
}

TEST_CASE("validate foreign: a wrong nibble is found in either nibble order", "[validate][foreign]") {
  for (const bool high_first : {false, true}) {
    foreign::options o;
    o.type = foreign::element::e2m1;
    o.mode = foreign::scale_mode::floor;
    o.zero_scale = 0x00;
    foreign::layout l;
    l.high_nibble_first = high_first;
    l.scales = foreign::scale_placement::row_major;
    l.scale_ld = 8;
    l.data_ld = 64;
    const std::size_t rows = 32, cols = 96;
    foreign_case c = run_foreign(o, l, rows, cols, 11);
    REQUIRE(c.validate(c.validation()).ok());
    // Row 3, column 37: byte 18 of row 3; odd element: high nibble when low-first, low nibble when high-first.
    std::uint8_t& byte = c.out.data[3 * 64 + 18];
    byte ^= high_first ? 0x02 : 0x20;
    const mxkit::ref::mx_validation_report r = c.validate(c.validation());
    INFO(mxkit::ref::to_string(r));
    REQUIRE(r.element_mismatches == 1);
    REQUIRE(r.mismatches.size() == 1);
    CHECK(r.mismatches[0].row == 3);
    CHECK(r.mismatches[0].col == 37);
    CHECK((r.mismatches[0].expected ^ r.mismatches[0].actual) == 0x2);
    // Read with the other order, the same bytes are wrong almost everywhere.
    mxkit::mx_foreign_view swapped = c.view();
    swapped.storage.nibbles = high_first ? mxkit::nibble_order::low_first : mxkit::nibble_order::high_first;
    CHECK(mxkit::ref::validate(matrix_view<const float>{c.x.data(), rows, cols}, swapped, c.validation()).element_mismatches > 1000);
  }
}

TEST_CASE("validate foreign: NaN blocks' codes are don't-care unless strict", "[validate][foreign]") {
  foreign::options o;
  o.type = foreign::element::e4m3;
  o.mode = foreign::scale_mode::floor;
  foreign::layout l;
  l.columnwise = true;
  const std::size_t rows = 64, cols = 64;
  foreign_case c{o, l, rows, cols, test_matrix(rows, cols, 5), {}};
  c.x[40 * cols + 3] = std::nanf("");        // column 3, block 1
  c.x[10 * cols + 50] = INFINITY;            // column 50, block 0: Inf is flagged the same way
  c.out = foreign::quantize(c.x, rows, cols, o, l);  // writes 0xFF and leaves 0xFF codes in those blocks
  const mxkit::ref::mx_validation_report r = c.validate(c.validation());
  INFO(mxkit::ref::to_string(r));
  CHECK(r.ok());
  CHECK(r.nan_blocks_skipped == 2);
  CHECK(mxkit::ref::to_string(r).find("of 2 NaN-scale blocks not compared") != std::string::npos);
  mxkit::ref::validate_options strict = c.validation();
  strict.strict_nan_blocks = true;
  const mxkit::ref::mx_validation_report rs = c.validate(strict);
  CHECK(rs.scale_mismatches == 0);
  CHECK(rs.element_mismatches == 64);  // mxkit's policy writes zero codes there
  // A wrong scale byte on a NaN block is still a mismatch.
  c.out.scales[3 * 2 + 1] = 0x7F;
  CHECK(c.validate(c.validation()).scale_mismatches == 1);
}

TEST_CASE("validate foreign: stochastic rounding with the kernel's own random bits", "[validate][foreign]") {
  for (const foreign::element type : {foreign::element::e2m1, foreign::element::e4m3})
    for (const bool columnwise : {false, true}) {
      foreign::options o;
      o.type = type;
      o.mode = foreign::scale_mode::floor;
      o.round = foreign::rounding::stochastic_add_carry;
      o.seed = 99;
      o.hadamard = type == foreign::element::e2m1;
      foreign::layout l;
      l.columnwise = columnwise;
      const std::size_t rows = 64, cols = 64;
      const foreign_case c = run_foreign(o, l, rows, cols, 13);
      mxkit::ref::validate_options v = c.validation();
      v.random_bits = [](std::size_t row, std::size_t col) { return foreign::random_bits(99, row, col); };
      v.random_rule = mxkit::ref::random_bits_rule::add_and_carry;
      const mxkit::ref::mx_validation_report r = c.validate(v);
      INFO(mxkit::ref::to_string(r));
      CHECK(r.ok());
      // Without the kernel's bits (mxkit's Philox), or with its bits read by the other rule, the
      // codes that rounded stochastically differ.
      CHECK(c.validate(c.validation()).element_mismatches > 100);
      v.random_rule = mxkit::ref::random_bits_rule::round_up_below;
      CHECK(c.validate(v).element_mismatches > 100);
    }
}
