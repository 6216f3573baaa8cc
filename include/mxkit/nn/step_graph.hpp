// SPDX-License-Identifier: Apache-2.0
#pragma once
// A training step recorded once by a backend and replayed (a CUDA or HIP graph on the device
// backend: gpu/nn/device_step_graph.hpp): what backend::make_step_graph() hands out. The host
// code of the step runs only when it is recorded; a replay runs the recorded device work with the
// same kernel arguments and addresses, so everything that changes from step to step must already
// be in device memory (the batch uploaded into the same tensors, the learning rate in a device
// scalar: adamw_args::lr_device). train/step_replay.hpp decides when a step is recorded,
// replayed, or launched as before.
#include <cstdint>
#include <functional>

#include <mxkit/config.hpp>
#include <mxkit/error.hpp>
#include <mxkit/nn/backend_counters.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

class step_graph {
 public:
  virtual ~step_graph() = default;

  // Launches `step` as the last step launched before the recording, the same step the recording
  // will hold; a backend may measure it there (the device backend: the memory the recording
  // needs, gpu/nn/device_step_graph.hpp).
  void warm_up(const std::function<void()>& step) {
    detail::require(!captured_, "step_graph: warm_up after the step was captured");
    do_warm_up(step);
  }
  // Records the device work `step` enqueues (it does not run then), and runs it once: when
  // capture() returns the step is enqueued, as a launched step would be. Once per graph.
  void capture(const std::function<void()>& step) {
    detail::require(!captured_, "step_graph: a step was already captured into this graph");
    do_capture(step);
    captured_ = true;
    if (counters_) ++counters_->graph_captures;
  }
  // Enqueues the recorded step again.
  void replay() {
    detail::require(captured_, "step_graph: replay before a step was captured");
    do_replay();
    if (counters_) ++counters_->graph_replays;
  }
  bool captured() const noexcept { return captured_; }
  // False once the backend has replaced memory the recorded step reads that is not the step's own
  // (a buffer it keeps across steps, such as a RoPE factor table grown for a longer sequence by an
  // evaluation): the step must then be launched and recorded again.
  bool valid() const noexcept { return do_valid(); }

 protected:
  virtual void do_warm_up(const std::function<void()>& step) { step(); }
  virtual void do_capture(const std::function<void()>& step) = 0;
  virtual void do_replay() = 0;
  virtual bool do_valid() const noexcept = 0;

 private:
  friend class backend;  // sets counters_ (backend::make_step_graph)
  bool captured_ = false;
  backend_counters* counters_ = nullptr;
};

}  // namespace nn
MXKIT_END_NAMESPACE
