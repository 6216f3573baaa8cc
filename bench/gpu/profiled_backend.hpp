// SPDX-License-Identifier: Apache-2.0
#pragma once
// The device backend with every operation bracketed by a pair of CUDA events while `profiling` is
// on: where a training step's device time goes, by backend operation and by part (issue #14's
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

class profiled_backend final : public mxkit::gpu::device_backend {
 public:
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
      const double ms = m.end->elapsed_ms_since(*m.begin);
      op_time& t = out.ops[static_cast<std::size_t>(m.op)];
      t.ms += ms;
      ++t.count;
      if (m.op == op::gemm) {
        out.gemms[m.product].ms += ms;
        ++out.gemms[m.product].count;
      }
    }
    marks_.clear();
    return out;
  }

 private:
  using op = mxkit::nn::backend_op;
  struct mark {
    op op;
    std::size_t product;  // gemm: the gemm_product
    std::unique_ptr<mxkit::gpu::event> begin, end;
  };
  std::vector<mark> marks_;

  template <class F>
  auto timed(op o, F&& f, std::size_t product = 0) {
    if (!profiling) return f();
    auto a = std::make_unique<mxkit::gpu::event>(), b = std::make_unique<mxkit::gpu::event>();
    a->record(stream());
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      b->record(stream());
      marks_.push_back({o, product, std::move(a), std::move(b)});
    } else {
      auto r = f();
      b->record(stream());
      marks_.push_back({o, product, std::move(a), std::move(b)});
      return r;
    }
  }
 protected:
  using tensor = mxkit::nn::tensor;
  using qtensor = mxkit::nn::qtensor;
  using qpair = mxkit::nn::qpair;
  using quant_request = mxkit::nn::quant_request;
  using quant_plan = mxkit::nn::quant_plan;
  using head_shape = mxkit::nn::head_shape;

  allocation do_alloc(std::size_t bytes, bool zero_fill) override {
    return timed(op::alloc, [&] { return device_backend::do_alloc(bytes, zero_fill); });
  }
  void do_write_tokens(tensor& t, const std::vector<std::int32_t>& tokens) override {
    timed(op::write_tokens, [&] { device_backend::do_write_tokens(t, tokens); });
  }
  void do_fill(tensor& t, double value) override {
    timed(op::fill, [&] { device_backend::do_fill(t, value); });
  }
  void do_copy(const tensor& src, tensor& dst) override {
    timed(op::copy, [&] { device_backend::do_copy(src, dst); });
  }
  void do_axpy(double alpha, const tensor& x, tensor& y) override {
    timed(op::axpy, [&] { device_backend::do_axpy(alpha, x, y); });
  }
  void do_amax(const tensor& x, tensor& out) override {
    timed(op::amax, [&] { device_backend::do_amax(x, out); });
  }
  qtensor do_quantize(const tensor& x, const quant_request& r) override {
    return timed(op::quantize, [&] { return device_backend::do_quantize(x, r); });
  }
  qpair do_quantize_both(const tensor& x, const quant_request& a, const quant_request& b) override {
    return timed(op::quantize_both, [&] { return device_backend::do_quantize_both(x, a, b); });
  }
  qtensor do_transpose(const qtensor& q, mxkit::nn::operand_use u, mxkit::nn::mem_tag t) override {
    return timed(op::transpose, [&] { return device_backend::do_transpose(q, u, t); });
  }
  void do_update_scales(mxkit::nn::scaling_table& t) override {
    timed(op::update_scales, [&] { device_backend::do_update_scales(t); });
  }
  void do_gemm(mxkit::gemm_product k, const qtensor& a, const qtensor& b, tensor& d, float alpha, float beta, const tensor* c) override {
    timed(op::gemm, [&] { device_backend::do_gemm(k, a, b, d, alpha, beta, c); }, static_cast<std::size_t>(k));
  }
  void do_rmsnorm_forward(const tensor& x, const tensor& w, tensor& y, tensor& rstd, double eps) override {
    timed(op::rmsnorm_forward, [&] { device_backend::do_rmsnorm_forward(x, w, y, rstd, eps); });
  }
  qpair do_rmsnorm_quantize(const tensor& x, const tensor& w, tensor& rstd, double eps, const quant_plan& plan, tensor* y) override {
    return timed(op::rmsnorm_quantize, [&] { return device_backend::do_rmsnorm_quantize(x, w, rstd, eps, plan, y); });
  }
  void do_rmsnorm_backward(const tensor& dy, const tensor& x, const tensor& w, const tensor& rstd, const tensor& dr, tensor& dx,
                           tensor* dw) override {
    timed(op::rmsnorm_backward, [&] { device_backend::do_rmsnorm_backward(dy, x, w, rstd, dr, dx, dw); });
  }
  void do_rope(tensor& qkv, const head_shape& s, double theta, bool inverse) override {
    timed(op::rope, [&] { device_backend::do_rope(qkv, s, theta, inverse); });
  }
  void do_attention_forward(const tensor& qkv, tensor& out, tensor& lse, const head_shape& s) override {
    timed(op::attention_forward, [&] { device_backend::do_attention_forward(qkv, out, lse, s); });
  }
  void do_attention_backward(const tensor& dout, const tensor& qkv, const tensor& out, const tensor& lse, tensor& dqkv,
                             const head_shape& s) override {
    timed(op::attention_backward, [&] { device_backend::do_attention_backward(dout, qkv, out, lse, dqkv, s); });
  }
  void do_swiglu_forward(const tensor& gu, tensor& out) override {
    timed(op::swiglu_forward, [&] { device_backend::do_swiglu_forward(gu, out); });
  }
  qpair do_swiglu_quantize(const tensor& gu, const quant_plan& plan, tensor* out) override {
    return timed(op::swiglu_quantize, [&] { return device_backend::do_swiglu_quantize(gu, plan, out); });
  }
  void do_swiglu_backward(const tensor& dout, const tensor& gu, tensor& dgu) override {
    timed(op::swiglu_backward, [&] { device_backend::do_swiglu_backward(dout, gu, dgu); });
  }
  qpair do_swiglu_backward_quantize(tensor& dout, tensor& gu, const quant_plan& plan) override {
    return timed(op::swiglu_backward_quantize, [&] { return device_backend::do_swiglu_backward_quantize(dout, gu, plan); });
  }
  void do_embedding_forward(const tensor& tokens, const tensor& table, tensor& out) override {
    timed(op::embedding_forward, [&] { device_backend::do_embedding_forward(tokens, table, out); });
  }
  void do_embedding_backward(const tensor& tokens, const tensor& dout, tensor& dtable) override {
    timed(op::embedding_backward, [&] { device_backend::do_embedding_backward(tokens, dout, dtable); });
  }
  void do_cross_entropy(tensor& logits, const tensor& targets, tensor& loss, bool gradient) override {
    timed(op::cross_entropy, [&] { device_backend::do_cross_entropy(logits, targets, loss, gradient); });
  }
  void do_global_norm(std::span<const tensor* const> tensors, double max_norm, tensor& norm, tensor& clip) override {
    timed(op::global_norm, [&] { device_backend::do_global_norm(tensors, max_norm, norm, clip); });
  }
  void do_adamw_step(std::span<const mxkit::nn::adamw_slot_ref> slots, const mxkit::nn::adamw_args& args, const tensor& norm,
                     const tensor& clip, tensor& state) override {
    timed(op::adamw_step, [&] { device_backend::do_adamw_step(slots, args, norm, clip, state); });
  }
};

// Operation names in backend_op order (for the per-operation table).
inline constexpr const char* backend_op_names[mxkit::nn::backend_op_count] = {
    "alloc", "write", "write_tokens", "read", "fill", "copy", "axpy", "amax",
    "quantize", "quantize_both", "transpose", "export_fp8", "import_fp8", "update_scales", "gemm",
    "rmsnorm_forward", "rmsnorm_quantize", "rmsnorm_backward", "rope", "attention_forward", "attention_backward",
    "swiglu_forward", "swiglu_quantize", "swiglu_backward", "swiglu_backward_quantize", "embedding_forward", "embedding_backward",
    "cross_entropy",
    "global_norm", "adamw_step"};
static_assert(backend_op_names[mxkit::nn::backend_op_count - 1] != nullptr, "a name for every backend_op");

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
  for (std::size_t o = 0; o < p.ops.size(); ++o) line(backend_op_names[o], p.ops[o]);
  const char* products[] = {"gemm fprop", "gemm dgrad", "gemm wgrad"};
  for (std::size_t g = 0; g < 3; ++g) line(products[g], p.gemms[g]);
}

}  // namespace mxkit_bench
