// SPDX-License-Identifier: Apache-2.0
// NVFP4's scale computation (block/nvfp4_scale.hpp) and block functions (block/nvfp4_block.hpp)
// against an independent reading of the rule: every step is computed here in long double and
// rounded to float by the host's cast (IEEE nearest even), and E4M3 and E2M1 values are found by
// searching the tables of tests/format/spec_oracle.hpp (built from the OCP field definitions):
// no integer rounding and no mxkit format template is involved on this side. Swept: every bf16
// block amax at many tensor scales, the floats around every E4M3 code's rounding boundaries, every
// (element code, scale code) pair in both directions, and every float amax over E4M3's whole
// range ([exhaustive]); then zeros, NaN, Inf and float subnormals.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <mxkit/block/nvfp4_block.hpp>

#include "../catch.hpp"
#include "../format/spec_oracle.hpp"

namespace nvfp4_scale_test {
using mxkit::e2m1;
using mxkit::e4m3;
using mxkit::rounding;

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
float f32(long double x) { return static_cast<float>(x); }  // one IEEE rounding to float

// The rule, restated: t = amax / (448 x 6) in fp32 (1 for amax 0, at least 2^-126); a block's
// scale is the E4M3 value nearest (ties to the even code) to fl(fl(amax_block / 6) / t), at most
// 448; an element is the E2M1 code of fl(x / fl(scale x t)), saturating at 6.
float tensor_scale(float amax) {
  if (amax == 0.0f) return 1.0f;
  const float t = f32(static_cast<long double>(amax) / 2688.0L);
  return t < 0x1p-126f ? 0x1p-126f : t;
}
std::uint8_t e4m3_code(long double v) {
  const oracle::table& t = oracle::table_of(oracle::e4m3_spec);
  const std::size_t i = oracle::round_index(t, v, rounding::nearest_even);
  return static_cast<std::uint8_t>(i == t.finite.size() ? t.finite.back().code : t.finite[i].code);  // past 464: 448
}
float pre_scale(float amax, float t) { return f32(static_cast<long double>(f32(static_cast<long double>(amax) / 6.0L)) / t); }
std::uint8_t block_scale(float amax, float t) { return e4m3_code(pre_scale(amax, t)); }
long double e4m3_value(std::uint8_t code) { return oracle::decode(oracle::e4m3_spec, code).magnitude; }
std::uint8_t element_code(float x, std::uint8_t scale, float t, rounding r = rounding::nearest_even, std::uint32_t random_bits = 0) {
  if (e4m3_value(scale) == 0) return std::signbit(x) ? 0x8 : 0x0;
  const float y = f32(static_cast<long double>(x) / f32(e4m3_value(scale) * t));
  return static_cast<std::uint8_t>(oracle::encode(oracle::e2m1_spec, oracle::table_of(oracle::e2m1_spec), y, 0, r, mxkit::overflow::saturate, random_bits));
}

// Tensor scales: 1, powers of two, the scales of amaxes with full significands, the extremes.
std::vector<float> tensor_scales() {
  std::vector<float> out = {1.0f, 0x1p-126f, 0x1p-100f, 0x1p-20f, 0.5f, 4.0f, 0x1p40f, 0x1p100f, 0x1.fffffep126f};
  std::mt19937_64 g(11);
  for (int i = 0; i < 40; ++i) out.push_back(tensor_scale(oracle::float_from_bits(0x30000000u + static_cast<std::uint32_t>(g() % 0x1F000000u))));
  return out;
}

// The first float a with pre_scale(a, t) >= target (pre_scale is monotone in a).
float first_amax_at(long double target, float t) {
  std::uint32_t lo = 0, hi = 0x7F7FFFFFu;
  while (lo < hi) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (pre_scale(oracle::float_from_bits(mid), t) >= target) hi = mid;
    else lo = mid + 1;
  }
  return oracle::float_from_bits(lo);
}

}  // namespace nvfp4_scale_test

TEST_CASE("nvfp4 tensor scale: amax / (448 x 6) in fp32, 1 for a zero amax, at least 2^-126", "[nvfp4_scale]") {
  using namespace nvfp4_scale_test;
  oracle::mismatch_log log;
  std::vector<float> amaxes = oracle::all_bfloat16_patterns();
  const std::vector<float> rnd = oracle::random_inputs(5, 200000, 200000, -149, 128);
  amaxes.insert(amaxes.end(), rnd.begin(), rnd.end());
  for (const float x : amaxes) {
    if (!std::isfinite(x)) continue;
    const float a = std::fabs(x);
    const float want = tensor_scale(a), got = mxkit::nvfp4_tensor_scale(a);
    if (bits(got) == bits(want)) log.pass();
    else log.fail(oracle::describe(a) + ": " + oracle::describe(got) + " vs " + oracle::describe(want));
    if (!mxkit::nvfp4_valid_tensor_scale(got)) log.fail(oracle::describe(a) + ": not a valid tensor scale");
  }
  INFO(log.summary());
  CHECK(log.count == 0);
  CHECK(log.checked > 400000);
  CHECK(mxkit::nvfp4_tensor_scale(0.0f) == 1.0f);
  CHECK(mxkit::nvfp4_tensor_scale(2688.0f) == 1.0f);
  CHECK(mxkit::nvfp4_tensor_scale(1e-37f) == 0x1p-126f);
  // An amax outside the contract (a caller's given one) still gives a valid scale: 1.
  for (const float outside : {-1.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), std::nanf("")})
    CHECK(bits(mxkit::nvfp4_tensor_scale(outside)) == bits(1.0f));
  static_assert(mxkit::nvfp4_tensor_scale(std::numeric_limits<float>::infinity()) == 1.0f);
  for (const float bad : {0.0f, -1.0f, 0x1p-127f, std::numeric_limits<float>::infinity(), std::nanf("")})
    CHECK_FALSE(mxkit::nvfp4_valid_tensor_scale(bad));
}

TEST_CASE("nvfp4 block scale: every bf16 block amax at many tensor scales", "[nvfp4_scale]") {
  using namespace nvfp4_scale_test;
  oracle::mismatch_log log;
  const std::vector<float> amaxes = oracle::all_bfloat16_patterns();
  for (const float t : tensor_scales())
    for (const float a : amaxes) {
      if (!(a >= 0.0f) || std::signbit(a) || std::isinf(a)) continue;  // amaxes are magnitudes
      const std::uint8_t want = block_scale(a, t), got = mxkit::nvfp4_block_scale(a, t).bits();
      if (got == want) log.pass();
      else log.fail(oracle::describe(a) + " at t " + oracle::describe(t) + ": " + std::to_string(got) + " vs " + std::to_string(want));
    }
  INFO(log.summary());
  CHECK(log.count == 0);
  CHECK(log.checked > 1000000);
}

TEST_CASE("nvfp4 block scale: the floats around every E4M3 code's rounding boundaries", "[nvfp4_scale]") {
  using namespace nvfp4_scale_test;
  const oracle::table& tab = oracle::table_of(oracle::e4m3_spec);
  oracle::mismatch_log log;
  std::vector<bool> reached(127, false);
  for (const float t : tensor_scales())
    for (std::size_t i = 0; i < tab.finite.size(); ++i) {  // boundaries: the value itself and the midpoint above it
      const long double v = tab.finite[i].value, next = i + 1 < tab.finite.size() ? tab.finite[i + 1].value : tab.beyond.value;
      for (const long double target : {v, (v + next) / 2}) {
        const float a0 = first_amax_at(target, t);
        std::uint32_t b = bits(a0) > 64 ? bits(a0) - 64 : 0;
        for (int k = 0; k < 128; ++k, ++b) {
          const float a = oracle::float_from_bits(b);
          if (std::isinf(a) || bits(a) > 0x7F7FFFFFu) break;
          const std::uint8_t want = block_scale(a, t), got = mxkit::nvfp4_block_scale(a, t).bits();
          if (want < reached.size()) reached[want] = true;
          if (got == want) log.pass();
          else log.fail(oracle::describe(a) + " at t " + oracle::describe(t) + ": " + std::to_string(got) + " vs " + std::to_string(want));
        }
      }
    }
  INFO(log.summary());
  CHECK(log.count == 0);
  for (std::size_t c = 0; c < reached.size(); ++c) {
    INFO("E4M3 code " << c);
    CHECK(reached[c]);  // every finite non-negative scale code is reached, 0 and 448 included
  }
}

TEST_CASE("nvfp4 block scale: every float amax across E4M3's range", "[nvfp4_scale][exhaustive]") {
  using namespace nvfp4_scale_test;
  // Walk the amaxes in order: the expected code changes only where fl(fl(a / 6) / t) reaches the
  // next boundary, so the reading stays independent (long double, the table's midpoints) and the
  // sweep linear. Boundaries: midpoints of consecutive values; a tie takes the even code.
  const oracle::table& tab = oracle::table_of(oracle::e4m3_spec);
  for (const float t : {1.0f, tensor_scale(1000.0f)}) {
    INFO("t " << oracle::describe(t));
    const float first = first_amax_at(std::ldexp(1.0L, -12), t), last = first_amax_at(470.0L, t);
    std::size_t i = 0, mismatches = 0, checked = 0;
    for (std::uint32_t b = bits(first); b <= bits(last); ++b) {
      const float a = oracle::float_from_bits(b);
      const long double q = pre_scale(a, t);
      while (i + 1 < tab.finite.size() && q >= tab.finite[i + 1].value) ++i;
      std::uint8_t want = static_cast<std::uint8_t>(tab.finite[i].code);
      const long double next = i + 1 < tab.finite.size() ? tab.finite[i + 1].value : tab.beyond.value;
      const long double mid = (tab.finite[i].value + next) / 2;
      if ((q > mid || (q == mid && !tab.finite[i].even)) && i + 1 < tab.finite.size()) want = static_cast<std::uint8_t>(tab.finite[i + 1].code);
      ++checked;
      if (mxkit::nvfp4_block_scale(a, t).bits() != want && mismatches++ < 5) FAIL_CHECK(oracle::describe(a) << ": " << int{want});
    }
    CHECK(mismatches == 0);
    CHECK(checked > 100000000);
  }
}

TEST_CASE("nvfp4 elements: every scale code, the E2M1 boundaries under it, both roundings", "[nvfp4_scale]") {
  using namespace nvfp4_scale_test;
  const oracle::table& e2 = oracle::table_of(oracle::e2m1_spec);
  oracle::mismatch_log log;
  std::mt19937 g(7);
  for (const float t : {1.0f, 0x1p-126f, tensor_scale(1000.0f), tensor_scale(7.7e-9f), tensor_scale(3.0e30f)})
    for (std::uint8_t s = 1; s < 0x7F; ++s) {
      const mxkit::nvfp4_scaler scaler{t};
      const long double unit = e4m3_value(s) * t;
      // x at every E2M1 value and midpoint times fl(s x t), with the floats either side, and beyond 6.
      std::vector<float> xs = oracle::boundary_inputs(e2, 0);
      for (float& x : xs) x = f32(static_cast<long double>(x) * f32(unit));
      for (const float x : {f32(7.0L * unit), f32(100.0L * unit), -f32(6.5L * unit)}) xs.push_back(x);
      for (const float x : xs) {
        if (!std::isfinite(x)) continue;
        const std::uint8_t want = element_code(x, s, t);
        const std::uint8_t got = e2m1::from_float(scaler.scaled(x, e4m3::from_bits(s)), rounding::nearest_even, mxkit::overflow::saturate).bits();
        if (got == want) log.pass();
        else log.fail(oracle::describe(x) + " scale " + std::to_string(s) + " t " + oracle::describe(t) + ": " + std::to_string(got) + " vs " + std::to_string(want));
        const std::uint32_t rb = g();
        const std::uint8_t want_sr = element_code(x, s, t, rounding::stochastic, rb);
        const std::uint8_t got_sr = e2m1::from_float(scaler.scaled(x, e4m3::from_bits(s)), rounding::stochastic, mxkit::overflow::saturate, rb).bits();
        if (got_sr == want_sr) log.pass();
        else log.fail("stochastic " + oracle::describe(x) + " scale " + std::to_string(s));
      }
    }
  INFO(log.summary());
  CHECK(log.count == 0);
  CHECK(log.checked > 100000);
}

TEST_CASE("nvfp4 decode and round trip: every element code under every scale code", "[nvfp4_scale]") {
  using namespace nvfp4_scale_test;
  oracle::mismatch_log log;
  for (const float t : {1.0f, 0x1p-126f, tensor_scale(1000.0f), tensor_scale(5e-30f), 0x1p100f})
    for (unsigned s = 0; s < 256; ++s)
      for (unsigned q = 0; q < 16; ++q) {
        const e2m1 code = e2m1::from_bits(static_cast<std::uint8_t>(q));
        const e4m3 scale = e4m3::from_bits(static_cast<std::uint8_t>(s));
        const float got = mxkit::nvfp4_decode(code, scale, t);
        const oracle::decoded dq = oracle::decode(oracle::e2m1_spec, q), ds = oracle::decode(oracle::e4m3_spec, s);
        if (ds.nan) {
          if (std::isnan(got)) log.pass();
          else log.fail("NaN scale " + std::to_string(s) + " decodes to " + oracle::describe(got));
          continue;
        }
        const long double exact = (dq.negative != ds.negative ? -1 : 1) * dq.magnitude * ds.magnitude * t;
        const float want = f32(exact);
        if (bits(got) == bits(want)) log.pass();
        else log.fail(std::to_string(q) + " x scale " + std::to_string(s) + ": " + oracle::describe(got) + " vs " + oracle::describe(want));
        // Back: a decoded value under its own (positive, non-zero) scale is its code again.
        if (s == 0 || s >= 0x7F || std::isinf(got)) continue;
        const std::uint8_t back = e2m1::from_float(mxkit::nvfp4_scaler{t}.scaled(got, scale)).bits();
        if (back == q) log.pass();  // -0 (code 8) included
        else log.fail("round trip of " + std::to_string(q) + " under " + std::to_string(s) + ": " + std::to_string(back));
      }
  INFO(log.summary());
  CHECK(log.count == 0);
}

TEST_CASE("nvfp4 blocks: zeros, tiny blocks, NaN, Inf and float subnormals", "[nvfp4_scale]") {
  using namespace nvfp4_scale_test;
  const mxkit::nvfp4_options o{};
  const auto quantize = [&](const std::vector<float>& in, float t) {
    float v[16] = {};
    for (std::size_t i = 0; i < in.size(); ++i) v[i] = in[i];
    return mxkit::quantize_nvfp4_block(v, mxkit::nvfp4_block_amax_bits(v), mxkit::nvfp4_scaler{t}, o);
  };
  // All zeros (with -0): scale zero, signed zero codes.
  mxkit::nvfp4_block b = quantize({0.0f, -0.0f, 0.0f}, 1.0f);
  CHECK(b.scale.bits() == 0x00);
  CHECK(b.elements[0].bits() == 0x0);
  CHECK(b.elements[1].bits() == 0x8);
  // A block so small next to the tensor scale that its scale rounds to 0 (below half of 2^-9):
  // it decodes to 0, and its codes are the signed zeros of its inputs.
  b = quantize({1e-4f, -3e-5f}, 1.0f);  // 1e-4 / 6 < 2^-10
  CHECK(block_scale(1e-4f, 1.0f) == 0x00);
  CHECK(b.scale.bits() == 0x00);
  CHECK(b.elements[0].bits() == 0x0);
  CHECK(b.elements[1].bits() == 0x8);
  // Just above: the least subnormal scale 2^-9, elements against fl(2^-9 x t).
  b = quantize({0.006f, -0.002f}, 1.0f);
  CHECK(b.scale.bits() == block_scale(0.006f, 1.0f));
  CHECK(b.scale.bits() == 0x01);
  CHECK(b.elements[0].bits() == element_code(0.006f, 0x01, 1.0f));
  CHECK(b.elements[1].bits() == element_code(-0.002f, 0x01, 1.0f));
  // NaN or +-Inf anywhere: the E4M3 NaN 0x7F and zero codes.
  for (const float special : {std::nanf(""), -std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    b = quantize({1.0f, special, 3.0f}, 1.0f);
    CHECK(b.scale.bits() == 0x7F);
    for (const e2m1 q : b.elements) CHECK(q.bits() == 0);
    float out[16];
    mxkit::dequantize_nvfp4_block(b, 1.0f, out);
    CHECK(std::isnan(out[0]));
  }
  // Float subnormal inputs under the smallest tensor scale: scale and elements as the rule says
  // (each step rounds to the subnormal float, which a flush-to-zero float path would lose).
  const std::vector<float> tiny = {1e-40f, -3e-41f, 7e-42f, 0x1p-149f};
  const float t = tensor_scale(1e-40f);
  CHECK(t == 0x1p-126f);
  b = quantize(tiny, t);
  CHECK(b.scale.bits() == block_scale(1e-40f, t));
  CHECK(b.scale.bits() != 0);
  for (std::size_t i = 0; i < tiny.size(); ++i) {
    INFO(i);
    CHECK(b.elements[i].bits() == element_code(tiny[i], b.scale.bits(), t));
  }
  // A given tensor scale far below the block's amax saturates the block scale at 448 (0x7E), and
  // its largest elements clip to 6.
  b = quantize({1000.0f, -1000.0f, 1.0f}, 0.25f);
  CHECK(b.scale.bits() == 0x7E);
  CHECK(b.elements[0].bits() == 0x7);
  CHECK(b.elements[1].bits() == 0xF);
}

TEST_CASE("nvfp4 blocks: the rotation, 2-D amax and stochastic rounding's bits", "[nvfp4_scale]") {
  using namespace nvfp4_scale_test;
  float x[16];
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i % 5) - 1.75f + (i == 9 ? 20.0f : 0.0f);
  mxkit::nvfp4_options o;
  o.hadamard = true;
  o.hadamard_signs = 0xD7E8u;
  // The rotation is H16 . D, normalized: compare with the matrix product in long double.
  float v[16];
  std::copy(x, x + 16, v);
  mxkit::nvfp4_rotate_block(v, o);
  for (int i = 0; i < 16; ++i) {
    long double s = 0;
    for (int j = 0; j < 16; ++j) s += ((__builtin_popcount(static_cast<unsigned>(i & j)) & 1) ? -1.0L : 1.0L) * ((0xD7E8u >> j) & 1 ? -x[j] : x[j]);
    CHECK(v[i] == f32(s / 4));  // every sum here is exact in float
  }
  // The caller's amax (a 16 x 16 tile's) sets the scale; the elements follow it.
  const float tile_amax = 40.0f;
  const mxkit::nvfp4_block b = mxkit::quantize_nvfp4_block(v, bits(tile_amax), mxkit::nvfp4_scaler{1.0f}, o);
  CHECK(b.scale.bits() == block_scale(tile_amax, 1.0f));
  for (int i = 0; i < 16; ++i) CHECK(b.elements[i].bits() == element_code(v[i], b.scale.bits(), 1.0f));
  // Stochastic rounding draws random_bits(seed, stream, first_index + i), mxkit's Philox.
  o.round = rounding::stochastic;
  o.seed = 1234;
  o.stream = 5;
  const mxkit::nvfp4_block s = mxkit::quantize_nvfp4_block(v, bits(tile_amax), mxkit::nvfp4_scaler{1.0f}, o, 320);
  for (int i = 0; i < 16; ++i)
    CHECK(s.elements[i].bits() == element_code(v[i], s.scale.bits(), 1.0f, rounding::stochastic, mxkit::random_bits(1234, 5, 320 + static_cast<std::uint64_t>(i))));
  // Dequantizing undoes the rotation: within the quantization error of the rotated values.
  float back[16];
  mxkit::dequantize_nvfp4_block(b, 1.0f, back, o);
  for (int i = 0; i < 16; ++i) CHECK(std::fabs(back[i] - x[i]) < 4.0f);
}
