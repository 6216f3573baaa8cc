// SPDX-License-Identifier: Apache-2.0
// tests/catch.hpp itself: the v2 spellings the test suite relies on work with the Catch2 major
// this build found, including the portable substring matcher for exception messages.
#include <stdexcept>

#include <mxkit/error.hpp>

#include "../catch.hpp"

TEST_CASE("catch shim: contains matches exception messages", "[catch_shim]") {
  REQUIRE_THROWS_WITH(mxkit::detail::require(false, "bad rows ", 7), mxkit_test::contains("rows 7"));
  REQUIRE_THROWS_AS(mxkit::detail::require(false, "x"), std::invalid_argument);
  REQUIRE_NOTHROW(mxkit::detail::require(true, "unused"));
}

TEST_CASE("catch shim: approx and generators", "[catch_shim]") {
  const int n = GENERATE(1, 2, 3);
  SECTION("approx") { REQUIRE(n * 0.1 == mxkit_test::approx(n / 10.0)); }
  SECTION("CHECK_FALSE") { CHECK_FALSE(n == 0); }
}
