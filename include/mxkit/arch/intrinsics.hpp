// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every instruction-level choice of the host-safe numerics, in one place. Each function below is
// one instruction where a device pass has it and a plain constexpr expression elsewhere, and
// gives the same bits as that expression on every input its callers pass (the comment says
// which); constant evaluation always takes the plain expression. The exhaustive host tests
// (tests/format, tests/block) hold the plain paths to the spec, and the GPU tests hold each
// device path to the host's bytes. Includes no GPU header: the inline PTX is guarded by
// MXKIT_CUDA_DEVICE_ARCH, and nvcc (or clang in CUDA mode) declares `__clz` itself.
// Instructions that only a kernel uses (wgmma, mfma_scale) live under gpu/ (gpu/gemm/arch/).
//
// Callers test the `has_*` constants with `if constexpr`: they are true only in a device pass
// with the instruction, where the value type's own portable code would otherwise run.
#include <cstdint>

#include <mxkit/config.hpp>

// __CUDA_ARCH__ in a CUDA device pass (nvcc, clang), 0 elsewhere (host passes, HIP device
// passes). Always defined, so it is tested with `#if`, never `#ifdef` (STYLE.md).
#if MXKIT_DEVICE_PASS && defined(__CUDA_ARCH__)
#define MXKIT_CUDA_DEVICE_ARCH __CUDA_ARCH__
#else
#define MXKIT_CUDA_DEVICE_ARCH 0
#endif

MXKIT_BEGIN_NAMESPACE
namespace hw {

// ---- Integers ---------------------------------------------------------------------------------

// Number of bits needed to hold v (0 for 0). At run time one count-leading-zeros: `clz.b32`
// (PTX, every sm; nvcc's __clz, which gives 32 for 0), `__builtin_clz` elsewhere (x86 LZCNT/BSR,
// AMD v_ffbh_u32; undefined for 0, hence the test). Constant evaluation: a branchy binary search.
// The same integer either way.
MXKIT_HD constexpr int bit_width(std::uint32_t v) noexcept {
  if (!__builtin_is_constant_evaluated()) {
#if MXKIT_CUDA_DEVICE_ARCH
    return 32 - __clz(static_cast<int>(v));
#else
    return v ? 32 - __builtin_clz(v) : 0;
#endif
  }
  int n = 0;
  if (v >> 16) { v >>= 16; n += 16; }
  if (v >> 8) { v >>= 8; n += 8; }
  if (v >> 4) { v >>= 4; n += 4; }
  if (v >> 2) { v >>= 2; n += 2; }
  if (v >> 1) { v >>= 1; n += 1; }
  return n + static_cast<int>(v);
}

// Bytes of the 8-byte value {hi:lo} (lo's bytes 0-3, hi's bytes 4-7) picked by the selector's
// nibbles: result byte n is byte (sel >> 4n) & 7. Callers keep bit 3 of every nibble clear (PTX
// prmt gives that bit a sign-replicating meaning). At run time in a CUDA pass one PTX prmt.b32
// (every sm): four lookups in an 8-byte table at once (gpu/gemm/expand.hpp's fold); elsewhere
// and in constant evaluation the shifts below. The same bits either way.
MXKIT_HD constexpr std::uint32_t byte_permute(std::uint32_t lo, std::uint32_t hi, std::uint32_t sel) noexcept {
#if MXKIT_CUDA_DEVICE_ARCH
  if (!__builtin_is_constant_evaluated()) {
    std::uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(sel));
    return r;
  }
#endif
  const std::uint64_t bytes = (static_cast<std::uint64_t>(hi) << 32) | lo;
  std::uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<std::uint32_t>((bytes >> (8 * ((sel >> (4 * n)) & 7u))) & 0xFFu) << (8 * n);
  return r;
}

// ---- Float arithmetic -------------------------------------------------------------------------

// |x| for a non-NaN x: the sign bit cleared. In a device pass `fabsf`, which costs nothing: an
// operand modifier on the next instruction (PTX abs.f32; AMD's abs source modifier). The same
// bits, except that a flush-to-zero build (nvcc --use_fast_math: abs.ftz.f32) turns a float
// subnormal into 0; every caller's subnormal input rounds to code 0 either way.
MXKIT_HD constexpr float abs_float(float x) noexcept {
#if MXKIT_DEVICE_PASS
  if (!__builtin_is_constant_evaluated()) return __builtin_fabsf(x);
#endif
  return bit_cast<float>(bit_cast<std::uint32_t>(x) & 0x7FFFFFFFu);
}

// a * p + c with ONE rounding, for callers whose product a * p is exact (p a power of two and
// the product not a float subnormal) or so small (below 2^-126, flushed or not) that c + it
// rounds to c: then the separate multiply and add (two roundings, the first exact) equal the
// fused operation. A device pass issues the fused one (PTX fma.rn.f32, AMD v_fma_f32), one FFMA
// whatever the contraction flags; the host keeps the expression, which -ffast-math may contract
// or not: the same float either way, by the precondition.
MXKIT_HD constexpr float fma_exact_product(float a, float p, float c) noexcept {
#if MXKIT_DEVICE_PASS
  if (!__builtin_is_constant_evaluated()) return __builtin_fmaf(a, p, c);
#endif
  return a * p + c;
}

// The larger of a and b, and the canonical NaN 0x7FFFFFFF if either is NaN: PTX max.NaN.f32
// (PTX ISA 7.0, sm_80 and later). The plain expression computes the same bits for a and b
// non-negative or NaN (callers pass magnitudes; signed zeros are not looked at). Where the
// instruction is missing, the block amax is an integer max of |x|'s bits instead, which needs
// no NaN test (block/quantize_block.hpp); has_max_nan says which to use.
inline constexpr bool has_max_nan = MXKIT_CUDA_DEVICE_ARCH >= 800;
MXKIT_HD constexpr float max_nan(float a, float b) noexcept {
#if MXKIT_CUDA_DEVICE_ARCH >= 800
  if (!__builtin_is_constant_evaluated()) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
  }
#endif
  if (a != a || b != b) return bit_cast<float>(0x7FFFFFFFu);
  return a > b ? a : b;
}

// a * b and a / b rounded to nearest even, IEEE 754, subnormals kept: PTX mul.rn.f32 and
// div.rn.f32 (every sm; without .ftz they keep subnormal operands and results, whatever the
// compile flags). Callers pass finite operands and, to div_rn, a non-zero divisor: there the
// integer arithmetic of format/float_arithmetic.hpp computes the same bits (tests/format holds it
// to the host's IEEE * and /), where its 64-bit integer division is a long emulated routine on a
// GPU. HIP passes and the host keep the integer path.
inline constexpr bool has_rn_mul_div = MXKIT_CUDA_DEVICE_ARCH > 0;
MXKIT_HD inline float mul_rn(float a, float b) noexcept {
#if MXKIT_CUDA_DEVICE_ARCH
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a * b;  // not reached: callers test has_rn_mul_div
#endif
}
MXKIT_HD inline float div_rn(float a, float b) noexcept {
#if MXKIT_CUDA_DEVICE_ARCH
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a / b;  // not reached: callers test has_rn_mul_div
#endif
}

// a * b + c with one rounding to nearest even (IEEE 754 fusedMultiplyAdd), subnormals kept: PTX
// fma.rn.f32 (no .ftz, whatever the compile flags), AMD v_fma_f32, the host's fmaf (an FMA
// instruction, or libm's correctly rounded emulation without one). The one function here with no
// plain expression behind it (a * b + c rounds twice): its callers take another path during
// constant evaluation (block/nvfp4_reciprocal.hpp).
MXKIT_HD inline float fma_rn(float a, float b, float c) noexcept {
#if MXKIT_CUDA_DEVICE_ARCH
  float r;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
  return r;
#else
  return __builtin_fmaf(a, b, c);
#endif
}

// ---- Conversions ------------------------------------------------------------------------------

// IEEE binary16 code h to float, for a non-NaN h: exact (every half is a float). PTX cvt.f32.f16
// on every sm, one instruction against the generic decode of minifloat::to_float, which handles
// NaN payloads (docs/perf/quantize.md, v5). HIP passes take the generic decode.
inline constexpr bool has_cvt_f32_f16 = MXKIT_CUDA_DEVICE_ARCH > 0;
MXKIT_HD constexpr float cvt_f32_f16(std::uint16_t h) noexcept {
#if MXKIT_CUDA_DEVICE_ARCH
  if (!__builtin_is_constant_evaluated()) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(h)));
    return f;
  }
#endif
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t mag = h & 0x7FFFu;
  if (mag >= 0x7C00u) return bit_cast<float>(sign | 0x7F800000u);  // Inf (callers pass no NaN)
  if (mag >= 0x0400u) return bit_cast<float>(sign | ((mag + (112u << 10)) << 13));  // rebias 15 -> 127
  // Subnormal: mag * 2^-24, exact (mag < 2^10, so the product is a normal float).
  return bit_cast<float>(sign | bit_cast<std::uint32_t>(static_cast<float>(mag) * 0x1p-24f));
}

// x rounded to OCP E4M3 (ManBits 3) or E5M2 (ManBits 2) with nearest-even and satfinite
// (overflow and +-Inf to +-max, overflow::saturate), for a non-NaN x: PTX
// cvt.rn.satfinite.e4m3x2.f32 / e5m2x2.f32 (PTX ISA 7.8, sm_89 and later), the same codes as
// minifloat's nearest-even path (the format conversion OCP 8-bit FP v1.0 defines). Only where
// has_cvt_fp8 holds: elsewhere the caller's portable path is the conversion. (AMD: gfx942's FP8
// conversions produce the FNUZ encodings, not OCP's; the HIP passes take the portable path.)
inline constexpr bool has_cvt_fp8 = MXKIT_CUDA_DEVICE_ARCH >= 890;
template <int ManBits>
MXKIT_HD inline std::uint8_t cvt_fp8_satfinite(float x) noexcept {
  static_assert(ManBits == 2 || ManBits == 3, "OCP FP8 is E4M3 or E5M2");
#if MXKIT_CUDA_DEVICE_ARCH >= 890
  unsigned short r;  // the x2 form packs its two operands; the second lands in the low byte
  if constexpr (ManBits == 3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  return static_cast<std::uint8_t>(r & 0xFF);
#else
  static_assert(ManBits < 0, "no FP8 conversion instruction in this pass: test hw::has_cvt_fp8 first");
  return static_cast<std::uint8_t>(x);
#endif
}

// Two OCP FP8 codes (E4M3 when ManBits is 3, E5M2 when 2; the first in the low byte) as two
// IEEE binary16 codes (the first in the low half), exactly for every non-NaN code: every E4M3
// and E5M2 value, subnormals and E5M2's infinities included, is a binary16 value. PTX
// cvt.rn.f16x2.e4m3x2 / e5m2x2 (PTX ISA 7.8, sm_89 and later), one instruction against two
// generic decodes. Only where has_cvt_fp8 holds; callers keep NaN codes off it (their binary16
// NaN is not the payload minifloat's decode gives).
template <int ManBits>
MXKIT_HD inline std::uint32_t cvt_f16x2_fp8x2(std::uint16_t codes) noexcept {
  static_assert(ManBits == 2 || ManBits == 3, "OCP FP8 is E4M3 or E5M2");
#if MXKIT_CUDA_DEVICE_ARCH >= 890
  std::uint32_t r;
  if constexpr (ManBits == 3) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(static_cast<unsigned short>(codes)));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(r) : "h"(static_cast<unsigned short>(codes)));
  return r;
#else
  static_assert(ManBits < 0, "no FP8 conversion instruction in this pass: test hw::has_cvt_fp8 first");
  return codes;
#endif
}

}  // namespace hw
MXKIT_END_NAMESPACE
