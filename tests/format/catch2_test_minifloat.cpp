// SPDX-License-Identifier: Apache-2.0
// Element formats built on minifloat<>: E2M1, E2M3, E3M2, E4M3, E5M2, binary16, bfloat16.
// Decoding of every code, the spec constants, the documented special-value policy, hand-checked
// ties, and every rounding/overflow mode against the independent oracle in spec_oracle.hpp on
// every bf16 and fp16 bit pattern, the rounding boundaries, random floats and every scale exponent.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e2m3.hpp>
#include <mxkit/format/e3m2.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/format/float16.hpp>

#include "../catch.hpp"
#include "spec_oracle.hpp"

namespace {

using mxkit::overflow;
using mxkit::rounding;

template <class F>
std::uint32_t lib_code(float x, int scale_exp, rounding r, overflow o) {
  return F::from_float_scaled(x, scale_exp, r, o).bits();
}

// Compares the library with the oracle on every input under every rounding and overflow mode.
template <class F>
void compare_with_oracle(const oracle::minifloat_spec& s, const std::vector<float>& xs, int scale_exp,
                         oracle::mismatch_log& log) {
  const oracle::table& t = oracle::table_of(s);
  for (const rounding r : oracle::all_roundings)
    for (const overflow o : oracle::all_overflows)
      for (const float x : xs) {
        const std::uint32_t want = oracle::encode(s, t, x, scale_exp, r, o);
        const std::uint32_t got = lib_code<F>(x, scale_exp, r, o);
        if (want == got) {
          log.pass();
          continue;
        }
        std::ostringstream m;
        m << s.name << " x=" << oracle::describe(x) << " scale_exp=" << scale_exp << " " << oracle::name_of(r) << "/"
          << oracle::name_of(o) << ": expected 0x" << std::hex << want << " got 0x" << got;
        log.fail(m.str());
      }
}

long double as_ld(float f) { return static_cast<long double>(f); }

}  // namespace

TEST_CASE("minifloat: spec constants of every format", "[format]") {
  // OCP MX v1.0 Table 1 and section 5.3; OCP 8-bit FP v1.0 Table 1; IEEE 754 binary16; bfloat16.
  struct expected {
    long double max, min_normal, min_subnormal;
    int emax;
  };
  const auto check = [](auto tag, const oracle::minifloat_spec& s, expected e) {
    using F = decltype(tag);
    INFO(s.name);
    CHECK(as_ld(F::max().to_float()) == e.max);
    CHECK(as_ld(F::lowest().to_float()) == -e.max);
    CHECK(as_ld(F::min_normal().to_float()) == e.min_normal);
    CHECK(as_ld(F::min_subnormal().to_float()) == e.min_subnormal);
    CHECK(F::emax == e.emax);
    CHECK(F::emax == s.emax_elem);
    CHECK(F::bits_count == 1 + s.exp_bits + s.man_bits);
    // The oracle's own value list agrees with the published numbers.
    const oracle::table& t = oracle::table_of(s);
    CHECK(t.max() == e.max);
    CHECK(t.min_positive() == e.min_subnormal);
  };
  check(mxkit::e2m1{}, oracle::e2m1_spec, {6.0L, 1.0L, 0.5L, 2});
  check(mxkit::e2m3{}, oracle::e2m3_spec, {7.5L, 1.0L, 0.125L, 2});
  check(mxkit::e3m2{}, oracle::e3m2_spec, {28.0L, 0.25L, 0.0625L, 4});
  check(mxkit::e4m3{}, oracle::e4m3_spec, {448.0L, std::ldexp(1.0L, -6), std::ldexp(1.0L, -9), 8});
  check(mxkit::e5m2{}, oracle::e5m2_spec, {57344.0L, std::ldexp(1.0L, -14), std::ldexp(1.0L, -16), 15});
  check(mxkit::float16{}, oracle::float16_spec, {65504.0L, std::ldexp(1.0L, -14), std::ldexp(1.0L, -24), 15});
  check(mxkit::bfloat16{}, oracle::bfloat16_spec,
        {std::ldexp(255.0L, 120), std::ldexp(1.0L, -126), std::ldexp(1.0L, -133), 127});

  // Special codes: E4M3 NaN S.1111.111 and no Inf; E5M2 Inf S.11111.00, NaN S.11111.{01,10,11}.
  CHECK(mxkit::e4m3::quiet_nan().bits() == 0x7F);
  CHECK(mxkit::e4m3::max().bits() == 0x7E);
  CHECK(mxkit::e5m2::quiet_nan().bits() == 0x7E);
  CHECK(mxkit::e5m2::infinity().bits() == 0x7C);
  CHECK(mxkit::e5m2::max().bits() == 0x7B);
  CHECK(mxkit::float16::infinity().bits() == 0x7C00);
  CHECK(mxkit::bfloat16::infinity().bits() == 0x7F80);
  CHECK(mxkit::e2m1::max().bits() == 0x7);
  CHECK(mxkit::e2m3::max().bits() == 0x1F);
  CHECK(mxkit::e3m2::max().bits() == 0x1F);
  for (std::uint32_t m = 1; m < 4; ++m) CHECK(mxkit::e5m2::from_bits(static_cast<std::uint8_t>(0x7C | m)).is_nan());
  CHECK_FALSE(mxkit::e5m2::infinity().is_nan());
  CHECK(mxkit::e5m2::infinity().is_inf());
  CHECK_FALSE(mxkit::e4m3::from_bits(0x7E).is_nan());
  CHECK(mxkit::e4m3::from_bits(0xFF).is_nan());
  CHECK_FALSE(mxkit::e4m3::from_bits(0x78).is_inf());  // S.1111.000 is 256, not Inf
  CHECK(mxkit::e4m3::from_bits(0x78).to_float() == 256.0f);
}

TEST_CASE("minifloat: every code decodes to its spec value and re-encodes to itself", "[format]") {
  oracle::for_each_format([](auto tag, const oracle::minifloat_spec& s) {
    using F = decltype(tag);
    oracle::mismatch_log decode_log, round_trip_log;
    for (std::uint32_t code = 0; code < oracle::code_count(s); ++code) {
      const F f = F::from_bits(static_cast<typename F::storage_type>(code));
      const float v = f.to_float();
      const oracle::decoded d = oracle::decode(s, code);
      std::ostringstream what;
      what << s.name << " code 0x" << std::hex << code << " decodes to " << oracle::describe(v);
      // Decoding: the exact spec value with the code's sign; NaN codes give a NaN of that sign.
      const bool ok = d.nan ? std::isnan(v) && f.is_nan() && !f.is_inf() && std::signbit(v) == d.negative
                            : !std::isnan(v) && !f.is_nan() && f.is_inf() == std::isinf(d.magnitude) &&
                                  as_ld(v) == (d.negative ? -d.magnitude : d.magnitude) && std::signbit(v) == d.negative;
      ok ? decode_log.pass() : decode_log.fail(what.str());
      // Re-encoding under every rounding mode: the same code; NaN codes give the canonical NaN
      // with their sign; Inf stays Inf under propagate and becomes max under saturate.
      for (const rounding r : oracle::all_roundings)
        for (const overflow o : oracle::all_overflows) {
          std::uint32_t want = code;
          if (d.nan) want = (d.negative ? oracle::sign_bit(s) : 0u) | s.canonical_nan;
          else if (std::isinf(d.magnitude) && o == overflow::saturate) want = (code & oracle::sign_bit(s)) | F::max().bits();
          const std::uint32_t got = F::from_float(v, r, o).bits();
          if (got == want) round_trip_log.pass();
          else {
            std::ostringstream m;
            m << what.str() << " re-encodes to 0x" << std::hex << got << " under " << oracle::name_of(r) << "/" << oracle::name_of(o);
            round_trip_log.fail(m.str());
          }
        }
    }
    INFO(decode_log.summary());
    CHECK(decode_log.count == 0);
    INFO(round_trip_log.summary());
    CHECK(round_trip_log.count == 0);
    CHECK(decode_log.checked == oracle::code_count(s));
  });
}

TEST_CASE("minifloat: from_bits keeps only the format's bits", "[format]") {
  CHECK(mxkit::e2m1::from_bits(0xF3).bits() == 0x3);
  CHECK(mxkit::e2m1::from_bits(0x1A).bits() == 0xA);
  CHECK(mxkit::e2m3::from_bits(0xFF).bits() == 0x3F);
  CHECK(mxkit::e3m2::from_bits(0xC1).bits() == 0x01);
  CHECK(mxkit::e4m3::from_bits(0xFF).bits() == 0xFF);
}

TEST_CASE("minifloat: NaN, Inf and -0 follow the documented policy", "[format]") {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan = oracle::float_from_bits(0x7F800001u);  // signalling, smallest payload
  const float inf = std::numeric_limits<float>::infinity();
  for (const rounding r : oracle::all_roundings) {
    INFO(oracle::name_of(r));
    // NaN keeps its sign where the format has NaN; FP4/FP6 give +max whatever the sign.
    CHECK(mxkit::e4m3::from_float(qnan, r).bits() == 0x7F);
    CHECK(mxkit::e4m3::from_float(-qnan, r).bits() == 0xFF);
    CHECK(mxkit::e4m3::from_float(snan, r).bits() == 0x7F);
    CHECK(mxkit::e5m2::from_float(qnan, r).bits() == 0x7E);
    CHECK(mxkit::e5m2::from_float(-snan, r).bits() == 0xFE);
    CHECK(mxkit::float16::from_float(-qnan, r).bits() == 0xFE00);
    CHECK(mxkit::bfloat16::from_float(snan, r).bits() == 0x7FC0);
    CHECK(mxkit::e2m1::from_float(qnan, r).bits() == 0x7);
    CHECK(mxkit::e2m1::from_float(-qnan, r).bits() == 0x7);
    CHECK(mxkit::e2m3::from_float(-qnan, r).bits() == 0x1F);
    CHECK(mxkit::e3m2::from_float(-snan, r).bits() == 0x1F);
    // Inf: saturate -> +-max; propagate -> +-Inf (E5M2), NaN with the sign (E4M3), +-max (FP4/6).
    CHECK(mxkit::e4m3::from_float(inf, r, overflow::saturate).bits() == 0x7E);
    CHECK(mxkit::e4m3::from_float(-inf, r, overflow::saturate).bits() == 0xFE);
    CHECK(mxkit::e4m3::from_float(inf, r, overflow::propagate).bits() == 0x7F);
    CHECK(mxkit::e4m3::from_float(-inf, r, overflow::propagate).bits() == 0xFF);
    CHECK(mxkit::e5m2::from_float(inf, r, overflow::saturate).bits() == 0x7B);
    CHECK(mxkit::e5m2::from_float(-inf, r, overflow::propagate).bits() == 0xFC);
    CHECK(mxkit::e2m1::from_float(-inf, r, overflow::propagate).bits() == 0xF);
    CHECK(mxkit::e3m2::from_float(inf, r, overflow::propagate).bits() == 0x1F);
    CHECK(mxkit::bfloat16::from_float(-inf, r, overflow::propagate).bits() == 0xFF80);
    // -0 stays -0; a negative value that rounds to zero is -0.
    CHECK(mxkit::e2m1::from_float(-0.0f, r).bits() == 0x8);
    CHECK(mxkit::e4m3::from_float(-0.0f, r).bits() == 0x80);
    CHECK(mxkit::e5m2::from_float(-1e-30f, r).bits() == 0x80);
    CHECK(mxkit::e2m1::from_float(-0.1f, r).bits() == 0x8);
    CHECK(mxkit::e2m1::from_float(0.0f, r).bits() == 0x0);
    CHECK(std::signbit(mxkit::e4m3::from_bits(0x80).to_float()));
  }
  // Finite overflow: propagate gives Inf/NaN except under toward_zero (IEEE 754 section 7.4).
  CHECK(mxkit::e5m2::from_float(1e6f, rounding::nearest_even, overflow::propagate).bits() == 0x7C);
  CHECK(mxkit::e5m2::from_float(1e6f, rounding::toward_zero, overflow::propagate).bits() == 0x7B);
  CHECK(mxkit::e4m3::from_float(-1e6f, rounding::nearest_away, overflow::propagate).bits() == 0xFF);
  CHECK(mxkit::e4m3::from_float(-1e6f, rounding::toward_zero, overflow::propagate).bits() == 0xFE);
  CHECK(mxkit::e4m3::from_float(1e6f, rounding::nearest_even, overflow::saturate).bits() == 0x7E);
}

TEST_CASE("minifloat: ties and their neighbours, checked by hand", "[format]") {
  struct tie_case {
    float x;
    std::uint32_t even, away, zero;  // expected codes under saturate
  };
  const auto run = [](auto tag, const char* name, std::initializer_list<tie_case> cases) {
    using F = decltype(tag);
    for (const tie_case& c : cases) {
      INFO(name << " x=" << oracle::describe(c.x));
      CHECK(F::from_float(c.x, rounding::nearest_even).bits() == c.even);
      CHECK(F::from_float(c.x, rounding::nearest_away).bits() == c.away);
      CHECK(F::from_float(c.x, rounding::toward_zero).bits() == c.zero);
    }
  };
  const float up = std::numeric_limits<float>::infinity();
  // E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 are codes 0..7.
  run(mxkit::e2m1{}, "e2m1",
      {{0.25f, 0, 1, 0},   {std::nextafter(0.25f, up), 1, 1, 0},
       {std::nextafter(0.25f, 0.0f), 0, 0, 0},
       {0.75f, 2, 2, 1},   {1.25f, 2, 3, 2},   {std::nextafter(1.25f, up), 3, 3, 2},
       {1.75f, 4, 4, 3},   {2.5f, 4, 5, 4},    {3.5f, 6, 6, 5},
       {5.0f, 6, 7, 6},    {std::nextafter(5.0f, 0.0f), 6, 6, 6},
       {7.0f, 7, 7, 7},    {100.0f, 7, 7, 7},  {-1.25f, 0xA, 0xB, 0xA},
       {-5.0f, 0xE, 0xF, 0xE}, {-0.25f, 0x8, 0x9, 0x8}});
  // E4M3: 448 = 1.110b*2^8 is max and 480 (mantissa 111) would be odd: 464 ties to 448.
  run(mxkit::e4m3{}, "e4m3",
      {{464.0f, 0x7E, 0x7E, 0x7E},
       {std::ldexp(1.0f, -10), 0x00, 0x01, 0x00},        // half the smallest subnormal
       {3 * std::ldexp(1.0f, -10), 0x02, 0x02, 0x01},    // 1.5 subnormal steps
       {std::ldexp(17.0f, -10), 0x08, 0x09, 0x08},       // (1 + 1/16) * 2^-6: tie at min normal
       {17.0f, 0x58, 0x59, 0x58},                        // tie 16 (S.1011.000) / 18
       {19.0f, 0x5A, 0x5A, 0x59}});                      // tie 18 (odd) / 20 (even)
  // E5M2: max 57344 = 1.11b*2^15; the tie 61440 goes to 2^16 (even): overflow.
  run(mxkit::e5m2{}, "e5m2",
      {{61440.0f, 0x7B, 0x7B, 0x7B},
       {std::nextafter(61440.0f, 0.0f), 0x7B, 0x7B, 0x7B},
       {std::ldexp(1.0f, -17), 0x00, 0x01, 0x00},
       {2.5f, 0x41, 0x41, 0x41},                         // exact: 1.01b*2
       {2.25f, 0x40, 0x41, 0x40}});
  run(mxkit::float16{}, "float16",
      {{1.0f + std::ldexp(1.0f, -11), 0x3C00, 0x3C01, 0x3C00},
       {1.0f + 3 * std::ldexp(1.0f, -11), 0x3C02, 0x3C02, 0x3C01},
       {65520.0f, 0x7BFF, 0x7BFF, 0x7BFF},
       {std::ldexp(1.0f, -25), 0x0000, 0x0001, 0x0000}});
  run(mxkit::bfloat16{}, "bfloat16",
      {{1.0f + std::ldexp(1.0f, -8), 0x3F80, 0x3F81, 0x3F80},
       {1.0f + 3 * std::ldexp(1.0f, -8), 0x3F82, 0x3F82, 0x3F81},
       {std::numeric_limits<float>::max(), 0x7F7F, 0x7F7F, 0x7F7F},
       {-std::ldexp(1.0f, -134), 0x8000, 0x8001, 0x8000}});
  // Ties that carry past max overflow under propagate (except toward_zero).
  CHECK(mxkit::e5m2::from_float(61440.0f, rounding::nearest_even, overflow::propagate).bits() == 0x7C);
  CHECK(mxkit::e4m3::from_float(464.0f, rounding::nearest_even, overflow::propagate).bits() == 0x7E);
  CHECK(mxkit::e4m3::from_float(464.0f, rounding::nearest_away, overflow::propagate).bits() == 0x7F);
  CHECK(mxkit::float16::from_float(65520.0f, rounding::nearest_even, overflow::propagate).bits() == 0x7C00);
  CHECK(mxkit::bfloat16::from_float(std::numeric_limits<float>::max(), rounding::nearest_even, overflow::propagate).bits() == 0x7F80);
  CHECK(mxkit::bfloat16::from_float(std::numeric_limits<float>::max(), rounding::toward_zero, overflow::propagate).bits() == 0x7F7F);
}

TEST_CASE("minifloat: every bf16 and fp16 bit pattern, every mode, matches the oracle", "[format][exhaustive]") {
  const std::vector<float> bf16 = oracle::all_bfloat16_patterns();
  const std::vector<float> fp16 = oracle::all_float16_patterns();
  oracle::for_each_format([&](auto tag, const oracle::minifloat_spec& s) {
    using F = decltype(tag);
    oracle::mismatch_log log;
    compare_with_oracle<F>(s, bf16, 0, log);
    compare_with_oracle<F>(s, fp16, 0, log);
    INFO(log.summary());
    CHECK(log.count == 0);
  });
}

TEST_CASE("minifloat: every rounding boundary and its float neighbours matches the oracle", "[format][exhaustive]") {
  oracle::for_each_format([&](auto tag, const oracle::minifloat_spec& s) {
    using F = decltype(tag);
    oracle::mismatch_log log;
    compare_with_oracle<F>(s, oracle::boundary_inputs(oracle::table_of(s), 0), 0, log);
    INFO(log.summary());
    CHECK(log.count == 0);
  });
}

TEST_CASE("minifloat: random floats match the oracle", "[format]") {
  oracle::for_each_format([&](auto tag, const oracle::minifloat_spec& s) {
    using F = decltype(tag);
    const oracle::table& t = oracle::table_of(s);
    const int lo = std::ilogb(t.min_positive()) - 3, hi = std::ilogb(t.max()) + 3;
    oracle::mismatch_log log;
    compare_with_oracle<F>(s, oracle::random_inputs(0xC0FFEE + s.exp_bits * 16 + s.man_bits, 20000, 40000, lo, hi), 0, log);
    INFO(log.summary());
    CHECK(log.count == 0);
  });
}

TEST_CASE("minifloat: from_float_scaled at every scale exponent in [-127, 127] matches the oracle", "[format][exhaustive]") {
  oracle::for_each_format([&](auto tag, const oracle::minifloat_spec& s) {
    using F = decltype(tag);
    const oracle::table& t = oracle::table_of(s);
    const int lo = std::ilogb(t.min_positive()) - 3, hi = std::ilogb(t.max()) + 3;
    // binary16/bfloat16 have ~64k values: a different sample of 1 in 211 at each scale.
    const std::size_t stride = t.finite.size() > 1024 ? 211 : 1;
    oracle::mismatch_log log;
    for (int sc = -127; sc <= 127; ++sc) {
      std::vector<float> xs = oracle::boundary_inputs(t, sc, stride, static_cast<std::size_t>(sc + 127) * 7);
      const std::vector<float> rnd = oracle::random_inputs(0x5CA1E + static_cast<std::uint64_t>(sc + 127), 64, 256, lo + sc, hi + sc);
      xs.insert(xs.end(), rnd.begin(), rnd.end());
      compare_with_oracle<F>(s, xs, sc, log);
    }
    // Every bf16 pattern at the extreme scales, where x * 2^-scale_exp leaves float's range
    // (a float-arithmetic shortcut would round or overflow there).
    const std::vector<float> bf16 = oracle::all_bfloat16_patterns();
    for (const int sc : {-127, -100, 100, 127}) compare_with_oracle<F>(s, bf16, sc, log);
    INFO(log.summary());
    CHECK(log.count == 0);
  });
}

#if defined(__FLT16_MANT_DIG__)
TEST_CASE("minifloat: the oracle and float16 agree with the compiler's _Float16 conversion", "[format]") {
  // A second, unrelated reference for one format: the compiler's IEEE binary16 conversion
  // (round to nearest even, overflow to Inf). NaNs are skipped: their payloads are not specified.
  const oracle::table& t = oracle::table_of(oracle::float16_spec);
  std::vector<float> xs = oracle::all_bfloat16_patterns();
  const std::vector<float> more = oracle::boundary_inputs(t, 0);
  xs.insert(xs.end(), more.begin(), more.end());
  oracle::mismatch_log log;
  for (const float x : xs) {
    if (std::isnan(x)) continue;
    const _Float16 h = static_cast<_Float16>(x);
    std::uint16_t hw;
    std::memcpy(&hw, &h, 2);
    const std::uint32_t want = oracle::encode(oracle::float16_spec, t, x, 0, rounding::nearest_even, overflow::propagate);
    const std::uint32_t lib = mxkit::float16::from_float(x, rounding::nearest_even, overflow::propagate).bits();
    if (hw == want && hw == lib) log.pass();
    else log.fail("x=" + oracle::describe(x) + " compiler " + std::to_string(hw) + " oracle " + std::to_string(want) + " mxkit " + std::to_string(lib));
  }
  INFO(log.summary());
  CHECK(log.count == 0);
  CHECK(log.checked > 100000);
}
#endif
