// SPDX-License-Identifier: Apache-2.0
// format/float_arithmetic.hpp: fp32_mul and fp32_div, computed in integers, give the bits of the
// host's IEEE float * and / (this file is compiled without fast-math; the CPU rounds to nearest
// even with subnormals) on every class of operand: random bit patterns, subnormals, operands whose
// result overflows or underflows, exact quotients and products, and the halfway cases of the
// last bit. They are the arithmetic of NVFP4's scales (block/nvfp4_scale.hpp).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <mxkit/format/float_arithmetic.hpp>

#include "../catch.hpp"
#include "spec_oracle.hpp"

namespace float_arithmetic_test {

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// Finite operands: random bit patterns (every binade, subnormals included), small integers and
// their quotients' neighbours, powers of two at the ends of the range.
std::vector<float> operands(std::uint64_t seed, std::size_t n) {
  std::vector<float> v;
  std::mt19937_64 g(seed);
  while (v.size() < n) {
    const float x = oracle::float_from_bits(static_cast<std::uint32_t>(g()) & 0x7FFFFFFFu);
    if (std::isfinite(x)) v.push_back((g() & 1) ? -x : x);
  }
  for (int i = 1; i <= 64; ++i) {
    v.push_back(static_cast<float>(i));
    v.push_back(1.0f / static_cast<float>(i));
    v.push_back(std::nextafter(static_cast<float>(i), 0.0f));
  }
  for (const float x : {0.0f, -0.0f, std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                        std::numeric_limits<float>::max(), 0x1p-127f, 0x1.8p-140f, 2688.0f, 448.0f, 6.0f})
    v.push_back(x);
  return v;
}

}  // namespace float_arithmetic_test

TEST_CASE("fp32_mul and fp32_div: the host's IEEE bits on random and special operands", "[float_arithmetic]") {
  using namespace float_arithmetic_test;
  const std::vector<float> a = operands(1, 3000), b = operands(2, 1000);
  oracle::mismatch_log mul, div;
  for (const float x : a)
    for (const float y : b) {
      const float p = x * y;
      if (bits(mxkit::fp32_mul(x, y)) == bits(p)) mul.pass();
      else mul.fail(oracle::describe(x) + " * " + oracle::describe(y) + " = " + oracle::describe(p));
      if (y == 0.0f) continue;
      const float q = x / y;
      if (bits(mxkit::fp32_div(x, y)) == bits(q)) div.pass();
      else div.fail(oracle::describe(x) + " / " + oracle::describe(y) + " = " + oracle::describe(q));
    }
  INFO(mul.summary());
  CHECK(mul.count == 0);
  INFO(div.summary());
  CHECK(div.count == 0);
  CHECK(mul.checked > 2000000);
}

TEST_CASE("fp32_div: ties and near-ties of the last bit, and results that leave the range", "[float_arithmetic]") {
  using namespace float_arithmetic_test;
  oracle::mismatch_log log;
  std::mt19937_64 g(3);
  // q = x / y with x = (m + 1/2 ulp) * y rounded: quotients next to the midpoint of two floats.
  for (int i = 0; i < 200000; ++i) {
    const float y = oracle::float_from_bits((static_cast<std::uint32_t>(g()) & 0x007FFFFFu) | (static_cast<std::uint32_t>(100 + g() % 60) << 23));
    const float m = oracle::float_from_bits((static_cast<std::uint32_t>(g()) & 0x007FFFFFu) | (static_cast<std::uint32_t>(100 + g() % 60) << 23));
    const long double mid = (static_cast<long double>(m) + static_cast<long double>(std::nextafter(m, 1e30f))) / 2;
    const float x0 = static_cast<float>(mid * y);
    for (const float x : {x0, std::nextafter(x0, 0.0f), std::nextafter(x0, 1e30f)}) {
      const float q = x / y;
      if (bits(mxkit::fp32_div(x, y)) == bits(q)) log.pass();
      else log.fail(oracle::describe(x) + " / " + oracle::describe(y));
    }
  }
  // Overflow to Inf, underflow into the subnormals and to zero.
  for (const float x : {std::numeric_limits<float>::max(), 1e30f, 3.0f, 1e-30f, 0x1p-126f, 0x1p-149f})
    for (const float y : {0x1p-149f, 0x1p-127f, 1e-30f, 3.0f, 1e30f, std::numeric_limits<float>::max()}) {
      const float q = x / y;
      if (bits(mxkit::fp32_div(x, y)) == bits(q)) log.pass();
      else log.fail(oracle::describe(x) + " / " + oracle::describe(y));
      const float p = x * y;
      if (bits(mxkit::fp32_mul(x, y)) == bits(p)) log.pass();
      else log.fail(oracle::describe(x) + " * " + oracle::describe(y));
    }
  INFO(log.summary());
  CHECK(log.count == 0);
  STATIC_REQUIRE(mxkit::fp32_div(1.0f, 6.0f) == 0x1.555556p-3f);  // constant evaluation: the same bits
  STATIC_REQUIRE(mxkit::fp32_mul(0x1p-100f, 0x1p-40f) == 0x1p-140f);
}
