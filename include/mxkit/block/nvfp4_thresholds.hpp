// SPDX-License-Identifier: Apache-2.0
#pragma once
// NVFP4's nearest-even element codes as comparisons: the device quantizer's fast path
// (gpu/quantize/nvfp4_kernel.hpp), which otherwise divides every element.
//
// In a block whose elements are divided by d (nvfp4_block_scaling: d = fl(s x t) for E4M3 scale
// s and tensor scale t), element x gets e2m1(fl(x / d)) (block/nvfp4_scale.hpp). Correctly
// rounded division is non-decreasing in |x| for a fixed d, and so is E2M1's nearest-even rounding
// with saturation, and both are odd functions; so the code of x is x's sign and the number of
// thresholds T_1 <= ... <= T_7 that |x| reaches, T_k being the least float whose magnitude code is
// k or more. The thresholds are found by evaluating the rule itself (nvfp4_block_scaling, then
// e2m1::from_float): they hold no rounding rule of their own. Under one tensor scale a block's
// thresholds depend on its scale's code alone, so a copy has at most 127 sets (codes 0 .. 126;
// 127 is the NaN scale, whose blocks have zero codes), and an element costs seven integer
// comparisons on its bits (non-negative floats order as their bits) instead of a division.
// tests/block/catch2_test_nvfp4_thresholds.cpp holds them to quantize_nvfp4_block.
#include <cstddef>
#include <cstdint>

#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/block/nvfp4_scale.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/float_arithmetic.hpp>
#include <mxkit/format/rounding.hpp>

MXKIT_BEGIN_NAMESPACE

inline constexpr int nvfp4_code_thresholds = 7;          // E2M1 magnitude codes 1 .. 7
inline constexpr int nvfp4_threshold_scale_codes = 127;  // the E4M3 scale codes a finite block can have: 0 .. 126

// The magnitude code (0 .. 7) of the non-negative float with bits a in a block scaled by s: the rule.
MXKIT_HD constexpr std::uint32_t nvfp4_magnitude_code(const nvfp4_block_scaling& s, std::uint32_t a) noexcept {
  return e2m1::from_float(s(bit_cast<float>(a)), rounding::nearest_even, overflow::saturate).bits() & 0x7u;
}

// T_k (k = 1 .. 7) as float bits: the least non-negative finite float whose magnitude code in a
// block scaled by s is k or more, or +Inf's bits where none is (no finite |x| reaches it). Found by
// search over the bits, which order the non-negative floats: a first guess from E2M1's midpoint
// below code k times d, a bracket widened from it by doubling steps, then bisection. The guess
// lies within an ulp or two of T_k, so the rule is evaluated about three times; the result does
// not depend on the guess. The bracket's low end may be 0, whose code is 0 (zero divided by any
// divisor is a zero).
MXKIT_HD constexpr std::uint32_t nvfp4_code_threshold(const nvfp4_block_scaling& s, std::uint32_t k) noexcept {
  constexpr std::uint32_t largest = 0x7F7FFFFFu;  // FLT_MAX's bits
  const float midpoint = (e2m1::from_bits(static_cast<std::uint8_t>(k - 1u)).to_float() + e2m1::from_bits(static_cast<std::uint8_t>(k)).to_float()) * 0.5f;
  std::uint32_t g = s.zero ? 0u : bit_cast<std::uint32_t>(fp32_mul(midpoint, s.divisor)) & 0x7FFFFFFFu;
  g = g > largest ? largest : g;
  std::uint32_t lo = 0u, hi = largest;  // the invariant, once bracketed: code(lo) < k <= code(hi)
  if (nvfp4_magnitude_code(s, g) >= k) {
    hi = g;
    for (std::uint32_t step = 1u; hi > 0u; step *= 2u) {
      const std::uint32_t c = hi > step ? hi - step : 0u;
      if (nvfp4_magnitude_code(s, c) < k) {
        lo = c;
        break;
      }
      hi = c;
    }
    if (hi == 0u) return 0u;  // not reached for k >= 1: zero's code is 0
  } else {
    lo = g;
    for (std::uint32_t step = 1u;; step *= 2u) {
      if (lo == largest) return 0x7F800000u;  // no finite float has code k
      const std::uint32_t c = largest - lo > step ? lo + step : largest;
      if (nvfp4_magnitude_code(s, c) >= k) {
        hi = c;
        break;
      }
      lo = c;
    }
  }
  while (hi - lo > 1u) {
    const std::uint32_t m = lo + (hi - lo) / 2u;
    if (nvfp4_magnitude_code(s, m) >= k) hi = m;
    else lo = m;
  }
  return hi;
}

// The code of x (finite) from its block's thresholds t[0 .. 6] (T_1 .. T_7): x's sign and the
// number of thresholds |x| reaches, which, the thresholds being sorted, is the largest k with
// T_k <= |x|: three comparisons of a binary search, each choosing the next threshold.
MXKIT_HD constexpr std::uint8_t nvfp4_code_from_thresholds(const std::uint32_t* t, float x) noexcept {
  const std::uint32_t b = bit_cast<std::uint32_t>(x), a = b & 0x7FFFFFFFu;
  const bool four = a >= t[3];
  const bool two = a >= (four ? t[5] : t[1]);
  const bool one = a >= (four ? (two ? t[6] : t[4]) : (two ? t[2] : t[0]));
  const std::uint32_t c = (four ? 4u : 0u) | (two ? 2u : 0u) | (one ? 1u : 0u);
  return static_cast<std::uint8_t>(((b >> 28) & 0x8u) | c);
}

// quantize_nvfp4_block(v, amax, scaler, o) for o rounding to nearest even, its elements from
// `thresholds`: T_1 .. T_7 of each scale code (nvfp4_code_threshold under scaler.for_block), at
// thresholds + stride x code. The same block: the scale from the scaler, NaN or Inf blocks the NaN
// scale and zero codes.
MXKIT_HD constexpr nvfp4_block quantize_nvfp4_block_by_thresholds(const float* v, std::uint32_t amax, const nvfp4_scaler& scaler,
                                                                  const std::uint32_t* thresholds, int stride) noexcept {
  nvfp4_block b{};
  if (amax >= 0x7F800000u) {
    b.scale = e4m3::quiet_nan();
    return b;
  }
  b.scale = scaler.block_scale(bit_cast<float>(amax));
  const std::uint32_t* t = thresholds + static_cast<std::size_t>(stride) * (b.scale.bits() & 0x7Fu);
  std::uint32_t own[nvfp4_code_thresholds] = {};
  for (int k = 0; k < nvfp4_code_thresholds; ++k) own[k] = t[k];
  for (int i = 0; i < nvfp4_block_size; ++i) b.elements[i] = e2m1::from_bits(nvfp4_code_from_thresholds(own, v[i]));
  return b;
}

MXKIT_END_NAMESPACE
