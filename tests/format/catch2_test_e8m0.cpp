// SPDX-License-Identifier: Apache-2.0
// E8M0, the MX shared scale (OCP MX v1.0 section 5.4.1): every code's value, from_exponent's
// clamping, and from_float under every rounding and overflow mode against the oracle.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <mxkit/format/e8m0.hpp>

#include "../catch.hpp"
#include "spec_oracle.hpp"

namespace {
using mxkit::e8m0;
using mxkit::overflow;
using mxkit::rounding;

void compare(const std::vector<float>& xs, oracle::mismatch_log& log) {
  static const oracle::table t = oracle::make_e8m0_table();
  for (const rounding r : oracle::all_roundings)
    for (const overflow o : oracle::all_overflows)
      for (const float x : xs) {
        const std::uint8_t want = oracle::encode_e8m0(t, x, r, o);
        const std::uint8_t got = e8m0::from_float(x, r, o).bits();
        if (want == got) {
          log.pass();
          continue;
        }
        std::ostringstream m;
        m << "x=" << oracle::describe(x) << " " << oracle::name_of(r) << "/" << oracle::name_of(o) << ": expected "
          << int{want} << " got " << int{got};
        log.fail(m.str());
      }
}
}  // namespace

TEST_CASE("e8m0: every code is 2^(b-127), 0xFF is NaN", "[format]") {
  for (int b = 0; b < 256; ++b) {
    const e8m0 s = e8m0::from_bits(static_cast<std::uint8_t>(b));
    INFO("code " << b);
    CHECK(s.bits() == b);
    const oracle::decoded d = oracle::decode_e8m0(static_cast<std::uint8_t>(b));
    if (d.nan) {
      CHECK(s.is_nan());
      CHECK(std::isnan(s.to_float()));
    } else {
      CHECK_FALSE(s.is_nan());
      CHECK(static_cast<long double>(s.to_float()) == d.magnitude);
      CHECK(s.exponent() == b - 127);
      // Re-encoding a scale gives it back under every mode.
      for (const rounding r : oracle::all_roundings)
        for (const overflow o : oracle::all_overflows) CHECK(e8m0::from_float(s.to_float(), r, o).bits() == b);
    }
  }
  CHECK(e8m0::from_bits(0).to_float() == std::ldexp(1.0f, -127));  // a float subnormal
  CHECK(e8m0::from_bits(254).to_float() == std::ldexp(1.0f, 127));
  CHECK(e8m0{}.bits() == 127);  // default: 1.0
  CHECK(e8m0::nan().bits() == 0xFF);
}

TEST_CASE("e8m0: from_exponent clamps to [-127, 127]", "[format]") {
  for (int e = -300; e <= 300; ++e) {
    const int c = e < -127 ? -127 : (e > 127 ? 127 : e);
    INFO("exponent " << e);
    CHECK(e8m0::from_exponent(e).bits() == c + 127);
    CHECK(e8m0::from_exponent(e).exponent() == c);
  }
}

TEST_CASE("e8m0: from_float special inputs and ties, checked by hand", "[format]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const rounding r : oracle::all_roundings) {
    INFO(oracle::name_of(r));
    CHECK(e8m0::from_float(nan, r).is_nan());
    CHECK(e8m0::from_float(-1.0f, r).is_nan());
    CHECK(e8m0::from_float(-inf, r).is_nan());
    CHECK(e8m0::from_float(0.0f, r).bits() == 0);
    CHECK(e8m0::from_float(-0.0f, r).bits() == 0);
    CHECK(e8m0::from_float(std::ldexp(1.0f, -149), r).bits() == 0);
    CHECK(e8m0::from_float(std::ldexp(1.9f, -128), r).bits() == 0);
    CHECK(e8m0::from_float(inf, r, overflow::saturate).bits() == 254);
    CHECK(e8m0::from_float(inf, r, overflow::propagate).is_nan());
    CHECK(e8m0::from_float(1.0f, r).bits() == 127);
  }
  // Ties at 1.5 * 2^k: nearest_even picks the even biased exponent.
  CHECK(e8m0::from_float(1.5f, rounding::nearest_even).bits() == 128);  // 127 odd, 128 even
  CHECK(e8m0::from_float(3.0f, rounding::nearest_even).bits() == 128);  // 128 even, 129 odd
  CHECK(e8m0::from_float(1.5f, rounding::nearest_away).bits() == 128);
  CHECK(e8m0::from_float(3.0f, rounding::nearest_away).bits() == 129);
  CHECK(e8m0::from_float(1.5f, rounding::toward_zero).bits() == 127);
  CHECK(e8m0::from_float(std::nextafter(3.0f, 4.0f), rounding::nearest_even).bits() == 129);
  CHECK(e8m0::from_float(std::nextafter(1.5f, 0.0f), rounding::nearest_away).bits() == 127);
  // Near the top: 1.5 * 2^127 ties to 2^127 (254 even); anything rounding to 2^128 overflows.
  const float top_tie = std::ldexp(1.5f, 127), fmax = std::numeric_limits<float>::max();
  CHECK(e8m0::from_float(top_tie, rounding::nearest_even, overflow::propagate).bits() == 254);
  CHECK(e8m0::from_float(top_tie, rounding::nearest_away, overflow::propagate).is_nan());
  CHECK(e8m0::from_float(top_tie, rounding::nearest_away, overflow::saturate).bits() == 254);
  CHECK(e8m0::from_float(fmax, rounding::nearest_even, overflow::propagate).is_nan());
  CHECK(e8m0::from_float(fmax, rounding::toward_zero, overflow::propagate).bits() == 254);
}

TEST_CASE("e8m0: from_float matches the oracle on every bf16/fp16 pattern, boundaries and random floats",
          "[format][exhaustive]") {
  static const oracle::table t = oracle::make_e8m0_table();
  oracle::mismatch_log log;
  compare(oracle::all_bfloat16_patterns(), log);
  compare(oracle::all_float16_patterns(), log);
  compare(oracle::boundary_inputs(t, 0), log);
  compare(oracle::random_inputs(0xE8, 50000, 50000, -150, 129), log);
  INFO(log.summary());
  CHECK(log.count == 0);
  CHECK(log.checked > 1000000);
}
