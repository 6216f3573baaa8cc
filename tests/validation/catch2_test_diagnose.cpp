// SPDX-License-Identifier: Apache-2.0
// validation/diagnose.hpp: a copy written with one common mistake in its storage fails validation as
// described, and the diagnosis names the change that makes it pass (the swapped FP4 nibble
// order, the tiled scale layout, the columnwise storage, the scale rule); a copy with a planted
// byte error is not explained away, and a description larger than the buffers is refused.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <mxkit/validation/diagnose.hpp>
#include <mxkit/ref/quantize.hpp>

#include "../catch.hpp"

namespace {
using mxkit::block_axis;
using mxkit::matrix_view;
using mxkit::mx_type;

std::vector<float> test_matrix(std::size_t rows, std::size_t cols) {
  std::vector<float> x(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  return x;
}

// The copy of `x` stored as `written`, described as `described`.
struct stored_copy {
  mxkit::mx_foreign_buffers bytes;
  mxkit::mx_foreign_view described;
};
stored_copy write_copy(const std::vector<float>& x, std::size_t rows, std::size_t cols, mx_type type, block_axis axis,
                       const mxkit::quantize_options& o, const mxkit::mx_storage& written, const mxkit::mx_storage& described) {
  const mxkit::mx_tensor t = mxkit::ref::quantize(matrix_view<const float>{x.data(), rows, cols}, type, axis, o);
  stored_copy c{mxkit::store_foreign(t.view(), written), {}};
  c.described = c.bytes.view();
  c.described.storage = described;
  return c;
}
}  // namespace

TEST_CASE("diagnose_layout names a swapped FP4 nibble order", "[diagnose]") {
  const std::size_t rows = 64, cols = 128;
  const std::vector<float> x = test_matrix(rows, cols);
  mxkit::mx_storage high;
  high.nibbles = mxkit::nibble_order::high_first;
  const stored_copy c = write_copy(x, rows, cols, mx_type::mxfp4, block_axis::rowwise, {}, high, mxkit::mx_storage{});
  const matrix_view<const float> in{x.data(), rows, cols};
  REQUIRE_FALSE(mxkit::ref::validate(in, c.described).ok());
  const mxkit::ref::layout_diagnosis d = mxkit::ref::diagnose_layout(in, c.described);
  REQUIRE(d.found());
  CHECK(d.original_mismatches > 0);
  CHECK(d.passing()->change == "high_first nibbles");
  CHECK(d.explanation.find("high_first nibbles") != std::string::npos);
}

TEST_CASE("diagnose_layout names a 128x4 scale layout, a columnwise storage and a scale rule", "[diagnose]") {
  const std::size_t rows = 128, cols = 64;
  const std::vector<float> x = test_matrix(rows, cols);
  const matrix_view<const float> in{x.data(), rows, cols};
  SECTION("cuBLAS 128x4 scales described as row-major") {
    mxkit::mx_storage tiled;
    tiled.scales = mxkit::scale_layout::cublas_128x4;
    const stored_copy c = write_copy(x, rows, cols, mx_type::mxfp8_e4m3, block_axis::rowwise, {}, tiled, mxkit::mx_storage{});
    const mxkit::ref::layout_diagnosis d = mxkit::ref::diagnose_layout(in, c.described);
    REQUIRE(d.found());
    CHECK(d.passing()->change == "cublas_128x4 scales");
  }
  SECTION("a not-transposed columnwise copy described as transposed") {
    mxkit::mx_storage flat;
    flat.columnwise = mxkit::columnwise_storage::not_transposed;
    const stored_copy c = write_copy(x, rows, cols, mx_type::mxfp8_e5m2, block_axis::columnwise, {}, flat, mxkit::mx_storage{});
    const mxkit::ref::layout_diagnosis d = mxkit::ref::diagnose_layout(in, c.described);
    REQUIRE(d.found());
    CHECK(d.passing()->change == "columnwise copy stored not_transposed");
  }
  SECTION("scales by round_up described as floor") {
    mxkit::quantize_options rceil;
    rceil.rule = mxkit::scale_rule::round_up;
    stored_copy c = write_copy(x, rows, cols, mx_type::mxfp4, block_axis::rowwise, rceil, {}, {});
    c.described.options.rule = mxkit::scale_rule::floor;
    const mxkit::ref::layout_diagnosis d = mxkit::ref::diagnose_layout(in, c.described);
    REQUIRE(d.found());
    CHECK(d.passing()->change == "scale rule round_up");
  }
  SECTION("two mistakes at once: nibbles and 128x4 scales") {
    mxkit::mx_storage both;
    both.nibbles = mxkit::nibble_order::high_first;
    both.scales = mxkit::scale_layout::cublas_128x4;
    const stored_copy c = write_copy(x, rows, cols, mx_type::mxfp4, block_axis::rowwise, {}, both, mxkit::mx_storage{});
    const mxkit::ref::layout_diagnosis d = mxkit::ref::diagnose_layout(in, c.described);
    REQUIRE(d.found());
    CHECK(d.passing()->change == "high_first nibbles and cublas_128x4 scales");
  }
}

TEST_CASE("diagnose_layout does not explain away a wrong byte, and checks the buffer sizes", "[diagnose]") {
  const std::size_t rows = 32, cols = 64;
  const std::vector<float> x = test_matrix(rows, cols);
  const matrix_view<const float> in{x.data(), rows, cols};
  stored_copy c = write_copy(x, rows, cols, mx_type::mxfp8_e4m3, block_axis::rowwise, {}, {}, {});
  c.bytes.data[5] ^= 0x01;  // one planted element error
  c.described = c.bytes.view();
  const mxkit::ref::layout_diagnosis d = mxkit::ref::diagnose_layout(in, c.described);
  CHECK_FALSE(d.found());
  CHECK(d.original_mismatches == 1);
  CHECK(!d.tried.empty());
  CHECK(d.explanation.find("no single or paired change") != std::string::npos);
  mxkit::mx_foreign_view short_scales = c.described;
  short_scales.scales = short_scales.scales.first(short_scales.scales.size() - 1);
  CHECK_THROWS_AS(mxkit::ref::diagnose_layout(in, short_scales), std::invalid_argument);
}
