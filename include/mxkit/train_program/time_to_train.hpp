// SPDX-License-Identifier: Apache-2.0
#pragma once
// Evaluation to a target and time to train (--target-loss), counted as MLPerf Training counts a
// run (github.com/mlcommons/training_policies, training_rules.adoc, "Run Results"; the reference's
// callbacks.py logs the same events: init_start, init_stop and run_start before the first step,
// run_stop when an evaluation reaches the target):
//   initialization   from run() to run start: the model built, the data read and its samples
//                    indexed, --init-from and --resume loaded. Not on the clock ("Prior to starting
//                    the clock, a system may use a maximum model initialization time of 30 minutes
//                    for Closed division"): reported apart, with a note where it passes 30 minutes.
//   time to train    from run start to the end of the first evaluation whose loss is at or below
//                    the target (the log perplexity of the reference's "Validation log perplexity =
//                    3.3"): every step, every evaluation and every checkpoint on the way counted,
//                    since "the clock may not be paused during the run" and evaluation is included
//                    "unless specified otherwise for the benchmark"; the clock stops at that
//                    evaluation ("as soon as any part of the system determines target accuracy has
//                    been reached"), so the checkpoint and --export written after it are not.
// The rules start the clock "before any part of the system touches the dataset". The program's
// initialization reads a token dataset's index (document sizes: metadata, which the rules let a
// system process without touching the data, as the reference builds its sample index in a job of
// its own before training) and maps its tokens without reading them; a text corpus, though, is
// read whole there, which a submission would have to count.
// A resumed run's clock starts at its own run start: MLPerf times one uninterrupted run, so the
// time to train of a run resumed from a checkpoint is that part's only, and is reported as such.
// Tokens and sequences are counted over every rank: a step trains ranks x micro-batches x --batch
// sequences of --seq tokens (the reference counts samples, "train_samples").
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {

class mlperf_clock {
 public:
  using clock = std::chrono::steady_clock;
  explicit mlperf_clock(clock::time_point init_start) : init_start_(init_start) {}
  // Before the first step (every rank has built its model and training state).
  void start_run() { run_start_ = clock::now(); }
  double initialization_seconds() const { return seconds(init_start_, run_start_.value_or(clock::now())); }
  // Training time so far: since run start (0 before it).
  double elapsed() const { return run_start_ ? seconds(*run_start_, clock::now()) : 0.0; }

 private:
  static double seconds(clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
  clock::time_point init_start_;
  std::optional<clock::time_point> run_start_;
};

// Where the run stands against --target-loss after an evaluation.
struct target_state {
  std::optional<double> target;
  std::size_t evaluations = 0;
  // Set at the first evaluation at or below the target: its step, loss, tokens and time.
  std::optional<std::size_t> step;
  double loss = 0, tokens = 0, sequences = 0, seconds = 0;

  // Records one evaluation; true when it reaches the target for the first time.
  bool evaluated(std::size_t at, double eval_loss, double tokens_now, double sequences_now, double seconds_now) {
    ++evaluations;
    if (!target || step || !(eval_loss <= *target)) return false;
    step = at;
    loss = eval_loss;
    tokens = tokens_now;
    sequences = sequences_now;
    seconds = seconds_now;
    return true;
  }
  bool reached() const noexcept { return step.has_value(); }
};

// The summary's lines (rank 0): the result, the time to train with the rule, initialization apart.
inline void print_time_to_train(const target_state& t, const mlperf_clock& c, std::size_t first_step, std::size_t last_step,
                                bool stopped_early) {
  if (!t.target) return;
  const double init = c.initialization_seconds();
  if (t.reached()) {
    std::printf("\ntarget reached: held-out loss %.4f <= --target-loss %g at step %zu, after %.6g tokens (%.6g sequences) and %zu "
                "evaluation%s\n",
                t.loss, *t.target, *t.step, t.tokens, t.sequences, t.evaluations, t.evaluations == 1 ? "" : "s");
    std::printf("time to train: %.3f s (MLPerf Training's rule: from run start to the end of the evaluation that reached the target, "
                "evaluations and checkpoints included)\n",
                t.seconds);
    if (first_step > 0) std::printf("  (resumed at step %zu: the time of this run from there only)\n", first_step);
  } else {
    std::printf("\ntarget not reached: no evaluation of steps %zu..%zu reached --target-loss %g (%zu evaluation%s)%s\n", first_step + 1,
                last_step, *t.target, t.evaluations, t.evaluations == 1 ? "" : "s",
                stopped_early ? "; --stop-after ended this part of the run before --steps" : "");
  }
  std::printf("initialization (not timed: model, data, --init-from, --resume): %.3f s%s\n", init,
              init > 30 * 60 ? "; MLPerf's Closed division allows 30 minutes off the clock, the rest counts" : "");
}

}  // namespace train_program
MXKIT_END_NAMESPACE
