#pragma once
// AdamW (Loshchilov and Hutter 2019, decoupled weight decay) on fp32 master weights, with
// global-norm gradient clipping. The quantized or bf16 copies the GEMMs read are made from these
// masters after each update (the version bump invalidates them, linear.hpp).
//   g' = g * clip,  m = b1 m + (1 - b1) g',  v = b2 v + (1 - b2) g'^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)
// A step whose gradient norm is not finite is skipped (nothing is updated) and counted.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/parameter.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {
struct adamw_config {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;  // on parameters with decay = true
  double clip_norm = 1.0;     // global gradient norm limit; 0 disables clipping
};

// The settings an update divides by or multiplies into every weight; a bad one poisons every
// weight at the first step (eps = 0: a parameter with zero gradient gets 0 / 0 = NaN; a NaN
// anywhere propagates). Written so that NaN fails every check (comparisons with NaN are false).
inline void check_config(const adamw_config& c) {
  detail::require(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, "adamw: betas must be in [0, 1), got ", c.beta1, ", ",
                  c.beta2);
  detail::require(c.eps > 0 && std::isfinite(c.eps), "adamw: eps must be finite and > 0, got ", c.eps);
  detail::require(c.weight_decay >= 0 && std::isfinite(c.weight_decay), "adamw: weight_decay must be finite and >= 0, got ",
                  c.weight_decay);
  detail::require(c.clip_norm >= 0, "adamw: clip_norm must be >= 0, got ", c.clip_norm);
}

// The arguments of one backend::adamw_update call. step >= 1: the bias corrections 1 - beta^step
// are divisors.
inline void check_config(const adamw_hyper& h) {
  detail::require(h.lr >= 0 && std::isfinite(h.lr), "adamw_hyper: lr must be finite and >= 0, got ", h.lr);
  detail::require(h.beta1 >= 0 && h.beta1 < 1, "adamw_hyper: beta1 must be in [0, 1), got ", h.beta1);
  detail::require(h.beta2 >= 0 && h.beta2 < 1, "adamw_hyper: beta2 must be in [0, 1), got ", h.beta2);
  detail::require(h.eps > 0 && std::isfinite(h.eps), "adamw_hyper: eps must be finite and > 0, got ", h.eps);
  detail::require(h.weight_decay >= 0 && std::isfinite(h.weight_decay), "adamw_hyper: weight_decay must be finite and >= 0, got ",
                  h.weight_decay);
  detail::require(h.grad_scale > 0 && std::isfinite(h.grad_scale), "adamw_hyper: grad_scale must be finite and > 0, got ",
                  h.grad_scale);
  detail::require(h.step >= 1, "adamw_hyper: step must be >= 1, got ", h.step);
}

class adamw {
 public:
  // The trainable parameters at construction are optimized; the state lives in the backend.
  adamw(backend& be, const std::vector<parameter*>& params, const adamw_config& config = {}) : be_(&be), config_(config) {
    check_config(config);
    for (parameter* p : params)
      if (p->trainable) {
        slot s{p, be.alloc(p->rows(), p->cols(), p->value.type(), mem_tag::optimizer),
               be.alloc(p->rows(), p->cols(), p->value.type(), mem_tag::optimizer)};
        slots_.push_back(std::move(s));
      }
  }

  // One update with learning rate `lr` (finite, >= 0; checked before anything changes). Returns
  // the gradient norm before clipping.
  double step(double lr) {
    detail::require(lr >= 0 && std::isfinite(lr), "adamw: lr must be finite and >= 0, got ", lr);
    double ss = 0.0;
    for (const slot& s : slots_) ss += be_->sum_squares(s.p->grad);
    const double norm = std::sqrt(ss);
    last_norm_ = norm;
    if (!std::isfinite(norm)) {
      ++skipped_;
      return norm;
    }
    adamw_hyper h{lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, 1.0, step_ + 1};
    if (config_.clip_norm > 0 && norm > config_.clip_norm) h.grad_scale = config_.clip_norm / norm;
    check_config(h);  // every value the backend update reads, checked once here before any weight changes
    ++step_;
    for (slot& s : slots_) {
      h.weight_decay = s.p->decay ? config_.weight_decay : 0.0;
      be_->adamw_update(s.p->value, s.p->grad, s.m, s.v, h);
      ++s.p->version;
    }
    return norm;
  }

  std::uint64_t steps() const noexcept { return step_; }
  std::uint64_t skipped_steps() const noexcept { return skipped_; }
  double last_grad_norm() const noexcept { return last_norm_; }
  const adamw_config& config() const noexcept { return config_; }

  // State access for checkpoints: (parameter, first moment, second moment) per trainable parameter.
  struct slot {
    parameter* p;
    tensor m, v;
  };
  std::vector<slot>& slots() noexcept { return slots_; }
  const std::vector<slot>& slots() const noexcept { return slots_; }
  void set_steps(std::uint64_t s) noexcept { step_ = s; }

 private:
  backend* be_;
  adamw_config config_;
  std::vector<slot> slots_;
  std::uint64_t step_ = 0, skipped_ = 0;
  double last_norm_ = 0.0;
};

}  // namespace nn
MXKIT_END_NAMESPACE
