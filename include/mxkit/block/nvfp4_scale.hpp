// SPDX-License-Identifier: Apache-2.0
#pragma once
// NVFP4's scales (block_scale_type::e4m3; NVIDIA, arXiv 2509.25149, the two-level scaling of its
// NVFP4 format): a value is E2M1 element x E4M3 block scale x fp32 tensor scale. The paper's
// quantities, under its names: the global encode scale s_enc = (448 x 6) / amax_tensor and its
// decode scale s_dec = 1 / s_enc; a block's decode scale amax_block / 6, times s_enc, cast to E4M3;
// the elements x / (E4M3 scale x s_dec), cast to E2M1. mxkit's rule evaluates them in fp32, one
// IEEE rounding per operation (format/float_arithmetic.hpp: the same bits under -ffast-math and
// flush-to-zero), with the decode scale as the one stored and given value:
//
//   tensor scale  t = fl(amax / (448 x 6)): the paper's s_dec, kept with the copy (dequantizing
//                 multiplies by it). amax is over the copy's finite values (rotated ones when the
//                 copy is rotated): NaN and Inf are flagged in their blocks and do not set the
//                 scale of the others. amax 0 (all zeros, an empty tensor, nothing finite): t = 1.
//                 t is at least the least normal float 2^-126 (an amax below 448 x 6 x 2^-126), so
//                 that scale x t below is never zero.
//   block scale   s = e4m3(fl(fl(amax_block / 6) / t)), to nearest even, saturating at 448 (a
//                 given tensor scale smaller than the tensor's amax needs); dividing by t is
//                 multiplying by s_enc with one rounding fewer. The largest block's scale lands
//                 next to 448, E4M3's top, where its step is finest relative to the value.
//   elements      code = e2m1(fl(x / fl(s x t))) under the options' rounding, saturating at +-6:
//                 where s rounded down the block's largest elements clip to 6 (the paper's rule;
//                 TransformerEngine and torchao do the same).
//   zero scale    s = 0 (an all-zero block, or one so small that its scale rounds to 0) decodes to
//                 0 whatever the codes: its codes are the signed zeros of its inputs.
//   NaN, Inf      a block with a NaN or an Inf (after the rotation: the butterfly sums pass FLT_MAX
//                 only with some |x| > 2^123) gets the E4M3 NaN 0x7F and zero codes, as MX blocks
//                 get E8M0's NaN (block/scale_rule.hpp): the whole block decodes to NaN.
//   decode        code x s x t = fl(fl(code x s) x t), the first product exact.
//
// The peers order the same formulas otherwise (TransformerEngine multiplies by s_enc x fl(1/6) and
// by a rounded reciprocal; torchao divides by its stored tensor scale and clamps the block scale
// below at 2^-6): validation/nvfp4_quirks.hpp reproduces each byte for byte.
#include <cstdint>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/float_arithmetic.hpp>

MXKIT_BEGIN_NAMESPACE

// 448 x 6: E4M3's largest value times E2M1's, the range one block scale times one element spans.
inline constexpr float nvfp4_range = e4m3::max().to_float() * e2m1::max().to_float();
static_assert(nvfp4_range == 2688.0f);
// The least normal float, the smallest tensor scale (see the file comment).
inline constexpr float nvfp4_min_tensor_scale = detail::exp2i(-126);

// Whether t can be a tensor scale: a positive, finite, normal float.
MXKIT_HD constexpr bool nvfp4_valid_tensor_scale(float t) noexcept {
  const std::uint32_t b = bit_cast<std::uint32_t>(t);
  return b >= 0x00800000u && b < 0x7F800000u;  // sign clear, normal, finite
}

// The tensor scale of a copy whose finite values have the largest magnitude amax (>= 0, finite).
// Any other amax (NaN, negative or infinite: a caller's, gpu::nvfp4_tensor_scale_source) gives 1,
// the scale of a copy without a finite non-zero value, so the result is always a valid scale.
MXKIT_HD constexpr float nvfp4_tensor_scale(float amax) noexcept {
  if (!(amax > 0.0f) || bit_cast<std::uint32_t>(amax) >= 0x7F800000u) return 1.0f;
  const float t = fp32_div(amax, nvfp4_range);
  return t < nvfp4_min_tensor_scale ? nvfp4_min_tensor_scale : t;
}

// The E4M3 scale of the quotient v = fl(fl(amax_block / 6) / t): the rule's last step, alone for
// callers that compute v another way (block/nvfp4_reciprocal.hpp).
MXKIT_HD constexpr e4m3 nvfp4_scale_of_quotient(float v) noexcept {
  return e4m3::from_float(v, rounding::nearest_even, overflow::saturate);  // +Inf (t tiny) saturates too
}

// The E4M3 scale of a block whose finite amax is block_amax (>= 0), under tensor scale t
// (nvfp4_valid_tensor_scale). A NaN or Inf block is the caller's (e4m3::quiet_nan()).
MXKIT_HD constexpr e4m3 nvfp4_block_scale(float block_amax, float t) noexcept {
  return nvfp4_scale_of_quotient(fp32_div(fp32_div(block_amax, e2m1::max().to_float()), t));
}

// Whether an E4M3 scale is zero (+0 or -0: a block scale is never negative, a foreign one may be).
MXKIT_HD constexpr bool nvfp4_zero_scale(e4m3 s) noexcept { return (s.bits() & 0x7Fu) == 0; }

// The value of a finite E4M3 scale as a float. A device pass with FP8 conversions decodes it in
// two instructions through binary16, which holds every E4M3 value exactly
// (arch/intrinsics.hpp); elsewhere, and at compile time, e4m3's own decode: the same float.
// (Cvt is a template parameter so that the instruction's wrapper is instantiated only in the
// passes that have it.)
template <bool Cvt = hw::has_cvt_fp8>
MXKIT_HD constexpr float nvfp4_scale_value(e4m3 s) noexcept {
  if constexpr (Cvt) {
    if (!__builtin_is_constant_evaluated())
      return hw::cvt_f32_f16(static_cast<std::uint16_t>(hw::cvt_f16x2_fp8x2<Cvt ? 3 : 0>(s.bits()) & 0xFFFFu));
  }
  return s.to_float();
}

// What the elements of a block of scale s (finite, non-zero) under tensor scale t are divided by.
MXKIT_HD constexpr float nvfp4_element_divisor(e4m3 s, float t) noexcept { return fp32_mul(nvfp4_scale_value(s), t); }

// The value element x is rounded from, in a block of scale s (finite, non-zero) under tensor scale t.
MXKIT_HD constexpr float nvfp4_scaled_element(float x, e4m3 s, float t) noexcept { return fp32_div(x, nvfp4_element_divisor(s, t)); }

// scaled() of one block's elements, with what depends on the block alone computed once
// (nvfp4_scaler::for_block): a block quantizer's loop then divides and rounds, nothing more.
struct nvfp4_block_scaling {
  float divisor = 1.0f;  // nvfp4_element_divisor; unused for a zero scale
  bool zero = false;     // nvfp4_zero_scale: every element is its signed zero

  MXKIT_HD constexpr float operator()(float x) const noexcept {
    return zero ? bit_cast<float>(bit_cast<std::uint32_t>(x) & 0x80000000u) : fp32_div(x, divisor);
  }
};

// mxkit's rule for one copy, as the block functions take it (block/nvfp4_block.hpp): the block's
// scale from its amax, the value each element is rounded from, and the decoded value of a code.
// The peers' orders of operations are scalers of the same shape (validation/nvfp4_quirks.hpp).
struct nvfp4_scaler {
  float tensor_scale = 1.0f;  // t, nvfp4_valid_tensor_scale

  MXKIT_HD constexpr e4m3 block_scale(float block_amax) const noexcept { return nvfp4_block_scale(block_amax, tensor_scale); }
  // A zero scale gives each element its signed zero; any other divides by fl(s x t).
  MXKIT_HD constexpr nvfp4_block_scaling for_block(e4m3 s) const noexcept {
    if (nvfp4_zero_scale(s)) return {1.0f, true};
    return {nvfp4_element_divisor(s, tensor_scale), false};
  }
  MXKIT_HD constexpr float scaled(float x, e4m3 s) const noexcept { return for_block(s)(x); }
};

// The value of element code q (E2M1) under block scale s and tensor scale t: NaN for a NaN scale.
MXKIT_HD constexpr float nvfp4_decode(e2m1 q, e4m3 s, float t) noexcept {
  if (s.is_nan()) return bit_cast<float>(0x7FC00000u);
  return fp32_mul(q.to_float() * s.to_float(), t);  // the product of a 2-bit and a 4-bit significand: exact
}

MXKIT_END_NAMESPACE
