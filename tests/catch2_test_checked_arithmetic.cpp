// SPDX-License-Identifier: Apache-2.0
// The checked size arithmetic (checked_arithmetic.hpp) that every size computed from a user's
// shape goes through: exact results up to the limit, and a refusal that names both operands,
// their values and the limit instead of a wrapped product.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include <mxkit/checked_arithmetic.hpp>

#include "catch.hpp"

namespace {
using mxkit::detail::checked_add;
using mxkit::detail::checked_bytes;
using mxkit::detail::checked_mul;
using mxkit::detail::checked_round_up;
using mxkit_test::contains;
constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
constexpr std::size_t two32 = std::size_t{1} << 32;
}  // namespace

TEST_CASE("checked_mul: exact products up to the largest std::size_t, refusals above", "[checked]") {
  CHECK(checked_mul({"rows", 0}, {"cols", max}, "t") == 0);
  CHECK(checked_mul({"rows", max}, {"cols", 1}, "t") == max);
  CHECK(checked_mul({"rows", two32 - 1}, {"cols", two32 + 1}, "t") == max);  // 2^64 - 1 exactly
  CHECK(checked_mul({"rows", 3}, {"cols", 5}, "t") == 15);
  // 2^32 x 2^32 = 2^64 wraps to 0: refused, and the message carries the operands, not the 0.
  REQUIRE_THROWS_AS(checked_mul({"rows", two32}, {"cols", two32}, "where"), std::invalid_argument);
  REQUIRE_THROWS_WITH(checked_mul({"rows", two32}, {"cols", two32}, "quantize_fp8"),
                      contains("mxkit: quantize_fp8: rows 4294967296 x cols 4294967296 exceeds the largest std::size_t "
                               "18446744073709551615"));
  // The place can be given in parts, like every other check.
  REQUIRE_THROWS_WITH(checked_mul({"lines", max / 2}, {"blocks", 3}, "gemm: ", "A"),
                      contains("gemm: A: lines 9223372036854775807 x blocks 3 exceeds"));
}

TEST_CASE("checked_add and checked_round_up refuse sums that wrap", "[checked]") {
  CHECK(checked_add({"a", max - 1}, {"b", 1}, "t") == max);
  REQUIRE_THROWS_WITH(checked_add({"offset", max - 1}, {"count", 2}, "slice"),
                      contains("slice: offset 18446744073709551614 + count 2 exceeds the largest std::size_t"));
  CHECK(checked_round_up({"cols", 0}, 32, "t") == 0);
  CHECK(checked_round_up({"cols", 33}, 32, "t") == 64);
  CHECK(checked_round_up({"cols", max - 31}, 32, "t") == max - 31);  // already a multiple of 32
  // (n + 31) / 32 * 32 wraps to 0 for n = 2^64 - 3.
  REQUIRE_THROWS_WITH(checked_round_up({"cols", max - 2}, 32, "mx_tensor"),
                      contains("mx_tensor: cols 18446744073709551613 rounded up to a multiple of 32 exceeds the largest "
                               "std::size_t 18446744073709551615"));
  REQUIRE_THROWS_AS(checked_round_up({"cols", 5}, 0, "t"), std::invalid_argument);  // no multiple of 0
}

TEST_CASE("checked_bytes: a buffer must fit in one object (PTRDIFF_MAX bytes)", "[checked]") {
  constexpr std::size_t object = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  CHECK(checked_bytes({"elements", object / 4}, 4, "t") == object / 4 * 4);
  CHECK(checked_bytes({"elements", 0}, 8, "t") == 0);
  // Fits in std::size_t, but no object is that large: pointer arithmetic over it is undefined.
  REQUIRE_THROWS_WITH(checked_bytes({"elements", object / 4 + 1}, 4, "view"),
                      contains("view: elements 2305843009213693952 x 4 bytes exceeds the largest object size "
                               "9223372036854775807 bytes"));
  REQUIRE_THROWS_WITH(checked_bytes({"elements", max}, 2, "view"), contains("elements 18446744073709551615 x 2 bytes"));
}
