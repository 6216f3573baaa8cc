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

#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/rounding.hpp>

MXKIT_BEGIN_NAMESPACE

#if MXKIT_DEVICE_PASS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
namespace detail {
// cvt.rn.satfinite to OCP E4M3 (ManBits 3) or E5M2 (ManBits 2); the low byte is x's code.
template <int ManBits>
__device__ inline std::uint8_t cvt_fp8_satfinite(float x) noexcept {
  unsigned short r;
  if constexpr (ManBits == 3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  return static_cast<std::uint8_t>(r & 0xFF);
}
}  // namespace detail
#endif

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
#if MXKIT_DEVICE_PASS && defined(__CUDA_ARCH__)
    // IEEE half: the hardware conversion, one instruction instead of the integer path below (the
    // fp16 quantizer's hot loop). NaNs still take the path below, so their payload is the host's.
    if constexpr (Enc::exponent_bits == 5 && Enc::mantissa_bits == 10 && Enc::specials == special_values::ieee) {
      if (!__builtin_is_constant_evaluated() && !is_nan()) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(bits_)));
        return f;
      }
    }
#endif
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
    const int lead = lsb_exp + (ax >= 0x00800000u ? 23 : detail::bit_width(p.sig) - 1);  // normal: 24-bit sig
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
    const float y = x * scale_inv;
#if MXKIT_DEVICE_PASS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    // sm_89+ converts to OCP E4M3/E5M2 in hardware (RNE, satfinite: +-Inf and overflow to +-max,
    // which is `saturate`): the same codes in one instruction.
    if constexpr ((Enc::exponent_bits == 4 && Enc::mantissa_bits == 3 && Enc::specials == special_values::all_ones_nan) ||
                  (Enc::exponent_bits == 5 && Enc::mantissa_bits == 2 && Enc::specials == special_values::ieee)) {
      if (!__builtin_is_constant_evaluated() && o == overflow::saturate) return make_unmasked(detail::cvt_fp8_satfinite<Enc::mantissa_bits>(y));
    }
#endif
    return make_unmasked(sign_code(x) | rne_magnitude_code(y, o));
  }
  // from_non_nan_scaled_rne for an MX block element: |x * scale_inv| < 2^(emax+1) (the block's
  // scale, by any scale rule, brings its amax below 2^(emax+1)), overflow saturates, and
  // scale_inv = 2^-E with E <= block_element_max_exponent.
  MXKIT_HD static constexpr minifloat from_block_element_rne(float x, float scale_inv) noexcept
    requires(has_fast_nearest_even)
  {
    return make_unmasked(block_element_rne_biased(x, scale_inv) - block_element_bias);
  }

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
  // 2^-126, where it cannot move the constant). The sign is x's sign bit at bit 3
  // (block_element_rne_biased; quantize_block_packed shifts it in while packing). E in
  // [-126, 126] (every E2M1 block on the float path) keeps 2^-E normal and 2 * 2^-E finite.
  static constexpr bool e2m1_block_fma =
      Enc::exponent_bits == 2 && Enc::mantissa_bits == 1 && Enc::specials == special_values::none;
  static constexpr int block_element_max_exponent = 126;
  // block_element_rne_biased = from_block_element_rne's code + block_element_bias (K above for
  // E2M1, 0 otherwise), so a packer can remove the biases of a word at once.
  static constexpr std::uint32_t block_element_bias = e2m1_block_fma ? 0x4B7FFFFCu : 0u;
  // E2M1: the magnitude's code + block_element_bias, without the sign.
  MXKIT_HD static constexpr std::uint32_t block_element_magnitude_biased(float x, float scale_inv) noexcept
    requires(e2m1_block_fma)
  {
    const float a = detail::abs_float(x);
    const std::uint32_t below2 = bit_cast<std::uint32_t>(detail::fma_exact_product(a, 2.0f * scale_inv, 0x1p24f - 4.0f));
    const std::uint32_t above2 = bit_cast<std::uint32_t>(detail::fma_exact_product(a, scale_inv, 0x1p24f));
    const std::uint32_t m = below2 < above2 ? below2 : above2;
    return m < block_element_bias + 7u ? m : block_element_bias + 7u;
  }
  MXKIT_HD static constexpr std::uint32_t block_element_rne_biased(float x, float scale_inv) noexcept
    requires(has_fast_nearest_even)
  {
    if constexpr (e2m1_block_fma) {
      return block_element_magnitude_biased(x, scale_inv) + ((bit_cast<std::uint32_t>(x) >> 31) << 3);
    } else {
#if MXKIT_DEVICE_PASS && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
      if constexpr ((Enc::exponent_bits == 4 && Enc::mantissa_bits == 3 && Enc::specials == special_values::all_ones_nan) ||
                    (Enc::exponent_bits == 5 && Enc::mantissa_bits == 2 && Enc::specials == special_values::ieee)) {
        if (!__builtin_is_constant_evaluated()) return detail::cvt_fp8_satfinite<Enc::mantissa_bits>(x * scale_inv);
      }
#endif
      return sign_code(x) | rne_magnitude_code<true>(x * scale_inv, overflow::saturate);
    }
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
    const std::uint32_t code = bit_cast<std::uint32_t>(detail::abs_float(y) + c_plus_first) - c;
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
