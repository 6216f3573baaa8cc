// SPDX-License-Identifier: Apache-2.0
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
#include <mxkit/parallel/communicator.hpp>
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
    norm_ = be.scalar(mem_tag::optimizer);
    clip_ = be.scalar(mem_tag::optimizer);
    state_ = be.alloc(1, 2, dtype::f64, mem_tag::optimizer);  // steps applied, steps skipped
  }

  // One update with learning rate `lr` (finite, >= 0; checked before anything changes):
  // enqueued, nothing read back.
  void step(double lr) {
    detail::require(lr >= 0 && std::isfinite(lr), "adamw: lr must be finite and >= 0, got ", lr);
    std::vector<const tensor*> grads;
    std::vector<adamw_slot_ref> refs;
    for (slot& s : slots_) {
      materialize_grad(*be_, *s.p);  // a parameter the backward did not reach: its zeros
      grads.push_back(&s.p->grad);
      refs.push_back({&s.p->value, &s.p->grad, &s.m, &s.v, s.p->decay ? config_.weight_decay : 0.0});
    }
    if (!shards_) {
      be_->global_norm(grads, config_.clip_norm * divisor_, norm_, clip_);
    } else {  // this rank's shard norm, every rank's gathered, their norm: the whole gradient's
      be_->global_norm(grads, 0.0, norm_, clip_);
      shards_->all_gather(buffer_of(norm_), buffer_of(rank_norms_));
      shards_->join();
      const tensor* all[] = {&rank_norms_};
      be_->global_norm(all, config_.clip_norm * divisor_, norm_, clip_);
    }
    if (divisor_ != 1.0) {  // the mean gradient's norm; 1/divisor rides on the clip factor
      scale(norm_, 1.0 / divisor_);
      scale(clip_, 1.0 / divisor_);
    }
    be_->adamw_step(refs, {lr, config_.beta1, config_.beta2, config_.eps, lr_device_}, norm_, clip_, state_);
    bump_versions();
  }
  // Every update reads the learning rate from `lr` ((1, 1) f64 backend memory the caller fills
  // before each step; step()'s lr is then only checked) instead of taking it by value: a recorded
  // step replays its kernel arguments unchanged (nn/step_graph.hpp). Null: by value again.
  void set_lr_device(const tensor* lr) noexcept { lr_device_ = lr; }
  // What step() does on the host besides enqueueing: every parameter's version moves, so copies
  // cached from the old values are made again. A replayed step (nn/step_graph.hpp) runs no host
  // code; its caller calls this instead.
  void bump_versions() noexcept {
    for (slot& s : slots_) ++s.p->version;
  }

  // Data parallelism (data_parallel.hpp): the gradients hold the sum of `divisor` micro-batches'
  // gradients (each that of its mean loss) and the step uses their mean: norm() is the mean's,
  // clipping compares it with clip_norm, and the clip factor carries 1/divisor into the update
  // (the update reads g x clip in double). With `shards`, each rank's gradients are its shard of
  // the whole and the norm combines every rank's (an all_gather of the ranks' norms). Divisor 1 and
  // no shards: the plain step, bit for bit.
  void set_distribution(double divisor, communicator* shards) {
    detail::require(divisor >= 1.0 && std::isfinite(divisor), "adamw: gradient divisor must be finite and >= 1, got ", divisor);
    divisor_ = divisor;
    shards_ = shards;
    if (shards) rank_norms_ = be_->alloc(1, static_cast<std::size_t>(shards->size()), dtype::f64, mem_tag::optimizer);
    if (divisor != 1.0 && !scratch_.defined()) scratch_ = be_->scalar(mem_tag::optimizer);
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
  // t = a t for a device scalar (no host read).
  void scale(tensor& t, double a) {
    be_->fill(scratch_, 0.0);
    be_->axpy(a, t, scratch_);
    be_->copy(scratch_, t);
  }

  backend* be_;
  adamw_config config_;
  std::vector<slot> slots_;
  tensor norm_, clip_, state_;  // (1, 1), (1, 1), (1, 2) f64
  const tensor* lr_device_ = nullptr;  // set_lr_device
  double divisor_ = 1.0;
  communicator* shards_ = nullptr;
  tensor rank_norms_, scratch_;  // (1, ranks), (1, 1) f64
};

}  // namespace nn
MXKIT_END_NAMESPACE
