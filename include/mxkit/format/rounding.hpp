// SPDX-License-Identifier: Apache-2.0
#pragma once
// Rounding and overflow modes for every narrowing conversion in mxkit. Defaults live here only.
#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>

MXKIT_BEGIN_NAMESPACE

enum class rounding : std::uint8_t {
  nearest_even,  // IEEE 754 roundTiesToEven: CUDA cvt.rn, torchao, aiter (the default)
  nearest_away,  // ties away from zero: microxcaling's default, ROCm TE's Triton FP4 path
  toward_zero,   // truncation of the magnitude
  stochastic,    // up with probability equal to the discarded fraction; needs caller random bits
};

enum class overflow : std::uint8_t {
  saturate,   // clamp finite overflow and +-Inf to +-max (OCP MX v1.0 conversion rule)
  propagate,  // overflow gives Inf (E5M2) or NaN (E4M3), as non-saturating FP8 casts do
};

template <>
struct enum_names<rounding> {
  static constexpr const char* names[] = {"nearest_even", "nearest_away", "toward_zero", "stochastic"};
  static constexpr rounding last = rounding::stochastic;
};
template <>
struct enum_names<overflow> {
  static constexpr const char* names[] = {"saturate", "propagate"};
  static constexpr overflow last = overflow::propagate;
};

inline constexpr rounding default_rounding = rounding::nearest_even;
inline constexpr overflow default_overflow = overflow::saturate;

MXKIT_END_NAMESPACE
