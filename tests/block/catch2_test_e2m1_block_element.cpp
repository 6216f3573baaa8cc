// SPDX-License-Identifier: Apache-2.0
// E2M1's block-element encoder (block_element_encoder<e2m1>::encode, block/element_encoder.hpp:
// two FMAs and a min, the encoder of every MXFP4 block on the float path, host and device)
// against the integer rounding of from_float_scaled and the long-double oracle: every bf16 value
// and random floats at every element-scale exponent a float-path block can have, wherever
// |x| * 2^-E < 8 (the block element's precondition).
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <mxkit/block/element_encoder.hpp>
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/format/e2m1.hpp>

#include "../catch.hpp"
#include "../format/spec_oracle.hpp"

namespace {
using mxkit::e2m1;
using mxkit::overflow;
using mxkit::rounding;
using encoder = mxkit::block_element_encoder<mxkit::e2m1>;

// The exponents E (scale_inv = 2^-E) the float path hands E2M1's encoder: at least -124 (amax
// at least float_path_min_amax = 2^-122 under the floor rule; amax 0 gives E = 0 or 2), at most
// encoder::max_exponent; the encoder is checked on [-126, 126].
constexpr int min_exp = -126, max_exp = encoder::max_exponent;
static_assert(max_exp == 126);
static_assert(mxkit::detail::float_path_min_amax<e2m1>() == 5u << 23);  // 2^-122

constexpr std::uint32_t enc(float x, int e) { return encoder::encode(x, mxkit::detail::exp2i(-e)).bits(); }
// Ties go to the even code; one ulp off a tie decides it (a double rounding would not).
static_assert(enc(0.25f, 0) == 0 && enc(0x1.000002p-2f, 0) == 1 && enc(0.75f, 0) == 2);
static_assert(enc(2.5f, 0) == 4 && enc(0x1.400002p1f, 0) == 5 && enc(3.5f, 0) == 6);
static_assert(enc(5.0f, 0) == 6 && enc(0x1.400002p2f, 0) == 7 && enc(6.0f, 0) == 7);
// Saturation: [7, 8) rounds to 8 in value, saturates to 6.
static_assert(enc(0x1.bffffep2f, 0) == 7 && enc(7.0f, 0) == 7 && enc(0x1.fffffep2f, 0) == 7);
// Sign, -0, and the extreme exponents.
static_assert(enc(-0.0f, 0) == 8 && enc(-5.5f, 0) == 15 && enc(-0x1p-149f, 0) == 8);
static_assert(enc(0x1.8p127f, 125) == 7 && enc(-0x1.6p126f, 125) == 13 && enc(0x1p-127f, min_exp) == 1);
static_assert(enc(0x1.fffffep127f, 126) == 6 && enc(-0x1.8p127f, 126) == 13 && enc(0x1.cp127f, 126) == 6);
static_assert(enc(0x1.bffffep-124f, min_exp) == 7 && enc(0x1p-149f, min_exp) == 0);

struct checker {
  oracle::mismatch_log log;
  const oracle::table& t = oracle::table_of(oracle::e2m1_spec);
  void operator()(float x, int e) {
    if (!std::isfinite(x) || !(std::fabs(std::ldexp(static_cast<double>(x), -e)) < 8.0)) return;  // outside the precondition
    const std::uint32_t got = enc(x, e);
    const std::uint32_t want = e2m1::from_float_scaled(x, e, rounding::nearest_even, overflow::saturate).bits();
    const bool ok = got == want && got == oracle::encode(oracle::e2m1_spec, t, x, e, rounding::nearest_even, overflow::saturate);
    ok ? log.pass() : log.fail("x=" + oracle::describe(x) + " E=" + std::to_string(e) + " got " + std::to_string(got) + " want " + std::to_string(want));
  }
};
}  // namespace

TEST_CASE("e2m1 block element: every bf16 value at every float-path exponent", "[format][exhaustive]") {
  checker c;
  const std::vector<float> bf16 = oracle::all_bfloat16_patterns();
  for (int e = min_exp; e <= max_exp; ++e)
    for (const float x : bf16) c(x, e);
  INFO(c.log.summary());
  CHECK(c.log.count == 0);
  CHECK(c.log.checked > 8'000'000);
}

TEST_CASE("e2m1 block element: random floats, ties and their neighbours at every exponent", "[format][exhaustive]") {
  checker c;
  std::mt19937_64 gen(0xE2A1);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0x40FFFFFFu);  // |y| in [0, 8), every float
  for (int e = min_exp; e <= max_exp; ++e) {
    for (int k = 0; k < 65536; ++k) {
      const float y = mxkit::bit_cast<float>(bits(gen) | (k & 1 ? 0x80000000u : 0u));
      c(std::ldexp(y, e), e);
    }
    // Every grid point and midpoint k/4 in [0, 8] and its two float neighbours, both signs.
    for (int k = 0; k <= 32; ++k)
      for (const float s : {1.0f, -1.0f}) {
        const float y = s * static_cast<float>(k) / 4.0f;
        for (const float v : {y, std::nextafter(y, -9.0f), std::nextafter(y, 9.0f)}) c(std::ldexp(v, e), e);
      }
  }
  INFO(c.log.summary());
  CHECK(c.log.count == 0);
  CHECK(c.log.checked > 16'000'000);
}

TEST_CASE("e2m1 block element: MXFP4 blocks at the top of the exponent range", "[format]") {
  // amax just below 2^128: exponent 125 (floor) or 126 (the other rules), the largest element
  // scale the float path takes; same codes as from_float_scaled.
  std::array<float, 32> b{};
  for (std::size_t i = 0; i < 32; ++i) b[i] = std::ldexp(static_cast<float>(i) - 15.5f, 124);
  b[5] = 0x1.fffffep127f;
  for (const mxkit::scale_rule rule : oracle::all_scale_rules) {
    mxkit::quantize_options o;
    o.rule = rule;
    const auto q = mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp4>>(b, o);
    CHECK(q.scale.exponent() == (rule == mxkit::scale_rule::floor ? 125 : 126));
    for (std::size_t i = 0; i < 32; ++i)
      CHECK(q.elements[i].bits() == e2m1::from_float_scaled(b[i], q.scale.exponent(), rounding::nearest_even, overflow::saturate).bits());
  }
}
