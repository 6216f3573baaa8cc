// SPDX-License-Identifier: Apache-2.0
#pragma once
// The delayed-scaling rule of one scaling-table row (nn/delayed_scaling.hpp), as host+device
// constexpr functions: the host oracle (ref/nn/delayed_scaling.hpp) loops over rows with them,
// the device kernel (gpu/nn/delayed_scaling.hpp) runs them with a block per row, so both compute
// the same bits from one copy of the rule.
//   amax_w = max over the row's H columns (max) or column 0 (most_recent), NaN wins
//   amax_w > 0 and finite: scale = fp8_max / 2^margin / amax_w, the largest float if that overflows
//   otherwise the scale stays; then column k+1 = column k, column 0 = 0
#include <cstddef>

#include <mxkit/config.hpp>
#include <mxkit/nn/delayed_scaling.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

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
MXKIT_HD constexpr float history_amax(const float* h, std::size_t H, amax_algorithm algorithm) noexcept {
  float amax = h[0];
  if (algorithm == amax_algorithm::max)
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
                                         amax_algorithm algorithm) noexcept {
  scale_from_amax(history_amax(h, H, algorithm), scale, fp8_max, headroom);
  for (std::size_t k = H - 1; k > 0; --k) h[k] = h[k - 1];  // column k+1 = column k
  h[0] = 0.0f;
}

}  // namespace nn
MXKIT_END_NAMESPACE
