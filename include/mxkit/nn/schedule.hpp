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

struct warmup_cosine {
  double max_lr = 1e-3, min_lr = 1e-4;
  std::size_t warmup = 0, total = 1;

  double operator()(std::size_t step) const {
    detail::require(total > warmup, "warmup_cosine: total ", total, " must exceed warmup ", warmup);
    if (step < warmup) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (step >= total) return min_lr;
    const double p = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p));
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
