// SPDX-License-Identifier: Apache-2.0
// arch/intrinsics.hpp on the host: no instruction-only path is taken (the has_* constants are
// false outside a device pass), the run-time paths agree with constant evaluation, and the
// plain fallbacks compute what their comments promise. The device paths are held to the same
// bytes by the GPU tests (tests/gpu) through the block and format code that calls them.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/format/float16.hpp>

#include "../catch.hpp"

namespace {
namespace hw = mxkit::hw;
using mxkit::bit_cast;

static_assert(MXKIT_CUDA_DEVICE_ARCH == 0);
static_assert(!hw::has_max_nan && !hw::has_cvt_f32_f16 && !hw::has_cvt_fp8);

// Constant evaluation: the plain expressions.
static_assert(hw::bit_width(0) == 0 && hw::bit_width(1) == 1 && hw::bit_width(0x800000u) == 24);
static_assert(hw::bit_width(0xFFFFFFFFu) == 32 && hw::bit_width(0x7FFFFFFFu) == 31);
static_assert(bit_cast<std::uint32_t>(hw::abs_float(-0.0f)) == 0 && hw::abs_float(-3.5f) == 3.5f);
static_assert(hw::fma_exact_product(3.0f, 0.5f, 0x1p24f) == 0x1p24f + 2.0f);  // 2^24 + 1.5: ulp 2, one rounding
static_assert(hw::max_nan(1.0f, 2.0f) == 2.0f && hw::max_nan(0.0f, 0x1p-149f) == 0x1p-149f);
static_assert(bit_cast<std::uint32_t>(hw::max_nan(std::numeric_limits<float>::quiet_NaN(), 1.0f)) == 0x7FFFFFFFu);
static_assert(bit_cast<std::uint32_t>(hw::max_nan(std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN())) ==
              0x7FFFFFFFu);
static_assert(hw::cvt_f32_f16(0x3C00) == 1.0f && hw::cvt_f32_f16(0xC000) == -2.0f && hw::cvt_f32_f16(0x7BFF) == 65504.0f);
static_assert(hw::cvt_f32_f16(0x0001) == 0x1p-24f && hw::cvt_f32_f16(0x83FF) == -0x1.ff8p-15f);
static_assert(hw::cvt_f32_f16(0xFC00) == -std::numeric_limits<float>::infinity());

// The detection idiom a caller uses: no FP8 conversion is instantiated where has_cvt_fp8 is false.
template <int ManBits>
constexpr int fp8_path() {
  if constexpr (hw::has_cvt_fp8) return hw::cvt_fp8_satfinite<ManBits>(1.0f);
  else return -1;
}
static_assert(fp8_path<3>() == -1 && fp8_path<2>() == -1);
}  // namespace

TEST_CASE("intrinsics: bit_width at run time equals constant evaluation", "[arch]") {
  std::mt19937 g(12);
  for (int k = 0; k < 200000; ++k) {
    volatile std::uint32_t v = g() >> (k % 32);
    const std::uint32_t x = v;
    int want = 0;
    for (std::uint32_t t = x; t; t >>= 1) ++want;
    REQUIRE(hw::bit_width(x) == want);
  }
  volatile std::uint32_t zero = 0;
  CHECK(hw::bit_width(zero) == 0);
}

TEST_CASE("intrinsics: cvt_f32_f16's plain path is float16::to_float on every non-NaN code", "[arch]") {
  int checked = 0;
  for (std::uint32_t h = 0; h <= 0xFFFFu; ++h) {
    const mxkit::float16 f = mxkit::float16::from_bits(static_cast<std::uint16_t>(h));
    if (f.is_nan()) continue;
    REQUIRE(bit_cast<std::uint32_t>(hw::cvt_f32_f16(static_cast<std::uint16_t>(h))) == bit_cast<std::uint32_t>(f.to_float()));
    ++checked;
  }
  CHECK(checked == 65536 - 2046);  // 2 * (2^10 - 1) NaN codes
}

TEST_CASE("intrinsics: abs_float, fma_exact_product and max_nan at run time", "[arch]") {
  std::mt19937 g(34);
  std::uniform_int_distribution<std::uint32_t> finite(0u, 0x7F7FFFFFu);
  for (int k = 0; k < 100000; ++k) {
    const float a = bit_cast<float>(finite(g) | (k & 1 ? 0x80000000u : 0u));
    const float b = bit_cast<float>(finite(g));
    REQUIRE(bit_cast<std::uint32_t>(hw::abs_float(a)) == (bit_cast<std::uint32_t>(a) & 0x7FFFFFFFu));
    const float m = hw::max_nan(std::fabs(a), b);
    REQUIRE(m == std::fmax(std::fabs(a), b));
    // A power-of-two product that stays normal: one rounding, as std::fma.
    const float p = std::ldexp(1.0f, k % 40 - 20);
    const float x = std::ldexp(std::fabs(a), -std::ilogb(a));  // in [1, 2)
    if (std::isfinite(x) && x != 0) REQUIRE(hw::fma_exact_product(x, p, 0x1p24f) == std::fma(x, p, 0x1p24f));
  }
  volatile float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(bit_cast<std::uint32_t>(hw::max_nan(2.0f, nan)) == 0x7FFFFFFFu);
}
