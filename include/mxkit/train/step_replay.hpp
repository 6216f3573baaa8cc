// SPDX-License-Identifier: Apache-2.0
#pragma once
// When a training step is recorded into a step graph and replayed (nn/step_graph.hpp), and when
// it is launched operation by operation as before. The trainer (training.hpp) runs every step
// through step_replay::run with the step's key; a caller with its own loop can too.
//   - A new key (the first step, a batch of another shape, a loss mask where there was none) is
//     launched twice. The first does the one-time work a recording may not contain (allocations
//     that grow the pool, the RoPE table, the optimizer's descriptor arrays, cuBLASLt's handle and
//     the kernels' attributes) and any change of the kept buffers. The second is the step the
//     recording will hold, launched through step_graph::warm_up, where the backend measures it
//     (the device backend: the memory block of the recording, gpu/memory.hpp's
//     allocation_meter). Any graph of the previous key is dropped, so a step that changed the
//     backend's kept memory is never replayed over it.
//   - The next step of the same key is recorded and run; those after it replay the recording.
//   - A graph the backend invalidated (a kept buffer replaced, e.g. by an evaluation of a longer
//     sequence) is dropped and the key starts over.
//   - With an observer installed (profiling: bench/gpu/profiled_backend.hpp) every step launches:
//     a replay calls no backend operation to observe.
// Recording applies only where it gives the launched step's bits (step_graph_refusal); refused,
// every step launches and refusal() says why. counters(): launches here; the backend counts
// captures and replays (backend_counters::graph_captures, graph_replays).
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <mxkit/config.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/nn/step_graph.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// What a recorded step depends on besides device memory: the batch's shape (every kernel's grid
// and every tensor's size) and whether a loss mask is read.
struct step_key {
  std::size_t batch = 0, seq = 0;
  bool loss_mask = false;
  friend bool operator==(const step_key&, const step_key&) = default;
};

// Why a recipe's steps cannot be replayed, or "": stochastic rounding and random Hadamard signs
// draw from Philox streams that move every step (linear.hpp: the step number is part of the
// stream), and reach the quantizers as kernel arguments by value, which a replay repeats.
inline std::string per_step_draws(const recipe& r) {
  const auto stochastic = [](const operand_spec& o) {
    return o.is<block_scaled_spec>() && o.block_scaled().round == rounding::stochastic;
  };
  for (const gemm_spec* g : {&r.fprop, &r.dgrad, &r.wgrad}) {
    if (g->hadamard && g->random_signs) return "recipe '" + r.name + "' draws random Hadamard signs from per-step Philox streams";
    if (stochastic(g->a) || stochastic(g->b))
      return "recipe '" + r.name + "' rounds stochastically from per-step Philox streams";
  }
  return stochastic(r.high) ? "recipe '" + r.name + "' rounds stochastically from per-step Philox streams" : "";
}

class step_replay {
 public:
  struct counts {
    std::size_t launches = 0;  // steps launched operation by operation (refused, warm-ups, fallbacks)
  };

  // `refusal`: why recording does not apply ("" where it may); the backend's own refusal (it has
  // no step graph) is added here.
  step_replay(backend& be, std::string refusal) : be_(&be), records_(be.make_step_graph() != nullptr) { reconsider(std::move(refusal)); }

  // Runs one step: launched (`step()` called as is), recorded, or replayed (`step` not called).
  void run(const step_key& key, const std::function<void()>& step) {
    if (!refusal_.empty() || be_->observer()) {
      drop();
      launch(step);
      return;
    }
    if (!(key == key_) || (graph_ && !graph_->valid())) {
      drop();
      key_ = key;
    }
    if (warm_ < warm_up_steps) {
      if (++warm_ == warm_up_steps) {
        pending_ = be_->make_step_graph();
        pending_->warm_up(step);
        ++counts_.launches;
      } else {
        launch(step);
      }
      return;
    }
    if (!graph_) {
      std::unique_ptr<step_graph> g = std::move(pending_);
      try {
        g->capture(step);
      } catch (const std::exception& e) {
        // The step's host code ran and its device work did not: the run cannot go on.
        detail::fail("step graph: recording a training step failed (", e.what(),
                     "); train with the graph off (train_config::step_graph = false, --cuda-graph off)");
      }
      graph_ = std::move(g);
      return;
    }
    graph_->replay();
  }

  // Takes a new refusal ("" where recording applies now) after the model changed what a step
  // runs, and drops the recording.
  void reconsider(std::string refusal) {
    drop();
    refusal_ = std::move(refusal);
    if (refusal_.empty() && !records_)
      refusal_ = std::string("the ") + be_->name() + " backend records no step graph here (the host backend runs each operation as "
                 "it is called; a GPU runtime that cannot capture stream-ordered allocations)";
  }

  // Whether steps are recorded and replayed; "" or why not.
  bool applies() const noexcept { return refusal_.empty(); }
  const std::string& refusal() const noexcept { return refusal_; }
  // Whether the backend records step graphs at all (the host backend does not).
  bool backend_records() const noexcept { return records_; }
  const counts& counters() const noexcept { return counts_; }
  // The last step ran from a recording (captured or replayed).
  bool replaying() const noexcept { return graph_ != nullptr; }
  // Drops the recording (the next step of any key warms up again).
  void drop() noexcept {
    graph_.reset();
    pending_.reset();
    warm_ = 0;
  }
  // Launched steps of a key before its recording (see the file comment).
  static constexpr int warm_up_steps = 2;

 private:
  void launch(const std::function<void()>& step) {
    step();
    ++counts_.launches;
  }

  backend* be_;
  std::string refusal_;
  bool records_;
  step_key key_;
  int warm_ = 0;                          // launched steps of this key so far (up to warm_up_steps)
  std::unique_ptr<step_graph> pending_;   // warmed up, to record the next step
  std::unique_ptr<step_graph> graph_;
  counts counts_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
