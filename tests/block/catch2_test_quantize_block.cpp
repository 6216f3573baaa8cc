// SPDX-License-Identifier: Apache-2.0
// One MX block: quantize_block for every format, scale rule and rounding mode (with and without
// the Hadamard rotation and random signs) against the block oracle; the special blocks (all zero,
// NaN, Inf, tiny and huge amax); dequantize_block exactly; stochastic indices per element.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <mxkit/block/quantize_block.hpp>

#include "../catch.hpp"
#include "block_oracle.hpp"

namespace {
using mxkit::mx_block_size;
using mxkit::quantize_options;
using mxkit::rounding;
using mxkit::scale_rule;
using block = std::array<float, 32>;
using block_ld_t = std::array<long double, 32>;

template <class Fn>
void for_each_mx_type(Fn&& fn) {
  for (const mxkit::mx_type t : mxkit::all_mx_types)
    mxkit::visit_mx_type(t, [&](auto fmt) { fn(fmt, oracle::model_of(t)); });
}

// Blocks of many shapes: Gaussian at a random binade from deep subnormal to near FLT_MAX, some
// with zeros, an outlier, exact format values, or ties.
std::vector<block> test_blocks(std::uint64_t seed, int count) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-150, 120), kind(0, 5), pos(0, 31);
  std::vector<block> out;
  for (int n = 0; n < count; ++n) {
    block b{};
    const int e = binade(g);
    const int k = kind(g);
    for (float& x : b) x = std::ldexp(normal(g), e);
    if (k == 1)
      for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(pos(g))] = 0.0f;
    if (k == 2) b[static_cast<std::size_t>(pos(g))] = std::ldexp(60.0f, e);  // outlier
    if (k == 3)
      for (float& x : b) x = std::ldexp(std::round(x * 4) / 4, 0);              // coarse grid: ties
    if (k == 4)
      for (float& x : b) x = std::ldexp(static_cast<float>(pos(g) - 16) * 0.25f, e);  // exact small values + ties
    out.push_back(b);
  }
  // Hand-made shapes: one non-zero element, all equal, all negative.
  block one{};
  one[5] = 3.0f;
  out.push_back(one);
  block same;
  same.fill(-1.25f);
  out.push_back(same);
  return out;
}

std::string codes_text(const std::uint8_t scale, const std::array<std::uint32_t, 32>& c) {
  std::ostringstream s;
  s << "scale " << int{scale} << " codes";
  for (const std::uint32_t x : c) s << ' ' << std::hex << x;
  return s.str();
}

// Library block -> (scale byte, codes), for comparison with the oracle.
template <class Fmt>
oracle::block_codes lib_codes(const mxkit::mx_block<Fmt>& b) {
  oracle::block_codes r;
  r.scale = b.scale.bits();
  for (int i = 0; i < 32; ++i) r.codes[static_cast<std::size_t>(i)] = b.elements[static_cast<std::size_t>(i)].bits();
  return r;
}

}  // namespace

TEST_CASE("quantize_block: every format, rule and rounding matches the oracle", "[block]") {
  const std::vector<block> blocks = test_blocks(11, 300);
  for_each_mx_type([&](auto fmt, const oracle::element_model& m) {
    using Fmt = decltype(fmt);
    oracle::mismatch_log log;
    for (const scale_rule rule : oracle::all_scale_rules)
      for (const rounding r : {rounding::nearest_even, rounding::nearest_away, rounding::toward_zero, rounding::stochastic})
        for (const bool hadamard : {false, true})
          for (std::size_t n = 0; n < blocks.size(); ++n) {
            quantize_options o;
            o.rule = rule;
            o.round = r;
            o.hadamard = hadamard;
            o.random_signs = hadamard && (n % 2 == 1);
            o.seed = 1000 + n;
            o.stream = static_cast<std::uint32_t>(n % 3);
            const std::uint64_t first = 32 * n + n % 5;  // aligned and unaligned to Philox's groups of four
            // The oracle sees the rotated values: the rotation is tested in tests/transform.
            block v = blocks[n];
            if (hadamard) mxkit::rotate_block(v.data(), o.sign_mask());
            const oracle::block_codes want = oracle::quantize_block(m, v.data(), rule, r, o.seed, o.stream, first);
            const oracle::block_codes got = lib_codes(mxkit::quantize_block<Fmt>(blocks[n].data(), o, first));
            if (want.scale == got.scale && want.codes == got.codes) {
              log.pass();
              continue;
            }
            std::ostringstream s;
            s << m.info.name << " " << oracle::name_of(rule) << " " << oracle::name_of(r) << (hadamard ? " hadamard" : "")
              << " block " << n << ":\n    expected " << codes_text(want.scale, want.codes) << "\n    got      "
              << codes_text(got.scale, got.codes);
            log.fail(s.str());
          }
    INFO(log.summary());
    CHECK(log.count == 0);
  });
}

TEST_CASE("quantize_block: all-zero, NaN and Inf blocks", "[block]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for_each_mx_type([&](auto fmt, const oracle::element_model& m) {
    using Fmt = decltype(fmt);
    INFO(m.info.name);
    for (const scale_rule rule : oracle::all_scale_rules)
      for (const bool hadamard : {false, true}) {
        quantize_options o;
        o.rule = rule;
        o.hadamard = hadamard;
        // All zeros: scale 1.0 (0x7F), every element +0.
        const auto z = mxkit::quantize_block<Fmt>(block{}, o);
        CHECK(z.scale.bits() == 127);
        for (const auto& e : z.elements) CHECK(e.bits() == 0);
        // All -0 without rotation: the scale is still 1.0 and each element keeps its sign (-0 is
        // a code of its own in the minifloats; INT8 has none).
        if (!hadamard) {
          block neg{};
          neg.fill(-0.0f);
          const auto nz = mxkit::quantize_block<Fmt>(neg, o);
          CHECK(nz.scale.bits() == 127);
          for (const auto& e : nz.elements) CHECK(e.bits() == m.encode(-0.0f, 0, rounding::nearest_even, 0));
        }
        // One NaN or Inf anywhere: NaN scale and all element codes zero.
        for (const float bad : {nan, -nan, inf, -inf})
          for (const std::size_t at : {std::size_t{0}, std::size_t{17}, std::size_t{31}}) {
            block b{};
            for (std::size_t i = 0; i < 32; ++i) b[i] = static_cast<float>(i) - 3.5f;
            b[at] = bad;
            const auto q = mxkit::quantize_block<Fmt>(b, o);
            INFO("bad value at " << at);
            CHECK(q.scale.bits() == 0xFF);
            for (const auto& e : q.elements) CHECK(e.bits() == 0);
            // It decodes to NaN everywhere.
            for (const float d : mxkit::dequantize_block<Fmt>(q, o)) CHECK(std::isnan(d));
          }
      }
  });
}

TEST_CASE("quantize_block: scale exponent clamped at -127 and +127", "[block]") {
  for_each_mx_type([&](auto fmt, const oracle::element_model& m) {
    using Fmt = decltype(fmt);
    INFO(m.info.name);
    // amax 2^-135 needs exponent -135 - emax: clamped to -127, elements round at 2^-127.
    block tiny;
    for (std::size_t i = 0; i < 32; ++i) tiny[i] = std::ldexp(static_cast<float>(i) - 15.25f, -140);
    for (const scale_rule rule : oracle::all_scale_rules) {
      quantize_options o;
      o.rule = rule;
      const auto q = mxkit::quantize_block<Fmt>(tiny, o);
      CHECK(q.scale.bits() == 0);
      const oracle::block_codes want = oracle::quantize_block(m, tiny.data(), rule, rounding::nearest_even);
      CHECK(lib_codes(q).codes == want.codes);
    }
  });
  // MXINT8 near FLT_MAX under ceil: exponent 128 clamps to 127 and the elements clip to +-127.
  block huge;
  for (std::size_t i = 0; i < 32; ++i) huge[i] = (i % 2 ? -1.0f : 1.0f) * std::numeric_limits<float>::max();
  quantize_options o;
  o.rule = scale_rule::ceil;
  const auto q = mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxint8>>(huge, o);
  CHECK(q.scale.bits() == 254);
  for (std::size_t i = 0; i < 32; ++i) CHECK(q.elements[i].bits() == (i % 2 ? 0x81 : 0x7F));
}

TEST_CASE("dequantize_block: element value times 2^scale exactly; rotation undone", "[block]") {
  const std::vector<block> blocks = test_blocks(23, 200);
  for_each_mx_type([&](auto fmt, const oracle::element_model& m) {
    using Fmt = decltype(fmt);
    oracle::mismatch_log log;
    for (std::size_t n = 0; n < blocks.size(); ++n)
      for (const bool hadamard : {false, true}) {
        quantize_options o;
        o.rule = oracle::all_scale_rules[n % 4];
        o.hadamard = hadamard;
        o.random_signs = n % 3 == 0;
        o.seed = n;
        const auto q = mxkit::quantize_block<Fmt>(blocks[n].data(), o);
        const block got = mxkit::dequantize_block<Fmt>(q, o);
        block want;
        for (std::size_t i = 0; i < 32; ++i)
          want[i] = static_cast<float>(std::ldexp(m.decode(q.elements[i].bits()), q.scale.exponent()));
        if (hadamard)
          for (int g = 0; g < 32; g += 16) mxkit::unrotate_group16(want.data() + g, o.sign_mask());
        bool same = true;
        for (std::size_t i = 0; i < 32; ++i) same = same && (got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])));
        same ? log.pass() : log.fail(std::string(m.info.name) + " block " + std::to_string(n) + (hadamard ? " hadamard" : ""));
      }
    INFO(log.summary());
    CHECK(log.count == 0);
  });
}

TEST_CASE("quantize_block: stochastic rounding draws one word per element index", "[block]") {
  // Element i of a block that starts at first_index uses random_bits(seed, stream, first_index + i).
  block b;
  for (std::size_t i = 0; i < 32; ++i) b[i] = 0.3f + 0.1f * static_cast<float>(i);
  quantize_options o;
  o.round = rounding::stochastic;
  o.seed = 99;
  o.stream = 4;
  const auto q1 = mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(b, o, 64);
  const auto q2 = mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(b, o, 64);
  const auto q3 = mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(b, o, 96);
  const oracle::element_model m = oracle::model_of(mxkit::mx_type::mxfp4);
  bool any_differs = false;
  for (std::size_t i = 0; i < 32; ++i) {
    CHECK(q1.elements[i].bits() == q2.elements[i].bits());
    CHECK(q1.elements[i].bits() == m.encode(b[i], q1.scale.exponent(), rounding::stochastic, mxkit::random_bits(99, 4, 64 + i)));
    any_differs = any_differs || q1.elements[i].bits() != q3.elements[i].bits();
  }
  CHECK(any_differs);  // another index range draws other words
}

TEST_CASE("quantize_element: a NaN scale gives code zero", "[block]") {
  CHECK(mxkit::quantize_element<mxkit::e4m3>(3.0f, mxkit::e8m0::nan(), rounding::nearest_even).bits() == 0);
  CHECK(mxkit::quantize_element<mxkit::int8_fixed>(-1.0f, mxkit::e8m0::nan(), rounding::nearest_even).bits() == 0);
  CHECK(mxkit::quantize_element<mxkit::e2m1>(3.0f, mxkit::e8m0::from_exponent(0), rounding::nearest_even).bits() == 5);
  CHECK(mxkit::quantize_element<mxkit::e2m1>(12.0f, mxkit::e8m0::from_exponent(1), rounding::nearest_even).bits() == 7);
}

// ---- The Hadamard rotation near the float range (docs/formats.md "NaN and Inf") ---------------

namespace {
// Exact unrotation of a dequantized rotated block in long double: w = element x 2^scale, then
// per 16-group y_j = sign_j * sum_i (-1)^popcount(i & j) w_i / 4 (unrotate_group16 = D.H).
block_ld_t unrotated_exactly(const std::array<long double, 32>& w, std::uint32_t sign_mask) {
  block_ld_t y{};
  for (int g = 0; g < 32; g += 16)
    for (int j = 0; j < 16; ++j) {
      long double s = 0;
      for (int i = 0; i < 16; ++i) s += (__builtin_popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0L : 1.0L) * w[static_cast<std::size_t>(g + i)];
      s /= 4;
      y[static_cast<std::size_t>(g + j)] = ((sign_mask >> j) & 1u) ? -s : s;
    }
  return y;
}

// got[i] is y[i] up to the float rounding of the butterflies (tol: 2^-20 of the group's sum |w|
// / 4, four times their bound): finite and within tol, or +-Inf only where |y| + tol passes
// FLT_MAX (an IEEE overflow), never NaN.
bool matches_exact_unrotation(const block& got, const block_ld_t& y, const std::array<long double, 32>& w, std::string& why) {
  const long double fmax = std::numeric_limits<float>::max();
  for (std::size_t i = 0; i < 32; ++i) {
    long double l1 = 0;
    for (std::size_t k = i / 16 * 16; k < i / 16 * 16 + 16; ++k) l1 += std::fabs(w[k]);
    const long double tol = 0x1p-20L * l1 / 4, a = std::fabs(y[i]);
    bool ok = false;
    if (std::isnan(got[i])) ok = false;
    else if (std::isinf(got[i])) ok = a + tol > fmax && (a <= tol || std::signbit(got[i]) == std::signbit(y[i]));
    else ok = std::fabs(got[i] - y[i]) <= tol;
    if (!ok) {
      std::ostringstream s;
      s << "element " << i << ": got " << got[i] << ", exact " << static_cast<double>(y[i]);
      why = s.str();
      return false;
    }
  }
  return true;
}

template <class Fmt>
std::array<long double, 32> scaled_elements(const mxkit::mx_block<Fmt>& q, const oracle::element_model& m) {
  std::array<long double, 32> w{};
  for (std::size_t i = 0; i < 32; ++i) w[i] = std::ldexp(m.decode(q.elements[i].bits()), q.scale.exponent());
  return w;
}
}  // namespace

TEST_CASE("dequantize_block: a rotated block near the float range unrotates without overflow", "[block]") {
  // One outlier near FLT_MAX rotates to 16 values of a quarter of it; unrotating them added 16
  // values of up to 2^126 in float and gave +Inf (or NaN) for a block that holds a finite value.
  // Now the sums are formed 2^-32 lower and scaled back once: the result is the float nearest
  // the exact unrotation, +-Inf only where that is beyond the float range.
  const float fmax = std::numeric_limits<float>::max();
  for_each_mx_type([&](auto fmt, const oracle::element_model& m) {
    using Fmt = decltype(fmt);
    oracle::mismatch_log log;
    for (const scale_rule rule : oracle::all_scale_rules)
      for (const bool signs : {false, true})
        for (const float x0 : {1e38f, -1e38f, 3e38f, fmax, -fmax, 0x1p127f, 0x1p126f}) {
          block b{};
          b[3] = x0;
          b[20] = -x0 / 3;
          quantize_options o;
          o.rule = rule;
          o.hadamard = true;
          o.random_signs = signs;
          o.seed = 5;
          const auto q = mxkit::quantize_block<Fmt>(b, o);
          const block got = mxkit::dequantize_block<Fmt>(q, o);
          const std::array<long double, 32> w = scaled_elements(q, m);
          std::string why;
          // One outlier per group: no butterfly sum exceeds it, so the scale is finite.
          const bool ok = q.scale.bits() != 0xFF && matches_exact_unrotation(got, unrotated_exactly(w, o.sign_mask()), w, why);
          std::ostringstream s;
          s << m.info.name << " " << oracle::name_of(rule) << (signs ? " signs" : "") << " x0 " << x0 << " scale "
            << int{q.scale.bits()} << ": " << why;
          ok ? log.pass() : log.fail(s.str());
        }
    INFO(log.summary());
    CHECK(log.count == 0);
  });
  // The case from the issue: MXFP4, floor, one outlier of FLT_MAX. Its rotated values clip to
  // 6 x 2^123 each; unrotated, position 3 holds 24 x 2^123 = 2.55e38 (it was +Inf).
  block b{};
  b[3] = fmax;
  quantize_options o;
  o.hadamard = true;
  const block y = mxkit::dequantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(b, o), o);
  CHECK(y[3] == 0x1.8p127f);
  for (std::size_t i = 0; i < 32; ++i)
    if (i != 3) CHECK(y[i] == 0.0f);
  // Under round_up the same block's elements round up to 4 x 2^124: the exact unrotation is
  // 2^128, beyond the float range, so +Inf (an IEEE overflow, as without the rotation), not NaN.
  o.rule = scale_rule::round_up;
  const block z = mxkit::dequantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(b, o), o);
  CHECK(z[3] == std::numeric_limits<float>::infinity());
  for (std::size_t i = 0; i < 32; ++i)
    if (i != 3) CHECK(z[i] == 0.0f);
}

TEST_CASE("dequantize_block: rotated blocks of any codes and scales equal the float formula wherever it is finite", "[block]") {
  // Random finite codes under scale exponents -127..127. Where element x 2^scale, then
  // unrotate_group16 in float (the formula dequantize_block used) stays finite, the result is
  // that formula bit for bit: ordinary blocks decode exactly as before. Where it overflowed,
  // the result is the float nearest the exact unrotation (see the test above).
  std::mt19937_64 g(31);
  std::uniform_int_distribution<int> exp_dist(-127, 127), high_dist(100, 127), code_dist(0, 255);
  for_each_mx_type([&](auto fmt, const oracle::element_model& m) {
    using Fmt = decltype(fmt);
    using E = typename Fmt::element_type;
    oracle::mismatch_log log;
    std::size_t formula_overflowed = 0;
    for (int n = 0; n < 3000; ++n) {
      quantize_options o;
      o.hadamard = true;
      o.random_signs = n % 2 == 1;
      o.seed = static_cast<std::uint64_t>(n);
      mxkit::mx_block<Fmt> q{};
      q.scale = mxkit::e8m0::from_exponent(n % 3 == 0 ? exp_dist(g) : high_dist(g));
      for (auto& e : q.elements) {
        std::uint32_t c = 0;
        do c = static_cast<std::uint32_t>(code_dist(g)) & ((1u << Fmt::storage_bits) - 1);
        while (!std::isfinite(static_cast<double>(m.decode(c))));
        e = E::from_bits(static_cast<std::uint8_t>(c));
      }
      block formula;
      for (std::size_t i = 0; i < 32; ++i) formula[i] = q.elements[i].to_float() * q.scale.to_float();
      for (int k = 0; k < 32; k += 16) mxkit::unrotate_group16(formula.data() + k, o.sign_mask());
      bool finite = true;
      for (const float v : formula) finite = finite && std::isfinite(v);
      const block got = mxkit::dequantize_block<Fmt>(q, o);
      std::string why;
      bool ok = true;
      if (finite) {
        for (std::size_t i = 0; i < 32 && ok; ++i) ok = mxkit::bit_cast<std::uint32_t>(got[i]) == mxkit::bit_cast<std::uint32_t>(formula[i]);
        if (!ok) why = "differs from the float formula";
      } else {
        ++formula_overflowed;
        const std::array<long double, 32> w = scaled_elements(q, m);
        ok = matches_exact_unrotation(got, unrotated_exactly(w, o.sign_mask()), w, why);
      }
      ok ? log.pass() : log.fail(std::string(m.info.name) + " block " + std::to_string(n) + " scale " + std::to_string(q.scale.exponent()) + ": " + why);
    }
    INFO(log.summary());
    CHECK(log.count == 0);
    CHECK(formula_overflowed > 0);  // the high scales do reach the case that used to overflow
  });
}

TEST_CASE("quantize_block: Hadamard groups whose butterfly sums pass the float range are flagged NaN", "[block]") {
  // The defined bound (docs/formats.md "NaN and Inf"): the quantizer forms each 16-group's butterfly sums
  // in float before the 1/4 normalization (folded into the scale). With every |x| <= 2^123 no sum
  // can pass FLT_MAX and the block is exact; a single outlier up to FLT_MAX is fine too (its sums
  // never exceed it). A group whose sums do overflow is flagged like an Inf input: NaN scale,
  // zero codes, NaN on decode; never a wrong finite value.
  std::mt19937_64 g(77);
  std::uniform_real_distribution<float> mag(0.5f, 1.0f);
  for_each_mx_type([&](auto fmt, const oracle::element_model& m) {
    using Fmt = decltype(fmt);
    INFO(m.info.name);
    for (const scale_rule rule : oracle::all_scale_rules) {
      quantize_options o;
      o.rule = rule;
      o.hadamard = true;
      block all{};
      all.fill(0x1p123f);  // the bound itself, one sign: group sum 2^127
      const auto q = mxkit::quantize_block<Fmt>(all, o);
      CHECK(q.scale.bits() != 0xFF);
      for (const float v : mxkit::dequantize_block<Fmt>(q, o)) CHECK(std::isfinite(v));
      for (int n = 0; n < 50; ++n) {
        block b;
        for (float& x : b) x = (g() & 1 ? -1.0f : 1.0f) * mag(g) * 0x1p123f;
        o.random_signs = n % 2 == 1;
        o.seed = static_cast<std::uint64_t>(n);
        const auto r = mxkit::quantize_block<Fmt>(b, o);
        CHECK(r.scale.bits() != 0xFF);
        for (const float v : mxkit::dequantize_block<Fmt>(r, o)) CHECK(std::isfinite(v));
      }
      o.random_signs = false;
      block over{};
      over.fill(1e38f);  // group sum 1.6e39: past FLT_MAX
      const auto f = mxkit::quantize_block<Fmt>(over, o);
      CHECK(f.scale.bits() == 0xFF);
      for (const auto& e : f.elements) CHECK(e.bits() == 0);
      for (const float v : mxkit::dequantize_block<Fmt>(f, o)) CHECK(std::isnan(v));
    }
  });
}
