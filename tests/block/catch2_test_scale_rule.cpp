// SPDX-License-Identifier: Apache-2.0
// Shared-scale rules (block/scale_rule.hpp) for every MX element type against the oracle's
// long-double definitions, on amax values that sit on and next to every boundary a rule has:
// powers of two, max * 2^k, the `even` rule's rounding points, subnormals, FLT_MAX; plus random.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string_view>
#include <type_traits>
#include <vector>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

#include "../catch.hpp"
#include "block_oracle.hpp"

namespace {
using mxkit::scale_rule;

std::vector<float> amax_values(const oracle::element_model& m) {
  std::vector<float> v;
  const auto around = [&](long double x) {
    for (int k = -160; k <= 130; ++k) oracle::push_with_neighbours(v, std::ldexp(x, k));
  };
  around(1.0L);                                                            // powers of two
  around(m.info.max);                                                      // round_up's boundary
  around(1.0L + std::ldexp(1.0L, -(m.info.man_bits + 1)));                // even: first rounding point
  around(2.0L - std::ldexp(1.0L, -(m.info.man_bits + 1)));                // even: carry into the next binade
  around(1.5L);
  for (const float f : {std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                        std::numeric_limits<float>::denorm_min(), std::ldexp(0.75f, -126), std::ldexp(1.0f, -127)})
    oracle::push_with_neighbours(v, f);
  std::mt19937 g(7);
  std::uniform_int_distribution<std::uint32_t> finite(1u, 0x7F7FFFFFu), subnormal(1u, 0x7FFFFFu);
  for (int i = 0; i < 20000; ++i) v.push_back(oracle::float_from_bits(finite(g)));
  for (int i = 0; i < 2000; ++i) v.push_back(oracle::float_from_bits(subnormal(g)));
  std::vector<float> positive;
  for (const float f : v)
    if (f > 0 && std::isfinite(f)) positive.push_back(f);
  return positive;
}

// Defect 4: the natural call passes the amax as a float. It must mean that float, never its
// integer value taken as bits (6.5f once converted to the bits 6, a subnormal: exponent -127).
// A bare integer or a double does not compile; bits are spelled float_bits{b}.
template <class Element, class Amax>
concept shared_scale_takes = requires(Amax a) { mxkit::shared_scale<Element>(a, scale_rule::even); };
static_assert(mxkit::shared_scale<mxkit::e2m1>(6.5f, scale_rule::even).exponent() == 0);
static_assert(mxkit::shared_scale<mxkit::e2m1>(-6.5f, scale_rule::even).exponent() == 0);  // |amax|
static_assert(mxkit::shared_scale<mxkit::e2m1>(mxkit::float_bits{0x40D00000u}, scale_rule::even).exponent() == 0);
static_assert(shared_scale_takes<mxkit::e2m1, float> && shared_scale_takes<mxkit::e2m1, mxkit::float_bits>);
static_assert(!shared_scale_takes<mxkit::e2m1, std::uint32_t> && !shared_scale_takes<mxkit::e2m1, int> &&
              !shared_scale_takes<mxkit::e2m1, double>);
static_assert(!std::is_convertible_v<std::uint32_t, mxkit::float_bits> && !std::is_convertible_v<float, mxkit::float_bits>);
// The format descriptor, as quantize_block takes it, names its element type.
static_assert(mxkit::shared_scale<mxkit::mx_format<mxkit::mx_type::mxfp4>>(7.0f, scale_rule::even).bits() ==
              mxkit::shared_scale<mxkit::e2m1>(7.0f, scale_rule::even).bits());
static_assert(mxkit::shared_scale<mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>>(7.0f, scale_rule::floor).bits() ==
              mxkit::shared_scale<mxkit::e4m3>(7.0f, scale_rule::floor).bits());
static_assert(mxkit::shared_scale<mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>>(7.0f, scale_rule::floor).bits() !=
              mxkit::shared_scale<mxkit::e2m1>(7.0f, scale_rule::floor).bits());

template <class Fn>
void for_each_scale_type(Fn&& fn) {
  for (const mxkit::mx_type t : mxkit::all_mx_types)
    mxkit::visit_mx_type(t, [&](auto fmt) { fn(fmt, oracle::model_of(t)); });
}

}  // namespace

TEST_CASE("scale rules: every element type and rule matches the oracle on boundary and random amax", "[block]") {
  for_each_scale_type([](auto fmt, const oracle::element_model& m) {
    using E = typename decltype(fmt)::element_type;
    oracle::mismatch_log log;
    for (const float amax : amax_values(m))
      for (const scale_rule rule : oracle::all_scale_rules) {
        const std::uint8_t want = oracle::scale_byte(amax, rule, m.info);
        const std::uint8_t got = mxkit::shared_scale<E>(mxkit::float_bits{mxkit::abs_bits(amax)}, rule).bits();
        const std::uint8_t got_neg = mxkit::shared_scale<E>(-amax, rule).bits();  // amax is |x|
        if (want == got && want == got_neg) {
          log.pass();
          continue;
        }
        std::ostringstream s;
        s << m.info.name << " " << oracle::name_of(rule) << " amax=" << oracle::describe(amax) << ": expected " << int{want}
          << " got " << int{got} << " (negated: " << int{got_neg} << ")";
        log.fail(s.str());
      }
    INFO(log.summary());
    CHECK(log.count == 0);
    CHECK(log.checked > 10000);
  });
}

TEST_CASE("scale rules: the issue's FP4 table (6.5 -> 0/0/1/1, 7 -> 0/1/1/1)", "[block]") {
  using mxkit::e2m1;
  const auto exponent = [](float amax, scale_rule r) { return mxkit::shared_scale<e2m1>(amax, r).exponent(); };
  CHECK(exponent(6.5f, scale_rule::floor) == 0);
  CHECK(exponent(6.5f, scale_rule::even) == 0);
  CHECK(exponent(6.5f, scale_rule::round_up) == 1);
  CHECK(exponent(6.5f, scale_rule::ceil) == 1);
  CHECK(exponent(7.0f, scale_rule::floor) == 0);
  CHECK(exponent(7.0f, scale_rule::even) == 1);
  CHECK(exponent(7.0f, scale_rule::round_up) == 1);
  CHECK(exponent(7.0f, scale_rule::ceil) == 1);
  // At the boundaries: 6 fits under every rule but ceil; 4 is a power of two.
  CHECK(exponent(6.0f, scale_rule::round_up) == 0);
  CHECK(exponent(6.0f, scale_rule::ceil) == 1);
  CHECK(exponent(4.0f, scale_rule::ceil) == 0);
  CHECK(exponent(std::nextafter(6.0f, 7.0f), scale_rule::round_up) == 1);
  CHECK(exponent(std::nextafter(7.0f, 0.0f), scale_rule::even) == 0);
}

TEST_CASE("scale rules: a float amax is a value, bits are float_bits (defect 4)", "[block]") {
  // Run time too, on an amax the compiler cannot fold.
  volatile float amax = 6.5f;
  const float a = amax;
  CHECK(mxkit::shared_scale<mxkit::e2m1>(a, scale_rule::even).exponent() == 0);
  CHECK(mxkit::shared_scale<mxkit::e2m1>(a, scale_rule::round_up).exponent() == 1);
  CHECK(mxkit::shared_scale<mxkit::e2m1>(-a, scale_rule::floor).exponent() == 0);
  CHECK(mxkit::shared_scale<mxkit::e2m1>(a, scale_rule::even).bits() ==
        mxkit::shared_scale<mxkit::e2m1>(mxkit::float_bits{mxkit::abs_bits(a)}, scale_rule::even).bits());
  CHECK(mxkit::shared_scale<mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>::element_type>(a * 64.0f, scale_rule::floor).exponent() == 0);  // 416: 2^8 * 1.625
}

TEST_CASE("scale rules: round_up and ceil never clip, floor keeps amax/scale below 2^(emax+1)", "[block]") {
  for_each_scale_type([](auto fmt, const oracle::element_model& m) {
    using E = typename decltype(fmt)::element_type;
    oracle::mismatch_log log;
    for (const float amax : amax_values(m)) {
      const long double a = amax;
      for (const scale_rule rule : {scale_rule::round_up, scale_rule::ceil}) {
        const int e = mxkit::shared_scale<E>(amax, rule).exponent();
        if (e == 127) continue;  // clamped (only MXINT8 near FLT_MAX): elements may clip by design
        const bool fits = std::ldexp(a, -e) <= m.info.max;
        // round_up is the smallest such scale (unless clamped below).
        const bool smallest = rule != scale_rule::round_up || e == -127 || std::ldexp(a, -(e - 1)) > m.info.max;
        if (fits && smallest) log.pass();
        else log.fail(std::string(m.info.name) + " " + oracle::name_of(rule) + " amax=" + oracle::describe(amax) + " exponent " + std::to_string(e));
      }
      const int e = mxkit::shared_scale<E>(amax, scale_rule::floor).exponent();
      if (e > -127 && e < 127) {
        const long double y = std::ldexp(a, -e);
        if (y >= std::ldexp(1.0L, m.info.emax) && y < std::ldexp(1.0L, m.info.emax + 1)) log.pass();
        else log.fail(std::string(m.info.name) + " floor amax=" + oracle::describe(amax));
      }
    }
    INFO(log.summary());
    CHECK(log.count == 0);
  });
}

TEST_CASE("scale rules: zero, NaN and Inf amax; exponent clamping at +-127", "[block]") {
  for_each_scale_type([](auto fmt, const oracle::element_model& m) {
    using E = typename decltype(fmt)::element_type;
    INFO(m.info.name);
    for (const scale_rule rule : oracle::all_scale_rules) {
      INFO(oracle::name_of(rule));
      CHECK(mxkit::shared_scale<E>(0.0f, rule).bits() == 127);  // neutral 1.0
      CHECK(mxkit::shared_scale<E>(-0.0f, rule).bits() == 127);
      CHECK(mxkit::shared_scale<E>(std::numeric_limits<float>::infinity(), rule).bits() == 0xFF);
      CHECK(mxkit::shared_scale<E>(std::numeric_limits<float>::quiet_NaN(), rule).bits() == 0xFF);
      CHECK(mxkit::shared_scale<E>(mxkit::float_bits{0x7FFFFFFFu}, rule).bits() == 0xFF);  // NaN with a full payload
      // Below 2^-127 * 2^emax every rule clamps to the smallest scale.
      CHECK(mxkit::shared_scale<E>(std::numeric_limits<float>::denorm_min(), rule).bits() == 0);
      CHECK(mxkit::shared_scale<E>(std::ldexp(1.0f, -130), rule).bits() == 0);
    }
    // The largest float: floor(log2) = 127, so the floor exponent is 127 - emax, never clamped.
    CHECK(mxkit::shared_scale<E>(std::numeric_limits<float>::max(), scale_rule::floor).exponent() == 127 - m.info.emax);
  });
  // MXINT8 (emax 0) is the one format whose exponent can pass 127: FLT_MAX needs 2^128.
  CHECK(mxkit::shared_scale<mxkit::int8_fixed>(std::numeric_limits<float>::max(), scale_rule::ceil).bits() == 254);
  CHECK(mxkit::shared_scale<mxkit::int8_fixed>(std::numeric_limits<float>::max(), scale_rule::round_up).bits() == 254);
  CHECK(mxkit::shared_scale<mxkit::int8_fixed>(std::numeric_limits<float>::max(), scale_rule::even).bits() == 254);
}

TEST_CASE("mx formats: descriptors, names and the run-time dispatch", "[block]") {
  for (const mxkit::mx_type t : mxkit::all_mx_types) {
    INFO(mxkit::name_of(t));
    const mxkit::mx_type back = mxkit::visit_mx_type(t, [](auto fmt) { return decltype(fmt)::type; });
    CHECK(back == t);
    const int bits = mxkit::visit_mx_type(t, [](auto fmt) { return decltype(fmt)::storage_bits; });
    CHECK(bits == mxkit::storage_bits_of(t));
    CHECK(bits == mxkit::block_layout{mxkit::format_of(t), mxkit::block_axis::rowwise, 1, 1}.storage_bits());
    CHECK(bits == (t == mxkit::mx_type::mxfp4 ? 4 : 8));
    CHECK(mxkit::visit_mx_type(t, [](auto fmt) { return decltype(fmt)::block_size; }) == 32);
  }
  CHECK(std::string_view(mxkit::name_of(mxkit::mx_type::mxfp4)) == "mxfp4");
  CHECK(std::string_view(mxkit::name_of(mxkit::mx_type::mxfp8_e4m3)) == "mxfp8_e4m3");
  CHECK(std::string_view(mxkit::name_of(mxkit::mx_type::mxint8)) == "mxint8");
  STATIC_REQUIRE(mxkit::mx_format_descriptor<mxkit::mx_format<mxkit::mx_type::mxfp4>>);
  STATIC_REQUIRE(mxkit::mx_format_descriptor<mxkit::mx_format<mxkit::mx_type::mxint8>>);
  STATIC_REQUIRE_FALSE(mxkit::mx_format_descriptor<mxkit::e2m1>);
  STATIC_REQUIRE(std::is_same_v<mxkit::mx_format<mxkit::mx_type::mxfp6_e3m2>::element_type, mxkit::e3m2>);
}
