// SPDX-License-Identifier: Apache-2.0
#pragma once
// An independent model of mxkit's element and scale formats, for the tests only. It is written
// from the specifications, not from mxkit's code: OCP Microscaling Formats (MX) v1.0 (section 5:
// element formats, INT8, the E8M0 scale and Table 1's emax_elem; section 6.3: the shared scale),
// OCP 8-bit Floating Point v1.0 (E4M3/E5M2), IEEE 754-2019 (binary16, the rounding attributes,
// section 7.4 overflow).
// A format is the sorted list of all its finite values, exact in long double, and a number is
// rounded by searching that list and comparing distances: no bit manipulation, so a mistake in
// the library's integer rounding cannot be repeated here by construction.
// mxkit's own policies (NaN, Inf, overflow, -0, E8M0 below 2^-127, INT8 symmetric saturation,
// the four scale rules and the special blocks) are restated from the comments in
// format/minifloat.hpp, format/e8m0.hpp, format/int8_fixed.hpp and block/scale_rule.hpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <mxkit/block/scale_rule.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e2m3.hpp>
#include <mxkit/format/e3m2.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/format/rounding.hpp>

namespace oracle {

using mxkit::overflow;
using mxkit::rounding;
using mxkit::scale_rule;

// Every quantity below is a dyadic rational with fewer than 40 significant bits and a binary
// exponent in [-300, 300] (a float times 2^+-127, a format value, a midpoint, a difference of
// neighbours), so long double holds it exactly; double would too.
static_assert(std::numeric_limits<long double>::digits >= 53 && std::numeric_limits<long double>::min_exponent < -300);

inline constexpr rounding all_roundings[] = {rounding::nearest_even, rounding::nearest_away, rounding::toward_zero};
inline constexpr overflow all_overflows[] = {overflow::saturate, overflow::propagate};
inline constexpr scale_rule all_scale_rules[] = {scale_rule::floor, scale_rule::even, scale_rule::round_up,
                                                 scale_rule::ceil};

using mxkit::name_of;  // names of the modes, for messages

// ---------------------------------------------------------------------------------------------
// Sign / exponent / mantissa formats.

enum class specials {
  none,          // all codes finite: FP4 E2M1, FP6 E2M3/E3M2 (OCP MX v1.0 section 5.3)
  nan_all_ones,  // S.1111.111 is NaN, no Inf: FP8 E4M3 (OCP 8-bit FP v1.0)
  ieee,          // exponent all ones: Inf (mantissa 0) or NaN: E5M2, binary16, bfloat16
};

struct minifloat_spec {
  const char* name;
  int exp_bits;
  int man_bits;
  specials kind;
  std::uint32_t canonical_nan;  // magnitude bits of the NaN mxkit writes (minifloat.hpp comment)
  int emax_elem;                // exponent of the largest normal (OCP MX Table 1 for MX elements)
};

inline constexpr minifloat_spec e2m1_spec{"e2m1", 2, 1, specials::none, 0, 2};
inline constexpr minifloat_spec e2m3_spec{"e2m3", 2, 3, specials::none, 0, 2};
inline constexpr minifloat_spec e3m2_spec{"e3m2", 3, 2, specials::none, 0, 4};
inline constexpr minifloat_spec e4m3_spec{"e4m3", 4, 3, specials::nan_all_ones, 0x7F, 8};     // S.1111.111
inline constexpr minifloat_spec e5m2_spec{"e5m2", 5, 2, specials::ieee, 0x7E, 15};            // S.11111.10
inline constexpr minifloat_spec float16_spec{"float16", 5, 10, specials::ieee, 0x7E00, 15};   // quiet bit
inline constexpr minifloat_spec bfloat16_spec{"bfloat16", 8, 7, specials::ieee, 0x7FC0, 127};  // quiet bit

struct decoded {
  bool nan = false;
  bool negative = false;
  long double magnitude = 0;  // +infinity for Inf
};

// The value of a code, straight from the field definitions: bias 2^(E-1)-1; exponent field 0 is
// subnormal (0.m * 2^(1-bias)), otherwise 1.m * 2^(e-bias).
inline decoded decode(const minifloat_spec& s, std::uint32_t code) {
  const std::uint32_t man_mask = (1u << s.man_bits) - 1, exp_ones = (1u << s.exp_bits) - 1;
  const std::uint32_t e = (code >> s.man_bits) & exp_ones, m = code & man_mask;
  decoded d;
  d.negative = ((code >> (s.exp_bits + s.man_bits)) & 1u) != 0;
  if (s.kind == specials::ieee && e == exp_ones) {
    if (m != 0) d.nan = true;
    else d.magnitude = std::numeric_limits<long double>::infinity();
    return d;
  }
  if (s.kind == specials::nan_all_ones && e == exp_ones && m == man_mask) {
    d.nan = true;
    return d;
  }
  const int bias = (1 << (s.exp_bits - 1)) - 1;
  d.magnitude = e == 0 ? std::ldexp(static_cast<long double>(m), 1 - bias - s.man_bits)
                       : std::ldexp(static_cast<long double>(m + (1u << s.man_bits)), static_cast<int>(e) - bias - s.man_bits);
  return d;
}

inline std::uint32_t code_count(const minifloat_spec& s) { return 1u << (1 + s.exp_bits + s.man_bits); }
inline std::uint32_t sign_bit(const minifloat_spec& s) { return 1u << (s.exp_bits + s.man_bits); }
inline std::uint32_t inf_code(const minifloat_spec& s) { return ((1u << s.exp_bits) - 1) << s.man_bits; }

// ---------------------------------------------------------------------------------------------
// Rounding to the nearest member of a sorted value list.

struct point {
  long double value;
  std::uint32_t code;
  bool even;  // last digit of the significand is 0 (IEEE 754 roundTiesToEven's tie-break)
};

struct table {
  std::vector<point> finite;  // every finite non-negative value once, ascending
  point beyond;               // the value after max if the exponent range were unbounded: a
                              // rounding that reaches it has overflowed (IEEE 754 section 7.4)
  long double max() const { return finite.back().value; }
  long double min_positive() const { return finite[finite.front().value == 0 ? 1 : 0].value; }
};

inline void check_sorted(const table& t, const char* what) {
  for (std::size_t i = 1; i < t.finite.size(); ++i)
    if (!(t.finite[i - 1].value < t.finite[i].value)) throw std::logic_error(std::string("oracle: unsorted ") + what);
}

inline table make_table(const minifloat_spec& s) {
  table t;
  const std::uint32_t man_mask = (1u << s.man_bits) - 1;
  for (std::uint32_t code = 0; code < sign_bit(s); ++code) {
    const decoded d = decode(s, code);
    if (d.nan || std::isinf(d.magnitude)) continue;
    t.finite.push_back({d.magnitude, code, ((code & man_mask) & 1u) == 0});
  }
  std::sort(t.finite.begin(), t.finite.end(), [](const point& a, const point& b) { return a.value < b.value; });
  check_sorted(t, s.name);
  // max's binade continues with one more significand step; its parity flips.
  const point& mx = t.finite.back();
  const long double ulp = mx.value - t.finite[t.finite.size() - 2].value;
  t.beyond = {mx.value + ulp, mx.code + 1, !mx.even};
  return t;
}

// make_table once per format (the binary16 and bfloat16 lists hold about 64k values each).
inline const table& table_of(const minifloat_spec& s) {
  static std::map<std::string, table> cache;
  auto it = cache.find(s.name);
  if (it == cache.end()) it = cache.emplace(s.name, make_table(s)).first;
  return it->second;
}

// floor(fraction * 2^32) for a between lo and hi: the stochastic-rounding threshold documented in
// format/bits.hpp (round up when random_bits < threshold).
inline std::uint64_t stochastic_threshold(long double lo, long double hi, long double a) {
  return static_cast<std::uint64_t>(std::floor(std::ldexp((a - lo) / (hi - lo), 32)));
}

// Where a (t.finite.front().value <= a, finite) falls: t.finite[i] <= a, with its neighbours.
struct bracket {
  std::size_t i;
  bool exact;  // a == t.finite[i]
  bool past;   // a >= t.beyond: every rounding but toward_zero overflows
  point lo, hi;
};
inline bracket find_bracket(const table& t, long double a) {
  const std::size_t n = t.finite.size();
  const auto it = std::upper_bound(t.finite.begin(), t.finite.end(), a,
                                   [](long double v, const point& p) { return v < p.value; });
  const std::size_t i = static_cast<std::size_t>(it - t.finite.begin()) - 1;
  const point& hi = i + 1 < n ? t.finite[i + 1] : t.beyond;
  return {i, t.finite[i].value == a, i == n - 1 && a >= t.beyond.value, t.finite[i], hi};
}

// Index in t.finite of the rounding of a (t.finite.front().value <= a, finite), or
// t.finite.size() when the rounding passes max (overflow).
inline std::size_t round_index(const table& t, long double a, rounding r, std::uint32_t random_bits = 0) {
  const bracket b = find_bracket(t, a);
  if (b.exact) return b.i;
  if (b.past) return r == rounding::toward_zero ? b.i : t.finite.size();
  const long double below = a - b.lo.value, above = b.hi.value - a;
  bool up = false;
  switch (r) {
    case rounding::nearest_even: up = above < below || (above == below && b.hi.even); break;
    case rounding::nearest_away: up = above <= below; break;
    case rounding::toward_zero: up = false; break;
    case rounding::stochastic: up = random_bits < stochastic_threshold(b.lo.value, b.hi.value, a); break;
  }
  return b.i + (up ? 1 : 0);
}

// The code mxkit must produce for x * 2^-scale_exp (exact) in a minifloat format.
inline std::uint32_t encode(const minifloat_spec& s, const table& t, float x, int scale_exp, rounding r, overflow o,
                            std::uint32_t random_bits = 0) {
  const std::uint32_t sign = std::signbit(x) ? sign_bit(s) : 0u;
  const std::uint32_t max_code = t.finite.back().code;
  // Overflow (and Inf input): saturate -> +-max; propagate -> Inf, else NaN, else max.
  const auto overflowed = [&]() -> std::uint32_t {
    if (o == overflow::saturate || s.kind == specials::none) return sign | max_code;
    return sign | (s.kind == specials::ieee ? inf_code(s) : s.canonical_nan);
  };
  if (std::isnan(x)) return s.kind == specials::none ? max_code : sign | s.canonical_nan;  // FP4/FP6: +max
  if (std::isinf(x)) return overflowed();
  const long double a = std::ldexp(std::fabs(static_cast<long double>(x)), -scale_exp);
  const std::size_t i = round_index(t, a, r, random_bits);
  return i == t.finite.size() ? overflowed() : sign | t.finite[i].code;  // a zero keeps its sign
}

// ---------------------------------------------------------------------------------------------
// E8M0 (OCP MX 5.4.1): 2^(b-127) for b in 0..254, 0xFF NaN.

inline table make_e8m0_table() {
  table t;
  for (std::uint32_t b = 0; b < 255; ++b) t.finite.push_back({std::ldexp(1.0L, static_cast<int>(b) - 127), b, b % 2 == 0});
  t.beyond = {std::ldexp(1.0L, 128), 255, false};
  check_sorted(t, "e8m0");
  return t;
}

inline decoded decode_e8m0(std::uint8_t b) {
  decoded d;
  if (b == 0xFF) d.nan = true;
  else d.magnitude = std::ldexp(1.0L, int{b} - 127);
  return d;
}

// e8m0::from_float's documented policy: NaN and negative non-zero x -> NaN; 0 and anything below
// 2^-127 -> 2^-127; +Inf and overflow -> 2^127 (saturate) or NaN (propagate); toward_zero never
// overflows a finite x.
inline std::uint8_t encode_e8m0(const table& t, float x, rounding r, overflow o, std::uint32_t random_bits = 0) {
  if (std::isnan(x) || x < 0) return 0xFF;
  if (std::isinf(x)) return o == overflow::saturate ? 254 : 0xFF;
  const long double a = x;
  if (a < t.finite.front().value) return 0;
  const std::size_t i = round_index(t, a, r, random_bits);
  if (i == t.finite.size()) return o == overflow::saturate ? 254 : 0xFF;
  return static_cast<std::uint8_t>(t.finite[i].code);
}

// ---------------------------------------------------------------------------------------------
// MXINT8 element (OCP MX v1.0 section 5.3: two's complement with an implicit scale 2^-6).

inline long double decode_int8(std::uint8_t code) { return std::ldexp(static_cast<long double>(static_cast<std::int8_t>(code)), -6); }

inline table make_int8_table() {
  table t;
  for (std::uint32_t k = 0; k <= 127; ++k) t.finite.push_back({std::ldexp(static_cast<long double>(k), -6), k, k % 2 == 0});
  t.beyond = {2.0L, 128, true};
  check_sorted(t, "int8");
  return t;
}

// int8_fixed's policy: symmetric saturation to +-127/64; NaN -> +127/64; -0 -> 0 (no -0 code).
inline std::uint8_t encode_int8(const table& t, float x, int scale_exp, rounding r, std::uint32_t random_bits = 0) {
  if (std::isnan(x)) return 127;
  const bool neg = std::signbit(x);
  std::uint32_t k = 127;
  if (!std::isinf(x)) {
    const long double a = std::ldexp(std::fabs(static_cast<long double>(x)), -scale_exp);
    const std::size_t i = round_index(t, a, r, random_bits);
    k = i == t.finite.size() ? 127u : t.finite[i].code;
  }
  return static_cast<std::uint8_t>(neg ? (256u - k) & 0xFFu : k);
}

// ---------------------------------------------------------------------------------------------
// Shared scale of an MX block (OCP MX 6.3 and block/scale_rule.hpp's four rules).

struct element_info {
  const char* name;
  int emax;            // OCP MX Table 1 emax_elem
  int man_bits;        // mantissa width the `even` rule rounds amax to
  long double max;     // largest element magnitude
};

// The unclamped scale exponent for a finite amax > 0, from each rule's definition.
inline int scale_exponent(long double amax, scale_rule rule, const element_info& e) {
  const int lead = std::ilogb(amax);  // floor(log2 amax), exact
  switch (rule) {
    case scale_rule::floor: return lead - e.emax;
    case scale_rule::even: {
      // amax's significand in [1, 2) rounded half-up to man_bits fraction bits, then floor(log2).
      const long double sig = std::ldexp(amax, -lead);
      const long double rounded = std::floor(std::ldexp(sig, e.man_bits) + 0.5L);
      return (rounded >= std::ldexp(1.0L, e.man_bits + 1) ? lead + 1 : lead) - e.emax;
    }
    case scale_rule::round_up: {
      // Smallest exponent with amax / 2^exp <= max.
      int x = lead - e.emax - 2;
      while (std::ldexp(amax, -x) > e.max) ++x;
      return x;
    }
    case scale_rule::ceil: return (amax == std::ldexp(1.0L, lead) ? lead : lead + 1) - e.emax;
  }
  return 0;
}

// The E8M0 byte of a block with absolute maximum amax (NaN/Inf -> 0xFF, 0 -> 1.0, clamp to +-127).
inline std::uint8_t scale_byte(float amax, scale_rule rule, const element_info& e) {
  if (std::isnan(amax) || std::isinf(amax)) return 0xFF;
  if (amax == 0) return 127;
  const int x = std::clamp(scale_exponent(std::fabs(static_cast<long double>(amax)), rule, e), -127, 127);
  return static_cast<std::uint8_t>(x + 127);
}

// ---------------------------------------------------------------------------------------------
// Test helpers: inputs and mismatch collection.

inline std::string describe(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%a (0x%08X)", static_cast<double>(x), b);
  return buf;
}

inline float float_from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// How many checks failed, with descriptions of the first ten.
struct mismatch_log {
  std::size_t count = 0;
  std::size_t checked = 0;
  std::vector<std::string> first;
  void pass() { ++checked; }
  void fail(const std::string& what) {
    ++checked;
    ++count;
    if (first.size() < 10) first.push_back(what);
  }
  std::string summary() const {
    std::ostringstream s;
    s << count << " mismatches in " << checked << " checks";
    for (const auto& f : first) s << "\n  " << f;
    return s.str();
  }
};

// Every bfloat16 bit pattern as a float (exact: bf16 is the top half of a float).
inline std::vector<float> all_bfloat16_patterns() {
  std::vector<float> v;
  v.reserve(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) v.push_back(float_from_bits(b << 16));
  return v;
}

// Every binary16 bit pattern as a float: finite values exactly, Inf as Inf, NaNs with their
// payload in the float's top mantissa bits (quiet and signalling).
inline std::vector<float> all_float16_patterns() {
  std::vector<float> v;
  v.reserve(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const decoded d = decode(float16_spec, b);
    const std::uint32_t sign = d.negative ? 0x80000000u : 0u;
    if (d.nan) v.push_back(float_from_bits(sign | 0x7F800000u | ((b & 0x3FFu) << 13)));
    else v.push_back(static_cast<float>(d.negative ? -d.magnitude : d.magnitude));
  }
  return v;
}

// x when it is a float exactly or rounds to a finite float, both neighbours too.
inline void push_with_neighbours(std::vector<float>& out, long double x) {
  const float f = static_cast<float>(x);
  if (!std::isfinite(f)) return;
  out.push_back(f);
  out.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
  out.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
}

// The rounding boundaries of a value list scaled by 2^scale_exp: every value, every midpoint
// (including max's midpoint with `beyond`) and the floats either side, both signs. `stride` > 1
// samples every stride-th value (large formats at many scales).
inline std::vector<float> boundary_inputs(const table& t, int scale_exp, std::size_t stride = 1, std::size_t offset = 0) {
  std::vector<float> out;
  for (std::size_t i = offset % stride; i < t.finite.size(); i += stride) {
    const long double v = t.finite[i].value;
    const long double next = i + 1 < t.finite.size() ? t.finite[i + 1].value : t.beyond.value;
    for (const long double x : {v, (v + next) / 2, next}) {
      push_with_neighbours(out, std::ldexp(x, scale_exp));
      push_with_neighbours(out, -std::ldexp(x, scale_exp));
    }
  }
  return out;
}

// Random floats: `n_bits` uniformly random bit patterns (every class: NaN, Inf, subnormal) and
// `n_range` values log-uniform over [2^lo, 2^hi) with random significand and sign.
inline std::vector<float> random_inputs(std::uint64_t seed, std::size_t n_bits, std::size_t n_range, int lo, int hi) {
  std::mt19937_64 g(seed);
  std::vector<float> out;
  out.reserve(n_bits + n_range);
  for (std::size_t i = 0; i < n_bits; ++i) out.push_back(float_from_bits(static_cast<std::uint32_t>(g())));
  std::uniform_int_distribution<int> ex(lo, hi - 1);
  for (std::size_t i = 0; i < n_range; ++i) {
    const std::uint64_t r = g();
    const long double sig = 1.0L + std::ldexp(static_cast<long double>(r & 0xFFFFFFu), -24);
    const float f = static_cast<float>(std::ldexp(sig, ex(g)));
    out.push_back((r >> 63) ? -f : f);
  }
  return out;
}

// Calls fn(tag, spec) for each minifloat type with its spec (the library type names only the tag).
template <class Fn>
void for_each_format(Fn&& fn) {
  fn(mxkit::e2m1{}, e2m1_spec);
  fn(mxkit::e2m3{}, e2m3_spec);
  fn(mxkit::e3m2{}, e3m2_spec);
  fn(mxkit::e4m3{}, e4m3_spec);
  fn(mxkit::e5m2{}, e5m2_spec);
  fn(mxkit::float16{}, float16_spec);
  fn(mxkit::bfloat16{}, bfloat16_spec);
}

}  // namespace oracle
