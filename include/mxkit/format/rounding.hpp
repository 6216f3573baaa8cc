#pragma once
// Rounding and overflow modes for every narrowing conversion in mxkit. Defaults live here only.
#include <mxkit/config.hpp>

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

constexpr const char* name_of(rounding r) noexcept {
  switch (r) {
    case rounding::nearest_even: return "nearest_even";
    case rounding::nearest_away: return "nearest_away";
    case rounding::toward_zero: return "toward_zero";
    case rounding::stochastic: return "stochastic";
  }
  return "unknown";
}
constexpr const char* name_of(overflow o) noexcept {
  switch (o) {
    case overflow::saturate: return "saturate";
    case overflow::propagate: return "propagate";
  }
  return "unknown";
}

inline constexpr rounding default_rounding = rounding::nearest_even;
inline constexpr overflow default_overflow = overflow::saturate;

MXKIT_END_NAMESPACE
