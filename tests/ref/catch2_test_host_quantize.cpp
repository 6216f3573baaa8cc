// SPDX-License-Identifier: Apache-2.0
// Host tensor quantizer (ref/quantize.hpp): every block of a tensor equals the block oracle
// (storage addressing, FP4 packing, padding), columnwise copies equal rowwise copies of the
// transpose, ragged and empty shapes, float/bf16/fp16 inputs, leading dimensions, argument errors,
// dequantize round-trip error bounds per format, and reproducible stochastic rounding.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <mxkit/ref/quantize.hpp>

#include "../block/block_oracle.hpp"
#include "../catch.hpp"

namespace {
using mxkit::block_axis;
using mxkit::matrix_view;
using mxkit::mx_tensor;
using mxkit::mx_type;
using mxkit::quantize_options;
using mxkit::rounding;
using mxkit::scale_rule;

// Row-major [rows, cols] test data: Gaussian rows at different magnitudes, a few outliers.
std::vector<float> make_matrix(std::size_t rows, std::size_t cols, std::uint64_t seed) {
  std::vector<float> x(rows * cols);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-20, 20);
  for (std::size_t r = 0; r < rows; ++r) {
    const int e = binade(g);
    for (std::size_t c = 0; c < cols; ++c) x[r * cols + c] = std::ldexp(normal(g), e);
  }
  std::uniform_int_distribution<std::size_t> at(0, x.empty() ? 0 : x.size() - 1);
  for (std::size_t i = 0; i < x.size() / 50; ++i) x[at(g)] *= 40.0f;
  return x;
}

std::vector<float> transpose(const std::vector<float>& x, std::size_t rows, std::size_t cols) {
  std::vector<float> t(x.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

bool same_bytes(const mx_tensor& a, const mx_tensor& b) {
  return std::ranges::equal(a.data(), b.data()) && std::ranges::equal(a.scales(), b.scales());
}

// A few option sets that exercise every path: rules, roundings, rotation with and without signs.
std::vector<quantize_options> option_sets() {
  std::vector<quantize_options> v;
  quantize_options o;
  v.push_back(o);  // floor, nearest_even
  o.rule = scale_rule::even;
  o.hadamard = true;
  v.push_back(o);
  o.rule = scale_rule::round_up;
  o.round = rounding::nearest_away;
  o.random_signs = true;
  o.seed = 5;
  v.push_back(o);
  o = {};
  o.rule = scale_rule::ceil;
  o.round = rounding::toward_zero;
  v.push_back(o);
  return v;
}

}  // namespace

TEST_CASE("quantize: every stored block equals the block oracle (addressing, packing, padding)", "[tensor]") {
  constexpr std::size_t rows = 37, cols = 70;  // neither a multiple of 32
  const std::vector<float> x = make_matrix(rows, cols, 1);
  const matrix_view<const float> in{x.data(), rows, cols};
  for (const mx_type type : mxkit::all_mx_types) {
    const oracle::element_model m = oracle::model_of(type);
    for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise})
      for (quantize_options o : option_sets()) {
        o.round = o.round == rounding::toward_zero ? rounding::stochastic : o.round;
        o.seed = 77;
        o.stream = 3;
        INFO(mxkit::name_of(type) << " " << mxkit::name_of(axis) << " " << mxkit::name_of(o.rule) << " " << mxkit::name_of(o.round)
                                  << (o.hadamard ? " hadamard" : ""));
        const mx_tensor t = mxkit::ref::quantize(in, type, axis, o);
        const mxkit::block_layout& l = t.layout();
        REQUIRE(l.lines() == (axis == block_axis::rowwise ? rows : cols));
        REQUIRE(l.padded_length() == mxkit::round_up_to_block(axis == block_axis::rowwise ? cols : rows));
        REQUIRE(t.data().size() == l.lines() * (type == mx_type::mxfp4 ? l.padded_length() / 2 : l.padded_length()));
        REQUIRE(t.scales().size() == l.lines() * l.padded_length() / 32);
        oracle::mismatch_log log;
        for (std::size_t line = 0; line < l.lines(); ++line)
          for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk) {
            float v[32];
            for (std::size_t i = 0; i < 32; ++i) {
              const std::size_t p = blk * 32 + i;  // position along the block axis; zero beyond the edge
              const std::size_t r = axis == block_axis::rowwise ? line : p, c = axis == block_axis::rowwise ? p : line;
              v[i] = (r < rows && c < cols) ? x[r * cols + c] : 0.0f;
            }
            if (o.hadamard) mxkit::rotate_block(v, o.sign_mask());
            const oracle::block_codes want = oracle::quantize_block(m, v, o.rule, o.round, o.seed, mxkit::stochastic_stream(o, axis),
                                                                    line * l.padded_length() + blk * 32);
            bool ok = t.scales()[line * l.blocks_per_line() + blk] == want.scale;
            for (std::size_t i = 0; i < 32; ++i) {
              const std::size_t p = blk * 32 + i;
              const std::uint8_t* row = t.data().data() + line * l.line_bytes();
              // Storage: FP4 element p in byte p/2, low nibble when p is even; else one byte each.
              const std::uint32_t code = type == mx_type::mxfp4 ? (p % 2 ? row[p / 2] >> 4 : row[p / 2] & 0xF) : row[p];
              ok = ok && code == want.codes[i];
            }
            ok ? log.pass() : log.fail("line " + std::to_string(line) + " block " + std::to_string(blk));
          }
        INFO(log.summary());
        CHECK(log.count == 0);
      }
  }
}

TEST_CASE("quantize: the columnwise copy of X is the rowwise copy of X^T, byte for byte", "[tensor]") {
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{64, 96}, {45, 70}, {1, 33}, {100, 3}}) {
    const std::vector<float> x = make_matrix(rows, cols, rows * 1000 + cols);
    const std::vector<float> xt = transpose(x, rows, cols);
    const matrix_view<const float> in{x.data(), rows, cols}, in_t{xt.data(), cols, rows};
    for (const mx_type type : mxkit::all_mx_types)
      for (quantize_options o : option_sets()) {
        INFO(mxkit::name_of(type) << " " << rows << "x" << cols << (o.hadamard ? " hadamard" : ""));
        const mx_tensor col = mxkit::ref::quantize_columnwise(in, type, o);
        const mx_tensor row_t = mxkit::ref::quantize_rowwise(in_t, type, o);
        CHECK(col.layout().lines() == row_t.layout().lines());
        CHECK(same_bytes(col, row_t));
        // Dequantizing the columnwise copy gives the logical (untransposed) matrix.
        const std::vector<float> back = mxkit::ref::dequantize(col), back_t = mxkit::ref::dequantize(row_t);
        CHECK(back == transpose(back_t, cols, rows));
        // Stochastic rounding: the columnwise copy draws from stream ^ 0x80000000.
        o.round = rounding::stochastic;
        o.seed = 9;
        o.stream = 12;
        const mx_tensor col_s = mxkit::ref::quantize_columnwise(in, type, o);
        quantize_options ot = o;
        ot.stream = 12u ^ 0x80000000u;
        CHECK(same_bytes(col_s, mxkit::ref::quantize_rowwise(in_t, type, ot)));
      }
  }
}

TEST_CASE("quantize: ragged dimensions are zero-padded along the block axis", "[tensor]") {
  constexpr std::size_t rows = 19, cols = 45, padded_cols = 64;
  const std::vector<float> x = make_matrix(rows, cols, 3);
  std::vector<float> xp(rows * padded_cols, 0.0f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) xp[r * padded_cols + c] = x[r * cols + c];
  for (const mx_type type : mxkit::all_mx_types)
    for (const quantize_options& o : option_sets()) {
      INFO(mxkit::name_of(type) << (o.hadamard ? " hadamard" : ""));
      const mx_tensor t = mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), rows, cols}, type, o);
      const mx_tensor tp = mxkit::ref::quantize_rowwise(matrix_view<const float>{xp.data(), rows, padded_cols}, type, o);
      CHECK(t.layout().padded_length() == padded_cols);
      CHECK(same_bytes(t, tp));  // padding is exactly explicit zeros
      if (!o.hadamard)           // unrotated, the padding quantizes to code 0 (+0)
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = cols; c < padded_cols; ++c) CHECK(t.view().code(r, c) == 0);
      // dequantize drops the padding.
      CHECK(mxkit::ref::dequantize(t).size() == rows * cols);
    }
}

TEST_CASE("quantize: empty tensors (0 rows or 0 cols)", "[tensor]") {
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{0, 5}, {5, 0}, {0, 0}, {0, 40}})
    for (const mx_type type : mxkit::all_mx_types)
      for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
        INFO(rows << "x" << cols << " " << mxkit::name_of(type) << " " << mxkit::name_of(axis));
        const mx_tensor t = mxkit::ref::quantize(matrix_view<const float>{nullptr, rows, cols}, type, axis);  // null is fine: nothing to read
        CHECK(t.empty());
        CHECK(t.rows() == rows);
        CHECK(t.cols() == cols);
        CHECK(t.data().empty());
        CHECK(t.scales().empty());
        CHECK(mxkit::ref::dequantize(t).empty());
      }
}

TEST_CASE("quantize: float, bfloat16 and float16 inputs of the same values agree", "[tensor]") {
  constexpr std::size_t rows = 8, cols = 64;
  std::vector<float> x = make_matrix(rows, cols, 4);
  for (float& v : x) v = std::ldexp(v, -12);  // well inside fp16's normal range
  std::vector<mxkit::bfloat16> xb;
  std::vector<mxkit::float16> xh;
  std::vector<float> xbf, xhf;  // the same values as floats
  for (const float v : x) {
    xb.push_back(mxkit::bfloat16::from_float(v));
    xh.push_back(mxkit::float16::from_float(v));
    xbf.push_back(xb.back().to_float());
    xhf.push_back(xh.back().to_float());
  }
  for (const mx_type type : mxkit::all_mx_types)
    for (const quantize_options& o : option_sets()) {
      INFO(mxkit::name_of(type));
      CHECK(same_bytes(mxkit::ref::quantize_rowwise(matrix_view<const mxkit::bfloat16>{xb.data(), rows, cols}, type, o),
                       mxkit::ref::quantize_rowwise(matrix_view<const float>{xbf.data(), rows, cols}, type, o)));
      CHECK(same_bytes(mxkit::ref::quantize_columnwise(matrix_view<const mxkit::float16>{xh.data(), rows, cols}, type, o),
                       mxkit::ref::quantize_columnwise(matrix_view<const float>{xhf.data(), rows, cols}, type, o)));
      // Non-const element views are accepted too.
      CHECK(same_bytes(mxkit::ref::quantize_rowwise(matrix_view<mxkit::bfloat16>{xb.data(), rows, cols}, type, o),
                       mxkit::ref::quantize_rowwise(matrix_view<const mxkit::bfloat16>{xb.data(), rows, cols}, type, o)));
    }
}

TEST_CASE("quantize: a leading dimension larger than cols skips the gap", "[tensor]") {
  constexpr std::size_t rows = 9, cols = 40, ld = 47;
  const std::vector<float> x = make_matrix(rows, cols, 5);
  std::vector<float> wide(rows * ld, std::numeric_limits<float>::quiet_NaN());  // the gap must never be read
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) wide[r * ld + c] = x[r * cols + c];
  for (const mx_type type : mxkit::all_mx_types)
    for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
      INFO(mxkit::name_of(type) << " " << mxkit::name_of(axis));
      CHECK(same_bytes(mxkit::ref::quantize(matrix_view<const float>{wide.data(), rows, cols, ld}, type, axis),
                       mxkit::ref::quantize(matrix_view<const float>{x.data(), rows, cols}, type, axis)));
      CHECK(same_bytes(mxkit::ref::quantize(matrix_view<const float>{x.data(), rows, cols, cols}, type, axis),
                       mxkit::ref::quantize(matrix_view<const float>{x.data(), rows, cols, 0}, type, axis)));
    }
}

TEST_CASE("quantize: bad arguments raise errors naming the dimension", "[tensor]") {
  const std::vector<float> x(100, 1.0f);
  REQUIRE_THROWS_AS(mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), 4, 5, 3}, mx_type::mxfp4), std::invalid_argument);
  REQUIRE_THROWS_WITH(mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), 4, 5, 3}, mx_type::mxfp4),
                      mxkit_test::contains("leading dimension 3") && mxkit_test::contains("cols 5"));
  REQUIRE_THROWS_WITH(mxkit::ref::quantize_columnwise(matrix_view<const float>{nullptr, 4, 5}, mx_type::mxfp8_e4m3),
                      mxkit_test::contains("null data") && mxkit_test::contains("4x5"));
  REQUIRE_THROWS_AS(mxkit::ref::quantize_both(matrix_view<const float>{nullptr, 1, 1}, mx_type::mxint8), std::invalid_argument);
}

TEST_CASE("quantize: dequantize round-trip error is bounded per format", "[tensor]") {
  constexpr std::size_t rows = 48, cols = 96;
  const std::vector<float> x = make_matrix(rows, cols, 6);
  const matrix_view<const float> in{x.data(), rows, cols};
  for (const mx_type type : mxkit::all_mx_types) {
    const oracle::element_model m = oracle::model_of(type);
    for (const scale_rule rule : oracle::all_scale_rules) {
      quantize_options o;
      o.rule = rule;
      const mx_tensor t = mxkit::ref::quantize_rowwise(in, type, o);
      const std::vector<float> back = mxkit::ref::dequantize(t);
      // Per element: nearest rounding is off by at most half the step around x/scale; an element
      // above max (floor and even rules may clip) loses exactly x/scale - max.
      oracle::mismatch_log log;
      long double worst_relative = 0;  // |error| / block amax
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t b = 0; b < cols / 32; ++b) {
          const int e = int{t.scales()[r * (cols / 32) + b]} - 127;
          long double amax = 0;
          for (std::size_t c = b * 32; c < b * 32 + 32; ++c) amax = std::max(amax, std::fabs(static_cast<long double>(x[r * cols + c])));
          for (std::size_t c = b * 32; c < b * 32 + 32; ++c) {
            const long double xv = x[r * cols + c], y = std::ldexp(std::fabs(xv), -e);
            const long double err = std::fabs(xv - back[r * cols + c]);
            long double bound;
            if (y >= m.info.max) {
              bound = std::ldexp(y - m.info.max, e);
            } else {
              const oracle::bracket br = oracle::find_bracket(*m.values, y);
              bound = std::ldexp((br.hi.value - br.lo.value) / 2, e);
            }
            worst_relative = std::max(worst_relative, err / amax);
            err <= bound ? log.pass() : log.fail("row " + std::to_string(r) + " col " + std::to_string(c) + " x=" + oracle::describe(x[r * cols + c]));
          }
        }
      INFO(mxkit::name_of(type) << " " << mxkit::name_of(rule) << ": worst |error| / block amax = " << static_cast<double>(worst_relative));
      INFO(log.summary());
      CHECK(log.count == 0);
      // Without clipping (round_up, ceil) the error is at most half a top-binade step:
      // 2^(emax - m - 1) * scale, and amax > max * scale / 2, so below 2^-m of the block amax.
      if (rule == scale_rule::round_up || rule == scale_rule::ceil) CHECK(worst_relative <= std::ldexp(1.0L, -m.info.man_bits));
    }
  }
}

TEST_CASE("quantize: rotated round trip error is bounded in L2 per 16-group", "[tensor]") {
  // The rotation is orthonormal: the error energy of a group equals that of its rotated values,
  // which the per-element bound above limits (plus float rounding of the rotations).
  constexpr std::size_t rows = 16, cols = 64;
  const std::vector<float> x = make_matrix(rows, cols, 8);
  for (const mx_type type : mxkit::all_mx_types) {
    const oracle::element_model m = oracle::model_of(type);
    quantize_options o;
    o.rule = scale_rule::round_up;
    o.hadamard = true;
    o.random_signs = true;
    o.seed = 17;
    const mx_tensor t = mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), rows, cols}, type, o);
    const std::vector<float> back = mxkit::ref::dequantize(t);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t b = 0; b < cols / 32; ++b) {
        float v[32];
        for (std::size_t i = 0; i < 32; ++i) v[i] = x[r * cols + b * 32 + i];
        mxkit::rotate_block(v, o.sign_mask());
        const int e = int{t.scales()[r * (cols / 32) + b]} - 127;
        for (std::size_t g = 0; g < 32; g += 16) {
          long double allowed = 0, energy = 0, signal = 0;
          for (std::size_t i = g; i < g + 16; ++i) {
            const oracle::bracket br = oracle::find_bracket(*m.values, std::ldexp(std::fabs(static_cast<long double>(v[i])), -e));
            const long double half_step = std::ldexp((br.hi.value - br.lo.value) / 2, e);
            allowed += half_step * half_step;
            const long double d = static_cast<long double>(x[r * cols + b * 32 + i]) - back[r * cols + b * 32 + i];
            energy += d * d;
            signal += static_cast<long double>(v[i]) * v[i];
          }
          INFO(mxkit::name_of(type) << " row " << r << " group " << b * 2 + g / 16);
          CHECK(std::sqrt(energy) <= std::sqrt(allowed) + 1e-5L * std::sqrt(signal));
        }
      }
  }
}

TEST_CASE("quantize: stochastic rounding is reproducible with a seed and differs with another", "[tensor]") {
  constexpr std::size_t rows = 32, cols = 64;
  const std::vector<float> x = make_matrix(rows, cols, 9);
  const matrix_view<const float> in{x.data(), rows, cols};
  for (const mx_type type : mxkit::all_mx_types) {
    INFO(mxkit::name_of(type));
    quantize_options o;
    o.round = rounding::stochastic;
    o.seed = 1234;
    const mx_tensor a = mxkit::ref::quantize_rowwise(in, type, o), b = mxkit::ref::quantize_rowwise(in, type, o);
    CHECK(same_bytes(a, b));
    quantize_options other_seed = o, other_stream = o;
    other_seed.seed = 1235;
    other_stream.stream = 1;
    const mx_tensor c = mxkit::ref::quantize_rowwise(in, type, other_seed), d = mxkit::ref::quantize_rowwise(in, type, other_stream);
    CHECK(std::ranges::equal(a.scales(), c.scales()));  // the scale does not depend on the random bits
    CHECK_FALSE(std::ranges::equal(a.data(), c.data()));
    CHECK_FALSE(std::ranges::equal(a.data(), d.data()));
    // quantize_both gives the same two copies as the separate calls.
    const mxkit::ref::mx_tensor_pair both = mxkit::ref::quantize_both(in, type, o);
    CHECK(same_bytes(both.rowwise, a));
    CHECK(same_bytes(both.columnwise, mxkit::ref::quantize_columnwise(in, type, o)));
    CHECK(both.columnwise.axis() == block_axis::columnwise);
  }
}

TEST_CASE("dequantize: a view with null data or scales is refused", "[tensor]") {
  const std::vector<float> x(4 * 40, 0.5f);
  const mxkit::mx_tensor t = mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), 4, 40}, mxkit::mx_type::mxfp6_e2m3);
  mxkit::mx_const_view v = t.view();
  v.data = nullptr;
  REQUIRE_THROWS_WITH(mxkit::ref::dequantize(v), mxkit_test::contains("dequantize: null data or scales for a 4x40 mxfp6_e2m3 tensor"));
  v = t.view();
  v.scales = nullptr;
  REQUIRE_THROWS_AS(mxkit::ref::dequantize(v), std::invalid_argument);
  v = {{mxkit::formats::mxfp4, block_axis::rowwise, 0, 40}, {}, nullptr, nullptr};
  CHECK(mxkit::ref::dequantize(v).empty());
  for (float y : mxkit::ref::dequantize(t)) CHECK(y == 0.5f);
}

TEST_CASE("quantize: an mx_type value outside the enum is refused", "[tensor]") {
  const std::vector<float> x(2 * 32, 1.0f);
  const auto bad = static_cast<mxkit::mx_type>(17);
  REQUIRE_THROWS_WITH(mxkit::ref::quantize_rowwise(matrix_view<const float>{x.data(), 2, 32}, bad),
                      mxkit_test::contains("unknown mx_type value 17"));
}
