// SPDX-License-Identifier: Apache-2.0
#pragma once
// E8M0: the MX shared scale, 2^(b-127) for b in 0..254, 0xFF is NaN; no sign, no zero, no Inf
// (OCP MX v1.0 section 5.4.1).
#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/rounding.hpp>

MXKIT_BEGIN_NAMESPACE

class e8m0 {
 public:
  using storage_type = std::uint8_t;
  static constexpr int bias = 127;
  static constexpr int min_exponent = -127;
  static constexpr int max_exponent = 127;
  static constexpr std::uint8_t nan_bits = 0xFF;

  constexpr e8m0() = default;
  MXKIT_HD static constexpr e8m0 from_bits(std::uint8_t b) noexcept { return e8m0(b); }
  // 2^e, e clamped to [-127, 127] (the E8M0 range; callers that care check the range first).
  MXKIT_HD static constexpr e8m0 from_exponent(int e) noexcept {
    e = e < min_exponent ? min_exponent : (e > max_exponent ? max_exponent : e);
    return e8m0(static_cast<std::uint8_t>(e + bias));
  }
  MXKIT_HD static constexpr e8m0 nan() noexcept { return e8m0(nan_bits); }

  MXKIT_HD constexpr std::uint8_t bits() const noexcept { return bits_; }
  MXKIT_HD constexpr bool is_nan() const noexcept { return bits_ == nan_bits; }
  MXKIT_HD constexpr int exponent() const noexcept { return int{bits_} - bias; }  // not for NaN
  MXKIT_HD constexpr float to_float() const noexcept {
    if (is_nan()) return bit_cast<float>(0x7FC00000u);
    if (bits_ == 0) return bit_cast<float>(0x00400000u);  // 2^-127 is a float subnormal
    return bit_cast<float>(static_cast<std::uint32_t>(bits_) << 23);
  }

  // Nearest power of two to x under r (ties at 1.5 * 2^k go to the even biased exponent for
  // nearest_even). NaN and negative x give NaN; 0 and values below 2^-127 give 2^-127 (E8M0 has
  // no zero); +Inf and values above 2^127 give 2^127 (saturate) or NaN (propagate).
  MXKIT_HD static constexpr e8m0 from_float(float x, rounding r = default_rounding,
                                            overflow o = default_overflow,
                                            std::uint32_t random_bits = 0) noexcept {
    const std::uint32_t xb = bit_cast<std::uint32_t>(x);
    const std::uint32_t ax = xb & 0x7FFFFFFFu;
    if (ax > 0x7F800000u || ((xb >> 31) && ax != 0)) return nan();
    if (ax == 0x7F800000u) return o == overflow::saturate ? from_exponent(max_exponent) : nan();
    if (ax == 0) return from_exponent(min_exponent);
    const detail::float_parts p = detail::decompose_abs(ax);
    const int width = hw::bit_width(p.sig);
    const int lead = p.lsb_exp + width - 1;
    // Round sig / 2^(width-1) (in [1, 2)) to an integer 1 or 2.
    const std::uint64_t q = detail::round_shifted(p.sig, width - 1, r, random_bits);
    int e = lead + (q == 2 ? 1 : 0);
    if (r == rounding::nearest_even && q == 2 && width >= 2 && p.sig == (3u << (width - 2)) && ((e + bias) & 1)) {
      --e;  // exact tie 1.5 * 2^lead: round_shifted tied to the even *mantissa*; E8M0 ties by exponent
    }
    if (e > max_exponent) return (o == overflow::saturate || r == rounding::toward_zero) ? from_exponent(max_exponent) : nan();
    return from_exponent(e);
  }

 private:
  MXKIT_HD constexpr explicit e8m0(std::uint8_t b) noexcept : bits_(b) {}
  std::uint8_t bits_ = bias;
};

MXKIT_END_NAMESPACE
