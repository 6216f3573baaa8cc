// SPDX-License-Identifier: Apache-2.0
#pragma once
// MXINT8's element: 8-bit two's complement with an implicit 2^-6, so codes -128..127 mean
// -2 .. 1.984375 (OCP MX v1.0 section 5.3.3). Conversions saturate symmetrically to +-127/64, as
// microxcaling does, so a negated block quantizes to the negated codes; -128 still decodes.
// NaN becomes +max (no NaN code; inside an MX block the scale carries it); Inf saturates.
#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/rounding.hpp>

MXKIT_BEGIN_NAMESPACE

class int8_fixed {
 public:
  using storage_type = std::uint8_t;
  static constexpr int fraction_bits = 6;
  static constexpr int mantissa_bits = 6;  // used by the `even` scale rule
  static constexpr int bits_count = 8;
  static constexpr int emax = 0;  // OCP MX v1.0 Table 1: emax_elem of INT8
  static constexpr int max_code = 127;

  constexpr int8_fixed() = default;
  MXKIT_HD static constexpr int8_fixed from_bits(std::uint8_t b) noexcept { return int8_fixed(b); }
  MXKIT_HD constexpr std::uint8_t bits() const noexcept { return bits_; }
  MXKIT_HD constexpr bool is_nan() const noexcept { return false; }
  MXKIT_HD constexpr bool is_inf() const noexcept { return false; }
  MXKIT_HD constexpr float to_float() const noexcept {
    const int v = bits_ >= 128 ? int{bits_} - 256 : int{bits_};
    return static_cast<float>(v) * (1.0f / 64.0f);
  }

  MXKIT_HD static constexpr int8_fixed from_float_scaled(float x, int scale_exp, rounding r = default_rounding,
                                                         overflow /*no Inf or NaN code*/ = default_overflow,
                                                         std::uint32_t random_bits = 0) noexcept {
    const std::uint32_t xb = bit_cast<std::uint32_t>(x);
    const std::uint32_t ax = xb & 0x7FFFFFFFu;
    const bool neg = (xb >> 31) != 0;
    if (ax > 0x7F800000u) return from_int(max_code);
    if (r == rounding::nearest_even && scale_exp >= -121 && scale_exp <= 127) {
      // Float path, same codes: y = x * 2^(6 - scale_exp) (one normal power of two, so no
      // subnormal multiplier for a flush-to-zero build to drop) is exact unless y is a float
      // subnormal (then it rounds to 0 either way); clamped to +-128, y + 1.5 * 2^23 rounds y to
      // an integer (RNE, ulp 1) and the bit difference is that integer.
      float y = x * detail::exp2i(fraction_bits - scale_exp);
      y = y < -128.0f ? -128.0f : (y > 128.0f ? 128.0f : y);
      constexpr float magic = 12582912.0f;  // 1.5 * 2^23
      const int q = static_cast<int>(bit_cast<std::uint32_t>(y + magic) - bit_cast<std::uint32_t>(magic));
      return from_int(q < -max_code ? -max_code : (q > max_code ? max_code : q));
    }
    if (ax == 0x7F800000u) return from_int(neg ? -max_code : max_code);
    if (ax == 0) return from_int(0);
    const detail::float_parts p = detail::decompose_abs(ax);
    const int shift = -fraction_bits - (p.lsb_exp - scale_exp);  // quantum 2^-6
    std::uint64_t q = shift < -38 ? max_code : detail::round_shifted(p.sig, shift, r, random_bits);
    if (q > max_code) q = max_code;
    const int v = static_cast<int>(q);
    return from_int(neg ? -v : v);
  }
  MXKIT_HD static constexpr int8_fixed from_float(float x, rounding r = default_rounding,
                                                  overflow o = default_overflow,
                                                  std::uint32_t random_bits = 0) noexcept {
    return from_float_scaled(x, 0, r, o, random_bits);
  }
  MXKIT_HD static constexpr int8_fixed from_float_stochastic(float x, std::uint32_t random_bits,
                                                             overflow o = default_overflow) noexcept {
    return from_float_scaled(x, 0, rounding::stochastic, o, random_bits);
  }
  MXKIT_HD static constexpr int8_fixed max() noexcept { return from_int(max_code); }
  MXKIT_HD static constexpr int8_fixed lowest() noexcept { return from_int(-max_code); }

 private:
  MXKIT_HD constexpr explicit int8_fixed(std::uint8_t b) noexcept : bits_(b) {}
  MXKIT_HD static constexpr int8_fixed from_int(int v) noexcept {
    return int8_fixed(static_cast<std::uint8_t>(v & 0xFF));
  }
  std::uint8_t bits_ = 0;
};

MXKIT_END_NAMESPACE
