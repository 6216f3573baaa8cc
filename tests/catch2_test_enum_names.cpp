// SPDX-License-Identifier: Apache-2.0
// enum_names.hpp: every enumerator of every named enum has a distinct, non-empty name, a value
// outside the enum is "unknown", and the names are the ones the library printed before the
// mechanism (messages, test output and README tables show them).
#include <cstddef>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>

#include <mxkit/mxkit.hpp>
#include <mxkit/training_stack.hpp>

#include "catch.hpp"

namespace {

template <class E>
void check_names(std::initializer_list<const char*> want) {
  REQUIRE(mxkit::enum_count<E> == want.size());
  std::set<std::string> seen;
  std::size_t i = 0;
  for (const char* w : want) {
    const std::string name = mxkit::name_of(static_cast<E>(i++));
    INFO(name);
    CHECK(name == w);
    CHECK(!name.empty());
    CHECK(name != "unknown");
    CHECK(seen.insert(name).second);  // distinct
  }
  CHECK(std::string(mxkit::name_of(static_cast<E>(mxkit::enum_count<E>))) == "unknown");
  CHECK(std::string(mxkit::name_of(static_cast<E>(255))) == "unknown");
}

// name_of is constexpr, and found by argument-dependent lookup in every namespace.
static_assert(std::string_view(name_of(mxkit::rounding::stochastic)) == "stochastic");
static_assert(std::string_view(name_of(mxkit::nn::operand_use::wgrad_dy)) == "wgrad dY");
static_assert(std::string_view(mxkit::nn::name_of(mxkit::nn::dtype::f64)) == "f64");
static_assert(std::string_view(name_of(static_cast<mxkit::mx_type>(6))) == "unknown");
static_assert(!mxkit::named_enum<mxkit::nn::recipes::hadamard_placement>);  // never printed: no names
static_assert(!mxkit::named_enum<int>);

}  // namespace

TEST_CASE("enum names: numerics enums", "[enum_names]") {
  check_names<mxkit::rounding>({"nearest_even", "nearest_away", "toward_zero", "stochastic"});
  check_names<mxkit::overflow>({"saturate", "propagate"});
  check_names<mxkit::mx_type>({"mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8"});
  check_names<mxkit::scale_rule>({"floor", "even", "round_up", "ceil"});
  check_names<mxkit::block_axis>({"rowwise", "columnwise"});
  check_names<mxkit::fp8_type>({"e4m3", "e5m2"});
  check_names<mxkit::scale_layout>({"row_major", "cublas_128x4", "aiter_shuffle"});
  check_names<mxkit::gemm_product>({"fprop", "dgrad", "wgrad"});
  for (const mxkit::mx_type t : mxkit::all_mx_types) CHECK(std::string(mxkit::name_of(t)) != "unknown");
  CHECK(std::size(mxkit::all_mx_types) == mxkit::enum_count<mxkit::mx_type>);
  CHECK(std::size(mxkit::all_scale_layouts) == mxkit::enum_count<mxkit::scale_layout>);
}

TEST_CASE("enum names: training enums", "[enum_names]") {
  using namespace mxkit::nn;
  check_names<dtype>({"f32", "f64", "bf16", "i32"});
  check_names<mem_tag>({"parameter", "gradient", "optimizer", "activation", "quantized_weight", "quantized_activation", "scaling"});
  check_names<amax_algorithm>({"max", "most_recent"});
  check_names<precision>({"native", "bf16", "fp8", "mx"});
  check_names<operand_use>({"fprop X", "fprop W", "dgrad dY", "dgrad W", "wgrad dY", "wgrad X", "adapter"});
  CHECK(mxkit::enum_count<mem_tag> == mem_tag_count);
  CHECK(mxkit::enum_count<operand_use> == operand_use_count);
}
