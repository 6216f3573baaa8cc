// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fused delayed-scaling update of every row of a scaling table (nn/delayed_scaling.hpp), and
// the amax combine a cast applies to history column 0. A device kernel runs one thread block per
// group of rows with the same arithmetic (float compares, one float division).
//   amax_w = max over the row's H columns (max) or column 0 (most_recent), NaN wins
//   amax_w > 0 and finite: scale = fp8_max / 2^margin / amax_w, the largest float if that overflows
//   otherwise the scale stays; then column k+1 = column k, column 0 = 0
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cmath>
#include <cstddef>
#include <limits>

#include <mxkit/nn/delayed_scaling.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// history[0] = max(history[0], amax), NaN wins (an overflowed tensor must stay visible).
inline void record_amax(float& slot, float amax) noexcept {
  if (std::isnan(amax) || std::isnan(slot)) slot = std::numeric_limits<float>::quiet_NaN();
  else if (amax > slot) slot = amax;
}

// history (rows, H), scale and fp8_max (rows, 1).
inline void update_scales(float* history, float* scale, const float* fp8_max, std::size_t rows, std::size_t H,
                          const nn::delayed_scaling_config& c) {
  const float headroom = std::ldexp(1.0f, c.margin);
  for (std::size_t r = 0; r < rows; ++r) {
    float* h = history + r * H;
    float amax = h[0];
    if (c.algorithm == nn::amax_algorithm::max)
      for (std::size_t k = 1; k < H; ++k) record_amax(amax, h[k]);
    if (amax > 0.0f && std::isfinite(amax)) {
      const float s = fp8_max[r] / headroom / amax;
      // A tiny amax can overflow the quotient; the largest float is the closest valid scale.
      scale[r] = std::isfinite(s) ? s : std::numeric_limits<float>::max();
    }
    for (std::size_t k = H - 1; k > 0; --k) h[k] = h[k - 1];
    h[0] = 0.0f;
  }
}

}  // namespace ref
MXKIT_END_NAMESPACE
