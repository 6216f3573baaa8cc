// SPDX-License-Identifier: Apache-2.0
#pragma once
// Quantize and dequantize one NVFP4 block (block/nvfp4_scale.hpp: E2M1 elements, an E4M3 scale
// per 16, an fp32 tensor scale), with the options of the paper's recipe (arXiv 2509.25149): the
// 16-point random Hadamard transform of each block before its amax (the paper's RHT: H16 after a
// sign vector D), stochastic rounding of the elements with mxkit's Philox bits (as the MX blocks
// draw them, block/quantize_block.hpp), and 2-D scaling, where the caller passes the amax of a
// 16 x 16 tile instead of the block's own. Elements round through the one E2M1 template
// (format/minifloat.hpp), the scale through the E4M3 one: no rounding rule is written here.
// constexpr and host/device, like the MX block functions.
#include <cstdint>

#include <mxkit/block/block_format.hpp>
#include <mxkit/block/nvfp4_scale.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/rounding.hpp>
#include <mxkit/random/philox.hpp>
#include <mxkit/transform/hadamard.hpp>

MXKIT_BEGIN_NAMESPACE

inline constexpr int nvfp4_block_size = formats::nvfp4.block_size();  // elements per scale along the block axis
static_assert(nvfp4_block_size == hadamard_group && formats::nvfp4_2d.block_size() == nvfp4_block_size,
              "the rotation is one 16-point transform per block, in both NVFP4 block shapes");

// How an NVFP4 copy is quantized, beyond its format (1 x 16 or 16 x 16 blocks) and tensor scale.
struct nvfp4_options {
  rounding round = default_rounding;  // the elements'; block scales round to nearest even (block/nvfp4_scale.hpp)
  bool hadamard = false;              // rotate each block (H16 . D) before its amax: the paper's RHT
  std::uint32_t hadamard_signs = 0;   // D: bit i negates element i of each block before H16 (16 bits). 0: none;
                                      // hadamard_sign_mask(seed) for random ones; ref::te_nvfp4_rht_signs for TE's
  std::uint64_t seed = 0;             // Philox key of stochastic rounding
  std::uint32_t stream = 0;           // Philox stream (the columnwise copy flips the top bit, stochastic_stream)

  friend constexpr bool operator==(const nvfp4_options&, const nvfp4_options&) = default;
};

struct nvfp4_block {
  e4m3 scale;
  e2m1 elements[nvfp4_block_size];
};

// Rotates a block of 16 values in place when o.hadamard (normalized H16 after the signs:
// transform/hadamard.hpp's rotate_group16, the MX rotation).
MXKIT_HD constexpr void nvfp4_rotate_block(float* v, const nvfp4_options& o) noexcept {
  if (o.hadamard) rotate_group16(v, o.hadamard_signs & 0xFFFFu);
}

// The amax of 16 values as float bits (amax_bits: NaN sorts above Inf above every finite value).
MXKIT_HD constexpr std::uint32_t nvfp4_block_amax_bits(const float* v) noexcept {
  std::uint32_t a = 0;
  for (int i = 0; i < nvfp4_block_size; ++i) a = amax_bits(a, v[i]);
  return a;
}

namespace detail {
// The elements of block b from values v, each scaled by `scaled` and rounded under o. Stochastic
// rounding draws random_bits(seed, stream, first_index + i): one Philox call serves four
// consecutive indices (random_bits_x4), so a block that starts at a multiple of 4 (every block of
// a copy: lines are padded to whole blocks) makes four calls, not sixteen. The rounding is spelled
// out there, so that a caller's run-time mode does not keep the other modes' code in the loop.
template <class Scaled>
MXKIT_HD constexpr void round_nvfp4_elements(nvfp4_block& b, const float* v, const nvfp4_options& o, std::uint64_t first_index,
                                             const Scaled& scaled) noexcept {
  if (o.round == rounding::stochastic && first_index % 4 == 0) {
    for (int g = 0; g < nvfp4_block_size; g += 4) {
      const philox_block r = random_bits_x4(o.seed, o.stream, (first_index + static_cast<std::uint64_t>(g)) / 4);
      for (int j = 0; j < 4; ++j) b.elements[g + j] = e2m1::from_float(scaled(v[g + j]), rounding::stochastic, overflow::saturate, r.v[j]);
    }
    return;
  }
  for (int i = 0; i < nvfp4_block_size; ++i) {
    const std::uint32_t bits = o.round == rounding::stochastic ? random_bits(o.seed, o.stream, first_index + static_cast<std::uint64_t>(i)) : 0u;
    b.elements[i] = e2m1::from_float(scaled(v[i]), o.round, overflow::saturate, bits);
  }
}
}  // namespace detail

// Values v (rotated already, when the options rotate) to a block, scaled from `amax` (float bits:
// the block's own, or its 16 x 16 tile's) by `scaler` (nvfp4_scaler: mxkit's rule; the peers'
// scalers in validation/nvfp4_quirks.hpp). first_index numbers v[0] in its copy for stochastic
// rounding's bits (random_bits(seed, stream, first_index + i)).
template <class Scaler>
MXKIT_HD constexpr nvfp4_block quantize_nvfp4_block(const float* v, std::uint32_t amax, const Scaler& scaler, const nvfp4_options& o,
                                                    std::uint64_t first_index = 0) noexcept {
  nvfp4_block b{};
  if (amax >= 0x7F800000u) {  // NaN or Inf: the NaN scale, zero codes (block/nvfp4_scale.hpp)
    b.scale = e4m3::quiet_nan();
    return b;
  }
  b.scale = scaler.block_scale(bit_cast<float>(amax));
  // A scaler that splits its scaling per block (nvfp4_scaler::for_block) does the block's part
  // once; the peers' scalers (validation/nvfp4_quirks.hpp) scale each element whole.
  if constexpr (requires { scaler.for_block(b.scale); }) {
    detail::round_nvfp4_elements(b, v, o, first_index, scaler.for_block(b.scale));
  } else {
    detail::round_nvfp4_elements(b, v, o, first_index, [&](float x) { return scaler.scaled(x, b.scale); });
  }
  return b;
}

namespace detail {
// Unrotating sums 16 decoded values: past 2^124 each, the float butterflies could overflow
// although the block holds finite values. Such blocks (tensor scale above 2^100: |value| <= 2688 t)
// are unrotated 2^-32 lower and scaled back exactly, as dequantize_block does for MX: every
// value is a normal float there, so the shifted sums are the unshifted ones 2^-32 lower.
inline constexpr float nvfp4_unrotate_shift_above = exp2i(100);
inline constexpr int nvfp4_unrotate_shift = 32;
}  // namespace detail

// A block back to 16 floats under tensor scale t (the decode: block/nvfp4_scale.hpp), the
// rotation undone when o.hadamard (pass the options it was quantized with).
MXKIT_HD constexpr void dequantize_nvfp4_block(const nvfp4_block& b, float t, float* out, const nvfp4_options& o = {}) noexcept {
  const bool shift = o.hadamard && t > detail::nvfp4_unrotate_shift_above && !b.scale.is_nan();
  const float decode_t = shift ? t * detail::exp2i(-detail::nvfp4_unrotate_shift) : t;  // exact: t is a normal float far above 2^-94
  for (int i = 0; i < nvfp4_block_size; ++i) out[i] = nvfp4_decode(b.elements[i], b.scale, decode_t);
  if (!o.hadamard || b.scale.is_nan()) return;
  unrotate_group16(out, o.hadamard_signs & 0xFFFFu);
  if (shift)
    for (int i = 0; i < nvfp4_block_size; ++i) out[i] = fp32_mul(out[i], detail::exp2i(detail::nvfp4_unrotate_shift));
}

MXKIT_END_NAMESPACE
