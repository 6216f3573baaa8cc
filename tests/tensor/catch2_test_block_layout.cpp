// SPDX-License-Identifier: Apache-2.0
// One layout for every block-scaled copy (tensor/block_layout.hpp), keyed by the format value:
// its shifts equal the divisions they replace for every format the checks accept, at small,
// ragged and huge line lengths; an MX copy's mx_type comes back from the value and anything else
// is refused by name; an mx_type past the enum never becomes MXFP4.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <mxkit/tensor/foreign_layout.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/nvfp4_foreign_layout.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

#include "../catch.hpp"

namespace {
using mxkit::block_axis;
using mxkit::block_format;
using mxkit::block_layout;
using mxkit_test::contains;

// Every format value a layout is checked for: the six MX formats and NVFP4's two.
std::vector<block_format> accepted_formats() {
  std::vector<block_format> f;
  for (const mxkit::mx_type t : mxkit::all_mx_types) f.push_back(mxkit::format_of(t));
  f.push_back(mxkit::formats::nvfp4);
  f.push_back(mxkit::formats::nvfp4_2d);
  return f;
}

// The layout's numbers by division, from the format's own block size (the rule the shifts replace).
void check_against_division(const block_layout& l) {
  const std::size_t k = static_cast<std::size_t>(l.format.block_size());
  const std::size_t n = l.line_length(), blocks = n / k + (n % k != 0);
  REQUIRE(l.block_size() == k);
  REQUIRE(l.blocks_per_line() == blocks);
  REQUIRE(l.padded_length() == blocks * k);
  REQUIRE(l.padded_length() == mxkit::round_up_to_block(n, k));
  REQUIRE(l.line_bytes() == blocks * k * static_cast<std::size_t>(l.format.storage_bits()) / 8);
  REQUIRE(l.scale_count() == l.lines() * blocks);
  REQUIRE(l.data_bytes() == l.lines() * l.line_bytes());
  REQUIRE(l.tile_lines() == static_cast<std::size_t>(l.format.block.rows));
}
}  // namespace

TEST_CASE("block_layout: the shifts equal the divisions by the format's block size", "[tensor][block_layout]") {
  for (const block_format& f : accepted_formats()) {
    INFO(mxkit::format_name(f));
    REQUIRE(block_layout{f, block_axis::rowwise, 1, 1}.block_shift() == (f.block_size() == 32 ? 5 : 4));
    for (const block_axis a : {block_axis::rowwise, block_axis::columnwise}) {
      for (std::size_t n = 0; n <= 1000; ++n) {
        const block_layout l = a == block_axis::rowwise ? block_layout{f, a, 3, n} : block_layout{f, a, n, 3};
        REQUIRE(l.line_length() == n);
        REQUIRE(l.lines() == 3);
        check_against_division(l);
      }
      // Long lines: lengths whose bits still fit 64 bits (line_bytes counts them), ragged and whole.
      for (const std::size_t n : {std::size_t{1} << 40, (std::size_t{1} << 40) + 1, (std::size_t{1} << 40) - 1, (std::size_t{1} << 59) - 17}) {
        const block_layout l = a == block_axis::rowwise ? block_layout{f, a, 1, n} : block_layout{f, a, n, 1};
        check_against_division(l);
      }
    }
  }
}

TEST_CASE("block_layout: usable at compile time, and the same numbers as the format's descriptor", "[tensor][block_layout]") {
  constexpr block_layout mx{mxkit::formats::mxfp4, block_axis::columnwise, 70, 5};
  static_assert(mx.lines() == 5 && mx.line_length() == 70 && mx.block_size() == 32 && mx.padded_length() == 96 &&
                mx.blocks_per_line() == 3 && mx.line_bytes() == 48 && mx.scale_count() == 15);
  static_assert(mx.block_size() == mxkit::mx_format<mxkit::mx_type::mxfp4>::block_size);
  constexpr block_layout nv{mxkit::formats::nvfp4_2d, block_axis::rowwise, 37, 17};
  static_assert(nv.block_size() == 16 && nv.padded_length() == 32 && nv.blocks_per_line() == 2 && nv.line_bytes() == 16 &&
                nv.tile_lines() == 16 && nv.data_bytes() == 37 * 16);
  // A block of no elements (a value no check accepts) still computes without dividing by zero.
  constexpr block_format none{mxkit::element_kind::e2m1, {1, 0}, mxkit::block_scale_type::e8m0, mxkit::tensor_scale_type::none};
  static_assert(block_layout{none, block_axis::rowwise, 2, 5}.blocks_per_line() == 5);
  SUCCEED("static_asserts above");
}

TEST_CASE("block_layout: an MX copy's mx_type from its value; other values refused by name", "[tensor][block_layout]") {
  for (const mxkit::mx_type t : mxkit::all_mx_types) {
    const block_layout l{mxkit::format_of(t), block_axis::rowwise, 2, 64};
    CHECK(l.mx() == t);
    CHECK(std::string(mxkit::format_name(l.format)) == mxkit::name_of(t));
    CHECK_NOTHROW(mxkit::detail::check_mx_layout(l, "test"));
    CHECK_THROWS_WITH(mxkit::detail::check_nvfp4_layout(l, "test"), contains(std::string("test: the format, ") + mxkit::name_of(t) + " ("));
  }
  for (const block_format& f : {mxkit::formats::nvfp4, mxkit::formats::nvfp4_2d}) {
    const block_layout l{f, block_axis::columnwise, 16, 16};
    CHECK_NOTHROW(mxkit::detail::check_nvfp4_layout(l, "test"));
    CHECK_THROWS_WITH(l.mx(), contains("block_layout: " + std::string(mxkit::nvfp4_format_name(f)) + " (e2m1 elements, "));
    CHECK_THROWS_WITH(mxkit::detail::check_mx_layout(l, "test"), contains("is not an MX format"));
  }
  block_format odd = mxkit::formats::mxfp8_e5m2;
  odd.tensor_scale = mxkit::tensor_scale_type::fp32;  // an MX element and block with a tensor scale: no format mxkit knows
  CHECK(std::string(mxkit::format_name(odd)) == "unknown block format");
  CHECK_THROWS_WITH(mxkit::to_mx_type(odd, "where"),
                    contains("where: unknown block format (e5m2 elements, 1 x 32 blocks, e8m0 scales, tensor scale fp32) is not an MX format"));
  // Both families share the extent checks.
  const std::size_t huge = std::size_t{1} << 62;
  CHECK_THROWS_WITH(mxkit::detail::check_mx_layout(block_layout{mxkit::formats::mxfp4, block_axis::rowwise, 8, huge}, "test"),
                    contains("test: rows 8 x padded cols"));
  CHECK_THROWS_WITH(mxkit::detail::check_nvfp4_layout(block_layout{mxkit::formats::nvfp4, block_axis::columnwise, huge, 8}, "test"),
                    contains("test: cols 8 x padded rows"));
}

TEST_CASE("checked_format_of: an mx_type past the enum is refused, never taken for MXFP4", "[tensor][block_layout]") {
  for (const mxkit::mx_type t : mxkit::all_mx_types) CHECK(mxkit::checked_format_of(t, "test") == mxkit::format_of(t));
  const auto bad = static_cast<mxkit::mx_type>(6);
  CHECK(mxkit::format_of(bad) == mxkit::formats::mxfp4);  // why the check exists: the noexcept map falls back
  CHECK_THROWS_WITH(mxkit::checked_format_of(bad, "test"), contains("test: unknown mx_type value 6 (valid: 0 to 5, mxfp4 to mxint8)"));
}

TEST_CASE("block_layout: each family's default-constructed copies hold its own format", "[tensor][block_layout]") {
  CHECK(mxkit::mx_tensor{}.layout().format == mxkit::formats::mxfp4);
  CHECK(mxkit::mx_const_view{}.layout.format == mxkit::formats::mxfp4);
  CHECK(mxkit::mx_foreign_view{}.layout.format == mxkit::formats::mxfp4);
  CHECK(mxkit::mx_foreign_buffers{}.layout.format == mxkit::formats::mxfp4);
  CHECK(mxkit::nvfp4_tensor{}.layout().format == mxkit::formats::nvfp4);
  CHECK(mxkit::nvfp4_const_view{}.layout.format == mxkit::formats::nvfp4);
  CHECK(mxkit::nvfp4_foreign_view{}.layout.format == mxkit::formats::nvfp4);
  CHECK(mxkit::nvfp4_foreign_buffers{}.layout.format == mxkit::formats::nvfp4);
  // So an empty copy of either family passes its own family's checks, as before the merge.
  CHECK_NOTHROW(mxkit::detail::check_nvfp4_foreign_view(mxkit::nvfp4_foreign_view{}, "test"));
  CHECK_NOTHROW(mxkit::detail::check_foreign_view(mxkit::mx_foreign_view{}, "test"));
}
