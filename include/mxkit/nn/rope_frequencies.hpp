// SPDX-License-Identifier: Apache-2.0
#pragma once
// The rotation frequencies of RoPE (nn/rope.hpp says what rotates): pair i of a head of dimension
// D turns by t * f_i at position t, f_i = theta^(-2i/D) (Su et al. 2021), and under Llama 3.1's
// frequency scaling ("rope_type": "llama3" in its config.json) by t * llama3_scaled_frequency(f_i).
// One function for the host reference (ref/nn/rope.hpp) and the device kernels (gpu/nn/rope.hpp),
// both forming f_i = pow(theta, -2i/D) in double first, as before the scaling existed: without
// scaling the frequency is f_i itself, so every existing model rotates by the same bits.
//
// Llama 3.1's rule (Hugging Face transformers, modeling_rope_utils.py, _compute_llama3_parameters;
// Meta's llama-models apply_scaling is the same): with the wavelength w = 2 pi / f and the
// original context L (original_max_position_embeddings),
//   w < L / high_freq_factor   f                        (high frequencies: unchanged)
//   w > L / low_freq_factor    f / factor               (low frequencies: interpolated by factor)
//   otherwise                  (1 - s) f / factor + s f,   s = (L / w - low) / (high - low)
// The rule depends on the wavelength, not on the sequence trained: it rescales the low-frequency
// pairs at every position, 8192 tokens or 10. With theta 500000 and D 128 (Llama 3.1 8B), pairs
// 0 .. 28 keep their frequency, pairs 29 .. 34 are blended and pairs 35 .. 63 turn 8 times slower:
// a model trained (or fine-tuned from Llama 3.1's weights) without it is another model.
#include <cmath>

#include <mxkit/config.hpp>
#include <mxkit/error.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct rope_scaling {
  double factor = 1.0;  // 1: no scaling (the default; Llama 2). Llama 3.1: 8
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  double original_max_position = 8192.0;  // L, Llama 3's pretraining context

  MXKIT_HD constexpr bool enabled() const noexcept { return factor != 1.0; }
  friend constexpr bool operator==(const rope_scaling&, const rope_scaling&) = default;
};

// Llama 3.1's values (config.json "rope_scaling" of meta-llama/Llama-3.1-8B, the same for 70B and
// 405B: factor 8.0, low_freq_factor 1.0, high_freq_factor 4.0, original_max_position_embeddings
// 8192, rope_type "llama3").
inline constexpr rope_scaling llama3_1_rope_scaling{8.0, 1.0, 4.0, 8192.0};

// What the RoPE kernels take: the base and the scaling.
struct rope_frequencies {
  double theta = 10000.0;
  rope_scaling scaling = {};
  friend constexpr bool operator==(const rope_frequencies&, const rope_frequencies&) = default;
};

// f as the scaling leaves it; f itself when the scaling is off (no arithmetic at all).
MXKIT_HD constexpr double llama3_scaled_frequency(double f, const rope_scaling& s) noexcept {
  if (!s.enabled()) return f;
  constexpr double two_pi = 6.283185307179586;  // the double nearest 2 pi (Python's 2 * math.pi)
  const double wavelength = two_pi / f;
  if (wavelength < s.original_max_position / s.high_freq_factor) return f;
  if (wavelength > s.original_max_position / s.low_freq_factor) return f / s.factor;
  const double smooth = (s.original_max_position / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * f / s.factor + smooth * f;
}

// Refuses what the rule cannot mean (a NaN or non-positive field, an empty blend band), naming it.
inline void check_config(const rope_frequencies& r) {
  detail::require(std::isfinite(r.theta) && r.theta > 0.0, "rope: theta must be finite and > 0, got ", r.theta);
  const rope_scaling& s = r.scaling;
  if (!s.enabled()) return;
  detail::require(std::isfinite(s.factor) && s.factor > 0.0, "rope scaling: factor must be finite and > 0, got ", s.factor);
  detail::require(s.low_freq_factor > 0.0 && s.high_freq_factor > s.low_freq_factor && std::isfinite(s.high_freq_factor),
                  "rope scaling: needs 0 < low_freq_factor < high_freq_factor, got ", s.low_freq_factor, " and ", s.high_freq_factor);
  detail::require(std::isfinite(s.original_max_position) && s.original_max_position > 0.0,
                  "rope scaling: original_max_position must be finite and > 0, got ", s.original_max_position);
}

}  // namespace nn
MXKIT_END_NAMESPACE
