#pragma once
// FP8 delayed scaling (Micikevicius et al. 2022, "FP8 Formats for Deep Learning"; the rule of
// TransformerEngine's DelayedScaling recipe). Each FP8 tensor of a linear layer (input X, weight
// W, output gradient dY) keeps a window of the amax values seen in the last `history_length`
// steps and one per-tensor scale. The scale used in step t comes from steps before t:
//   record(amax)  while step t runs (max of every quantization of the tensor in the step),
//   update()      after the step: amax_w = max of the window (`max`) or this step's (`most_recent`),
//                 scale = fp8_max / 2^margin / amax_w, then the window slides by one step.
// A zero or non-finite amax_w keeps the previous scale (nothing was seen, or an overflow that a
// new scale would not fix). The first step runs with scale 1.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

enum class amax_algorithm : std::uint8_t { max, most_recent };

}  // namespace nn
template <>
struct enum_names<nn::amax_algorithm> {
  static constexpr const char* names[] = {"max", "most_recent"};
  static constexpr nn::amax_algorithm last = nn::amax_algorithm::most_recent;
};
namespace nn {

struct delayed_scaling_config {
  std::size_t history_length = 1024;  // TransformerEngine's default
  amax_algorithm algorithm = amax_algorithm::max;
  int margin = 0;  // scale is divided by 2^margin: headroom for growth between updates
};

inline void check_config(const delayed_scaling_config& c) {
  detail::require(c.history_length >= 1, "delayed scaling: history_length must be at least 1, got ", c.history_length);
  detail::require(c.margin >= 0 && c.margin <= 64, "delayed scaling: margin must be in [0, 64], got ", c.margin);
}

class scaling_state {
 public:
  scaling_state() : scaling_state(delayed_scaling_config{}, fp8_type::e4m3) {}
  scaling_state(const delayed_scaling_config& config, fp8_type type) : config_(config), type_(type) {
    check_config(config_);
    history_.assign(config_.history_length, 0.0f);
  }

  fp8_type type() const noexcept { return type_; }
  const delayed_scaling_config& config() const noexcept { return config_; }
  float scale() const noexcept { return scale_; }
  // history()[0] is the step in progress, [1] the step before, ...
  const std::vector<float>& history() const noexcept { return history_; }

  void record(float amax) noexcept {
    float& slot = history_[0];
    // NaN wins (an overflowed tensor must be visible to update()), then the larger value.
    if (std::isnan(amax) || std::isnan(slot)) slot = std::numeric_limits<float>::quiet_NaN();
    else if (amax > slot) slot = amax;
  }

  void update() noexcept {
    float amax = history_[0];
    if (config_.algorithm == amax_algorithm::max)
      for (float a : history_) amax = std::isnan(a) || std::isnan(amax) ? std::numeric_limits<float>::quiet_NaN() : (a > amax ? a : amax);
    if (amax > 0.0f && std::isfinite(amax)) {
      const float s = fp8_max(type_) / std::ldexp(1.0f, config_.margin) / amax;
      // A tiny amax can overflow the quotient; the largest float is the closest valid scale.
      scale_ = std::isfinite(s) ? s : std::numeric_limits<float>::max();
    }
    for (std::size_t i = history_.size() - 1; i > 0; --i) history_[i] = history_[i - 1];
    history_[0] = 0.0f;
  }

  // A fresh start (recipe switch): empty window, scale 1.
  void reset() noexcept {
    history_.assign(config_.history_length, 0.0f);
    scale_ = 1.0f;
  }

 private:
  delayed_scaling_config config_;
  fp8_type type_ = fp8_type::e4m3;
  std::vector<float> history_;
  float scale_ = 1.0f;
};

}  // namespace nn
MXKIT_END_NAMESPACE
