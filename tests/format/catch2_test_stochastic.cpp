// SPDX-License-Identifier: Apache-2.0
// Stochastic rounding for every element format, E8M0 and INT8: the documented rule (round up when
// random_bits < floor(fraction * 2^32), format/bits.hpp) exactly against the oracle, including
// the random words either side of each threshold; determinism; and unbiasedness: the mean of many
// draws with Philox bits is within 5 standard deviations of the input.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e2m3.hpp>
#include <mxkit/format/e3m2.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/format/e8m0.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/format/int8_fixed.hpp>
#include <mxkit/random/philox.hpp>

#include "../catch.hpp"
#include "spec_oracle.hpp"

namespace {
using mxkit::overflow;
using mxkit::rounding;

// Random words to try for input a: a few uniform ones plus those either side of the threshold.
std::vector<std::uint32_t> words_for(const oracle::table& t, long double a, std::mt19937& g) {
  std::vector<std::uint32_t> w = {0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu};
  for (int k = 0; k < 3; ++k) w.push_back(static_cast<std::uint32_t>(g()));
  const oracle::bracket b = oracle::find_bracket(t, a);
  if (!b.exact && !b.past) {
    const std::uint64_t thr = oracle::stochastic_threshold(b.lo.value, b.hi.value, a);
    for (const std::uint64_t d : {thr - 1, thr, thr + 1})
      if (d <= 0xFFFFFFFFu) w.push_back(static_cast<std::uint32_t>(d));
  }
  return w;
}

// Inputs around a value list scaled by 2^scale_exp: boundaries and random points between them.
std::vector<float> stochastic_inputs(const oracle::table& t, int scale_exp, std::size_t stride, std::uint64_t seed) {
  std::vector<float> xs = oracle::boundary_inputs(t, scale_exp, stride);
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::size_t i = 0; i < t.finite.size(); i += stride) {
    const long double lo = t.finite[i].value;
    const long double hi = i + 1 < t.finite.size() ? t.finite[i + 1].value : t.beyond.value;
    for (int k = 0; k < 3; ++k) {
      const float f = static_cast<float>(std::ldexp(lo + (hi - lo) * static_cast<long double>(u(g)), scale_exp));
      xs.push_back(f);
      xs.push_back(-f);
    }
  }
  // Far below the least step: the discarded fraction is the whole value, below 2^-9 of the step
  // from k = 10 on, where a 32-bit significand is shifted by 32 or more (format/bits.hpp).
  for (int k = 1; k <= 40; ++k)
    for (const long double m : {1.0L, 1.3125L, 1.9375L}) {
      const float f = static_cast<float>(std::ldexp(t.min_positive() * m, scale_exp - k));
      if (f != 0.0f) {
        xs.push_back(f);
        xs.push_back(-f);
      }
    }
  return xs;
}

// Mean of n stochastic roundings of x (random words from Philox) and the bound it must meet:
// each draw is lo or hi with P(hi) = p, so the mean has standard deviation (hi-lo)*sqrt(p(1-p)/n);
// the 2^-32 granularity of the threshold adds at most (hi-lo)*2^-32 of bias.
struct draw_stats {
  long double mean = 0;
  long double bound = 0;
  bool only_neighbours = true;
};
template <class Decode, class Round>
draw_stats draw(long double x, long double lo, long double hi, int n, std::uint64_t seed, Decode&& decode, Round&& round) {
  draw_stats s;
  long double sum = 0;
  for (int i = 0; i < n; ++i) {
    const long double v = decode(round(mxkit::random_bits(seed, 7, static_cast<std::uint64_t>(i))));
    if (v != lo && v != hi) s.only_neighbours = false;
    sum += v;
  }
  s.mean = sum / n;
  const long double p = (x - lo) / (hi - lo);
  s.bound = 5 * (hi - lo) * std::sqrt(p * (1 - p) / n) + (hi - lo) * std::ldexp(1.0L, -32);
  return s;
}

constexpr int draws = 20000;
constexpr double fractions[] = {0.03125, 0.25, 0.5, 0.6875, 0.96875};  // few bits: x stays exact

}  // namespace

TEST_CASE("stochastic: minifloats follow the threshold rule exactly", "[format][stochastic]") {
  oracle::for_each_format([](auto tag, const oracle::minifloat_spec& s) {
    using F = decltype(tag);
    const oracle::table& t = oracle::table_of(s);
    const std::size_t stride = t.finite.size() > 1024 ? 97 : 1;
    std::mt19937 g(1234);
    oracle::mismatch_log log;
    for (const int sc : {0, -3, 5, 100, -100}) {
      for (const float x : stochastic_inputs(t, sc, stride, 99 + static_cast<std::uint64_t>(sc + 200))) {
        if (!std::isfinite(x)) continue;
        const long double a = std::ldexp(std::fabs(static_cast<long double>(x)), -sc);
        for (const std::uint32_t w : words_for(t, a, g))
          for (const overflow o : oracle::all_overflows) {
            const std::uint32_t want = oracle::encode(s, t, x, sc, rounding::stochastic, o, w);
            const std::uint32_t got = F::from_float_scaled(x, sc, rounding::stochastic, o, w).bits();
            if (want == got) {
              log.pass();
              continue;
            }
            std::ostringstream m;
            m << s.name << " x=" << oracle::describe(x) << " scale_exp=" << sc << " bits=0x" << std::hex << w << " "
              << oracle::name_of(o) << ": expected 0x" << want << " got 0x" << got;
            log.fail(m.str());
          }
      }
    }
    INFO(log.summary());
    CHECK(log.count == 0);
    CHECK(log.checked > 1000);
    // from_float_stochastic is the same conversion with the defaults.
    for (const std::uint32_t w : {0u, 0x12345678u, 0xFFFFFFFFu})
      CHECK(F::from_float_stochastic(1.2345f, w).bits() == F::from_float(1.2345f, rounding::stochastic, overflow::saturate, w).bits());
  });
}

TEST_CASE("stochastic: e8m0 and int8 follow the threshold rule exactly", "[format][stochastic]") {
  std::mt19937 g(77);
  oracle::mismatch_log log;
  const oracle::table e8 = oracle::make_e8m0_table();
  for (const float x : stochastic_inputs(e8, 0, 1, 5)) {
    if (!(x > 0) || !std::isfinite(x) || x < std::ldexp(1.0f, -127)) continue;
    for (const std::uint32_t w : words_for(e8, x, g))
      for (const overflow o : oracle::all_overflows) {
        const std::uint8_t want = oracle::encode_e8m0(e8, x, rounding::stochastic, o, w);
        const std::uint8_t got = mxkit::e8m0::from_float(x, rounding::stochastic, o, w).bits();
        if (want == got) log.pass();
        else log.fail("e8m0 x=" + oracle::describe(x) + " bits=" + std::to_string(w) + " expected " + std::to_string(want) + " got " + std::to_string(got));
      }
  }
  const oracle::table i8 = oracle::make_int8_table();
  for (const int sc : {0, 4, -20}) {
    for (const float x : stochastic_inputs(i8, sc, 1, 6)) {
      const long double a = std::ldexp(std::fabs(static_cast<long double>(x)), -sc);
      for (const std::uint32_t w : words_for(i8, a, g)) {
        const std::uint8_t want = oracle::encode_int8(i8, x, sc, rounding::stochastic, w);
        const std::uint8_t got = mxkit::int8_fixed::from_float_scaled(x, sc, rounding::stochastic, overflow::saturate, w).bits();
        if (want == got) log.pass();
        else log.fail("int8 x=" + oracle::describe(x) + " bits=" + std::to_string(w) + " expected " + std::to_string(want) + " got " + std::to_string(got));
      }
    }
  }
  INFO(log.summary());
  CHECK(log.count == 0);
  CHECK(log.checked > 1000);
}

TEST_CASE("stochastic: the same random bits give the same code; exact values never move", "[format][stochastic]") {
  for (std::uint32_t i = 0; i < 1000; ++i) {
    const std::uint32_t w = mxkit::random_bits(42, 1, i);
    const float x = 0.1f + 0.01f * static_cast<float>(i);
    CHECK(mxkit::e2m1::from_float_stochastic(x, w).bits() == mxkit::e2m1::from_float_stochastic(x, w).bits());
    CHECK(mxkit::e4m3::from_float_stochastic(x, w).bits() == mxkit::e4m3::from_float_stochastic(x, w).bits());
    // Representable inputs are returned unchanged whatever the random word.
    CHECK(mxkit::e2m1::from_float_stochastic(1.5f, w).bits() == 0x3);
    CHECK(mxkit::e5m2::from_float_stochastic(-0.75f, w).bits() == mxkit::e5m2::from_float(-0.75f).bits());
    CHECK(mxkit::e8m0::from_float(0.25f, rounding::stochastic, overflow::saturate, w).bits() == 125);
    CHECK(mxkit::int8_fixed::from_float_stochastic(0.5f, w).bits() == 32);
  }
}

TEST_CASE("stochastic: unbiased within 5 sigma over Philox draws", "[format][stochastic]") {
  oracle::for_each_format([](auto tag, const oracle::minifloat_spec& s) {
    using F = decltype(tag);
    const oracle::table& t = oracle::table_of(s);
    const std::size_t n = t.finite.size();
    // Intervals: the first subnormal step, a middle one, the last below max.
    for (const std::size_t i : {std::size_t{0}, n / 2, n - 2}) {
      const long double lo = t.finite[i].value, hi = t.finite[i + 1].value;
      for (const double frac : fractions)
        for (const float sign : {1.0f, -1.0f}) {
          const long double x = lo + (hi - lo) * static_cast<long double>(frac);  // exact: frac has 5 bits
          const float xf = sign * static_cast<float>(x);
          REQUIRE(static_cast<long double>(std::fabs(xf)) == x);
          const draw_stats st = draw(
              x, lo, hi, draws, 1000 + i, [&](std::uint32_t c) { return std::fabs(static_cast<long double>(F::from_bits(static_cast<typename F::storage_type>(c)).to_float())); },
              [&](std::uint32_t w) { return F::from_float_stochastic(xf, w).bits(); });
          INFO(s.name << " x=" << oracle::describe(xf) << " mean=" << static_cast<double>(st.mean) << " bound=" << static_cast<double>(st.bound));
          CHECK(st.only_neighbours);
          CHECK(std::fabs(st.mean - x) <= st.bound);
        }
    }
  });
  // E8M0: between 2^k and 2^(k+1) the probability of 2^(k+1) is x/2^k - 1.
  for (const int k : {-127, -3, 0, 100}) {
    const long double lo = std::ldexp(1.0L, k), hi = 2 * lo;
    for (const double frac : fractions) {
      const long double x = lo + (hi - lo) * static_cast<long double>(frac);
      const float xf = static_cast<float>(x);
      const draw_stats st = draw(
          x, lo, hi, draws, 77, [](std::uint32_t c) { return oracle::decode_e8m0(static_cast<std::uint8_t>(c)).magnitude; },
          [&](std::uint32_t w) { return mxkit::e8m0::from_float(xf, rounding::stochastic, overflow::saturate, w).bits(); });
      INFO("e8m0 x=" << oracle::describe(xf) << " mean=" << static_cast<double>(st.mean));
      CHECK(st.only_neighbours);
      CHECK(std::fabs(st.mean - x) <= st.bound);
    }
  }
  // INT8: steps of 1/64, both signs.
  for (const int k : {0, 40, 126, -1, -126}) {
    for (const double frac : fractions) {
      const long double lo = std::ldexp(static_cast<long double>(k), -6), hi = lo + (k < 0 ? -1.0L : 1.0L) / 64;
      const long double x = lo + (hi - lo) * static_cast<long double>(frac);
      const float xf = static_cast<float>(x);
      const draw_stats st = draw(
          x, lo, hi, draws, 78, [](std::uint32_t c) { return oracle::decode_int8(static_cast<std::uint8_t>(c)); },
          [&](std::uint32_t w) { return mxkit::int8_fixed::from_float_stochastic(xf, w).bits(); });
      INFO("int8 x=" << oracle::describe(xf) << " mean=" << static_cast<double>(st.mean));
      CHECK(st.only_neighbours);
      CHECK(std::fabs(st.mean - x) <= std::fabs(st.bound));
    }
  }
}
