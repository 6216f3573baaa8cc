// SPDX-License-Identifier: Apache-2.0
#pragma once
// Llama-style pre-norm transformer layer (Touvron et al. 2023): every linear goes through the
// recipe (linear.hpp); norms, RoPE, attention and SwiGLU run in the activation dtype (the
// recipe's `activations`: f32 or bf16).
//   forward                                         shapes (M = B*T tokens)
//     n1  = rmsnorm1(x)                             (M, C)               written as Wqkv's input copies
//     qkv = n1 . Wqkv^T,  rope(q, k)                (M, (H + 2 Hkv) D)   fused QKV projection
//     a   = causal_gqa_attention(qkv)               (M, H D)             saves the log-sum-exp (B*H, T)
//     x2  = x + a . Wo^T                            (M, C)               residual add in the epilogue
//     n2  = rmsnorm2(x2)                            (M, C)               written as Wgu's input copies
//     gu  = n2 . Wgu^T                              (M, 2F)              fused gate/up projection
//     y   = x2 + swiglu(gu) . Wdown^T               (M, C)               swiglu written as Wdown's input
//                                                                        copies; residual in the epilogue
//   backward: the same steps in reverse, residual gradients added.
// n1, n2 and swiglu(gu) exist in high precision only where a LoRA adapter reads them.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/attention.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/linear.hpp>
#include <mxkit/nn/rmsnorm.hpp>
#include <mxkit/nn/rope.hpp>
#include <mxkit/nn/swiglu.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct layer_config {
  std::size_t d_model = 64;   // C
  std::size_t n_heads = 4;    // H
  std::size_t n_kv_heads = 2; // Hkv (grouped-query attention)
  std::size_t d_ff = 192;     // F, SwiGLU hidden width
  double rope_theta = 10000.0;
  rope_scaling rope_scale = {};  // Llama 3.1's frequency scaling; off by default (nn/rope_frequencies.hpp)
  double norm_eps = 1e-5;

  std::size_t head_dim() const noexcept { return n_heads ? d_model / n_heads : 0; }
  std::size_t qkv_dim() const noexcept { return (n_heads + 2 * n_kv_heads) * head_dim(); }
};

inline void check_config(const layer_config& c) {
  detail::require(c.d_model > 0 && c.n_heads > 0 && c.d_model % c.n_heads == 0, "layer: d_model ", c.d_model,
                  " must be a positive multiple of n_heads ", c.n_heads);
  detail::require(c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0, "layer: n_heads ", c.n_heads,
                  " must be a multiple of n_kv_heads ", c.n_kv_heads);
  detail::require(c.head_dim() % 2 == 0, "layer: head_dim ", c.head_dim(), " must be even (RoPE rotates pairs)");
  detail::require(c.d_ff > 0, "layer: d_ff must be positive");
  check_config(rope_frequencies{c.rope_theta, c.rope_scale});
}

struct batch_shape {
  std::size_t batch = 1, seq = 1;
  std::size_t tokens() const noexcept { return batch * seq; }
};

// Which linears of a layer get LoRA adapters (the Llama 2 70B recipe: QKV and output projection).
struct lora_targets {
  bool qkv = true, out = true, gate_up = false, down = false;
};

class transformer_layer {
 public:
  // Linear ids first_id .. first_id + 3 (Philox streams). FP8 recipes: the linears use rows
  // first_row .. first_row + scaling_rows - 1 of `shared` (or tables of their own when null).
  static constexpr std::size_t scaling_rows = 4 * linear::scaling_rows;
  transformer_layer(backend& be, const std::string& prefix, const layer_config& c, std::uint32_t first_id, const recipe& r, dtype type,
                    const std::shared_ptr<scaling_table>& shared = nullptr, std::size_t first_row = 0)
      : be_(&be), c_((check_config(c), c)), rope_(rope_frequencies{c.rope_theta, c.rope_scale}) {
    constexpr std::size_t k = linear::scaling_rows;
    norm1_ = rmsnorm(be, prefix + ".norm1.weight", c.d_model, type, c.norm_eps);
    qkv_ = linear(be, prefix + ".qkv.weight", c.d_model, c.qkv_dim(), first_id, r, type, shared, first_row);
    out_ = linear(be, prefix + ".out.weight", c.n_heads * c.head_dim(), c.d_model, first_id + 1, r, type, shared, first_row + k);
    norm2_ = rmsnorm(be, prefix + ".norm2.weight", c.d_model, type, c.norm_eps);
    gate_up_ = linear(be, prefix + ".gate_up.weight", c.d_model, 2 * c.d_ff, first_id + 2, r, type, shared, first_row + 2 * k);
    down_ = linear(be, prefix + ".down.weight", c.d_ff, c.d_model, first_id + 3, r, type, shared, first_row + 3 * k);
  }

  // N(0, std) weights; the two projections into the residual stream scaled by 1/sqrt(2 L)
  // (GPT-2), norm gains 1. `fill` (when given) writes each weight instead (model_build_hooks).
  void init(std::uint64_t seed, double stddev, std::size_t n_layers, const std::function<void(parameter&, double)>& fill = {}) {
    const double residual = stddev / std::sqrt(2.0 * static_cast<double>(n_layers));
    const auto one = [&](linear& l, double sd) {
      if (!fill) return l.init_normal(seed, sd);
      fill(l.weight(), sd);
      ++l.weight().version;
    };
    one(qkv_, stddev);
    one(out_, residual);
    one(gate_up_, stddev);
    one(down_, residual);
  }

  // x (M, C) -> y (M, C), y must not alias x.
  void forward(const tensor& x, tensor& y, const batch_shape& b, bool training) {
    const std::size_t M = b.tokens(), C = c_.d_model;
    require_shape(x, M, C, "layer input");
    const head_shape hs = heads(b);
    tensor n1 = qkv_.lora() ? output(M, C, x) : tensor{};  // high precision only for an adapter
    qpair n1q = norm1_.forward_quantized(x, qkv_.input_requests(M, training), qkv_.lora() ? &n1 : nullptr);
    tensor qkv = output(M, c_.qkv_dim(), x);  // (M, (H + 2 Hkv) D)
    qkv_.forward_quantized(std::move(n1q), &n1, qkv, training);
    rope_.forward(*be_, qkv, hs);
    tensor att = output(M, hs.q_dim(), x);  // (M, H D)
    attention_.forward(*be_, qkv, att, hs);
    tensor x2 = output(M, C, x);  // residual stream after attention: x + att . Wo^T
    out_.forward(att, x2, training, &x);
    tensor n2 = gate_up_.lora() ? output(M, C, x) : tensor{};
    qpair n2q = norm2_.forward_quantized(x2, gate_up_.input_requests(M, training), gate_up_.lora() ? &n2 : nullptr);
    tensor gu = output(M, 2 * c_.d_ff, x);  // (M, 2F)
    gate_up_.forward_quantized(std::move(n2q), &n2, gu, training);
    tensor s = down_.lora() ? output(M, c_.d_ff, x) : tensor{};  // (M, F)
    qpair sq = swiglu_.forward_quantized(*be_, gu, down_.input_requests(M, training), down_.lora() ? &s : nullptr);
    down_.forward_quantized(std::move(sq), &s, y, training, &x2);  // y = x2 + s . Wdown^T
    if (!training) release_saved();
  }

  // dy (M, C); dx (M, C) overwritten when given (null: no input gradient wanted).
  // Every saved tensor and gradient is released as soon as its last reader is done, and each
  // linear allocates its dX only after its wgrad GEMM has released the saved X; the SwiGLU
  // gradient is written over the saved gate/up output and, unless an adapter reads it or its
  // copies are made one at a time, quantized into gate/up's dY copies and freed before gate/up's
  // GEMMs (swiglu::backward_quantized). Backward then never holds a gradient beside the
  // activation it replaces; where the recipe's dY copies are bytes of their own (FP8, MX),
  // gate/up's backward with both copies of its (M, 2F) gradient can still top the end of forward
  // (docs/perf/training.md has the bytes; linear_memory::lean() lowers it).
  void backward(const tensor& dy, tensor* dx, const batch_shape& b) {
    const std::size_t M = b.tokens(), C = c_.d_model;
    require_shape(dy, M, C, "layer backward dY");
    const head_shape hs = heads(b);
    tensor ds;  // (M, F), allocated by down's backward
    down_.backward(dy, &ds);
    tensor dn2;
    if (gate_up_.takes_quantized_dy()) {  // the SwiGLU backward makes gate/up's dY copies
      qpair dgu = swiglu_.backward_quantized(*be_, ds, gate_up_.dy_requests());  // consumes ds
      gate_up_.backward_quantized(std::move(dgu), &dn2, dy.type());
    } else {  // an adapter reads the gradient itself, or its copies are made one at a time
      tensor dgu = swiglu_.backward_in_place(*be_, ds);  // (M, 2F)
      ds.reset();
      gate_up_.backward(dgu, &dn2);
    }
    tensor dx2 = output(M, C, dy);  // gradient of the residual stream x2: dy + the norm's
    norm2_.backward(dn2, dx2, &dy);
    norm2_.release_saved();
    dn2.reset();
    tensor datt;
    out_.backward(dx2, &datt);
    tensor dqkv = output(M, c_.qkv_dim(), dy);
    attention_.backward(*be_, datt, dqkv, hs);
    attention_.release_saved();
    datt.reset();
    rope_.backward(*be_, dqkv, hs);
    const bool need_dn1 = dx != nullptr || norm1_.weight().trainable;
    tensor dn1;
    qkv_.backward(dqkv, need_dn1 ? &dn1 : nullptr);
    dqkv.reset();
    if (need_dn1) {
      tensor scratch = dx ? tensor{} : output(M, C, dy);
      tensor& target = dx ? *dx : scratch;
      norm1_.backward(dn1, target, &dx2);
    }
    release_saved();
  }

  void set_recipe(const recipe& r, const std::shared_ptr<scaling_table>& shared = nullptr, std::size_t first_row = 0) {
    std::size_t row = first_row;
    for (linear* l : linears()) {
      l->set_recipe(r, shared, row);
      row += linear::scaling_rows;
    }
  }
  void end_step() {
    for (linear* l : linears()) l->end_step();
  }
  // Every linear's memory trade (linear.hpp): linear_memory::lean() gives a layer step its lowest
  // peak, at one more read of each weight and of each dY.
  void set_memory(const linear_memory& m) {
    for (linear* l : linears()) l->set_memory(m);
  }
  void add_lora(const lora_targets& t, const lora_config& c, std::uint64_t seed) {
    if (t.qkv) qkv_.add_lora(c, seed);
    if (t.out) out_.add_lora(c, seed + 1);
    if (t.gate_up) gate_up_.add_lora(c, seed + 2);
    if (t.down) down_.add_lora(c, seed + 3);
  }

  std::vector<linear*> linears() { return {&qkv_, &out_, &gate_up_, &down_}; }
  // Frees everything a training forward saved (activation recomputation: only the input is kept).
  void drop_saved() noexcept {
    release_saved();
    for (linear* l : linears()) l->release_saved();
  }
  void collect(std::vector<parameter*>& out) {
    out.push_back(&norm1_.weight());
    qkv_.collect(out);
    out_.collect(out);
    out.push_back(&norm2_.weight());
    gate_up_.collect(out);
    down_.collect(out);
  }
  linear& qkv() noexcept { return qkv_; }
  linear& out() noexcept { return out_; }
  linear& gate_up() noexcept { return gate_up_; }
  linear& down() noexcept { return down_; }
  rmsnorm& norm1() noexcept { return norm1_; }
  rmsnorm& norm2() noexcept { return norm2_; }
  const layer_config& config() const noexcept { return c_; }

 private:
  head_shape heads(const batch_shape& b) const noexcept {
    return {b.batch, b.seq, c_.n_heads, c_.n_kv_heads, c_.head_dim()};
  }
  // An activation the next operation overwrites whole (GEMM, attention, copy, SwiGLU backward):
  // no zero fill.
  tensor output(std::size_t rows, std::size_t cols, const tensor& like) {
    return be_->alloc_uninitialized(rows, cols, like.type(), mem_tag::activation);
  }
  void release_saved() noexcept {
    norm1_.release_saved();
    norm2_.release_saved();
    attention_.release_saved();
    swiglu_.release_saved();
  }

  backend* be_;
  layer_config c_;
  rmsnorm norm1_, norm2_;
  linear qkv_, out_, gate_up_, down_;
  rotary rope_;
  causal_attention attention_;
  swiglu swiglu_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
