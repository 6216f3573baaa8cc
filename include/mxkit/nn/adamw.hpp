#pragma once
// AdamW (Loshchilov and Hutter 2019, decoupled weight decay) on fp32 master weights, with
// global-norm gradient clipping. The quantized or bf16 copies the GEMMs read are made from these
// masters after each update (the version bump invalidates them, linear.hpp).
//   g' = g * clip,  m = b1 m + (1 - b1) g',  v = b2 v + (1 - b2) g'^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)
// A step whose gradient norm is not finite is skipped (nothing is updated) and counted.
// One step is two multi-tensor backend operations and reads nothing back: global_norm (the norm
// and the clipping factor, (1, 1) f64 in backend memory) and adamw_step (every parameter; the
// step counters live in backend memory, so a skipped step is decided and counted on the device).
// The host bumps every parameter's version on each step() (it does not know whether the device
// skipped it): a skipped step costs a re-quantization of unchanged weights, never a stale copy.
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

class adamw {
 public:
  // The trainable parameters at construction are optimized; the state lives in the backend.
  adamw(backend& be, const std::vector<parameter*>& params, const adamw_config& config = {}) : be_(&be), config_(config) {
    detail::require(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
                    "adamw: betas must be in [0, 1), got ", config.beta1, ", ", config.beta2);
    detail::require(config.clip_norm >= 0, "adamw: clip_norm must be >= 0, got ", config.clip_norm);
    for (parameter* p : params)
      if (p->trainable) {
        slot s{p, be.alloc(p->rows(), p->cols(), p->value.type(), mem_tag::optimizer),
               be.alloc(p->rows(), p->cols(), p->value.type(), mem_tag::optimizer)};
        slots_.push_back(std::move(s));
      }
    norm_ = be.scalar(mem_tag::optimizer);
    clip_ = be.scalar(mem_tag::optimizer);
    state_ = be.alloc(1, 2, dtype::f64, mem_tag::optimizer);  // steps applied, steps skipped
  }

  // One update with learning rate `lr`: enqueued, nothing read back.
  void step(double lr) {
    std::vector<const tensor*> grads;
    std::vector<adamw_slot_ref> refs;
    for (slot& s : slots_) {
      grads.push_back(&s.p->grad);
      refs.push_back({&s.p->value, &s.p->grad, &s.m, &s.v, s.p->decay ? config_.weight_decay : 0.0});
    }
    be_->global_norm(grads, config_.clip_norm, norm_, clip_);
    be_->adamw_step(refs, {lr, config_.beta1, config_.beta2, config_.eps}, norm_, clip_, state_);
    for (slot& s : slots_) ++s.p->version;
  }

  // Reads from backend memory (each one a host read: for logging and checkpoints).
  std::uint64_t steps() const { return static_cast<std::uint64_t>(be_->read(state_)[0]); }
  std::uint64_t skipped_steps() const { return static_cast<std::uint64_t>(be_->read(state_)[1]); }
  double last_grad_norm() const { return be_->read_scalar(norm_); }
  // The gradient norm of the last step before clipping, (1, 1) f64 in backend memory.
  const tensor& grad_norm() const noexcept { return norm_; }
  const adamw_config& config() const noexcept { return config_; }

  // State access for checkpoints: (parameter, first moment, second moment) per trainable parameter.
  struct slot {
    parameter* p;
    tensor m, v;
  };
  std::vector<slot>& slots() noexcept { return slots_; }
  const std::vector<slot>& slots() const noexcept { return slots_; }
  void set_steps(std::uint64_t s) {
    std::vector<double> st = be_->read(state_);
    st[0] = static_cast<double>(s);
    be_->write(state_, st);
  }

 private:
  backend* be_;
  adamw_config config_;
  std::vector<slot> slots_;
  tensor norm_, clip_, state_;  // (1, 1), (1, 1), (1, 2) f64
};

}  // namespace nn
MXKIT_END_NAMESPACE
