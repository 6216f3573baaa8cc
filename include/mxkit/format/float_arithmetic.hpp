// SPDX-License-Identifier: Apache-2.0
#pragma once
// IEEE 754 binary32 multiplication and division (IEEE 754-2019 section 5.4.1), rounded to
// nearest even with subnormals kept, computed in integers. Where a format's bytes are defined by
// fp32 formulas (NVFP4's scales, block/nvfp4_scale.hpp; the peers' float formulas, validation/),
// the float operators would make them depend on the build and the thread's state: -ffast-math may
// turn a / b into a * (1 / b), and flush-to-zero or denormals-are-zero (set by -ffast-math's
// startup code, by nvcc --use_fast_math, or by a library at run time) flushes subnormal operands
// and results. These give the IEEE result everywhere: host, device and constant evaluation. The
// one significand rounding is format/bits.hpp's round_shifted.
#include <cstdint>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {

// The float nearest (ties to even) to p * 2^lsb, as bits, for p > 0: +Inf bits past FLT_MAX.
MXKIT_HD constexpr std::uint32_t round_to_float_bits(std::uint64_t p, int lsb) noexcept {
  const int width = (p >> 32) ? 32 + hw::bit_width(static_cast<std::uint32_t>(p >> 32)) : hw::bit_width(static_cast<std::uint32_t>(p));
  const int lead = lsb + width - 1;
  if (lead >= 128) return 0x7F800000u;
  const int quantum = (lead > -126 ? lead : -126) - 23;  // the float's last bit at this magnitude
  const std::uint64_t q = round_shifted(p, quantum - lsb, rounding::nearest_even, 0);
  // q * 2^quantum with q <= 2^24 (2^24: the rounding carried into the next binade): its float
  // bits are ((quantum + 149) << 23) + q, for subnormals (quantum -149, q < 2^23) too.
  const std::uint64_t bits = (static_cast<std::uint64_t>(quantum + 149) << 23) + q;
  return bits >= 0x7F800000u ? 0x7F800000u : static_cast<std::uint32_t>(bits);
}

// fl(a * b) for finite non-negative floats given as bits.
MXKIT_HD constexpr std::uint32_t multiply_rne_bits(std::uint32_t a, std::uint32_t b) noexcept {
  if (a == 0 || b == 0) return 0;
  const float_parts pa = decompose_abs(a), pb = decompose_abs(b);
  return round_to_float_bits(std::uint64_t{pa.sig} * pb.sig, pa.lsb_exp + pb.lsb_exp);  // exact product: < 2^48
}

// fl(a / b) for a finite non-negative float a and a finite positive float b, given as bits.
MXKIT_HD constexpr std::uint32_t divide_rne_bits(std::uint32_t a, std::uint32_t b) noexcept {
  if (a == 0) return 0;
  float_parts pa = decompose_abs(a), pb = decompose_abs(b);
  // Both significands to 24 bits (leading bit 23), so that the quotient has 40 or 41 bits.
  const int sa = 24 - hw::bit_width(pa.sig), sb = 24 - hw::bit_width(pb.sig);
  pa = {pa.sig << sa, pa.lsb_exp - sa};
  pb = {pb.sig << sb, pb.lsb_exp - sb};
  const std::uint64_t n = std::uint64_t{pa.sig} << 40;  // < 2^64
  std::uint64_t q = n / pb.sig;
  // The remainder as a sticky bit: bit 0 lies 16 or more bits below the float's last bit, so a
  // tie (exactly half) is seen only when the quotient is exact.
  if (n % pb.sig != 0) q |= 1u;
  return round_to_float_bits(q, pa.lsb_exp - pb.lsb_exp - 40);
}

MXKIT_HD constexpr bool finite_bits(std::uint32_t b) noexcept { return (b & 0x7F800000u) != 0x7F800000u; }

// fp32_mul and fp32_div in integers, operands as bits. Where a device pass issues the IEEE
// instruction for the contract's operands (below), these serve only the others and stay out of
// line: inlined, their 64-bit arithmetic made a caller's loop (an NVFP4 block's 16 elements) too
// large to unroll, and its arrays went to local memory.
#if MXKIT_CUDA_DEVICE_ARCH
#define MXKIT_DETAIL_FP32_INTEGER_PATH __attribute__((noinline))
#else
#define MXKIT_DETAIL_FP32_INTEGER_PATH
#endif
MXKIT_HD MXKIT_DETAIL_FP32_INTEGER_PATH constexpr float fp32_mul_integer(std::uint32_t ab, std::uint32_t bb) noexcept {
  return bit_cast<float>(((ab ^ bb) & 0x80000000u) | multiply_rne_bits(ab & 0x7FFFFFFFu, bb & 0x7FFFFFFFu));
}
MXKIT_HD MXKIT_DETAIL_FP32_INTEGER_PATH constexpr float fp32_div_integer(std::uint32_t ab, std::uint32_t bb) noexcept {
  return bit_cast<float>(((ab ^ bb) & 0x80000000u) | divide_rne_bits(ab & 0x7FFFFFFFu, bb & 0x7FFFFFFFu));
}
#undef MXKIT_DETAIL_FP32_INTEGER_PATH

}  // namespace detail

// a * b and a / b as IEEE binary32 computes them (nearest even, subnormals kept), for finite a
// and b (b non-zero for the division). Signs follow IEEE: the result's sign is the XOR of the
// operands'; a zero result keeps it. A result past FLT_MAX is +-Inf. A CUDA device pass issues
// the IEEE instruction for such operands (arch/intrinsics.hpp, mul_rn and div_rn): the same
// bits in one instruction, where the integer division is a long emulated routine.
MXKIT_HD constexpr float fp32_mul(float a, float b) noexcept {
  const std::uint32_t ab = bit_cast<std::uint32_t>(a), bb = bit_cast<std::uint32_t>(b);
  if constexpr (hw::has_rn_mul_div) {
    if (!__builtin_is_constant_evaluated() && detail::finite_bits(ab) && detail::finite_bits(bb)) return hw::mul_rn(a, b);
  }
  return detail::fp32_mul_integer(ab, bb);
}
MXKIT_HD constexpr float fp32_div(float a, float b) noexcept {
  const std::uint32_t ab = bit_cast<std::uint32_t>(a), bb = bit_cast<std::uint32_t>(b);
  if constexpr (hw::has_rn_mul_div) {
    if (!__builtin_is_constant_evaluated() && detail::finite_bits(ab) && detail::finite_bits(bb) && (bb & 0x7FFFFFFFu) != 0)
      return hw::div_rn(a, b);
  }
  return detail::fp32_div_integer(ab, bb);
}

// fp32_mul and fp32_div for callers whose operands are known finite (and the divisor non-zero):
// the same bits, without the operand test a device pass spends before its instruction.
MXKIT_HD constexpr float fp32_mul_finite(float a, float b) noexcept {
  if constexpr (hw::has_rn_mul_div) {
    if (!__builtin_is_constant_evaluated()) return hw::mul_rn(a, b);
  }
  return fp32_mul(a, b);
}
MXKIT_HD constexpr float fp32_div_finite(float a, float b) noexcept {
  if constexpr (hw::has_rn_mul_div) {
    if (!__builtin_is_constant_evaluated()) return hw::div_rn(a, b);
  }
  return fp32_div(a, b);
}

MXKIT_END_NAMESPACE
