// SPDX-License-Identifier: Apache-2.0
// The host NVFP4 quantizer (ref/nvfp4_quantize.hpp): a copy is the block functions on every block
// with the storage tensor/nvfp4_tensor.hpp describes (read back here by hand: low nibble first,
// row-major scales), the columnwise copy is the rowwise copy of the transpose, 16 x 16 blocks give
// one scale per tile and two copies that are each other's transpose, the tensor scale comes from
// the copy's finite amax (rotated, when rotated) or is given, stochastic rounding is reproducible
// and unbiased, and empty tensors and bad arguments have defined outcomes.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <mxkit/ref/nvfp4_quantize.hpp>

#include "../catch.hpp"

namespace nvfp4_quantize_test {
using mxkit::block_axis;
using mxkit::matrix_view;
namespace formats = mxkit::formats;

std::vector<float> nvfp4_random_matrix(std::size_t rows, std::size_t cols, std::uint32_t seed, float spread = 4.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::uniform_real_distribution<float> e(-spread, spread);
  std::vector<float> x(rows * cols);
  for (float& v : x) v = d(g) * std::exp2(e(g));
  return x;
}
std::vector<float> nvfp4_transpose(const std::vector<float>& x, std::size_t rows, std::size_t cols) {
  std::vector<float> t(x.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}
// Code of logical element (r, c) of a copy and its block's scale, read by hand: line-major rows of
// line_bytes, element 2i in the low nibble, scales [lines, blocks] row-major.
std::uint8_t code_at(const mxkit::nvfp4_tensor& q, std::size_t r, std::size_t c) {
  const bool rowwise = q.axis() == block_axis::rowwise;
  const std::size_t line = rowwise ? r : c, pos = rowwise ? c : r;
  const std::uint8_t byte = q.data()[line * q.layout().line_bytes() + pos / 2];
  return pos % 2 ? byte >> 4 : byte & 0xF;
}
std::uint8_t scale_at(const mxkit::nvfp4_tensor& q, std::size_t r, std::size_t c) {
  const bool rowwise = q.axis() == block_axis::rowwise;
  return q.scales()[(rowwise ? r : c) * q.layout().blocks_per_line() + (rowwise ? c : r) / 16];
}
float finite_amax(const std::vector<float>& x) {
  float a = 0;
  for (const float v : x)
    if (std::isfinite(v)) a = std::max(a, std::fabs(v));
  return a;
}

}  // namespace nvfp4_quantize_test

TEST_CASE("nvfp4 quantize: every block is the block functions' under the copy's tensor scale", "[nvfp4_quantize]") {
  using namespace nvfp4_quantize_test;
  const std::size_t rows = 37, cols = 50;  // ragged: 4 blocks per row, the last padded with 14 zeros
  const std::vector<float> x = nvfp4_random_matrix(rows, cols, 1);
  const matrix_view<const float> in{x.data(), rows, cols};
  const mxkit::nvfp4_tensor q = mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise);
  CHECK(q.layout().blocks_per_line() == 4);
  CHECK(q.data().size() == rows * 32);
  CHECK(q.scales().size() == rows * 4);
  CHECK(q.tensor_scale() == mxkit::nvfp4_tensor_scale(finite_amax(x)));
  CHECK(q.tensor_scale_from_amax());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t b = 0; b < 4; ++b) {
      float v[16] = {};
      for (std::size_t i = 0; i < 16 && b * 16 + i < cols; ++i) v[i] = x[r * cols + b * 16 + i];
      const mxkit::nvfp4_block want = mxkit::quantize_nvfp4_block(v, mxkit::nvfp4_block_amax_bits(v), mxkit::nvfp4_scaler{q.tensor_scale()}, {});
      INFO("row " << r << " block " << b);
      REQUIRE(scale_at(q, r, b * 16) == want.scale.bits());
      for (std::size_t i = 0; i < 16; ++i) {
        const std::uint8_t byte = q.data()[r * 32 + b * 8 + i / 2];
        REQUIRE((i % 2 ? byte >> 4 : byte & 0xF) == want.elements[i].bits());  // padding positions: the zeros' codes
      }
    }
  // Dequantize: code x scale x tensor scale at every logical position.
  const std::vector<float> y = mxkit::ref::dequantize(q);
  REQUIRE(y.size() == x.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      REQUIRE(y[r * cols + c] == mxkit::nvfp4_decode(mxkit::e2m1::from_bits(code_at(q, r, c)), mxkit::e4m3::from_bits(scale_at(q, r, c)), q.tensor_scale()));
}

TEST_CASE("nvfp4 quantize: the columnwise copy is the rowwise copy of the transpose (bf16 and fp16 inputs)", "[nvfp4_quantize]") {
  using namespace nvfp4_quantize_test;
  const std::size_t rows = 45, cols = 33;
  const std::vector<float> x = nvfp4_random_matrix(rows, cols, 2), xt = nvfp4_transpose(x, rows, cols);
  std::vector<mxkit::bfloat16> xb, xtb;
  for (const float v : x) xb.push_back(mxkit::bfloat16::from_float(v));
  for (const float v : xt) xtb.push_back(mxkit::bfloat16::from_float(v));
  mxkit::nvfp4_options o;
  o.hadamard = true;
  o.hadamard_signs = 0x1234;
  for (const mxkit::block_format f : {formats::nvfp4, formats::nvfp4_2d}) {
    INFO(mxkit::nvfp4_format_name(f));
    const mxkit::nvfp4_tensor c = mxkit::ref::quantize(matrix_view<const float>{x.data(), rows, cols}, f, block_axis::columnwise, o);
    const mxkit::nvfp4_tensor r = mxkit::ref::quantize(matrix_view<const float>{xt.data(), cols, rows}, f, block_axis::rowwise, o);
    CHECK(c.tensor_scale() == r.tensor_scale());
    CHECK(std::ranges::equal(c.data(), r.data()));
    CHECK(std::ranges::equal(c.scales(), r.scales()));
    const mxkit::nvfp4_tensor cb = mxkit::ref::quantize(matrix_view<const mxkit::bfloat16>{xb.data(), rows, cols}, f, block_axis::columnwise, o);
    const mxkit::nvfp4_tensor rb = mxkit::ref::quantize(matrix_view<const mxkit::bfloat16>{xtb.data(), cols, rows}, f, block_axis::rowwise, o);
    CHECK(std::ranges::equal(cb.data(), rb.data()));
    CHECK(std::ranges::equal(cb.scales(), rb.scales()));
  }
}

TEST_CASE("nvfp4 quantize: 16 x 16 blocks share one scale per tile, and the two copies are transposes", "[nvfp4_quantize]") {
  using namespace nvfp4_quantize_test;
  const std::size_t rows = 40, cols = 48;  // the last tile row spans 8 lines
  std::vector<float> x = nvfp4_random_matrix(rows, cols, 3, 6.0f);
  const matrix_view<const float> in{x.data(), rows, cols};
  const mxkit::nvfp4_tensor r = mxkit::ref::quantize(in, formats::nvfp4_2d, block_axis::rowwise);
  const mxkit::nvfp4_tensor c = mxkit::ref::quantize(in, formats::nvfp4_2d, block_axis::columnwise);
  REQUIRE(r.tensor_scale() == c.tensor_scale());
  for (std::size_t ti = 0; ti < rows; ti += 16)
    for (std::size_t tj = 0; tj < cols; tj += 16) {
      float amax = 0;
      for (std::size_t i = ti; i < std::min(rows, ti + 16); ++i)
        for (std::size_t j = tj; j < tj + 16; ++j) amax = std::max(amax, std::fabs(x[i * cols + j]));
      const std::uint8_t want = mxkit::nvfp4_block_scale(amax, r.tensor_scale()).bits();
      for (std::size_t i = ti; i < std::min(rows, ti + 16); ++i)
        for (std::size_t j = tj; j < tj + 16; ++j) {
          INFO("(" << i << ", " << j << ")");
          REQUIRE(scale_at(r, i, j) == want);
          REQUIRE(scale_at(c, i, j) == want);
          REQUIRE(code_at(r, i, j) == code_at(c, i, j));  // the same value under the same scale
        }
    }
  // 1 x 16 blocks differ from it wherever a row's amax is below its tile's.
  const mxkit::nvfp4_tensor one = mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise);
  CHECK_FALSE(std::ranges::equal(one.scales(), r.scales()));
}

TEST_CASE("nvfp4 quantize: the tensor scale comes from the finite amax of the values quantized, or is given", "[nvfp4_quantize]") {
  using namespace nvfp4_quantize_test;
  const std::size_t rows = 16, cols = 32;
  std::vector<float> x = nvfp4_random_matrix(rows, cols, 4);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[40] = std::numeric_limits<float>::infinity();
  x[300] = -std::numeric_limits<float>::infinity();
  const matrix_view<const float> in{x.data(), rows, cols};
  const mxkit::nvfp4_tensor q = mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise);
  CHECK(q.tensor_scale() == mxkit::nvfp4_tensor_scale(finite_amax(x)));
  CHECK(q.scales()[0] == 0x7F);   // NaN's block
  CHECK(q.scales()[2] == 0x7F);   // Inf's (row 1, block 0)
  CHECK(q.scales()[18] == 0x7F);  // -Inf's (row 9, block 0)
  CHECK(q.scales()[1] != 0x7F);
  const std::vector<float> y = mxkit::ref::dequantize(q);
  CHECK(std::isnan(y[0]));
  CHECK(std::isfinite(y[16]));
  // Rotated: the amax of the rotated values.
  mxkit::nvfp4_options o;
  o.hadamard = true;
  const std::vector<float> z = nvfp4_random_matrix(rows, cols, 5);
  const mxkit::nvfp4_tensor h = mxkit::ref::quantize(matrix_view<const float>{z.data(), rows, cols}, formats::nvfp4, block_axis::rowwise, o);
  std::vector<float> rotated = z;
  for (std::size_t b = 0; b < rotated.size(); b += 16) mxkit::rotate_group16(rotated.data() + b, 0);
  CHECK(h.tensor_scale() == mxkit::nvfp4_tensor_scale(finite_amax(rotated)));
  CHECK(mxkit::ref::nvfp4_amax(matrix_view<const float>{z.data(), rows, cols}, block_axis::rowwise, o) == finite_amax(rotated));
  // Given: used as it is and recorded as given.
  const mxkit::nvfp4_tensor g = mxkit::ref::quantize(matrix_view<const float>{z.data(), rows, cols}, formats::nvfp4, block_axis::rowwise, {}, 0.01f);
  CHECK(g.tensor_scale() == 0.01f);
  CHECK_FALSE(g.tensor_scale_from_amax());
  CHECK(g.scales()[0] == mxkit::nvfp4_block_scale(finite_amax(std::vector<float>(z.begin(), z.begin() + 16)), 0.01f).bits());
  // All zeros: tensor scale 1, zero scales, zero codes.
  const std::vector<float> zeros(rows * cols, 0.0f);
  const mxkit::nvfp4_tensor zq = mxkit::ref::quantize(matrix_view<const float>{zeros.data(), rows, cols}, formats::nvfp4, block_axis::rowwise);
  CHECK(zq.tensor_scale() == 1.0f);
  CHECK(std::ranges::all_of(zq.scales(), [](std::uint8_t s) { return s == 0; }));
  CHECK(std::ranges::all_of(zq.data(), [](std::uint8_t s) { return s == 0; }));
  CHECK(std::ranges::all_of(mxkit::ref::dequantize(zq), [](float v) { return v == 0.0f; }));
}

TEST_CASE("nvfp4 quantize: stochastic rounding is reproducible, the copies draw apart, and it is unbiased", "[nvfp4_quantize]") {
  using namespace nvfp4_quantize_test;
  const std::size_t rows = 16, cols = 64;
  const std::vector<float> x = nvfp4_random_matrix(rows, cols, 6, 1.0f), xt = nvfp4_transpose(x, rows, cols);
  const matrix_view<const float> in{x.data(), rows, cols};
  mxkit::nvfp4_options o;
  o.round = mxkit::rounding::stochastic;
  o.seed = 99;
  const mxkit::nvfp4_tensor a = mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise, o);
  const mxkit::nvfp4_tensor b = mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise, o);
  CHECK(std::ranges::equal(a.data(), b.data()));
  mxkit::nvfp4_options o2 = o;
  o2.seed = 100;
  CHECK_FALSE(std::ranges::equal(a.data(), mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise, o2).data()));
  // The columnwise copy draws stream ^ 0x80000000: it is the rowwise copy of the transpose on that stream.
  const mxkit::nvfp4_tensor c = mxkit::ref::quantize(in, formats::nvfp4, block_axis::columnwise, o);
  mxkit::nvfp4_options flipped = o;
  flipped.stream = 0x80000000u;
  const mxkit::nvfp4_tensor t = mxkit::ref::quantize(matrix_view<const float>{xt.data(), cols, rows}, formats::nvfp4, block_axis::rowwise, flipped);
  CHECK(std::ranges::equal(c.data(), t.data()));
  // Unbiased: over many seeds the mean of the dequantized values approaches x (up to the few
  // largest elements that a block scale rounded down clips).
  const float ts = mxkit::nvfp4_tensor_scale(finite_amax(x));
  std::vector<double> mean(x.size(), 0.0);
  const int draws = 400;
  for (int s = 0; s < draws; ++s) {
    o.seed = static_cast<std::uint64_t>(s);
    const std::vector<float> y = mxkit::ref::dequantize(mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise, o, ts));
    for (std::size_t i = 0; i < y.size(); ++i) mean[i] += y[i] / draws;
  }
  const mxkit::nvfp4_tensor rn = mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise, {}, ts);
  double sr_error = 0, rn_error = 0;  // per element: |mean of the draws - x| against |nearest - x|
  const std::vector<float> yrn = mxkit::ref::dequantize(rn);
  for (std::size_t i = 0; i < x.size(); ++i) {
    sr_error += std::fabs(mean[i] - x[i]);
    rn_error += std::fabs(yrn[i] - x[i]);
  }
  INFO("SR mean error " << sr_error << ", nearest-even error " << rn_error);
  CHECK(sr_error < 0.25 * rn_error);
}

TEST_CASE("nvfp4 quantize: empty tensors, bytes independent of threads, and bad arguments", "[nvfp4_quantize]") {
  using namespace nvfp4_quantize_test;
  const std::vector<float> none;
  for (const auto& [r, c] : {std::pair<std::size_t, std::size_t>{0, 5}, {5, 0}, {0, 0}}) {
    const mxkit::nvfp4_tensor q = mxkit::ref::quantize(matrix_view<const float>{none.data(), r, c}, formats::nvfp4_2d, block_axis::rowwise);
    CHECK(q.empty());
    CHECK(q.tensor_scale() == 1.0f);
    CHECK(mxkit::ref::dequantize(q).empty());
  }
  const std::size_t rows = 70, cols = 90;
  const std::vector<float> x = nvfp4_random_matrix(rows, cols, 7);
  const matrix_view<const float> in{x.data(), rows, cols};
  mxkit::nvfp4_options o;
  o.hadamard = true;
  o.round = mxkit::rounding::stochastic;
  for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise})
    for (const mxkit::block_format f : {formats::nvfp4, formats::nvfp4_2d}) {
      const mxkit::nvfp4_tensor one = mxkit::ref::quantize(in, f, axis, o, std::nullopt, 1);
      const mxkit::nvfp4_tensor three = mxkit::ref::quantize(in, f, axis, o, std::nullopt, 3);
      CHECK(std::ranges::equal(one.data(), three.data()));
      CHECK(std::ranges::equal(one.scales(), three.scales()));
      CHECK(one.tensor_scale() == three.tensor_scale());
    }
  using mxkit_test::contains;
  CHECK_THROWS_WITH(mxkit::ref::quantize(in, formats::mxfp4, block_axis::rowwise), contains("is not NVFP4"));
  for (const float bad : {0.0f, -1.0f, 1e-40f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    CHECK_THROWS_WITH(mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise, {}, bad), contains("tensor scale"));
  CHECK_THROWS_WITH(mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise, {}, -2.5f), contains("tensor scale -2.5"));
  mxkit::nvfp4_options bad_signs;
  bad_signs.hadamard_signs = 0x10000;
  CHECK_THROWS_WITH(mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise, bad_signs), contains("hadamard_signs 0x10000"));
  mxkit::nvfp4_options bad_round;
  bad_round.round = static_cast<mxkit::rounding>(9);
  CHECK_THROWS_WITH(mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise, bad_round), contains("rounding value 9"));
  CHECK_THROWS_WITH(mxkit::ref::quantize(in, formats::nvfp4, static_cast<block_axis>(3)), contains("block_axis value 3"));
  CHECK_THROWS_WITH(mxkit::ref::quantize(matrix_view<const float>{nullptr, 2, 2}, formats::nvfp4, block_axis::rowwise), contains("null data"));
  const mxkit::nvfp4_tensor q = mxkit::ref::quantize(in, formats::nvfp4, block_axis::rowwise);
  mxkit::nvfp4_const_view v = q.view();
  v.tensor_scale = 0.0f;
  CHECK_THROWS_WITH(mxkit::ref::dequantize(v), contains("tensor scale 0"));
  v = q.view();
  v.data = nullptr;
  CHECK_THROWS_WITH(mxkit::ref::dequantize(v), contains("null data or scales"));
}
