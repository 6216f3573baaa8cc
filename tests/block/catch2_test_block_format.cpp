// SPDX-License-Identifier: Apache-2.0
// The format model (block/block_format.hpp): the MX formats are instances of block_format with
// the values OCP MX v1.0 Table 1 gives them (k = 32, E8M0 scale, no tensor scale, the element of
// each name), format_of and the descriptors agree with the value, and the run-time queries
// (block_size_of, storage_bits_of, common_block_size) read the same value. NVFP4 is an instance
// too (E2M1, 1 x 16 or 16 x 16 blocks, E4M3 scales, an fp32 tensor scale), named by its value.
#include <string>

#include <mxkit/block/mx_format.hpp>

#include "../catch.hpp"

namespace {
using mxkit::block_format;
using mxkit::element_kind;
using mxkit::mx_type;
namespace formats = mxkit::formats;

// Every MX format as Table 1 lists it: the element of its name, 32-element blocks of one row,
// an E8M0 scale, no tensor scale.
constexpr bool is_mx(const block_format& f, element_kind e) {
  return f.element == e && f.block == mxkit::block_shape{1, 32} && f.block_size() == 32 &&
         f.scale == mxkit::block_scale_type::e8m0 && !f.has_tensor_scale();
}
static_assert(is_mx(formats::mxfp4, element_kind::e2m1));
static_assert(is_mx(formats::mxfp6_e2m3, element_kind::e2m3));
static_assert(is_mx(formats::mxfp6_e3m2, element_kind::e3m2));
static_assert(is_mx(formats::mxfp8_e4m3, element_kind::e4m3));
static_assert(is_mx(formats::mxfp8_e5m2, element_kind::e5m2));
static_assert(is_mx(formats::mxint8, element_kind::int8));
static_assert(formats::mxfp4.storage_bits() == 4 && formats::mxfp8_e4m3.storage_bits() == 8 && formats::mxfp6_e2m3.storage_bits() == 8);
static_assert(!(formats::mxfp4 == formats::mxfp6_e2m3));  // values compare member by member

// A format the model expresses but no MX name has: NVFP4's shape (1 x 16 blocks, fp32 tensor
// scale) differs from MX in the block and the tensor scale, and says so.
constexpr block_format sixteen{element_kind::e2m1, {1, 16}, mxkit::block_scale_type::e8m0, mxkit::tensor_scale_type::fp32};
static_assert(sixteen.block_size() == 16 && sixteen.has_tensor_scale() && !(sixteen == formats::mxfp4));
static_assert(mxkit::block_shape{16, 16}.size() == 256);

// NVFP4 (arXiv 2509.25149): E2M1 elements, 1 x 16 blocks (16 x 16 for weights), an E4M3 scale per
// block, an fp32 tensor scale; its block is one 16-point rotation group, and no MX format is one.
constexpr bool is_nvfp4_value(const block_format& f, int rows) {
  return f.element == element_kind::e2m1 && f.block == mxkit::block_shape{rows, 16} && f.block_size() == 16 &&
         f.scale == mxkit::block_scale_type::e4m3 && f.tensor_scale == mxkit::tensor_scale_type::fp32 && f.storage_bits() == 4;
}
static_assert(is_nvfp4_value(formats::nvfp4, 1) && is_nvfp4_value(formats::nvfp4_2d, 16));
static_assert(mxkit::is_nvfp4(formats::nvfp4) && mxkit::is_nvfp4(formats::nvfp4_2d));
static_assert(!mxkit::is_nvfp4(formats::mxfp4) && !mxkit::is_nvfp4(sixteen));  // E8M0-scaled: not NVFP4
static_assert(!mxkit::is_nvfp4(block_format{element_kind::e4m3, {1, 16}, mxkit::block_scale_type::e4m3, mxkit::tensor_scale_type::fp32}));
static_assert(!mxkit::is_nvfp4(block_format{element_kind::e2m1, {1, 32}, mxkit::block_scale_type::e4m3, mxkit::tensor_scale_type::fp32}));
static_assert(!mxkit::is_nvfp4(block_format{element_kind::e2m1, {1, 16}, mxkit::block_scale_type::e4m3, mxkit::tensor_scale_type::none}));
static_assert(mxkit::block_format_desc<formats::nvfp4>::block_size == 16 && mxkit::block_format_desc<formats::nvfp4>::storage_bits == 4);
}  // namespace

TEST_CASE("block_format: format_of, the descriptors and the run-time queries read one value", "[block_format]") {
  const block_format expected[] = {formats::mxfp4, formats::mxfp6_e2m3, formats::mxfp6_e3m2,
                                   formats::mxfp8_e4m3, formats::mxfp8_e5m2, formats::mxint8};
  std::size_t i = 0;
  for (const mx_type t : mxkit::all_mx_types) {
    INFO(mxkit::name_of(t));
    const block_format f = mxkit::format_of(t);
    CHECK(f == expected[i++]);
    CHECK(mxkit::block_size_of(t) == f.block_size());
    CHECK(mxkit::storage_bits_of(t) == f.storage_bits());
    mxkit::visit_mx_type(t, [&](auto fmt) {
      using Fmt = decltype(fmt);
      CHECK(Fmt::type == t);
      CHECK(Fmt::format == f);
      CHECK(Fmt::block_size == f.block_size());
      CHECK(Fmt::storage_bits == f.storage_bits());
      CHECK(Fmt::elements_per_byte * Fmt::storage_bits == 8);
      STATIC_REQUIRE(mxkit::mx_format_descriptor<Fmt>);
    });
    CHECK(mxkit::common_block_size % f.block_size() == 0);
  }
  CHECK(mxkit::common_block_size == 32);
  CHECK(mxkit::mx_block_size == formats::mxfp4.block_size());
}

TEST_CASE("block_format: NVFP4's values, and its scale type's name", "[block_format]") {
  CHECK(std::string(mxkit::name_of(mxkit::block_scale_type::e4m3)) == "e4m3");
  CHECK(std::string(mxkit::name_of(mxkit::block_scale_type::e8m0)) == "e8m0");
  CHECK(std::string(mxkit::nvfp4_format_name(formats::nvfp4)) == "nvfp4");
  CHECK(std::string(mxkit::nvfp4_format_name(formats::nvfp4_2d)) == "nvfp4_2d");
  CHECK(std::string(mxkit::nvfp4_format_name(formats::mxfp4)) == "not NVFP4");
  for (const mx_type t : mxkit::all_mx_types) {  // the MX names stay MX: NVFP4 is named by its value
    INFO(mxkit::name_of(t));
    CHECK_FALSE(mxkit::is_nvfp4(mxkit::format_of(t)));
    CHECK(mxkit::format_of(t).scale == mxkit::block_scale_type::e8m0);
  }
  CHECK(mxkit::common_block_size % formats::nvfp4.block_size() == 0);
}
