// SPDX-License-Identifier: Apache-2.0
// mxkit's headers are compiled into code built with -ffast-math (common in ML projects): the
// float fast paths of the nearest-even conversions must not depend on IEEE evaluation order
// that reassociation is allowed to change. The library headers below are compiled with
// fast-math (GCC: optimize pragma; clang: float_control) and compared with the oracle, which is
// compiled normally.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../catch.hpp"

#if defined(__clang__)
#pragma float_control(precise, off, push)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fast-math")
#endif
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e2m3.hpp>
#include <mxkit/format/e3m2.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/format/int8_fixed.hpp>
#if defined(__clang__)
#pragma float_control(pop)
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

#include "spec_oracle.hpp"

namespace {
using mxkit::overflow;
using mxkit::rounding;

template <class F>
void check(const oracle::minifloat_spec& s) {
  const oracle::table& t = oracle::table_of(s);
  // Finite inputs only: fast-math also assumes no NaN or Inf.
  std::vector<float> xs = oracle::boundary_inputs(t, 0);
  const std::vector<float> rnd = oracle::random_inputs(42, 0, 20000, std::ilogb(t.min_positive()) - 2, std::ilogb(t.max()) + 1);
  xs.insert(xs.end(), rnd.begin(), rnd.end());
  oracle::mismatch_log log;
  for (const float x : xs)
    for (const int sc : {0, 3, -2}) {
      const float y = std::ldexp(x, sc);
      if (!std::isfinite(y)) continue;
      const std::uint32_t want = oracle::encode(s, t, y, sc, rounding::nearest_even, overflow::saturate);
      const std::uint32_t got = F::from_float_scaled(y, sc, rounding::nearest_even, overflow::saturate).bits();
      want == got ? log.pass() : log.fail(std::string(s.name) + " x=" + oracle::describe(y) + " scale_exp=" + std::to_string(sc));
    }
  INFO(log.summary());
  CHECK(log.count == 0);
}
}  // namespace

TEST_CASE("fast-math: nearest-even conversions keep their rounding under reassociation", "[format]") {
  check<mxkit::e2m1>(oracle::e2m1_spec);
  check<mxkit::e2m3>(oracle::e2m3_spec);
  check<mxkit::e3m2>(oracle::e3m2_spec);
  check<mxkit::e4m3>(oracle::e4m3_spec);
  check<mxkit::e5m2>(oracle::e5m2_spec);
  check<mxkit::float16>(oracle::float16_spec);
  // INT8 and whole blocks through the same headers.
  const oracle::table i8 = oracle::make_int8_table();
  for (int k = -300; k <= 300; ++k) {
    const float x = static_cast<float>(k) / 128.0f;
    CHECK(mxkit::int8_fixed::from_float(x).bits() == oracle::encode_int8(i8, x, 0, rounding::nearest_even));
  }
  std::array<float, 32> b{};
  for (std::size_t i = 0; i < 32; ++i) b[i] = 0.25f * static_cast<float>(i) - 3.9f;  // amax 3.9: scale 2^-1
  const auto q = mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(b);
  const oracle::element_info info{"e2m1", 2, 1, 6.0L};
  REQUIRE(q.scale.bits() == oracle::scale_byte(3.9f, mxkit::scale_rule::floor, info));
  REQUIRE(q.scale.bits() == 126);
  for (std::size_t i = 0; i < 32; ++i)
    CHECK(q.elements[i].bits() == oracle::encode(oracle::e2m1_spec, oracle::table_of(oracle::e2m1_spec), b[i], -1,
                                                 rounding::nearest_even, overflow::saturate));
}

TEST_CASE("fast-math: the E2M1 block-element encoder keeps its single roundings", "[format]") {
  // Its three candidates are each one rounding of 2^23 + b + k * y; reassociation or a split
  // multiply-add must not change a code (ties and their float neighbours, both signs).
  const oracle::table& t = oracle::table_of(oracle::e2m1_spec);
  oracle::mismatch_log log;
  for (const int e : {-126, -40, -1, 0, 2, 77, 125})
    for (int k = 0; k <= 64; ++k)
      for (const float s : {1.0f, -1.0f}) {
        const float y = s * static_cast<float>(k) / 8.0f;
        for (const float v : {y, std::nextafter(y, -9.0f), std::nextafter(y, 9.0f)}) {
          const float x = std::ldexp(v, e);
          if (!(std::fabs(v) < 8.0f)) continue;
          const std::uint32_t got = mxkit::block_element_encoder<mxkit::e2m1>::encode(x, std::ldexp(1.0f, -e)).bits();
          got == oracle::encode(oracle::e2m1_spec, t, x, e, rounding::nearest_even, overflow::saturate)
              ? log.pass()
              : log.fail("x=" + oracle::describe(x) + " E=" + std::to_string(e));
        }
      }
  INFO(log.summary());
  CHECK(log.count == 0);
}
