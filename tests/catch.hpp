// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one Catch2 include for mxkit tests: the v2 API, whether the build found Catch2 v2 (Debian
// 2.13) or v3. tests/CMakeLists.txt defines MXKIT_CATCH2_MAJOR from the package it linked, so a
// machine with both versions' headers installed still includes the matching one.
#include <string>

#if defined(MXKIT_CATCH2_MAJOR)
#define MXKIT_CATCH2_V3 (MXKIT_CATCH2_MAJOR >= 3)
#elif __has_include(<catch2/catch_all.hpp>)
#define MXKIT_CATCH2_V3 1
#else
#define MXKIT_CATCH2_V3 0
#endif

#if MXKIT_CATCH2_V3
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

namespace mxkit_test {
// Floating-point comparison: v2 names the type Catch::Detail::Approx (Catch::Approx there is the
// vector matcher), v3 Catch::Approx.
#if MXKIT_CATCH2_V3
using approx = Catch::Approx;
#else
using approx = Catch::Detail::Approx;
#endif

// Substring matcher for REQUIRE_THROWS_WITH: v2 spells it Contains, v3 ContainsSubstring (v3's
// Contains is the range matcher).
inline auto contains(const std::string& s) {
#if MXKIT_CATCH2_V3
  return Catch::Matchers::ContainsSubstring(s);
#else
  return Catch::Matchers::Contains(s);
#endif
}
}  // namespace mxkit_test
