// SPDX-License-Identifier: Apache-2.0
#pragma once
// Learning-rate schedule: linear warmup to max_lr over `warmup` steps, then cosine decay to
// min_lr at step `total` (Loshchilov and Hutter 2017, "SGDR"; the usual LLM pretraining schedule).
//   lr(s) = max_lr * (s + 1) / warmup                                      s < warmup
//   lr(s) = min_lr + (max_lr - min_lr) * (1 + cos(pi * p)) / 2,  p = (s - warmup) / (total - warmup)
// Steps past `total` stay at min_lr.
#include <cmath>
#include <cstddef>

#include <mxkit/error.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct warmup_cosine;
inline void check_config(const warmup_cosine& s);

struct warmup_cosine {
  double max_lr = 1e-3, min_lr = 1e-4;
  std::size_t warmup = 0, total = 1;

  // Checked at construction and at every call (the fields are public).
  warmup_cosine(double max = 1e-3, double min = 1e-4, std::size_t warmup_steps = 0, std::size_t total_steps = 1)
      : max_lr(max), min_lr(min), warmup(warmup_steps), total(total_steps) {
    check_config(*this);
  }

  double operator()(std::size_t step) const {
    check_config(*this);
    if (step < warmup) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (step >= total) return min_lr;
    const double p = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p));
  }
};

// Learning rates finite and >= 0 (NaN fails: comparisons with NaN are false), decaying (min_lr <=
// max_lr), and a cosine phase of at least one step.
inline void check_config(const warmup_cosine& s) {
  detail::require(s.max_lr >= 0 && std::isfinite(s.max_lr), "warmup_cosine: max_lr must be finite and >= 0, got ", s.max_lr);
  detail::require(s.min_lr >= 0 && std::isfinite(s.min_lr), "warmup_cosine: min_lr must be finite and >= 0, got ", s.min_lr);
  detail::require(s.min_lr <= s.max_lr, "warmup_cosine: min_lr ", s.min_lr, " must not exceed max_lr ", s.max_lr);
  detail::require(s.total > s.warmup, "warmup_cosine: total ", s.total, " must exceed warmup ", s.warmup);
}

}  // namespace nn
MXKIT_END_NAMESPACE
