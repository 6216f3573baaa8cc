// SPDX-License-Identifier: Apache-2.0
#pragma once
// How an MX quantization is done; one struct from the block functions up to the GPU kernels.
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/rounding.hpp>

MXKIT_BEGIN_NAMESPACE

struct quantize_options {
  scale_rule rule = default_scale_rule;  // OCP floor unless a recipe says otherwise
  rounding round = default_rounding;     // elements; the scale follows `rule`
  bool hadamard = false;                 // 16-point rotation of each group before the scale
  bool random_signs = false;             // randomized rotation H.D, D fixed by `seed`
  std::uint64_t seed = 0;                // Philox key: stochastic rounding and random signs
  std::uint32_t stream = 0;              // Philox stream: decorrelates tensors quantized with one seed

  MXKIT_HD constexpr std::uint32_t sign_mask() const noexcept;
  friend constexpr bool operator==(const quantize_options&, const quantize_options&) = default;
};

MXKIT_END_NAMESPACE

#include <mxkit/transform/hadamard.hpp>

MXKIT_BEGIN_NAMESPACE
MXKIT_HD constexpr std::uint32_t quantize_options::sign_mask() const noexcept {
  return hadamard && random_signs ? hadamard_sign_mask(seed) : 0u;
}
MXKIT_END_NAMESPACE
