// SPDX-License-Identifier: Apache-2.0
#pragma once
// gpu::device_backend's step graph (nn/step_graph.hpp): the step's work on the backend's stream,
// captured into a gpu::graph and launched on the same stream. What makes a replay give the bits
// of a launched step:
//   - addresses: the step's own tensors are placed in one block the graph keeps, at the addresses
//     they had when recorded (gpu/memory.hpp, capture_memory), the block as large as the
//     launched step before the recording needed (allocation_meter, in do_warm_up); the tensors
//     kept across steps (parameters,
//     gradients, moments, scaling tables, the batch's tensors, the descriptor arrays of the
//     multi-tensor kernels, the RoPE table) are allocated before the capture and stay where they
//     are. A kept buffer the backend replaces (a RoPE table grown for a longer sequence, a new
//     descriptor array) counts up the backend's epoch, and the graph is then no longer valid.
//   - values: everything that changes per step is in device memory when the graph runs (the
//     learning rate: adamw_args::lr_device; the step counts, the norm and clip factor, the
//     delayed-scaling tables already were), never a kernel argument by value. Per-step Philox
//     streams are kernel arguments by value: recipes that draw from them (stochastic rounding,
//     random Hadamard signs) are not recorded (train/step_replay.hpp's step_graph_refusal).
//   - no host in the step: uploads from host memory are refused while capturing (staging_ring),
//     and synchronizations fail (thread-local capture mode); the trainer uploads the batch before
//     the step and reads the loss after it.
#include <cstddef>
#include <cstdint>
#include <functional>

#include <mxkit/gpu/platform.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/graph.hpp>
#include <mxkit/nn/step_graph.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

class device_step_graph final : public nn::step_graph {
 public:
  // `epoch`: the backend's count of replaced kept buffers, which outlives this graph.
  device_step_graph(stream_t s, const std::uint64_t& epoch) : stream_(s), epoch_(&epoch) {}

 protected:
  void do_warm_up(const std::function<void()>& step) override {
    allocation_meter meter(stream_);
    step();
    block_bytes_ = meter.block_bytes();
  }
  void do_capture(const std::function<void()>& step) override {
    // The block comes from what the pool kept from the launched steps before (stream-ordered);
    // the rest of that would only double the peak: given back once, after the steps before have
    // finished with it.
    graph_ = graph::capture(stream_, step, block_bytes_);
    recorded_epoch_ = *epoch_;  // a buffer replaced inside the step is the graph's own
    MXKIT_GPU_CHECK(stream_synchronize(stream_));
    trim_device_memory();
    graph_.launch(stream_);  // the recorded step has not run yet
  }
  void do_replay() override { graph_.launch(stream_); }
  bool do_valid() const noexcept override { return *epoch_ == recorded_epoch_; }

 private:
  stream_t stream_;
  const std::uint64_t* epoch_;
  std::uint64_t recorded_epoch_ = 0;
  std::size_t block_bytes_ = 0;  // the recording's block (do_warm_up's measure)
  graph graph_;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
