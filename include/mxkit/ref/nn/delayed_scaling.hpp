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

#include <mxkit/config.hpp>
#include <mxkit/nn/delayed_scaling.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// history[0] = max(history[0], amax), NaN wins (an overflowed tensor must stay visible).
MXKIT_HD constexpr void record_amax(float& slot, float amax) noexcept {
  if (amax != amax || slot != slot) slot = bit_cast<float>(0x7FC00000u);  // the quiet NaN
  else if (amax > slot) slot = amax;
}

// One row: h (H history columns), its scale, its fp8_max; headroom = 2^margin. The one copy of
// the rule, in three steps that the host loop below runs in turn and the device kernel
// (gpu/nn/tensor_ops.hpp) runs with a block per row (record_amax is a max in which NaN wins, so
// any grouping of the columns gives the same scale). Comparisons stand in for isfinite (a NaN
// fails every one), so it runs on the device as well.
MXKIT_HD constexpr float history_amax(const float* h, std::size_t H, nn::amax_algorithm algorithm) noexcept {
  float amax = h[0];
  if (algorithm == nn::amax_algorithm::max)
    for (std::size_t k = 1; k < H; ++k) record_amax(amax, h[k]);
  return amax;
}
MXKIT_HD constexpr void scale_from_amax(float amax, float& scale, float fp8_max, float headroom) noexcept {
  constexpr float largest = bit_cast<float>(0x7F7FFFFFu);  // the largest finite float
  if (amax > 0.0f && amax <= largest) {
    const float s = fp8_max / headroom / amax;
    // A tiny amax can overflow the quotient; the largest float is the closest valid scale.
    scale = s <= largest ? s : largest;
  }
}
MXKIT_HD constexpr void update_scale_row(float* h, std::size_t H, float& scale, float fp8_max, float headroom,
                                         nn::amax_algorithm algorithm) noexcept {
  scale_from_amax(history_amax(h, H, algorithm), scale, fp8_max, headroom);
  for (std::size_t k = H - 1; k > 0; --k) h[k] = h[k - 1];  // column k+1 = column k
  h[0] = 0.0f;
}

// history (rows, H), scale and fp8_max (rows, 1).
inline void update_scales(float* history, float* scale, const float* fp8_max, std::size_t rows, std::size_t H,
                          const nn::delayed_scaling_config& c) {
  const float headroom = std::ldexp(1.0f, c.margin);
  for (std::size_t r = 0; r < rows; ++r) update_scale_row(history + r * H, H, scale[r], fp8_max[r], headroom, c.algorithm);
}

}  // namespace ref
MXKIT_END_NAMESPACE
