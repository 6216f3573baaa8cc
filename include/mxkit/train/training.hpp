// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training loop: one optimizer step is
//   upload tokens and targets (two (B*T, 1) i32 tensors, allocated once; and the loss mask, a
//   third, for batches that carry one: nn::batch::loss_mask) -> zero_grad ->
//   forward (training; loss into backend memory, added to a device-side loss sum) -> backward
//   -> AdamW step (multi-tensor norm, clipping factor and update; lr from the schedule)
//   -> end_step (one fused delayed-scaling update)
// and reads nothing back, except at logging steps (every `log_every` steps and the last one):
// then the host reads the loss sum (and the gradient norm, for a progress callback) and records
// the window's mean loss. With log_every = 1 that is every step's loss.
// Step graphs (step_replay.hpp, nn/step_graph.hpp; train_config::step_graph, on by default): on a
// backend that records graphs (the device backend: a CUDA or HIP graph), with one rank, one
// micro-batch, no healing and a recipe without per-step random draws, the third step of a batch
// shape is recorded (the second, launched, is measured for its memory) and the steps after it
// replay it: zero_grad, forward, backward and the
// optimizer step, as one launch. Outside the recording, before it: the batch's upload into the
// same tokens, targets and mask tensors, and the learning rate into a device scalar (the
// optimizer reads it there: adamw_args::lr_device); after it: the loss read of a logging step. The
// same bits as launching each operation (tests/gpu/catch2_test_device_training.cu compares them).
// An optional healing switch (healing.hpp): the stash is taken when the trainer starts and the
// switch happens before step `heal_step`. Every run is deterministic in the model seed and the
// data seed: the same configuration gives the same losses, bit for bit.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/train/adamw.hpp>
#include <mxkit/train/data.hpp>
#include <mxkit/parallel/data_parallel.hpp>
#include <mxkit/nn/healing.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/train/schedule.hpp>
#include <mxkit/train/step_replay.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct train_progress {
  std::size_t step = 0, steps = 0;  // step just finished (1-based), of steps
  double loss = 0.0;                // mean training loss since the previous logging step
  double lr = 0.0, grad_norm = 0.0;
  const char* recipe = "";
};

struct train_config {
  std::size_t steps = 100;
  batch_shape shape{4, 64};
  warmup_cosine schedule{3e-3, 3e-4, 10, 100};
  adamw_config optimizer;
  std::uint64_t data_seed = 1;
  std::size_t heal_step = 0;      // 0: no healing; else switch before this step (0-based)
  recipe heal_recipe = recipes::fp8_healing();
  // The FP8 copies stashed while the base was built (build_lora_base, lora_base.hpp): the trainer
  // takes them over (moves them out) instead of calling prepare_healing. Null: prepare_healing.
  std::shared_ptr<fp8_weight_stash> heal_stash;
  std::size_t log_every = 1;        // the host reads the loss at these steps (and the last) only
  std::size_t progress_every = 0;   // 0: no progress callbacks; else a multiple of log_every
  std::function<void(const train_progress&)> on_progress;
  // Several ranks and gradient accumulation (data_parallel.hpp): shape is each micro-batch's; a
  // step trains on ranks x micro_batches of them (the global batch). The default: one rank, one
  // micro-batch, the plain step.
  parallel_config parallel;
  // Record the step once and replay it where it applies (step_replay.hpp; trainer::steps() says
  // whether it does, and why not). Off: every operation is launched.
  bool step_graph = true;
};

// The batch's loss mask uploaded into `mask` (allocated on first use: (B*T, 1) i32), or null for a
// batch without one (every target counts).
inline const tensor* upload_loss_mask(backend& be, const batch& b, tensor& mask) {
  if (b.loss_mask.empty()) return nullptr;
  if (!mask.defined() || mask.rows() != b.shape.tokens()) mask = be.alloc(b.shape.tokens(), 1, dtype::i32, mem_tag::activation);
  be.write_tokens(mask, b.loss_mask, 2);  // each 0 or 1, checked on the host
  return &mask;
}

// Mean loss over the batches (recipe forward, nothing saved, no amax recorded): each batch's mean
// over the targets its loss mask counts, averaged over the batches. The losses are summed in
// backend memory; one host read at the end.
inline double evaluate(model& m, const std::vector<batch>& batches) {
  if (batches.empty()) return 0.0;
  backend& be = m.be();
  tensor sum = be.scalar(), tokens, targets, mask;
  for (const batch& b : batches) {
    if (!tokens.defined() || tokens.rows() != b.shape.tokens()) {
      tokens = be.alloc(b.shape.tokens(), 1, dtype::i32, mem_tag::activation);
      targets = be.alloc(b.shape.tokens(), 1, dtype::i32, mem_tag::activation);
    }
    be.write_tokens(tokens, b.inputs, m.config().vocab);
    be.write_tokens(targets, b.targets, m.config().vocab);
    be.axpy(1.0, m.forward(tokens, targets, b.shape, false, upload_loss_mask(be, b, mask)), sum);
  }
  return be.read_scalar(sum) / static_cast<double>(batches.size());
}

class trainer {
 public:
  // Trains on random windows of a byte corpus (batch_loader, seeded by c.data_seed).
  trainer(model& m, token_buffer train_tokens, const train_config& c)
      : trainer(m, std::make_shared<const batch_loader>(std::move(train_tokens), c.shape, c.data_seed), c) {}
  // Trains on any batch source (a token dataset's samples: train/sample_batches.hpp); its batch
  // shape must be c.shape.
  trainer(model& m, std::shared_ptr<const batch_source> batches, const train_config& c)
      : m_(&m), c_(c), loader_(checked_source(std::move(batches), c.shape)), dp_(m, c.parallel),
        opt_(m.be(), dp_.optimizer_parameters(), c.optimizer) {
    opt_.set_distribution(static_cast<double>(dp_.global_micro_batches()), dp_.sharded() ? dp_.comm() : nullptr);
    detail::require(c.heal_step < c.steps, "trainer: heal_step ", c.heal_step, " must be below steps ", c.steps);
    check_config(c.schedule);  // (its fields are public: checked again here, before the first step)
    detail::require(c.log_every >= 1, "trainer: log_every must be at least 1");
    detail::require(c.progress_every % c.log_every == 0, "trainer: progress_every ", c.progress_every,
                    " must be a multiple of log_every ", c.log_every, " (progress needs the loss)");
    backend& be = m.be();
    tokens_ = be.alloc(c.shape.tokens(), 1, dtype::i32, mem_tag::activation);
    targets_ = be.alloc(c.shape.tokens(), 1, dtype::i32, mem_tag::activation);
    loss_sum_ = be.scalar();
    detail::require(c.heal_step == 0 || !dp_.fully_sharded(), "trainer: healing (heal_step ", c.heal_step,
                    ") needs every weight on every rank; full sharding keeps shards only");
    if (c.heal_step > 0) stash_ = c.heal_stash ? std::move(*c.heal_stash) : prepare_healing(m);
    replay_ = std::make_unique<step_replay>(be, step_graph_refusal());
    configuration_ = m.configuration_epoch();
    read_lr_from_device_where_replayed();
  }

  // Not copied or moved: the optimizer reads the learning rate through lr_'s address.
  trainer(const trainer&) = delete;
  trainer& operator=(const trainer&) = delete;

  // One optimizer step. Reads nothing back but at a logging step.
  void step() {
    if (c_.heal_step > 0 && step_ == c_.heal_step) {
      healing_ = heal(*m_, *stash_, c_.heal_recipe);
      stash_.reset();  // the host copies are no longer needed
    }
    if (m_->configuration_epoch() != configuration_) {  // a recipe switch, LoRA adapters added, ... between steps
      configuration_ = m_->configuration_epoch();
      replay_->reconsider(step_graph_refusal());
      read_lr_from_device_where_replayed();
    }
    const double lr = c_.schedule(step_);
    if (replay_->applies()) {
      // One rank, one micro-batch: uploads and the learning rate first, then the step's device
      // work launched, recorded or replayed; a replay runs none of the step's host code, so what
      // that code leaves for later steps is done here (parameter versions, Philox position).
      const batch b = loader_->at(step_);
      const tensor* mask = upload(b);
      m_->be().fill(lr_, lr);
      const std::uint64_t before = m_->be().counters().graph_replays;
      replay_->run({b.shape.batch, b.shape.seq, mask != nullptr}, [&] {
        m_->zero_grad();
        micro_batch(b, mask, 0);
        finish_step(lr);
      });
      if (m_->be().counters().graph_replays != before) {
        opt_.bump_versions();
        m_->set_step(step_ + 1);
      }
    } else {  // refused: launched (and counted) as is, the uploads inside
      replay_->run({}, [&] {
        m_->zero_grad();
        for (std::size_t k = 0; k < dp_.micro_batches(); ++k) {  // batch step x (N K) + r K + k of the loader
          const batch b = loader_->at(step_ * dp_.global_micro_batches() + dp_.micro_batch_index(k));
          micro_batch(b, upload(b), k);
        }
        finish_step(lr);
      });
    }
    ++step_;
    ++window_;
    if (step_ % c_.log_every == 0 || step_ == c_.steps) log(lr);
  }
  void run() {
    while (step_ < c_.steps) step();
  }

  // Mean of the last n logged losses (fewer if fewer were logged); with log_every = 1, the mean
  // training loss of the last n steps.
  double recent_loss(std::size_t n) const {
    if (losses_.empty()) return 0.0;
    n = n < losses_.size() ? n : losses_.size();
    double s = 0.0;
    for (std::size_t i = losses_.size() - n; i < losses_.size(); ++i) s += losses_[i];
    return s / static_cast<double>(n);
  }
  // Resume position (after load_checkpoint): steps done, data and schedule follow.
  void seek(std::size_t steps_done) {
    replay_->drop();  // a loaded checkpoint may have replaced the tensors a recording reads
    step_ = steps_done;
    window_ = 0;
    m_->be().fill(loss_sum_, 0.0);
    m_->set_step(steps_done);
  }

  std::size_t steps_done() const noexcept { return step_; }
  // One entry per logging step: the mean training loss of the steps since the previous one.
  const std::vector<double>& losses() const noexcept { return losses_; }
  const std::optional<healing_report>& healing() const noexcept { return healing_; }
  adamw& optimizer() noexcept { return opt_; }
  data_parallel& parallel() noexcept { return dp_; }
  model& trained_model() noexcept { return *m_; }
  // Whether the steps are recorded and replayed (steps().applies(), else steps().refusal() says
  // why), and how many were launched; the backend's counters() count captures and replays.
  const step_replay& steps() const noexcept { return *replay_; }
  // Drops the recorded step (after changing the model's tensors between steps other than through
  // seek(), which drops it itself): the next step launches and the one after records again.
  void drop_step_graph() noexcept { replay_->drop(); }

 private:
  model* m_;
  train_config c_;
  std::shared_ptr<const batch_source> loader_;  // batch n: at(n), nothing else (a resumed run needs no position)
  data_parallel dp_;  // before opt_: the optimizer's parameters are its
  adamw opt_;
  std::optional<fp8_weight_stash> stash_;
  std::optional<healing_report> healing_;
  std::size_t step_ = 0, window_ = 0;  // window_: steps since the last logging step
  std::vector<double> losses_;
  tensor tokens_, targets_;  // (B*T, 1) i32
  tensor mask_;              // (B*T, 1) i32: the batches' loss masks (allocated by the first that has one)
  tensor loss_sum_;          // (1, 1) f64: the losses since the last logging step
  tensor lr_;                // (1, 1) f64: this step's learning rate, where steps are replayed
  std::unique_ptr<step_replay> replay_;
  std::uint64_t configuration_ = 0;  // the model's configuration_epoch() the replay decision was made for

  // Where steps are replayed the optimizer reads the learning rate from lr_ (a replay's kernel
  // arguments are fixed), filled before each step; where they are launched, by value.
  void read_lr_from_device_where_replayed() {
    if (replay_->applies() && !lr_.defined()) lr_ = m_->be().scalar(mem_tag::optimizer);
    opt_.set_lr_device(replay_->applies() ? &lr_ : nullptr);
  }
  // Why steps are not recorded here, or "" (step_replay adds the backend's own reason).
  std::string step_graph_refusal() const {
    if (!c_.step_graph) return "turned off (train_config::step_graph, --cuda-graph off)";
    if (dp_.global_micro_batches() != 1)
      return "several ranks or micro-batches (each micro-batch uploads its own batch inside the step; the gradient reduction "
             "runs on the communicator)";
    if (c_.heal_step > 0) return "healing switches the recipe and restores weights from the host during the run";
    return per_step_draws(m_->current_recipe());
  }
  // The batch's tokens, targets and loss mask into the trainer's tensors; the mask's tensor, or null.
  const tensor* upload(const batch& b) {
    backend& be = m_->be();
    be.write_tokens(tokens_, b.inputs, m_->config().vocab);
    be.write_tokens(targets_, b.targets, m_->config().vocab);
    return upload_loss_mask(be, b, mask_);
  }
  // Forward and backward of micro-batch k of this rank (uploaded).
  void micro_batch(const batch& b, const tensor* mask, std::size_t k) {
    m_->set_micro_batch(dp_.micro_batch_index(k));
    // The micro-batch's mean over its counted targets; the step's loss and gradient are the mean
    // over its micro-batches (and ranks), each weighing the same, as Megatron-LM's per-micro-batch
    // loss_func (sum(losses * loss_mask) / loss_mask.sum()) does.
    m_->be().axpy(1.0, m_->forward(tokens_, targets_, b.shape, true, mask), loss_sum_);
    dp_.set_reducing(k + 1 == dp_.micro_batches());
    m_->backward();
  }
  void finish_step(double lr) {
    dp_.finish_gradients();
    opt_.step(lr);
    dp_.finish_update();
    dp_.reduce_amax();
    m_->end_step();
  }

  static std::shared_ptr<const batch_source> checked_source(std::shared_ptr<const batch_source> s, const batch_shape& shape) {
    detail::require(s != nullptr, "trainer: no batch source");
    detail::require(s->shape().batch == shape.batch && s->shape().seq == shape.seq, "trainer: the batch source's batches are ", s->shape().batch,
                    " x ", s->shape().seq, ", the configuration's ", shape.batch, " x ", shape.seq);
    return s;
  }

  void log(double lr) {
    backend& be = m_->be();
    dp_.reduce_loss(loss_sum_);
    const double mean = be.read_scalar(loss_sum_) / static_cast<double>(window_ * dp_.global_micro_batches());
    be.fill(loss_sum_, 0.0);
    window_ = 0;
    losses_.push_back(mean);
    if (c_.on_progress && c_.progress_every && (step_ % c_.progress_every == 0 || step_ == c_.steps))
      c_.on_progress({step_, c_.steps, mean, lr, opt_.last_grad_norm(), m_->current_recipe().name.c_str()});
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
