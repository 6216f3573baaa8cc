// SPDX-License-Identifier: Apache-2.0
// NVFP4's blocks through the reciprocal (block/nvfp4_reciprocal.hpp) against the rule
// (nvfp4_scaler, e2m1::from_float: tests/block/catch2_test_nvfp4_scale.cpp holds those to an
// independent reading of the rule):
//  - the quotient equals fp32_div bit for bit from 2^-39 up (below, both stay under 2^-33), for
//    divisors across the path's bounds (all-ones and power-of-two significands included);
//  - for every E4M3 scale code a finite block can have, under tensor scales from the least normal
//    float to the largest, the codes equal the rule's on the floats around each code threshold
//    (where a quotient one ulp off would change the code) and on random floats;
//  - the block scale through two dividers (nvfp4_reciprocal_scaler) equals the rule's, and so do
//    the block's divisor, reciprocal and path, within 64 ulps of every E4M3 scale threshold and on
//    random amaxes, under tensor scales on and off its bounds;
//  - whole blocks equal quantize_nvfp4_block, nearest even packed and every other rounding, NaN,
//    Inf, zero, subnormal and saturated ones included (those off the path too), and at compile time.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/block/nvfp4_reciprocal.hpp>

#include "../catch.hpp"

namespace nvfp4_reciprocal_test {
using mxkit::e2m1;
using mxkit::e4m3;

// The path's divisor bounds as the header states them: the tests below cover the whole range it
// claims, so a wider range there is tested here too.
constexpr float lowest = mxkit::detail::nvfp4_reciprocal_min_divisor, highest = mxkit::detail::nvfp4_reciprocal_max_divisor;

float from_bits(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

std::vector<float> tensor_scales() {
  std::vector<float> out = {1.0f, 0x1p-126f, 0x1.000002p-126f, 0x1p-100f, 0x1p-20f, 0.5f, 3.0f, 0x1.fffffep-1f, 0x1p40f, 0x1p100f, 0x1p118f, 0x1.fffffep126f};
  std::mt19937_64 g(5);
  for (int i = 0; i < 8; ++i) out.push_back(mxkit::nvfp4_tensor_scale(from_bits(static_cast<std::uint32_t>(g() % 0x7F000000u) + 0x00800000u)));
  return out;
}

// The magnitude code (0 .. 7) of the non-negative float with bits a in a block scaled by s: the rule.
std::uint32_t magnitude_code(const mxkit::nvfp4_block_scaling& s, std::uint32_t a) {
  return e2m1::from_float(s(from_bits(a)), mxkit::rounding::nearest_even, mxkit::overflow::saturate).bits() & 0x7u;
}

// The least non-negative finite float (as bits) where `reached` holds, +Inf's bits where it holds
// nowhere, for a predicate non-decreasing in the float: by bisection over the bits, which order the
// non-negative floats.
template <class Reached>
std::uint32_t least_float_bits(const Reached& reached) {
  if (reached(0u)) return 0u;
  std::uint32_t lo = 0u, hi = 0x7F7FFFFFu;  // !reached(lo); reached(hi) once checked
  if (!reached(hi)) return 0x7F800000u;
  while (hi - lo > 1u) {
    const std::uint32_t m = lo + (hi - lo) / 2u;
    (reached(m) ? hi : lo) = m;
  }
  return hi;
}

// The floats within 64 ulps of a threshold (float bits), either side, into probes; none for +Inf.
void add_around(std::vector<std::uint32_t>& probes, std::uint32_t threshold) {
  if (threshold >= 0x7F800000u) return;
  for (std::uint32_t u = 0; u <= 64; ++u) {
    if (threshold >= u) probes.push_back(threshold - u);
    probes.push_back(threshold + u);
  }
}

// T_k (k = 1 .. 7) as float bits: the least non-negative float whose magnitude code is k or more
// (the code is non-decreasing in |x|: correctly rounded division and E2M1's rounding both are).
std::uint32_t code_threshold(const mxkit::nvfp4_block_scaling& s, std::uint32_t k) {
  return least_float_bits([&](std::uint32_t a) { return magnitude_code(s, a) >= k; });
}

// The encoder of scale `scale` under s, as nvfp4_reciprocal_block::make builds it for a block of
// that scale (make itself is checked by the whole-block case below).
mxkit::nvfp4_reciprocal_block encoder_for(const mxkit::nvfp4_scaler& s, e4m3 scale) {
  mxkit::nvfp4_reciprocal_block b{};
  b.scale = scale;
  const mxkit::nvfp4_block_scaling bs = s.for_block(scale);
  b.divider = bs.zero ? mxkit::nvfp4_reciprocal_divider{1.0f, 0.0f} : mxkit::nvfp4_reciprocal_divider{bs.divisor, mxkit::fp32_div(1.0f, bs.divisor)};
  b.path = bs.zero || (bs.divisor >= lowest && bs.divisor <= highest);
  return b;
}

std::uint8_t rule_code(const mxkit::nvfp4_scaler& s, e4m3 scale, float x) {
  return e2m1::from_float(s.scaled(x, scale), mxkit::rounding::nearest_even, mxkit::overflow::saturate).bits();
}

TEST_CASE("the reciprocal quotient is the correctly rounded one", "[nvfp4][reciprocal]") {
  std::mt19937_64 g(11);
  std::vector<float> divisors = {lowest, highest, 1.0f, 0x1.fffffep0f, 0x1.fffffep-64f, 0x1.fffffep63f, 3.0f, 0x1.000002p0f};
  for (int i = 0; i < 2000; ++i) {
    const std::uint32_t e = static_cast<std::uint32_t>(127 - 64 + static_cast<int>(g() % 129)) << 23;  // exponents -64 .. 64
    std::uint32_t m = static_cast<std::uint32_t>(g()) & 0x7FFFFFu;
    if (i % 10 == 0) m = 0x7FFFFFu;  // all-ones significands
    if (i % 10 == 1) m = 0u;         // powers of two
    if (i % 10 == 2) m = 0x7FFFFFu ^ (1u << (g() % 23));
    const float d = from_bits(e | m);
    if (d >= lowest && d <= highest) divisors.push_back(d);
  }
  long checked = 0;
  for (const float d : divisors) {
    const mxkit::nvfp4_reciprocal_divider div{d, mxkit::fp32_div(1.0f, d)};
    for (int i = 0; i < 1500; ++i) {
      // Quotients of every magnitude up to the path's 2^32, most of them where nearest even's codes
      // change (1/8 .. 8), a third down to 2^-44 (stochastic rounding reads their low bits).
      const float target = i % 3 == 0 ? std::ldexp(1.0f + static_cast<float>(g() % 4096) / 4096.0f, static_cast<int>(g() % 76) - 44)
                                      : std::ldexp(1.0f + static_cast<float>(g() % 1048576) / 1048576.0f, static_cast<int>(g() % 7) - 3);
      float a = mxkit::fp32_mul(target, d);
      a = from_bits(bits(a) + static_cast<std::uint32_t>(g() % 9) - 4u);  // a few ulps either side
      if (!(a >= 0.0f) || !std::isfinite(a) || mxkit::fp32_mul(a, div.reciprocal) > 0x1p32f) continue;
      const float want = mxkit::fp32_div(a, d), got = div.quotient(a);
      INFO("d bits " << bits(d) << ", a bits " << bits(a));
      if (want >= 0x1p-39f) {
        REQUIRE(bits(got) == bits(want));
        REQUIRE(bits(div(-a)) == bits(mxkit::fp32_div(-a, d)));  // the signed form: x's sign
      } else {
        REQUIRE(got < 0x1p-33f);
      }
      ++checked;
    }
  }
  CHECK(checked > 2000000);
  const mxkit::nvfp4_reciprocal_divider one{3.0f, mxkit::fp32_div(1.0f, 3.0f)}, zero_scale{1.0f, 0.0f};
  CHECK(bits(one(-0.0f)) == 0x80000000u);
  CHECK(bits(zero_scale(-5.0f)) == 0x80000000u);  // a zero scale: the element's signed zero
  CHECK(bits(zero_scale(5.0f)) == 0u);
}

TEST_CASE("the codes through the reciprocal are the rule's around every code threshold", "[nvfp4][reciprocal]") {
  std::mt19937_64 g(17);
  long probed = 0;
  for (const float t : tensor_scales()) {
    const mxkit::nvfp4_scaler s{t};
    for (int code = 0; code <= 126; ++code) {
      const e4m3 scale = e4m3::from_bits(static_cast<std::uint8_t>(code));
      const mxkit::nvfp4_reciprocal_block enc = encoder_for(s, scale);
      if (!enc.path) continue;  // such blocks are quantize_nvfp4_block's (the whole-block case)
      const mxkit::nvfp4_block_scaling bs = s.for_block(scale);
      // The largest |x| a block of this scale on the path can hold: quotients up to 2^32.
      const float limit = bs.zero ? 0x1.fffffep127f : mxkit::fp32_mul(0x1p31f, bs.divisor);
      std::vector<std::uint32_t> probes;
      for (std::uint32_t k = 1; k <= 7; ++k) add_around(probes, code_threshold(bs, k));
      for (int i = 0; i < 256; ++i) probes.push_back(static_cast<std::uint32_t>(g() % 0x7F800000u));
      probes.push_back(0u);
      probes.push_back(1u);
      std::vector<float> xs;
      for (const std::uint32_t a : probes)
        if (from_bits(a) <= limit) xs.push_back(from_bits(a | (g() % 2 ? 0x80000000u : 0u)));
      while (xs.size() % mxkit::nvfp4_block_size) xs.push_back(-0.0f);
      for (std::size_t b = 0; b < xs.size(); b += mxkit::nvfp4_block_size) {
        std::uint32_t words[mxkit::nvfp4_block_words];
        enc.encode_nearest_even(xs.data() + b, words);
        for (int i = 0; i < mxkit::nvfp4_block_size; ++i) {
          const float x = xs[b + static_cast<std::size_t>(i)];
          INFO("tensor scale " << t << ", scale code " << code << ", x bits " << bits(x));
          REQUIRE(((words[i / 8] >> (4 * (i % 8))) & 0xFu) == rule_code(s, scale, x));
          ++probed;
        }
      }
    }
  }
  CHECK(probed > 1000000);
}

mxkit::nvfp4_packed_block rule_block(const float* v, std::uint32_t amax, const mxkit::nvfp4_scaler& s) {
  return mxkit::pack_nvfp4_block(mxkit::quantize_nvfp4_block(v, amax, s, mxkit::nvfp4_options{}));
}

TEST_CASE("blocks through the reciprocal equal quantize_nvfp4_block", "[nvfp4][reciprocal]") {
  std::mt19937_64 g(23);
  std::normal_distribution<float> n(0.0f, 1.0f);
  int on_path = 0, off_path = 0;
  std::vector<float> scales = tensor_scales();
  scales.push_back(0x1p-60f);  // given far below the data below: saturated block scales, off the path
  for (const float t : scales) {
    const mxkit::nvfp4_scaler s{t};
    const mxkit::nvfp4_reciprocal_scaler rs = mxkit::nvfp4_reciprocal_scaler::of(s);
    for (int trial = 0; trial < 2000; ++trial) {
      float v[mxkit::nvfp4_block_size];
      // Magnitudes around the tensor scale's range (t x 2688 is the copy's amax), some far below.
      const float magnitude = (t == 0x1p-60f ? 1.0f : t * 2688.0f) * std::ldexp(1.0f, -static_cast<int>(g() % 40));
      for (float& x : v) x = n(g) * magnitude;
      switch (trial % 8) {
        case 1: v[g() % 16] = std::numeric_limits<float>::quiet_NaN(); break;
        case 2: v[g() % 16] = -std::numeric_limits<float>::infinity(); break;
        case 3: for (float& x : v) x = 0.0f; v[3] = -0.0f; break;
        case 4: for (float& x : v) x = from_bits(static_cast<std::uint32_t>(g() % 0x00800000u) | (g() % 2 ? 0x80000000u : 0u)); break;
        case 6:  // a wide range within the block: quotients from 6 down to about 2^-38
          for (float& x : v) x = std::ldexp(n(g) > 0.0f ? magnitude : -magnitude, -static_cast<int>(g() % 40));
          break;
        default: break;
      }
      std::uint32_t amax = mxkit::nvfp4_block_amax_bits(v);
      // 2-D scaling passes a 16 x 16 tile's amax, at least the block's own.
      if (trial % 8 == 5 && amax < 0x7F000000u) amax += static_cast<std::uint32_t>(g() % (1u << 24));
      const mxkit::nvfp4_packed_block want = rule_block(v, amax, s);
      const mxkit::nvfp4_packed_block got = mxkit::quantize_nvfp4_block_nearest_even(v, amax, rs);
      (mxkit::nvfp4_reciprocal_block::make(amax, rs).path ? on_path : off_path) += 1;
      INFO("tensor scale " << t << ", trial " << trial);
      REQUIRE(got.scale.bits() == want.scale.bits());
      REQUIRE(got.words[0] == want.words[0]);
      REQUIRE(got.words[1] == want.words[1]);
      for (const mxkit::rounding r : {mxkit::rounding::stochastic, mxkit::rounding::toward_zero, mxkit::rounding::nearest_away}) {
        mxkit::nvfp4_options o;
        o.round = r;
        o.seed = g();
        o.stream = static_cast<std::uint32_t>(g() % 4);
        const std::uint64_t first = 16 * (g() % 100000);
        const mxkit::nvfp4_block w = mxkit::quantize_nvfp4_block(v, amax, s, o, first);
        const mxkit::nvfp4_block b = mxkit::quantize_nvfp4_block_by_reciprocal(v, amax, rs, o, first);
        INFO("rounding " << static_cast<int>(r));
        REQUIRE(b.scale.bits() == w.scale.bits());
        for (int i = 0; i < mxkit::nvfp4_block_size; ++i) REQUIRE(b.elements[i].bits() == w.elements[i].bits());
      }
    }
  }
  CHECK(on_path > 20000);
  CHECK(off_path > 2000);
}

// The least amax (float bits) whose block scale under s is code k or more (the rule's scale is
// non-decreasing in the amax).
std::uint32_t scale_threshold(const mxkit::nvfp4_scaler& s, std::uint32_t k) {
  return least_float_bits([&](std::uint32_t a) { return s.block_scale(from_bits(a)).bits() >= k; });
}

TEST_CASE("the block scale through two dividers is the rule's, and so is the block's divider", "[nvfp4][reciprocal]") {
  std::mt19937_64 g(29);
  std::vector<float> scales = tensor_scales();
  // The bounds of the divided path and just outside them.
  for (const float t : {0x1p-55f, 0x1.fffffep-56f, 0x1p55f, 0x1.000002p55f, 0x1.7p-50f, 0x1.3p50f}) scales.push_back(t);
  long probed = 0, divided = 0;
  for (const float t : scales) {
    const mxkit::nvfp4_scaler s{t};
    const mxkit::nvfp4_reciprocal_scaler rs = mxkit::nvfp4_reciprocal_scaler::of(s);
    // The same scaler with the divided path off: every block takes the rule's divisions.
    const mxkit::nvfp4_reciprocal_scaler plain{s, {t, 1.0f}, false};
    CHECK(rs.fast == (t >= 0x1p-55f && t <= 0x1p55f));
    std::vector<std::uint32_t> probes = {0u, 1u, 0x007FFFFFu, 0x00800000u, bits(0x1p-36f), bits(0x1p-36f) - 1u, bits(0x1p34f),
                                         bits(0x1p34f) - 1u, 0x7F7FFFFFu, bits(1.0f), bits(6.0f)};
    for (std::uint32_t k = 1; k <= 126; ++k) add_around(probes, scale_threshold(s, k));
    // Random amaxes: across every binade, and around the tensor's own range (amax up to 2688 t).
    for (int i = 0; i < 4000; ++i) probes.push_back(static_cast<std::uint32_t>(g() % 0x7F800000u));
    for (int i = 0; i < 4000; ++i) probes.push_back(bits(t * 2688.0f * std::ldexp(static_cast<float>(g() % 1000000) / 1e6f, -static_cast<int>(g() % 24))));
    for (const std::uint32_t a : probes) {
      if (a >= 0x7F800000u) continue;
      const float amax = from_bits(a);
      INFO("tensor scale bits " << bits(t) << ", amax bits " << a);
      REQUIRE(rs.block_scale(amax).bits() == s.block_scale(amax).bits());
      const mxkit::nvfp4_reciprocal_block b = mxkit::nvfp4_reciprocal_block::make(a, rs), want = mxkit::nvfp4_reciprocal_block::make(a, plain);
      REQUIRE(b.scale.bits() == want.scale.bits());
      REQUIRE(b.path == want.path);
      REQUIRE(bits(b.divider.divisor) == bits(want.divider.divisor));
      REQUIRE(bits(b.divider.reciprocal) == bits(want.divider.reciprocal));
      ++probed;
      if (rs.fast && amax >= 0x1p-36f && amax < 0x1p34f) ++divided;
    }
  }
  CHECK(probed > 300000);
  CHECK(divided > 100000);  // the divided path is what most of these scales take
}

// At compile time the quotient divides (no fused multiply-add there): the same block.
constexpr bool compile_time_block_matches() {
  const float v[mxkit::nvfp4_block_size] = {0.3f, -1.7f, 2.5f, 5.9f, -0.0f, 0.0f, 1e-30f, -3.25f, 4.0f, 0.76f, -6.0f, 1.26f, 2.49f, -0.74f, 3.6f, 0.1f};
  const mxkit::nvfp4_scaler s{0x1p-9f};
  const std::uint32_t amax = mxkit::nvfp4_block_amax_bits(v);
  const mxkit::nvfp4_packed_block a = mxkit::quantize_nvfp4_block_nearest_even(v, amax, mxkit::nvfp4_reciprocal_scaler::of(s));
  const mxkit::nvfp4_packed_block b = mxkit::pack_nvfp4_block(mxkit::quantize_nvfp4_block(v, amax, s, mxkit::nvfp4_options{}));
  return a.scale.bits() == b.scale.bits() && a.words[0] == b.words[0] && a.words[1] == b.words[1];
}
static_assert(compile_time_block_matches());

TEST_CASE("a packed block holds element 8j + i in bits 4i of word j", "[nvfp4][reciprocal]") {
  mxkit::nvfp4_block b{};
  for (int i = 0; i < mxkit::nvfp4_block_size; ++i) b.elements[i] = e2m1::from_bits(static_cast<std::uint8_t>(i));
  const mxkit::nvfp4_packed_block p = mxkit::pack_nvfp4_block(b);
  CHECK(p.words[0] == 0x76543210u);
  CHECK(p.words[1] == 0xFEDCBA98u);
}

}  // namespace nvfp4_reciprocal_test
