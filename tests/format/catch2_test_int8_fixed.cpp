// SPDX-License-Identifier: Apache-2.0
// The MXINT8 element: two's complement with an implicit 2^-6 (OCP MX v1.0 section 5.3), symmetric
// saturation, no -0, NaN to +max. Every code, hand-checked ties, and from_float_scaled under every
// mode at every scale exponent against the oracle.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <mxkit/format/int8_fixed.hpp>

#include "../catch.hpp"
#include "spec_oracle.hpp"

namespace {
using mxkit::int8_fixed;
using mxkit::overflow;
using mxkit::rounding;

const oracle::table& int8_table() {
  static const oracle::table t = oracle::make_int8_table();
  return t;
}

void compare(const std::vector<float>& xs, int scale_exp, oracle::mismatch_log& log) {
  for (const rounding r : oracle::all_roundings)
    for (const overflow o : oracle::all_overflows)
      for (const float x : xs) {
        const std::uint8_t want = oracle::encode_int8(int8_table(), x, scale_exp, r);
        const std::uint8_t got = int8_fixed::from_float_scaled(x, scale_exp, r, o).bits();
        if (want == got) {
          log.pass();
          continue;
        }
        std::ostringstream m;
        m << "x=" << oracle::describe(x) << " scale_exp=" << scale_exp << " " << oracle::name_of(r) << "/"
          << oracle::name_of(o) << ": expected " << int{want} << " got " << int{got};
        log.fail(m.str());
      }
}
}  // namespace

TEST_CASE("int8_fixed: every code decodes to code/64; re-encoding is the identity except -128", "[format]") {
  for (int b = 0; b < 256; ++b) {
    INFO("code " << b);
    const int8_fixed f = int8_fixed::from_bits(static_cast<std::uint8_t>(b));
    CHECK(static_cast<long double>(f.to_float()) == oracle::decode_int8(static_cast<std::uint8_t>(b)));
    CHECK_FALSE(f.is_nan());
    CHECK_FALSE(f.is_inf());
    for (const rounding r : oracle::all_roundings)
      CHECK(int8_fixed::from_float(f.to_float(), r).bits() == (b == 0x80 ? 0x81 : b));  // -2 saturates to -127/64
  }
  CHECK(int8_fixed::from_bits(0x80).to_float() == -2.0f);
  CHECK(int8_fixed::max().bits() == 127);
  CHECK(int8_fixed::max().to_float() == 1.984375f);
  CHECK(int8_fixed::lowest().bits() == 0x81);
  CHECK(int8_fixed::emax == 0);  // OCP MX Table 1
}

TEST_CASE("int8_fixed: ties, saturation and special inputs, checked by hand", "[format]") {
  struct tie_case {
    float x;
    int even, away, zero;  // expected signed codes
  };
  const tie_case cases[] = {
      {1.0f / 128, 0, 1, 0},     {3.0f / 128, 2, 2, 1},      {5.0f / 128, 2, 3, 2},   {-3.0f / 128, -2, -2, -1},
      {-1.0f / 128, 0, -1, 0},   {1.0f, 64, 64, 64},         {127.5f / 64, 127, 127, 127},
      {2.0f, 127, 127, 127},     {-2.0f, -127, -127, -127},  {1e30f, 127, 127, 127},  {-1e-30f, 0, 0, 0},
      {std::nextafter(1.0f / 128, 1.0f), 1, 1, 0}};
  for (const tie_case& c : cases) {
    INFO("x=" << oracle::describe(c.x));
    CHECK(int8_fixed::from_float(c.x, rounding::nearest_even).bits() == static_cast<std::uint8_t>(c.even));
    CHECK(int8_fixed::from_float(c.x, rounding::nearest_away).bits() == static_cast<std::uint8_t>(c.away));
    CHECK(int8_fixed::from_float(c.x, rounding::toward_zero).bits() == static_cast<std::uint8_t>(c.zero));
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const overflow o : oracle::all_overflows) {
    CHECK(int8_fixed::from_float(nan, rounding::nearest_even, o).bits() == 127);
    CHECK(int8_fixed::from_float(-nan, rounding::nearest_even, o).bits() == 127);
    CHECK(int8_fixed::from_float(inf, rounding::nearest_even, o).bits() == 127);
    CHECK(int8_fixed::from_float(-inf, rounding::nearest_even, o).bits() == 0x81);
    CHECK(int8_fixed::from_float(-0.0f, rounding::nearest_even, o).bits() == 0);  // no -0 code
  }
}

TEST_CASE("int8_fixed: every bf16/fp16 pattern, boundaries and random floats match the oracle", "[format][exhaustive]") {
  oracle::mismatch_log log;
  compare(oracle::all_bfloat16_patterns(), 0, log);
  compare(oracle::all_float16_patterns(), 0, log);
  compare(oracle::boundary_inputs(int8_table(), 0), 0, log);
  compare(oracle::random_inputs(0x18, 20000, 40000, -10, 3), 0, log);
  INFO(log.summary());
  CHECK(log.count == 0);
  CHECK(log.checked > 1000000);
}

TEST_CASE("int8_fixed: from_float_scaled at every scale exponent matches the oracle", "[format]") {
  oracle::mismatch_log log;
  for (int sc = -127; sc <= 127; ++sc) {
    std::vector<float> xs = oracle::boundary_inputs(int8_table(), sc);
    const std::vector<float> rnd = oracle::random_inputs(0x1800 + static_cast<std::uint64_t>(sc + 127), 64, 256, sc - 10, sc + 3);
    xs.insert(xs.end(), rnd.begin(), rnd.end());
    compare(xs, sc, log);
  }
  INFO(log.summary());
  CHECK(log.count == 0);
}
