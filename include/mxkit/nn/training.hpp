#pragma once
// The training loop: one optimizer step is
//   zero_grad -> forward (training) -> backward -> AdamW step (clipping, lr from the schedule)
//   -> end_step (delayed-scaling updates)
// with an optional healing switch (healing.hpp): the stash is taken when the trainer starts and
// the switch happens before step `heal_step`. Every run is deterministic in the model seed and
// the data seed: the same configuration gives the same losses, bit for bit.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/adamw.hpp>
#include <mxkit/nn/data.hpp>
#include <mxkit/nn/healing.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/nn/schedule.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct train_progress {
  std::size_t step = 0, steps = 0;  // step just finished (1-based), of steps
  double loss = 0.0, lr = 0.0, grad_norm = 0.0;
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
  std::size_t progress_every = 0;  // 0: no progress callbacks
  std::function<void(const train_progress&)> on_progress;
};

// Mean loss over the batches (recipe forward, nothing saved, no amax recorded).
inline double evaluate(model& m, const std::vector<batch>& batches) {
  double sum = 0.0;
  for (const batch& b : batches) sum += m.forward(b.inputs, b.targets, b.shape, false);
  return batches.empty() ? 0.0 : sum / static_cast<double>(batches.size());
}

class trainer {
 public:
  trainer(model& m, token_buffer train_tokens, const train_config& c)
      : m_(&m), c_(c), loader_(std::move(train_tokens), c.shape, c.data_seed), opt_(m.be(), m.trainable_parameters(), c.optimizer) {
    detail::require(c.heal_step < c.steps, "trainer: heal_step ", c.heal_step, " must be below steps ", c.steps);
    check_config(c.schedule);  // (its fields are public: checked again here, before the first step)
    if (c.heal_step > 0) stash_ = prepare_healing(m);
  }

  // One optimizer step; returns the training loss of its batch.
  double step() {
    if (c_.heal_step > 0 && step_ == c_.heal_step) {
      healing_ = heal(*m_, *stash_, c_.heal_recipe);
      stash_.reset();  // the host copies are no longer needed
    }
    const batch b = loader_.next();
    m_->zero_grad();
    const double loss = m_->forward(b.inputs, b.targets, b.shape, true);
    m_->backward();
    const double lr = c_.schedule(step_);
    const double norm = opt_.step(lr);
    m_->end_step();
    ++step_;
    losses_.push_back(loss);
    if (c_.on_progress && c_.progress_every && (step_ % c_.progress_every == 0 || step_ == c_.steps))
      c_.on_progress({step_, c_.steps, loss, lr, norm, m_->current_recipe().name.c_str()});
    return loss;
  }
  void run() {
    while (step_ < c_.steps) step();
  }

  // Mean training loss of the last n steps (fewer if fewer were run).
  double recent_loss(std::size_t n) const {
    if (losses_.empty()) return 0.0;
    n = n < losses_.size() ? n : losses_.size();
    double s = 0.0;
    for (std::size_t i = losses_.size() - n; i < losses_.size(); ++i) s += losses_[i];
    return s / static_cast<double>(n);
  }
  // Resume position (after load_checkpoint): steps done, data and schedule follow.
  void seek(std::size_t steps_done) {
    step_ = steps_done;
    loader_.seek(steps_done);
    m_->set_step(steps_done);
  }

  std::size_t steps_done() const noexcept { return step_; }
  const std::vector<double>& losses() const noexcept { return losses_; }
  const std::optional<healing_report>& healing() const noexcept { return healing_; }
  adamw& optimizer() noexcept { return opt_; }
  model& trained_model() noexcept { return *m_; }

 private:
  model* m_;
  train_config c_;
  batch_loader loader_;
  adamw opt_;
  std::optional<fp8_weight_stash> stash_;
  std::optional<healing_report> healing_;
  std::size_t step_ = 0;
  std::vector<double> losses_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
