// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fused delayed-scaling update of every row of a scaling table (nn/delayed_scaling.hpp) on the
// host: the rule of nn/delayed_scaling_rule.hpp row by row. The oracle of the device kernel
// (gpu/nn/delayed_scaling.hpp), called by ref::host_backend.
#include <cmath>
#include <cstddef>
#include <limits>

#include <mxkit/config.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/delayed_scaling_rule.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// history (rows, H), scale and fp8_max (rows, 1).
inline void update_scales(float* history, float* scale, const float* fp8_max, std::size_t rows, std::size_t H,
                          const nn::delayed_scaling_config& c) {
  const float headroom = std::ldexp(1.0f, c.margin);
  for (std::size_t r = 0; r < rows; ++r) nn::update_scale_row(history + r * H, H, scale[r], fp8_max[r], headroom, c.algorithm);
}

}  // namespace ref
MXKIT_END_NAMESPACE
