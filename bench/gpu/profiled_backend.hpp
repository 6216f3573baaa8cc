// SPDX-License-Identifier: Apache-2.0
#pragma once
// The device backend with every operation bracketed by a pair of CUDA events while `profiling` is
// on (an observer at the backend's one seam): where a training step's device time goes, by backend operation and by part (issue #14's
// split). The brackets measure each operation's span on the stream, so the step's time minus
// their sum is the time the GPU spent between operations: waiting for the host to enqueue the
// next one (launch and host-side work), plus the few microseconds the event pairs add.
// bench_layer.cu and bench_train.cu share it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include <mxkit/gpu/nn/backend.hpp>

namespace mxkit_bench {

// The parts of a step, in report order; `gaps` is the step minus every bracketed operation.
enum class step_part : int { gemm, quantize, producers, attention, norms_activations, optimizer, memory, gaps };
inline constexpr int step_part_count = 8;
inline constexpr const char* step_part_names[step_part_count] = {"gemm",      "quantize",  "producers", "attention",
                                                                 "norms/act", "optimizer", "memory",    "gaps"};

//   gemm               every GEMM
//   quantize           standalone quantize / quantize_both / transpose / FP8 scale update
//   producers          rmsnorm_quantize, swiglu_quantize and swiglu_backward_quantize (the norm or
//                      activation, or the activation's gradient, with its copies)
//   attention          flash attention forward and backward
//   norms/act          RMSNorm, RoPE, SwiGLU, embedding and cross entropy kernels
//   optimizer          the global gradient norm and the AdamW update
//   memory             allocations (their zero fill), fills, copies, axpy, amax, uploads
inline constexpr step_part part_of(mxkit::nn::backend_op o) {
  using op = mxkit::nn::backend_op;
  switch (o) {
    case op::gemm: return step_part::gemm;
    case op::quantize: case op::quantize_both: case op::transpose: case op::update_scales: return step_part::quantize;
    case op::rmsnorm_quantize: case op::swiglu_quantize: case op::swiglu_backward_quantize: return step_part::producers;
    case op::attention_forward: case op::attention_backward: return step_part::attention;
    case op::rmsnorm_forward: case op::rmsnorm_backward: case op::rope: case op::swiglu_forward: case op::swiglu_backward:
    case op::embedding_forward: case op::embedding_backward: case op::cross_entropy:
      return step_part::norms_activations;
    case op::global_norm: case op::adamw_step: return step_part::optimizer;
    default: return step_part::memory;
  }
}

// Times every backend operation between a pair of events on the backend's stream: an observer
// (nn/backend_observer.hpp), so a new backend operation is timed without a line here.
class op_timer final : public mxkit::nn::backend_observer {
 public:
  explicit op_timer(mxkit::gpu::stream_t stream) : stream_(stream) {}
  bool profiling = false;

  struct op_time {
    double ms = 0.0;
    std::size_t count = 0;
  };
  struct profile {
    std::array<op_time, mxkit::nn::backend_op_count> ops{};  // by backend_op
    std::array<op_time, 3> gemms{};                           // by gemm_product (fprop, dgrad, wgrad)
  };
  // Waits for the recorded events; returns the time and count of every operation since the last
  // call.
  profile collect() {
    profile out;
    for (mark& m : marks_) {
      if (!m.end) continue;  // still open (collect() called inside an operation)
      const double ms = m.end->elapsed_ms_since(*m.begin);
      op_time& t = out.ops[static_cast<std::size_t>(m.op)];
      t.ms += ms;
      ++t.count;
      if (m.product >= 0) {
        out.gemms[static_cast<std::size_t>(m.product)].ms += ms;
        ++out.gemms[static_cast<std::size_t>(m.product)].count;
      }
    }
    marks_.clear();
    open_.clear();
    return out;
  }

  void begin(const mxkit::nn::backend_event& e) override {
    if (!profiling) return;
    auto a = std::make_unique<mxkit::gpu::event>();
    a->record(stream_);
    open_.push_back(marks_.size());
    marks_.push_back({e.op, e.product, std::move(a), nullptr});
  }
  // Operations nest (an allocation inside a GEMM): the innermost open one ends first.
  void end(const mxkit::nn::backend_event& e) override {
    if (open_.empty() || marks_[open_.back()].op != e.op) return;  // begun while profiling was off
    mark& m = marks_[open_.back()];
    open_.pop_back();
    m.end = std::make_unique<mxkit::gpu::event>();
    m.end->record(stream_);
  }

 private:
  struct mark {
    mxkit::nn::backend_op op;
    int product;  // gemm: the gemm_product, else -1
    std::unique_ptr<mxkit::gpu::event> begin, end;
  };
  mxkit::gpu::stream_t stream_;
  std::vector<mark> marks_;
  std::vector<std::size_t> open_;  // indices of the marks begun and not yet ended
};

// The device backend with an op_timer installed while profiling (set_profiling): the observer
// is there only then, so the steps between profiled ones may be replayed step graphs
// (train/step_replay.hpp launches every step an observer watches).
class profiled_backend final : public mxkit::gpu::device_backend {
 public:
  using op_time = op_timer::op_time;
  using profile = op_timer::profile;
  profiled_backend() : timer_(stream()) {}
  ~profiled_backend() override { set_observer(nullptr); }
  profiled_backend(const profiled_backend&) = delete;
  profiled_backend& operator=(const profiled_backend&) = delete;

  void set_profiling(bool on) {
    timer_.profiling = on;
    set_observer(on ? &timer_ : nullptr);
  }
  profile collect() { return timer_.collect(); }

 private:
  op_timer timer_;
};

using op_times = std::array<profiled_backend::op_time, mxkit::nn::backend_op_count>;

// Milliseconds by part: the bracketed operations summed, `gaps` the rest of step_ms.
inline std::array<double, step_part_count> split_by_part(const profiled_backend::profile& p, double step_ms) {
  const op_times& t = p.ops;
  std::array<double, step_part_count> ms{};
  double bracketed = 0.0;
  for (std::size_t o = 0; o < t.size(); ++o) {
    ms[static_cast<std::size_t>(part_of(static_cast<mxkit::nn::backend_op>(o)))] += t[o].ms;
    bracketed += t[o].ms;
  }
  ms[static_cast<std::size_t>(step_part::gaps)] = step_ms - bracketed;
  return ms;
}

// Prints every operation that ran, then the GEMMs by product: count, total milliseconds, mean
// microseconds per call.
inline void print_op_times(const profiled_backend::profile& p) {
  const auto line = [](const char* name, const profiled_backend::op_time& t) {
    if (t.count)
      std::printf("    %-20s %5zu calls %8.3f ms %8.1f us/call\n", name, t.count, t.ms, 1e3 * t.ms / static_cast<double>(t.count));
  };
  for (std::size_t o = 0; o < p.ops.size(); ++o) line(mxkit::name_of(static_cast<mxkit::nn::backend_op>(o)), p.ops[o]);
  const char* products[] = {"gemm fprop", "gemm dgrad", "gemm wgrad"};
  for (std::size_t g = 0; g < 3; ++g) line(products[g], p.gemms[g]);
}

}  // namespace mxkit_bench
