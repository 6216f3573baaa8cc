// SPDX-License-Identifier: Apache-2.0
#pragma once
// The shared E8M0 scale of an MX block from its amax. Four rules are in use and they disagree
// (for FP4, amax 6.5 gives exponent 0/0/1/1 and amax 7 gives 0/1/1/1 in the order below):
//   floor    floor(log2 amax) - emax_elem; OCP MX v1.0 section 6.3, microxcaling, torchao default.
//            Elements above max clip to max.
//   even     amax first rounded half up to the element's mantissa width (for a normal amax: add
//            2^(22-m) to its float bits), then floor: ROCm TransformerEngine's MXFP4 recipe and
//            Primus-Turbo; the MXFP4 recipe's.
//   round_up smallest power of two with amax / scale <= max, so nothing clips (RCEIL: NVIDIA
//            TransformerEngine MXFP8, cuBLAS, aiter); the MXFP8 recipe's.
//   ceil     ceil(log2 amax) - emax_elem (torchao CEIL).
// Special blocks, one policy everywhere (README "NaN and Inf"):
//   amax NaN or Inf      -> NaN scale 0xFF: the whole block decodes to NaN (OCP MX section 6.3 for
//                           NaN; Inf has no MX encoding, so it is flagged the same way).
//   amax 0 (all zeros)   -> scale 1.0 (0x7F): neutral, and no subnormal float scale under FTZ.
//   exponent below -127 or above 127 -> clamped to the E8M0 range; elements then round or clip.
//   Hadamard rotation    -> the amax is that of the rotated group, whose butterfly sums are formed
//                           in float before the 1/4 normalization: finite whenever every |x| <=
//                           2^123 (16 x 2^123 = 2^127) or one outlier alone is up to FLT_MAX. A
//                           group whose sums pass FLT_MAX (some |x| > 2^123) has an Inf amax: NaN
//                           scale, as an Inf input. Dequantizing a rotated block unrotates high
//                           scales 2^-32 lower, so it never overflows in between (dequantize_block).
#include <type_traits>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/e8m0.hpp>

MXKIT_BEGIN_NAMESPACE

enum class scale_rule : std::uint8_t { floor, even, round_up, ceil };

inline constexpr scale_rule default_scale_rule = scale_rule::floor;  // the OCP rule

template <>
struct enum_names<scale_rule> {
  static constexpr const char* names[] = {"floor", "even", "round_up", "ceil"};
  static constexpr scale_rule last = scale_rule::ceil;
};

// amax is tracked as the bits of |x|: for non-negative floats integer order is value order, and
// NaN (> 0x7F800000) sorts above Inf above every finite value, so a plain integer max is exact
// and lets a NaN win.
MXKIT_HD constexpr std::uint32_t abs_bits(float x) noexcept { return bit_cast<std::uint32_t>(x) & 0x7FFFFFFFu; }
MXKIT_HD constexpr std::uint32_t amax_bits(std::uint32_t a, float x) noexcept {
  const std::uint32_t b = abs_bits(x);
  return a > b ? a : b;
}

// The bits of a float amax (abs_bits, amax_bits), as shared_scale's argument: a type of its own,
// so that neither a float nor a bare integer converts to it silently (shared_scale(6.5f, rule)
// takes the float overload below, never 6.5's integer value as bits).
struct float_bits {
  std::uint32_t value;
  MXKIT_HD constexpr explicit float_bits(std::uint32_t v) noexcept : value(v) {}
};

namespace detail {
// Significand of a finite non-zero |x| normalized to 24 bits (1.f scaled by 2^23).
MXKIT_HD constexpr std::uint32_t normalized_significand(std::uint32_t abs) noexcept {
  const float_parts p = decompose_abs(abs);
  return p.sig << (24 - hw::bit_width(p.sig));
}
}  // namespace detail

namespace detail {
// shared_scale's template argument: an element type (e2m1, e4m3, int8_fixed, ...) or a format
// descriptor (mx_format<mx_type::mxfp4>, what quantize_block takes), meaning its element type.
template <class T>
struct scale_element {
  using type = T;
};
template <class T>
  requires requires { typename T::element_type; }
struct scale_element<T> {
  using type = typename T::element_type;
};

// For a normal amax every rule is a floor after an addition to the float bits: the carry out of
// the mantissa field is the rule's step to the next binade (even: half an element ulp, rounding
// up; round_up: past the element's max significand; ceil: anything above the power of two).
template <class Element>
MXKIT_HD constexpr std::uint32_t scale_rule_carry(scale_rule rule) noexcept {
  // Selects, not a switch: a kernel hoists them out of its block loop.
  constexpr std::uint32_t even = 1u << (22 - Element::mantissa_bits);
  constexpr std::uint32_t round_up = 0xFFFFFFu - normalized_significand(abs_bits(Element::max().to_float()));
  return rule == scale_rule::even ? even : rule == scale_rule::round_up ? round_up : rule == scale_rule::ceil ? 0x7FFFFFu : 0u;
}
}  // namespace detail

// Shared scale for a block whose amax has the float bits b (see amax_bits): what kernels pass,
// having tracked the amax as bits. Element: the element type (shared_scale<e2m1>) or the format
// descriptor (shared_scale<mx_format<mx_type::mxfp4>>); there is no default, the scale depends on it.
template <class ElementOrFormat>
MXKIT_HD constexpr e8m0 shared_scale(float_bits b, scale_rule rule) noexcept {
  using Element = typename detail::scale_element<ElementOrFormat>::type;
  const std::uint32_t amax = b.value;
  if (amax >= 0x7F800000u) return e8m0::nan();
  if (amax >= 0x00800000u)  // normal: < 0x7F800000 + 0x800000, so the sum cannot wrap
    return e8m0::from_exponent(static_cast<int>((amax + detail::scale_rule_carry<Element>(rule)) >> 23) - 127 - Element::emax);
  if (amax == 0) return e8m0::from_exponent(0);
  // A subnormal amax: its leading bit is below bit 23, so the rules round its significand.
  int lead = detail::floor_log2_abs(amax);
  switch (rule) {
    case scale_rule::floor: break;
    case scale_rule::even:
      // Round the normalized significand half up to m fraction bits; a carry is the next binade.
      if (detail::normalized_significand(amax) + (1u << (22 - Element::mantissa_bits)) >= (1u << 24)) ++lead;
      break;
    case scale_rule::round_up: {
      constexpr std::uint32_t max_sig = detail::normalized_significand(abs_bits(Element::max().to_float()));
      if (detail::normalized_significand(amax) > max_sig) ++lead;
      break;
    }
    case scale_rule::ceil:
      if (detail::normalized_significand(amax) != 0x800000u) ++lead;
      break;
  }
  return e8m0::from_exponent(lead - Element::emax);
}

// Shared scale for a block whose amax is `amax` (its sign is ignored: amax is a magnitude).
template <class Element>
MXKIT_HD constexpr e8m0 shared_scale(float amax, scale_rule rule) noexcept {
  return shared_scale<Element>(float_bits{abs_bits(amax)}, rule);
}
// Any other argument is an error rather than a conversion: an integer might be meant as bits
// (spell it float_bits{b}), and a double or an int would be rounded to float first.
template <class Element, class T>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, float>)
e8m0 shared_scale(T amax, scale_rule rule) = delete;
// A call that names no element type lands here, and says so (a bare deduction failure, as nvcc
// reports it, gives no hint).
template <class Element = void, class T>
  requires std::is_void_v<Element>
MXKIT_HD constexpr e8m0 shared_scale(T, scale_rule) noexcept {
  static_assert(!std::is_void_v<Element>,
                "shared_scale needs the element type: shared_scale<mxkit::e2m1>(amax, rule) (or the format descriptor)");
  return e8m0::nan();
}

MXKIT_END_NAMESPACE
