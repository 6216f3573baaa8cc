// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a peer's quantizer departs from the rule it documents, as switches the validation
// reference (validation/validate.hpp) can turn on to reproduce that peer's bytes. All off: mxkit's
// quantizer (block/scale_rule.hpp). The named peer configurations are in validation/peer_presets.hpp.
//
// zero_block_scale  the scale byte of an all-zero block. mxkit writes 0x7F (1.0, neutral); so
//                   does ROCm TransformerEngine's MXFP4 cast (an explicit `where(amax == 0, 127)`).
//                   torchao's to_mx writes 0x00 in every mode (its exponent arithmetic on amax 0
//                   clamps to -127, and RCEIL converts amax * (1/max) = 0 to byte 0); NVIDIA TE's
//                   float_to_e8m0(0) is 0x00. The codes are zeros either way.
// rceil_float_formula  RCEIL ("round_up", OCP/cuBLAS: the smallest power of two s with
//                   amax / s <= max) computed as TE's and torchao's code computes it: in float,
//                   descale = fl(amax * fl(1 / max)), then the E8M0 round-up of that float, where
//                   a float subnormal rounds up to byte 1 only above 2^-127 (TE's float_to_e8m0,
//                   torchao's _f32_to_e8m0_rceil; Blackwell's cvt.rp.satfinite.ue8m0x2.f32 agrees).
//                   For the FP4, FP6 and FP8 elements, where descale is a normal float this is
//                   the rule exactly: fl(1/max) * max rounds to 1, and no amax next to max * 2^k
//                   rounds across the power of two (tests/ref/catch2_test_peer_presets.cpp sweeps
//                   every binade edge). Where descale is subnormal, bits are lost: at amax =
//                   nextup(max * 2^-127), descale rounds to 2^-127 and the peers write 0x00,
//                   while the rule needs 0x01 (amax / 2^-127 > max, so the element would clip).
//                   (MXINT8's max 127/64 has fl(64/127) below 64/127, so the formula would also
//                   miss nextup(max * 2^k) in the normal range; no peer applies RCEIL to MXINT8.)
// unit_element_scale_at_0x00  NVIDIA TE multiplies the elements by exp2f_rcp(scale byte), which
//                   is defined as 1 (not 2^127) for byte 0x00: a block whose scale is 0x00 (amax
//                   at most max * 2^-127) is quantized as if its scale were 1, so its tiny elements
//                   all become zeros.
#include <cstdint>

#include <mxkit/block/scale_rule.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/e8m0.hpp>
#include <mxkit/format/float_arithmetic.hpp>
#include <mxkit/ref/names.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

struct peer_quirks {
  std::uint8_t zero_block_scale = 0x7F;     // mxkit's policy: 1.0
  bool rceil_float_formula = false;         // round_up as fl(amax * fl(1/max)), then E8M0 round-up
  bool unit_element_scale_at_0x00 = false;  // elements of a 0x00-scale block scaled by 1

  constexpr bool any() const noexcept { return zero_block_scale != 0x7F || rceil_float_formula || unit_element_scale_at_0x00; }
};

}  // namespace ref
namespace detail {
// TE's float_to_e8m0 and torchao's _f32_to_e8m0_rceil of a finite non-negative float: its
// exponent field, plus one when the significand has bits beyond the power of two; a subnormal
// rounds up to byte 1 only above 2^-127 (byte 0 is 2^-127 itself).
constexpr std::uint8_t e8m0_round_up_bits(std::uint32_t f) noexcept {
  const std::uint32_t exponent = f >> 23, mantissa = f & 0x7FFFFFu;
  const bool up = exponent == 0 ? mantissa > 0x400000u : (mantissa != 0 && exponent != 0xFE);
  return static_cast<std::uint8_t>(exponent + (up ? 1u : 0u));
}

// RCEIL as the peers compute it, for a finite non-zero amax (see the file comment).
template <class Element>
constexpr e8m0 rceil_float_formula_scale(std::uint32_t amax) noexcept {
  constexpr float max_rcp = static_cast<float>(1.0 / static_cast<double>(Element::max().to_float()));
  return e8m0::from_bits(e8m0_round_up_bits(multiply_rne_bits(amax, bit_cast<std::uint32_t>(max_rcp))));
}

// The scale a peer with quirks q writes for a block whose (rotated) amax has float bits `amax`.
template <class Element>
constexpr e8m0 peer_scale(std::uint32_t amax, scale_rule rule, const peer_quirks& q) noexcept {
  if (amax == 0) return e8m0::from_bits(q.zero_block_scale);
  if (rule == scale_rule::round_up && q.rceil_float_formula && amax < 0x7F800000u) return rceil_float_formula_scale<Element>(amax);
  return shared_scale<Element>(float_bits{amax}, rule);
}

// The scale the elements are divided by, given the block's scale.
constexpr e8m0 peer_element_scale(e8m0 scale, const peer_quirks& q) noexcept {
  return q.unit_element_scale_at_0x00 && scale.bits() == 0 ? e8m0::from_exponent(0) : scale;
}
}  // namespace detail
MXKIT_END_NAMESPACE
