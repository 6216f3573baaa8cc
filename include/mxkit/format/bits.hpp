// SPDX-License-Identifier: Apache-2.0
#pragma once
// Integer helpers shared by every encoder: the one significand-rounding routine, so that each
// rounding mode is written exactly once for all formats, and exact float assembly. Instruction
// choices (count leading zeros, fabs, fma) are arch/intrinsics.hpp's.
#include <cstdint>
#include <type_traits>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/rounding.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {

// Rounds sig * 2^-shift to an integer under mode r. `random_bits` is used only by stochastic
// rounding: the result rounds up when random_bits < floor(fraction * 2^32), so the probability
// of rounding up equals the discarded fraction to within 2^-32.
// One rule in the significand's own width: a float's significand (32 bits: every encoder) is
// rounded in 32-bit operations, which a GPU issues as one instruction each where 64-bit shifts
// and compares take two (the stochastic path of the E2M1 quantizers lives on this function); a
// product of significands (64 bits: format/float_arithmetic.hpp) in 64. A 32-bit significand
// shifted by 32 or more is rounded in 64 bits: the same rule, reached only by values far below
// the format's least step.
template <class U>
  requires(std::is_same_v<U, std::uint32_t> || std::is_same_v<U, std::uint64_t>)
MXKIT_HD constexpr std::uint64_t round_shifted(U sig, int shift, rounding r, std::uint32_t random_bits) noexcept {
  constexpr int width = static_cast<int>(sizeof(U)) * 8;
  if (shift <= 0) return std::uint64_t{sig} << (-shift);
  if (shift > 62) return 0;  // callers pass sig < 2^25: the fraction is below 2^-37
  if constexpr (width == 32) {
    if (shift >= 32) return round_shifted(std::uint64_t{sig}, shift, r, random_bits);
  }
  const U q = sig >> shift;
  const U rem = sig & ((U{1} << shift) - 1);
  const U half = U{1} << (shift - 1);
  bool up = false;
  switch (r) {
    case rounding::nearest_even: up = rem > half || (rem == half && (q & 1)); break;
    case rounding::nearest_away: up = rem >= half; break;
    case rounding::toward_zero: up = false; break;
    case rounding::stochastic: {
      // rem < 2^shift: shifted up to 32 bits it stays below 2^32 in U's width.
      const U frac32 = shift <= 32 ? rem << (32 - shift) : rem >> (shift - 32);
      up = U{random_bits} < frac32;
      break;
    }
  }
  return std::uint64_t{q} + (up ? 1 : 0);
}

// A finite non-zero float |x| as sig * 2^lsb_exp with sig < 2^24 (float subnormals included).
struct float_parts {
  std::uint32_t sig;
  int lsb_exp;
};
MXKIT_HD constexpr float_parts decompose_abs(std::uint32_t abs_bits) noexcept {
  const int fexp = static_cast<int>(abs_bits >> 23);
  const std::uint32_t man = abs_bits & 0x7FFFFFu;
  if (fexp == 0) return {man, -149};
  return {man | 0x800000u, fexp - 150};
}

// Exponent of the leading bit of a finite non-zero |x| (floor(log2|x|)), exact for subnormals.
MXKIT_HD constexpr int floor_log2_abs(std::uint32_t abs_bits) noexcept {
  const float_parts p = decompose_abs(abs_bits);
  return p.lsb_exp + hw::bit_width(p.sig) - 1;
}

// 2^e as a float, exactly, for e in [-149, 127] (subnormal below -126).
MXKIT_HD constexpr float exp2i(int e) noexcept {
  return e >= -126 ? bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23) : bit_cast<float>(1u << (e + 149));
}

// Builds the float sig * 2^exp exactly (sig < 2^24, result within float range, possibly
// subnormal); callers guarantee exactness.
MXKIT_HD constexpr float make_float(std::uint32_t sig, int exp) noexcept {
  if (sig == 0) return 0.0f;
  const int lead = exp + hw::bit_width(sig) - 1;
  if (lead >= -126) {
    const int p = hw::bit_width(sig) - 1;
    const std::uint32_t man = (sig - (std::uint32_t{1} << p)) << (23 - p);
    return bit_cast<float>((static_cast<std::uint32_t>(lead + 127) << 23) | man);
  }
  return bit_cast<float>(sig << (exp + 149));
}

}  // namespace detail
MXKIT_END_NAMESPACE
