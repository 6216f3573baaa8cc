// SPDX-License-Identifier: Apache-2.0
#pragma once
// The nearest-even encoder of an MX block's elements on the float path (block/quantize_block.hpp):
// elements x of a block whose scale is finite, under the element scale 2^E passed as
// scale_inv = 2^-E, so that no x is NaN or Inf, |x| * 2^-E < 2^(emax+1) (every scale rule brings
// the block's amax there, OCP MX v1.0 section 6.3), overflow saturates, and E <= max_exponent.
// The codes are those of Element::from_float_scaled(x, E, nearest_even, saturate); the exhaustive
// tests (tests/block/catch2_test_e2m1_block_element.cpp, catch2_test_quantize_block*.cpp) hold
// them to it. block_element_encoder<Element> is the trait; an element without a specialization
// (MXINT8, whose from_float_scaled has its own float path) is encoded by Element itself.
#include <cstdint>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/minifloat.hpp>

MXKIT_BEGIN_NAMESPACE

template <class Element>
struct block_element_encoder {
  static constexpr bool specialized = false;  // the block code calls Element::from_float_scaled
  static constexpr int max_exponent = 126;    // 2^-E stays a normal float
  static constexpr std::uint32_t bias = 0;
};

// Every minifloat with a float nearest-even path (all MX FP elements; not bfloat16).
template <class Enc>
  requires(minifloat<Enc>::has_fast_nearest_even)
struct block_element_encoder<minifloat<Enc>> {
  using element_type = minifloat<Enc>;
  static constexpr bool specialized = true;

  // E2M1 block elements: nearest-even in two FMAs and an integer min, no integer rounding. With
  // y = |x| * 2^-E (< 8), the E2M1 code of y is the concave piecewise-linear g(y) = min(2y, y + 2,
  // y/2 + 4) on [0, 6] (0, 0.5 ... 6 are codes 0 ... 7; the pieces meet at the grid points 2 and
  // 4), so nearest in value is nearest in code and a tie in value is a tie in code; ties go to the
  // even code, which is the even mantissa (a code's low bit is its mantissa bit). RNE is monotone,
  // so code = min(RNE(2y), RNE(y + 2), RNE(y/2 + 4)), and float rounding does the RNEs:
  //  - a = fma(|x|, 2 * 2^-E, 2^24 - 4) = 2^24 - 4 + 2y rounds with ulp 1 below 2^24 (y < 2) and
  //    ulp 2 above, so its bits are K + RNE(2y) for y < 2 and K + RNE(y + 2) from y = 2 on
  //    (K = bits(2^24 - 4); the binade edge at 2^24 is the grid point y = 2, and the tie at
  //    y = 1.75 goes up to 2^24, the even mantissa, code 4, as it should);
  //  - b = fma(|x|, 2^-E, 2^24) = 2^24 + y rounds with ulp 2: its bits are K + 4 + RNE(y/2).
  // Both float patterns lie in one sign and two adjacent binades, so the integer min of the bits is
  // K + code; a third operand, K + 7, saturates (y in [7, 8) rounds to 8 in value; E2M1 clips it
  // to 6, code 7). Each FMA rounds once: 2^-E is a power of two, so |x| * 2^-E is exact (or below
  // 2^-126, where it cannot move the constant): hw::fma_exact_product's precondition. The sign is
  // x's sign bit at bit 3 (encode_biased; quantize_block_packed shifts it in while packing). E in
  // [-126, 126] (every E2M1 block on the float path) keeps 2^-E normal and 2 * 2^-E finite.
  // The other formats take minifloat::bounded_scaled_rne_code.
  static constexpr bool e2m1_fma =
      Enc::exponent_bits == 2 && Enc::mantissa_bits == 1 && Enc::specials == special_values::none;
  static constexpr int max_exponent = 126;
  // encode_biased = encode's code + bias (K above for E2M1, 0 otherwise), so a packer can remove
  // the biases of a word at once.
  static constexpr std::uint32_t bias = e2m1_fma ? 0x4B7FFFFCu : 0u;

  // E2M1: the magnitude's code + bias, without the sign.
  MXKIT_HD static constexpr std::uint32_t encode_magnitude_biased(float x, float scale_inv) noexcept
    requires(e2m1_fma)
  {
    const float a = hw::abs_float(x);
    const std::uint32_t below2 = bit_cast<std::uint32_t>(hw::fma_exact_product(a, 2.0f * scale_inv, 0x1p24f - 4.0f));
    const std::uint32_t above2 = bit_cast<std::uint32_t>(hw::fma_exact_product(a, scale_inv, 0x1p24f));
    const std::uint32_t m = below2 < above2 ? below2 : above2;
    return m < bias + 7u ? m : bias + 7u;
  }
  MXKIT_HD static constexpr std::uint32_t encode_biased(float x, float scale_inv) noexcept {
    if constexpr (e2m1_fma) return encode_magnitude_biased(x, scale_inv) + ((bit_cast<std::uint32_t>(x) >> 31) << 3);
    else return element_type::bounded_scaled_rne_code(x, scale_inv);
  }
  MXKIT_HD static constexpr element_type encode(float x, float scale_inv) noexcept {
    using storage = typename element_type::storage_type;
    return element_type::from_bits(static_cast<storage>(encode_biased(x, scale_inv) - bias));
  }
};

MXKIT_END_NAMESPACE
