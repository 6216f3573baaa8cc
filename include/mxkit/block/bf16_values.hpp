// SPDX-License-Identifier: Apache-2.0
#pragma once
// MXFP8 elements written out as bf16 values: each code times its block's E8M0 scale. An E4M3 or
// E5M2 value has at most 4 significant bits and bf16 has 8 with fp32's exponent range, so the
// product is a bf16 value as long as it stays within bf16's range: the upper half of the exact
// fp32 product. Hopper's GEMM multiplies such values on its bf16 tensor cores (gpu/gemm/sm90/),
// which is exact while every product and sum stays a normal fp32 number: every non-zero block's
// exponent within +-max_exponent, else the block-scaled FP8 fallback runs on the codes. One
// definition for the three places that need it: the expansion of a copy's codes before the GEMM
// (gpu/gemm/expand.hpp), the quantizer that writes the values instead of the codes
// (gpu/quantize/), and the way back from values to codes for that fallback.
#include <cstdint>
#include <type_traits>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>

MXKIT_BEGIN_NAMESPACE
namespace bf16_values {

// Block exponents (scale byte - 127) beyond +-48 could take a product of two values, or a partial
// sum, out of fp32's normal range, where it would round differently from the reference's
// per-block products (ref/gemm.hpp); E4M3's largest value is 448 < 2^9, so two blocks within +-48
// keep every product between 2^-114 and 2^115 times codes' products.
inline constexpr int max_exponent = 48;

template <bool E4M3>
using element = std::conditional_t<E4M3, e4m3, e5m2>;

// bf16 bits of code c's value times the block scale: the upper half of the exact fp32 product.
// The definition every path gives (NaN codes and scales included: the device's product).
template <bool E4M3>
MXKIT_HD constexpr std::uint32_t element_bits(std::uint32_t c, float scale) noexcept {
  return bit_cast<std::uint32_t>(element<E4M3>::from_bits(static_cast<std::uint8_t>(c)).to_float() * scale) >> 16;
}

// Does a block part whose codes' bits OR to `codes_or` under scale byte s leave the exact range
// of the bf16 product (a non-zero code in a block beyond +-max_exponent binades)? NaN scales do
// not: their blocks are NaN on both routes.
MXKIT_HD constexpr bool beyond_exact_range(unsigned s, std::uint32_t codes_or) noexcept {
  const int e = static_cast<int>(s) - 127;
  return s != 0xFF && (codes_or & 0x7F7F7F7Fu) != 0 && (e > max_exponent || e < -max_exponent);
}
static_assert(!beyond_exact_range(127 + 48, 0x01) && beyond_exact_range(127 + 49, 0x01) && !beyond_exact_range(127 + 49, 0x80808080u) &&
              beyond_exact_range(0x00, 0x01) && !beyond_exact_range(127 - 48, 0x7F) && !beyond_exact_range(0xFF, 0x7E));

// Does a word of four codes hold a NaN code (E4M3 0x7F/0xFF, E5M2 0x7D-0x7F/0xFD-0xFF)? Each
// byte's magnitude plus the distance from the first NaN code to 0x80 carries into its top bit
// only for NaN codes, and never into the next byte (0x7F + 3 < 0x100).
MXKIT_HD constexpr bool has_nan_code(bool e4m3, std::uint32_t w) noexcept {
  return (((w & 0x7F7F7F7Fu) + (e4m3 ? 0x01010101u : 0x03030303u)) & 0x80808080u) != 0;
}
static_assert(has_nan_code(true, 0x0000007Fu) && has_nan_code(true, 0xFF000000u) && !has_nan_code(true, 0x7E7EFEFEu) &&
              has_nan_code(false, 0x00007D00u) && !has_nan_code(false, 0x7C7CFCFCu));

// Two binary16 values (a word, the first in the low half) times the scale, as two bf16 in a word.
MXKIT_HD inline std::uint32_t half_pair_bf16(std::uint32_t h, float scale) noexcept {
  const float a = hw::cvt_f32_f16(static_cast<std::uint16_t>(h)) * scale;
  const float b = hw::cvt_f32_f16(static_cast<std::uint16_t>(h >> 16)) * scale;
  return (bit_cast<std::uint32_t>(a) >> 16) | (bit_cast<std::uint32_t>(b) & 0xFFFF0000u);
}

// Four codes (the first in the low byte) as four bf16, two to a word, the first in the low half.
// sm_89 and later convert two codes in one instruction (exact, arch/intrinsics.hpp) for words
// without NaN codes; elsewhere, and for NaN codes, each code goes through the generic decode.
// Either way each bf16 is element_bits of its code.
template <bool E4M3>
MXKIT_HD inline void four_bf16(std::uint32_t w, float scale, std::uint32_t& lo, std::uint32_t& hi) noexcept {
  if constexpr (hw::has_cvt_fp8) {
    if (!has_nan_code(E4M3, w)) {
      lo = half_pair_bf16(hw::cvt_f16x2_fp8x2<E4M3 ? 3 : 2>(static_cast<std::uint16_t>(w)), scale);
      hi = half_pair_bf16(hw::cvt_f16x2_fp8x2<E4M3 ? 3 : 2>(static_cast<std::uint16_t>(w >> 16)), scale);
      return;
    }
  }
  lo = element_bits<E4M3>(w & 0xFF, scale) | (element_bits<E4M3>((w >> 8) & 0xFF, scale) << 16);
  hi = element_bits<E4M3>((w >> 16) & 0xFF, scale) | (element_bits<E4M3>(w >> 24, scale) << 16);
}

// The way back: the code whose value times the scale (byte s, not NaN) is bf16 `bits`, for
// values element_bits wrote where the product was exact and finite (the quantizer's values
// from a 16-bit input without the rotation always are: gpu/quantize.hpp). Dividing by a power of
// two is exact, so the quotient is the code's value and the conversion only re-encodes it; signed
// zeros and NaNs keep their sign. Under a NaN scale the block is NaN whatever its codes: 0.
template <bool E4M3>
MXKIT_HD constexpr std::uint8_t code_of(std::uint16_t bits, unsigned s) noexcept {
  if (s == 0xFF) return 0;
  const float v = bit_cast<float>(static_cast<std::uint32_t>(bits) << 16) * mxkit::detail::exp2i(127 - static_cast<int>(s));
  return element<E4M3>::from_float(v).bits();
}
static_assert(code_of<true>(0x3F80, 127) == 0x38 && code_of<true>(0xC3E0, 127 + 1) == 0xF6 && code_of<false>(0x8000, 3) == 0x80 &&
              code_of<true>(static_cast<std::uint16_t>(element_bits<true>(0x01, mxkit::detail::exp2i(-124))), 3) == 0x01);

}  // namespace bf16_values
MXKIT_END_NAMESPACE
