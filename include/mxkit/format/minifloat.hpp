// SPDX-License-Identifier: Apache-2.0
#pragma once
// One template for every sign/exponent/mantissa element format (OCP MX v1.0 section 5, OCP 8-bit
// FP v1.0 for E4M3/E5M2). An `encoding` trait holds the bit layout and the special-value rule;
// `minifloat<Enc>` is the value type. e2m1.hpp ... e5m2.hpp are thin named aliases.
//
// Special inputs, one policy for all formats (see README "NaN and Inf"):
//   NaN  -> NaN with the input's sign where the format has NaN (E4M3 S.1111.111, E5M2 S.11111.10);
//           +max in FP4/FP6, which have no NaN (inside an MX block the NaN is carried by the
//           scale, OCP MX v1.0 section 6.3, so the element code does not matter there).
//   +-Inf -> saturate: +-max.  propagate: +-Inf (E5M2), NaN (E4M3), +-max (FP4/FP6).
//   finite overflow -> saturate: +-max.  propagate: as Inf above, except toward_zero, which never
//           overflows (IEEE 754 section 7.4).  -0 stays -0.  Subnormals are exact.
// Blocks (block/scale_rule.hpp): a NaN or Inf amax gives a NaN scale. With the Hadamard rotation
// a group whose float butterfly sums pass FLT_MAX (only possible with some |x| > 2^123) is
// flagged the same way; dequantizing a rotated block never overflows in between (+-Inf only for
// a value beyond the float range). Per-tensor FP8 decodes refuse a scale without a finite inverse.
#include <type_traits>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/rounding.hpp>

MXKIT_BEGIN_NAMESPACE

enum class special_values : std::uint8_t {
  none,          // every code is finite (E2M1, E2M3, E3M2)
  all_ones_nan,  // only S.1..1.1..1 is NaN, no Inf (E4M3, OCP 8-bit FP section 4)
  ieee,          // top exponent holds Inf and NaN (E5M2, bf16, fp16)
};

template <int ExpBits, int ManBits, special_values Special>
struct encoding {
  static_assert(ExpBits >= 1 && ExpBits <= 8 && ManBits >= 1 && ManBits <= 10);
  static constexpr int exponent_bits = ExpBits;
  static constexpr int mantissa_bits = ManBits;
  static constexpr special_values specials = Special;
  static constexpr int total_bits = 1 + ExpBits + ManBits;
  static constexpr int bias = (1 << (ExpBits - 1)) - 1;
  static constexpr int emin = 1 - bias;  // exponent of the smallest normal
  static constexpr std::uint32_t magnitude_mask = (1u << (ExpBits + ManBits)) - 1;
  static constexpr std::uint32_t sign_mask = 1u << (ExpBits + ManBits);
  static constexpr std::uint32_t exponent_all_ones = (1u << ExpBits) - 1;
  static constexpr std::uint32_t mantissa_all_ones = (1u << ManBits) - 1;
  // Largest finite magnitude code.
  static constexpr std::uint32_t max_code =
      Special == special_values::none           ? magnitude_mask
      : Special == special_values::all_ones_nan ? magnitude_mask - 1
                                                : ((exponent_all_ones - 1) << ManBits) | mantissa_all_ones;
  static constexpr int emax = static_cast<int>(max_code >> ManBits) - bias;  // exponent of max
  static constexpr bool has_nan = Special != special_values::none;
  static constexpr bool has_inf = Special == special_values::ieee;
  static constexpr std::uint32_t inf_code = exponent_all_ones << ManBits;  // ieee only
  static constexpr std::uint32_t nan_code =
      Special == special_values::ieee ? inf_code | (1u << (ManBits - 1)) : magnitude_mask;
};

template <class Enc>
class minifloat {
 public:
  using encoding_type = Enc;
  using storage_type = std::conditional_t<(Enc::total_bits <= 8), std::uint8_t, std::uint16_t>;
  static constexpr int exponent_bits = Enc::exponent_bits;
  static constexpr int mantissa_bits = Enc::mantissa_bits;
  static constexpr int bits_count = Enc::total_bits;
  static constexpr int emax = Enc::emax;  // OCP MX v1.0 Table 1 "emax_elem"
  static constexpr int emin = Enc::emin;

  constexpr minifloat() = default;

  MXKIT_HD static constexpr minifloat from_bits(storage_type b) noexcept {
    minifloat m;
    m.bits_ = static_cast<storage_type>(b & (Enc::sign_mask | Enc::magnitude_mask));
    return m;
  }
  MXKIT_HD constexpr storage_type bits() const noexcept { return bits_; }

  MXKIT_HD constexpr bool is_nan() const noexcept {
    const std::uint32_t mag = bits_ & Enc::magnitude_mask;
    if constexpr (Enc::specials == special_values::ieee) return mag > Enc::inf_code;
    else if constexpr (Enc::specials == special_values::all_ones_nan) return mag == Enc::nan_code;
    else return false;
  }
  MXKIT_HD constexpr bool is_inf() const noexcept {
    if constexpr (Enc::has_inf) return (bits_ & Enc::magnitude_mask) == Enc::inf_code;
    else return false;
  }

  MXKIT_HD constexpr float to_float() const noexcept {
    if constexpr (Enc::exponent_bits == 8 && Enc::mantissa_bits == 7) {
      return bit_cast<float>(static_cast<std::uint32_t>(bits_) << 16);  // bfloat16: float's top half (NaN payload kept)
    }
    // IEEE half: one conversion instruction where there is one (hw::cvt_f32_f16, exact). NaNs
    // still take the path below, so their payload is the host's.
    if constexpr (Enc::exponent_bits == 5 && Enc::mantissa_bits == 10 && Enc::specials == special_values::ieee &&
                  hw::has_cvt_f32_f16) {
      if (!__builtin_is_constant_evaluated() && !is_nan()) return hw::cvt_f32_f16(bits_);
    }
    const std::uint32_t sign = (bits_ & Enc::sign_mask) ? 0x80000000u : 0u;
    const std::uint32_t mag = bits_ & Enc::magnitude_mask;
    if (is_nan()) return bit_cast<float>(sign | 0x7FC00000u);
    if (is_inf()) return bit_cast<float>(sign | 0x7F800000u);
    const std::uint32_t e_field = mag >> Enc::mantissa_bits;
    const std::uint32_t man = mag & Enc::mantissa_all_ones;
    const float v = e_field == 0
                        ? detail::make_float(man, Enc::emin - Enc::mantissa_bits)
                        : detail::make_float(man | (1u << Enc::mantissa_bits),
                                             static_cast<int>(e_field) - Enc::bias - Enc::mantissa_bits);
    return bit_cast<float>(bit_cast<std::uint32_t>(v) | sign);
  }

  // x * 2^-scale_exp rounded into this format, computed exactly in integers (no float division,
  // so an MX block's scaling never adds a rounding of its own). random_bits: stochastic only.
  MXKIT_HD static constexpr minifloat from_float_scaled(float x, int scale_exp, rounding r = default_rounding,
                                                        overflow o = default_overflow,
                                                        std::uint32_t random_bits = 0) noexcept {
    if constexpr (Enc::exponent_bits == 8 && Enc::mantissa_bits == 7) {
      // bfloat16 is float's top half with float's exponent range, so nearest-even with IEEE
      // overflow (to Inf) is one integer add on the bits: the general path's result for every
      // non-NaN float (tests/format: catch2_test_minifloat). NaN takes the general path.
      if (r == rounding::nearest_even && o == overflow::propagate && scale_exp == 0) {
        const std::uint32_t u = bit_cast<std::uint32_t>(x);
        if ((u & 0x7FFFFFFFu) <= 0x7F800000u) return make(static_cast<std::uint32_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16));
      }
    }
    if constexpr (has_fast_nearest_even) {
      if (r == rounding::nearest_even && scale_exp >= -127 && scale_exp <= 126) return from_float_scaled_rne(x, scale_exp, o);
    }
    const std::uint32_t xb = bit_cast<std::uint32_t>(x);
    const std::uint32_t sign = (xb & 0x80000000u) ? Enc::sign_mask : 0u;
    const std::uint32_t ax = xb & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return Enc::has_nan ? make(sign | Enc::nan_code) : make(Enc::max_code);
    if (ax == 0x7F800000u) return make(sign | infinity_code(o));
    if (ax == 0) return make(sign);
    const detail::float_parts p = detail::decompose_abs(ax);
    const int lsb_exp = p.lsb_exp - scale_exp;
    const int lead = lsb_exp + (ax >= 0x00800000u ? 23 : hw::bit_width(p.sig) - 1);  // normal: 24-bit sig
    int quantum = (lead > Enc::emin ? lead : Enc::emin) - Enc::mantissa_bits;
    if (quantum - lsb_exp < -38) return make(sign | overflow_code(o, r));  // far beyond any max
    std::uint64_t q = detail::round_shifted(p.sig, quantum - lsb_exp, r, random_bits);
    if (q == 0) return make(sign);
    if (q >= (std::uint64_t{2} << Enc::mantissa_bits)) {  // rounding carried into a new binade
      q >>= 1;
      ++quantum;
    }
    std::uint64_t code;
    if (q < (std::uint64_t{1} << Enc::mantissa_bits)) {
      code = q;  // subnormal: only reachable with quantum == emin - mantissa_bits
    } else {
      const int e_field = quantum + Enc::mantissa_bits + Enc::bias;
      code = (static_cast<std::uint64_t>(e_field) << Enc::mantissa_bits) | (q - (std::uint64_t{1} << Enc::mantissa_bits));
    }
    if (code > Enc::max_code) return make(sign | overflow_code(o, r));
    return make(sign | static_cast<std::uint32_t>(code));
  }

  // The nearest-even case of from_float_scaled in float arithmetic: the same code for every x and
  // scale_exp in [-127, 126] (2^-scale_exp stays a normal float, which a flush-to-zero build
  // keeps), about ten operations instead of the integer rounding above: the hot path
  // of every MX quantizer. y = x * 2^-scale_exp is one multiply, exact except when |y| < 2^-126,
  // which is below half this format's least step (has_fast_nearest_even), so the code is 0 with
  // y's sign either way. Adding c, a power of two whose ulp is the format's step at |y|, rounds
  // |y| onto the format's grid in one IEEE round-to-nearest-even; the number of steps is the
  // bit distance of the sum from c, and the code is that count plus the binade's first code.
  static constexpr bool has_fast_nearest_even = Enc::emin - Enc::mantissa_bits - 1 > -126;  // not bf16
  MXKIT_HD static constexpr minifloat from_float_scaled_rne(float x, int scale_exp, overflow o = default_overflow) noexcept
    requires(has_fast_nearest_even)
  {
    const std::uint32_t xb = bit_cast<std::uint32_t>(x);
    if ((xb & 0x7FFFFFFFu) > 0x7F800000u)
      return Enc::has_nan ? make(((xb >> 31) ? Enc::sign_mask : 0u) | Enc::nan_code) : make(Enc::max_code);
    return from_non_nan_scaled_rne(x, detail::exp2i(-scale_exp), o);
  }
  // The same for a caller that knows x is not NaN and passes scale_inv = 2^-scale_exp (an MX
  // block hoists both out of its element loop).
  MXKIT_HD static constexpr minifloat from_non_nan_scaled_rne(float x, float scale_inv, overflow o = default_overflow) noexcept
    requires(has_fast_nearest_even)
  {
    return make_unmasked(scaled_rne_code<false>(x, scale_inv, o));
  }
  // The code of from_non_nan_scaled_rne(x, scale_inv, overflow::saturate), as an integer, for a
  // caller that also knows |x * scale_inv| < 2^(emax+1): an MX block's elements under the
  // block's scale, which every scale rule brings below 2^(emax+1) (block/element_encoder.hpp,
  // which packs the integers). The rounding constant then needs no upper clamp.
  MXKIT_HD static constexpr std::uint32_t bounded_scaled_rne_code(float x, float scale_inv) noexcept
    requires(has_fast_nearest_even)
  {
    return scaled_rne_code<true>(x, scale_inv, overflow::saturate);
  }

  MXKIT_HD static constexpr minifloat from_float(float x, rounding r = default_rounding,
                                                 overflow o = default_overflow,
                                                 std::uint32_t random_bits = 0) noexcept {
    return from_float_scaled(x, 0, r, o, random_bits);
  }
  // Stochastic rounding with caller-supplied uniform bits (e.g. philox4x32): deterministic.
  MXKIT_HD static constexpr minifloat from_float_stochastic(float x, std::uint32_t random_bits,
                                                            overflow o = default_overflow) noexcept {
    return from_float_scaled(x, 0, rounding::stochastic, o, random_bits);
  }

  MXKIT_HD static constexpr minifloat max() noexcept { return make(Enc::max_code); }
  MXKIT_HD static constexpr minifloat lowest() noexcept { return make(Enc::sign_mask | Enc::max_code); }
  MXKIT_HD static constexpr minifloat min_normal() noexcept { return make(1u << Enc::mantissa_bits); }
  MXKIT_HD static constexpr minifloat min_subnormal() noexcept { return make(1u); }
  MXKIT_HD static constexpr minifloat quiet_nan() noexcept requires(Enc::has_nan) { return make(Enc::nan_code); }
  MXKIT_HD static constexpr minifloat infinity() noexcept requires(Enc::has_inf) { return make(Enc::inf_code); }

 private:
  MXKIT_HD static constexpr minifloat make(std::uint32_t b) noexcept {
    return from_bits(static_cast<storage_type>(b));
  }
  MXKIT_HD static constexpr minifloat make_unmasked(std::uint32_t b) noexcept {  // b is a valid code
    minifloat m;
    m.bits_ = static_cast<storage_type>(b);
    return m;
  }
  // Magnitude codes (sign added by the caller) for an infinite input and for finite overflow.
  MXKIT_HD static constexpr std::uint32_t infinity_code(overflow o) noexcept {
    if (o == overflow::saturate) return Enc::max_code;
    if constexpr (Enc::has_inf) return Enc::inf_code;
    else if constexpr (Enc::has_nan) return Enc::nan_code;
    else return Enc::max_code;
  }
  MXKIT_HD static constexpr std::uint32_t overflow_code(overflow o, rounding r) noexcept {
    return r == rounding::toward_zero ? Enc::max_code : infinity_code(o);
  }
  // OCP E4M3 and E5M2 (OCP 8-bit FP v1.0): formats with a conversion instruction on some devices.
  static constexpr bool is_ocp_fp8 =
      (Enc::exponent_bits == 4 && Enc::mantissa_bits == 3 && Enc::specials == special_values::all_ones_nan) ||
      (Enc::exponent_bits == 5 && Enc::mantissa_bits == 2 && Enc::specials == special_values::ieee);
  // The code of from_non_nan_scaled_rne (Bounded: bounded_scaled_rne_code). Where the device
  // converts to OCP E4M3/E5M2 in one instruction (hw::cvt_fp8_satfinite: nearest even,
  // satfinite, which is `saturate`), that instruction gives the same codes.
  template <bool Bounded>
  MXKIT_HD static constexpr std::uint32_t scaled_rne_code(float x, float scale_inv, overflow o) noexcept {
    const float y = x * scale_inv;
    if constexpr (is_ocp_fp8 && hw::has_cvt_fp8) {
      if (!__builtin_is_constant_evaluated() && o == overflow::saturate) return hw::cvt_fp8_satfinite<Enc::mantissa_bits>(y);
    }
    return sign_code(x) | rne_magnitude_code<Bounded>(y, o);
  }
  // Magnitude code of a non-NaN y under nearest-even (see from_float_scaled_rne). Bounded: the
  // caller knows |y| < 2^(emax+1) (an MX block's elements under its own scale), so the rounding
  // constant needs no upper clamp.
  template <bool Bounded = false>
  MXKIT_HD static constexpr std::uint32_t rne_magnitude_code(float y, overflow o) noexcept {
    constexpr std::uint32_t lowest_exp = static_cast<std::uint32_t>(Enc::emin + 127) << 23;     // format subnormals
    constexpr std::uint32_t highest_exp = static_cast<std::uint32_t>(Enc::emax + 1 + 127) << 23;  // beyond max
    std::uint32_t e = bit_cast<std::uint32_t>(y) & 0x7F800000u;
    e = e < lowest_exp ? lowest_exp : e;
    if constexpr (!Bounded) e = e > highest_exp ? highest_exp : e;
    constexpr int shift = 23 - Enc::mantissa_bits;
    const std::uint32_t c = e + (static_cast<std::uint32_t>(shift) << 23);
    // For |y| < 2^(emax+1), |y| + c lies in [c, 2c) and its bit distance from c counts the
    // format steps in |y| after one IEEE round-to-nearest-even (2^(m+1) steps: the carry into the
    // next binade); a larger |y| gives a count past max. Not ((|y| + c) - c): -ffast-math folds
    // that to |y| and the rounding becomes truncation. The binade's first code, (e - emin) << m,
    // rides in c's low mantissa bits, so the distance from c is the code itself; it is even, so
    // it moves no tie, and far below 2^23, so the sum stays in c's binade.
    // (e - lowest_exp) >> shift == (e >> shift) - (lowest_exp >> shift): both have no low bits.
    const float c_plus_first = bit_cast<float>((e >> shift) + (c - (lowest_exp >> shift)));
    const std::uint32_t code = bit_cast<std::uint32_t>(hw::abs_float(y) + c_plus_first) - c;
    if (o == overflow::saturate) return code < Enc::max_code ? code : Enc::max_code;
    return code > Enc::max_code ? infinity_code(o) : code;  // nearest-even overflow = Inf's code
  }
  // Sign bit of x moved to this format's sign position.
  MXKIT_HD static constexpr std::uint32_t sign_code(float x) noexcept {
    return (bit_cast<std::uint32_t>(x) >> (31 - Enc::exponent_bits - Enc::mantissa_bits)) & Enc::sign_mask;
  }

  storage_type bits_ = 0;
};

MXKIT_END_NAMESPACE
