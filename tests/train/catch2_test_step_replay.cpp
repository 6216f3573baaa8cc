// SPDX-License-Identifier: Apache-2.0
// nn::step_replay (train/step_replay.hpp): when a step is launched, recorded or replayed, on a
// host backend with a counting stand-in for a step graph (the device's is
// tests/gpu/catch2_test_device_training.cu's, with the bits); which recipes are refused; and the
// trainer on the host backend, which has no graph, launching every step as before.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mxkit/train/step_replay.hpp>
#include <mxkit/train/training.hpp>

#include "../catch.hpp"
#include "../nn/nn_test_helpers.hpp"

using namespace nn_test;

namespace {

// A step graph that records nothing: warm_up and capture run the step (as the device's runs the
// recording once), replay runs nothing; `valid` is the test's to clear. `warmed` counts the
// graphs that were warmed up, `captured_unwarmed` those captured without their own warm-up.
class counting_graph final : public step_graph {
 public:
  counting_graph(const bool* valid, int* warmed, int* captured_unwarmed) : valid_(valid), warmed_(warmed), captured_unwarmed_(captured_unwarmed) {}

 protected:
  void do_warm_up(const std::function<void()>& step) override {
    step();
    warm_ = true;
    ++*warmed_;
  }
  void do_capture(const std::function<void()>& step) override {
    if (!warm_) ++*captured_unwarmed_;
    step();
  }
  void do_replay() override {}
  bool do_valid() const noexcept override { return *valid_; }

 private:
  const bool* valid_;
  int *warmed_, *captured_unwarmed_;
  bool warm_ = false;
};

class graph_backend final : public host_backend {
 public:
  bool valid = true;
  int warmed = 0, captured_unwarmed = 0;

 protected:
  std::unique_ptr<step_graph> do_make_step_graph() override { return std::make_unique<counting_graph>(&valid, &warmed, &captured_unwarmed); }
};

struct null_observer final : backend_observer {
  void begin(const backend_event&) override {}
  void end(const backend_event&) override {}
};

}  // namespace

TEST_CASE("step_replay: launch, record, replay; another key or an invalid graph starts over", "[train][graph]") {
  graph_backend be;
  step_replay r(be, "");
  REQUIRE(r.applies());
  int ran = 0;  // how often the step's host code ran
  const auto step = [&] { ++ran; };
  const step_key a{2, 64, false}, b{1, 64, false}, a_masked{2, 64, true};
  r.run(a, step);  // first warm-up: launched
  CHECK((ran == 1 && r.counters().launches == 1 && be.counters().graph_captures == 0 && be.warmed == 0));
  r.run(a, step);  // second warm-up: launched through the graph to be recorded
  CHECK((ran == 2 && r.counters().launches == 2 && be.counters().graph_captures == 0 && be.warmed == 1));
  r.run(a, step);  // recorded (and run once), by the graph that was warmed up
  CHECK((ran == 3 && be.counters().graph_captures == 1 && r.replaying()));
  r.run(a, step);  // replayed: no host code
  r.run(a, step);
  CHECK((ran == 3 && be.counters().graph_replays == 2));
  r.run(b, step);  // another shape: launched, the recording dropped
  CHECK((ran == 4 && r.counters().launches == 3 && !r.replaying()));
  r.run(a, step);  // back: two warm-ups again, then recorded
  r.run(a, step);
  r.run(a, step);
  CHECK((ran == 7 && be.counters().graph_captures == 2 && be.warmed == 2));
  r.run(a_masked, step);  // a loss mask where there was none: another key
  CHECK((ran == 8 && r.counters().launches == 6));
  r.run(a_masked, step);
  r.run(a_masked, step);
  r.run(a_masked, step);
  CHECK((ran == 10 && be.counters().graph_captures == 3 && be.counters().graph_replays == 3));
  be.valid = false;  // the backend replaced a buffer the recording reads
  r.run(a_masked, step);
  CHECK((ran == 11 && r.counters().launches == 8 && !r.replaying()));
  be.valid = true;
  r.run(a_masked, step);
  r.run(a_masked, step);
  r.run(a_masked, step);
  CHECK((ran == 13 && be.counters().graph_captures == 4 && be.counters().graph_replays == 4));
  r.run(b, step);  // warmed up once, then another key: the warmed graph is dropped unrecorded
  r.run(b, step);
  r.run(a, step);
  r.run(a, step);
  r.run(a, step);
  CHECK((ran == 18 && be.counters().graph_captures == 5 && be.warmed == 6));
  CHECK(be.captured_unwarmed == 0);  // every recording is of a graph warmed up the step before
  null_observer o;  // an observer sees every operation: launched
  be.set_observer(&o);
  r.run(a, step);
  r.run(a, step);
  CHECK((ran == 20 && r.counters().launches == 15 && be.counters().graph_replays == 4));
  be.set_observer(nullptr);
}

TEST_CASE("step_replay: a refusal launches every step; the host backend has no graph", "[train][graph]") {
  graph_backend gb;
  step_replay off(gb, "turned off");
  int ran = 0;
  for (int i = 0; i < 3; ++i) off.run({2, 64, false}, [&] { ++ran; });
  CHECK((ran == 3 && off.counters().launches == 3 && gb.counters().graph_captures == 0 && !off.applies()));
  CHECK(off.refusal() == "turned off");
  CHECK(off.backend_records());
  host_backend hb;
  const step_replay none(hb, "");
  CHECK(!none.applies());
  CHECK(none.refusal().find("the host backend records no step graph") != std::string::npos);
  CHECK(!none.backend_records());
}

TEST_CASE("step_replay: recipes that draw per step are refused", "[train][graph]") {
  CHECK(per_step_draws(recipes::bf16()) == "");
  CHECK(per_step_draws(recipes::fp8_delayed()) == "");
  CHECK(per_step_draws(recipes::mxfp8()) == "");
  CHECK(per_step_draws(recipes::mxfp4_amd()) == "");  // the rotation without random signs
  CHECK(per_step_draws(recipes::mxfp4_nvidia_style()).find("Philox") != std::string::npos);
  recipes::mxfp4_config sr;
  sr.hadamard = recipes::hadamard_placement::none;
  sr.stochastic_gradients = true;
  CHECK(per_step_draws(recipes::mxfp4(sr)).find("stochastically") != std::string::npos);
}

TEST_CASE("trainer: on the host backend every step launches, with or without the step graph", "[train][graph]") {
  std::vector<double> losses[2];
  for (const bool graph : {false, true}) {
    host_backend be;
    model m(be, tiny_model(), recipes::bf16(), 17);
    train_config c;
    c.steps = 4;
    c.shape = {2, 32};
    c.schedule = {1e-2, 1e-3, 2, 4};
    c.step_graph = graph;
    trainer t(m, text_tokens(), c);
    t.run();
    CHECK(!t.steps().applies());
    CHECK(t.steps().refusal().find(graph ? "records no step graph" : "turned off") != std::string::npos);
    CHECK(t.steps().counters().launches == 4);
    losses[graph] = t.losses();
  }
  CHECK(losses[0] == losses[1]);
}

TEST_CASE("trainer: the learning rate from a device scalar gives the same steps", "[train][graph]") {
  // adamw::set_lr_device, what the trainer sets where steps are replayed, on the host backend.
  std::vector<double> values[2];
  for (const bool device_lr : {false, true}) {
    host_backend be;
    model m(be, tiny_model(), recipes::bf16(), 17);
    adamw opt(be, m.parameters());
    tensor lr = be.scalar(mem_tag::optimizer), tokens = be.alloc(64, 1, dtype::i32, mem_tag::activation),
           targets = be.alloc(64, 1, dtype::i32, mem_tag::activation);
    if (device_lr) opt.set_lr_device(&lr);
    const batch_loader loader(text_tokens(), {2, 32}, 3);
    for (std::size_t i = 0; i < 3; ++i) {
      const batch b = loader.at(i);
      be.write_tokens(tokens, b.inputs, 256);
      be.write_tokens(targets, b.targets, 256);
      const double step_lr = 1e-2 / static_cast<double>(i + 1);
      be.fill(lr, device_lr ? step_lr : 0.0);  // by value: the tensor is not read
      m.zero_grad();
      m.forward(tokens, targets, b.shape, true);
      m.backward();
      opt.step(step_lr);
      m.end_step();
    }
    values[device_lr] = be.read(m.parameters().front()->value);
  }
  CHECK(values[0] == values[1]);
}

TEST_CASE("trainer: a change to the model between steps drops the recording and decides again", "[train][graph]") {
  // A recipe switch between steps (the training program's --switch-to, healing) frees the copies
  // a recording reads and may bring per-step draws: the next step launches, and records again
  // only where the new recipe allows.
  graph_backend be;
  model m(be, tiny_model(), recipes::bf16(), 17);
  train_config c;
  c.steps = 16;
  c.shape = {2, 32};
  c.schedule = {1e-2, 1e-3, 2, 16};
  c.step_graph = true;
  trainer t(m, text_tokens(), c);
  for (int i = 0; i < 5; ++i) t.step();  // launched twice, recorded, replayed twice
  CHECK((t.steps().applies() && t.steps().counters().launches == 2 && be.counters().graph_captures == 1 &&
         be.counters().graph_replays == 2));
  m.set_recipe(recipes::fp8_delayed());
  t.step();  // launched: the recording was the bf16 step's
  CHECK((t.steps().applies() && t.steps().counters().launches == 3 && !t.steps().replaying()));
  t.step();  // launched (the second warm-up), then recorded again
  t.step();
  t.step();
  CHECK((be.counters().graph_captures == 2 && be.counters().graph_replays == 3));
  m.set_recipe(recipes::mxfp4_nvidia_style());  // random Hadamard signs: per-step Philox draws
  t.step();
  t.step();
  CHECK(!t.steps().applies());
  CHECK(t.steps().refusal().find("Philox") != std::string::npos);
  CHECK((t.steps().counters().launches == 6 && be.counters().graph_captures == 2 && be.counters().graph_replays == 3));
  m.set_recompute(true);  // any change decides again; bf16 records again
  m.set_recipe(recipes::bf16());
  t.step();
  t.step();
  t.step();
  CHECK((t.steps().applies() && t.steps().counters().launches == 8 && be.counters().graph_captures == 3));
}
