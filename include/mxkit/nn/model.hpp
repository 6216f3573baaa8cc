// SPDX-License-Identifier: Apache-2.0
#pragma once
// A Llama-style decoder: token embedding, N transformer layers, final RMSNorm, LM head,
// next-token cross-entropy.
//   tokens (B*T, 1) i32 -> x (B*T, C) -> layers -> rmsnorm -> logits (B*T, V) -> mean cross-entropy
// The loss is the mean over the targets a loss mask counts (all without one: ref/nn/cross_entropy.hpp).
// A batch of more rows than model_config::loss_chunk has its head and loss computed a chunk of
// rows at a time (nn/head_loss.hpp): the logits of the whole batch are never held.
// The layers' linears train through the model's recipe. The LM head runs in the recipe's high
// precision (bf16 for every low-precision recipe), as FP8/FP4 training stacks keep the output
// layer out of the low-precision GEMMs. The loss is a (1, 1) f64 tensor in backend memory
// (loss()); the logits' gradient is written in place of the logits. FP8 recipes keep the
// delayed-scaling state of every linear in one scaling table, updated by one fused
// update_scales() per step (end_step). Activations are stored in the recipe's `activations` type.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/embedding.hpp>
#include <mxkit/nn/head_loss.hpp>
#include <mxkit/nn/linear.hpp>
#include <mxkit/nn/parameter.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/nn/rmsnorm.hpp>
#include <mxkit/nn/transformer_layer.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// What model::forward and backward tell a group hook (gradient_groups(): 0 the embedding, 1 .. L
// the layers, L + 1 the final norm and head), in the order they run. One exception: a training
// forward whose head and loss go by chunks (nn/head_loss.hpp) makes the head's gradients itself,
// so group L + 1 gets before_forward, then before_backward, in forward, and no after_forward.
enum class group_event : std::uint8_t { before_forward, after_forward, before_backward, after_backward };

struct model_config {
  std::size_t vocab = 256;  // V (bytes)
  std::size_t n_layers = 2;
  layer_config layer;
  dtype type = dtype::f32;
  double init_std = 0.02;
  // Rows of the head and its loss computed at a time (nn/head_loss.hpp): auto_loss_chunk (whole
  // 128-row tiles with chunk x V x 4 bytes <= 1 GiB), a row count, or 0 (every batch at once).
  std::size_t loss_chunk = auto_loss_chunk;
};

// A streamed construction (nn/lora_base.hpp builds a frozen quantized LoRA base with it): `init`
// replaces the default N(0, stddev) fill of the embedding and of every linear weight (a
// device-side generator, a checkpoint reader), `after_layer` runs once layer i is created and
// initialized, before layer i + 1 is allocated, so that a base too large to hold in fp32 is never
// held whole.
//
// defer_memory: every parameter gets its shape and its initializer (parameter_init) and no memory;
// data_parallel.hpp then allocates and fills what the rank keeps (full sharding: its shard of
// each group, ZeRO-1: its shard, gathered from the others), so that the whole model is never
// held, or generated, on one rank. allocate_parameters() gives every parameter its whole memory
// instead. The values are the bits of the eager construction (parameter.hpp). Not with `init` or
// `after_layer` (they write or read the weights).
struct model_build_hooks {
  std::function<void(parameter& weight, double stddev)> init;
  std::function<void(std::size_t index, transformer_layer& layer)> after_layer;
  bool defer_memory = false;
};

class model {
 public:
  model(backend& be, const model_config& c, const recipe& r, std::uint64_t seed, const model_build_hooks& hooks = {})
      : be_(&be), c_(c), recipe_(r) {
    detail::require(c.vocab > 0 && c.n_layers > 0, "model: vocab and n_layers must be positive");
    // A NaN or infinite std would start every weight at NaN or Inf.
    detail::require(c.init_std >= 0 && std::isfinite(c.init_std), "model: init_std must be finite and >= 0, got ", c.init_std);
    check_config(r);
    detail::require(!hooks.defer_memory || (!hooks.init && !hooks.after_layer),
                    "model: defer_memory cannot be combined with the init or after_layer hooks");
    loss_ = be.scalar();
    table_ = make_table(r);
    const deferred_parameter_scope deferred(hooks.defer_memory);
    embedding_ = embedding(be, "embedding.weight", c.vocab, c.layer.d_model, c.type);
    if (hooks.init) hooks.init(embedding_.table(), c.init_std);
    else initialize(be, embedding_.table(), parameter_init::normal(seed, mix_stream(0xE3B, 0), c.init_std));
    layers_.reserve(c.n_layers);
    for (std::size_t i = 0; i < c.n_layers; ++i) {
      layers_.emplace_back(be, "layers." + std::to_string(i), c.layer, static_cast<std::uint32_t>(4 * i), layer_recipe(r, i, c.n_layers),
                           c.type, table_,
                           i * transformer_layer::scaling_rows);
      layers_.back().init(seed, c.init_std, c.n_layers, hooks.init);
      if (hooks.after_layer) hooks.after_layer(i, layers_.back());
    }
    final_norm_ = rmsnorm(be, "final_norm.weight", c.layer.d_model, c.type, c.layer.norm_eps);
    head_ = linear(be, "head.weight", c.layer.d_model, c.vocab, static_cast<std::uint32_t>(4 * c.n_layers), head_recipe(r), c.type);
    if (hooks.init) {
      hooks.init(head_.weight(), c.init_std);
      ++head_.weight().version;
    } else {
      head_.init_normal(seed, c.init_std);
    }
    chunks_ = head_loss(loss_chunk_rows(c.loss_chunk, c.vocab), activation_type());
  }

  // Every parameter built with deferred memory gets its whole memory and initial values
  // (data_parallel.hpp does this, or less, itself); `threads` host threads make normal fills.
  void allocate_parameters(unsigned threads = 0) {
    for (parameter* p : parameters()) allocate_deferred(*be_, *p, threads);
  }

  // Mean next-token loss of one batch into loss(); tokens and targets (B*T, 1) i32 in backend
  // memory, and the loss mask (B*T, 1) i32 of 0/1 (null: every target counts; the loss is the mean
  // over the counted ones, max(1, their count)). training: keep what backward() needs (the logits
  // become their gradient). Reads nothing back.
  const tensor& forward(const tensor& tokens, const tensor& targets, const batch_shape& b, bool training, const tensor* mask = nullptr) {
    const std::size_t M = b.tokens(), C = c_.layer.d_model;
    detail::require(tokens.rows() == M && targets.rows() == M, "model: ", tokens.rows(), " tokens and ", targets.rows(),
                    " targets for a batch of ", b.batch, "x", b.seq);
    detail::require(!mask || mask->rows() == M, "model: a loss mask of ", mask ? mask->rows() : 0, " rows for a batch of ", M, " tokens");
    shape_ = b;
    training_forward_ = training;
    xs_.assign(1, output(M, C));  // xs_[i]: input of layer i; xs_[L]: input of the final norm
    notify(group_event::before_forward, 0);
    embedding_.forward(tokens, xs_[0]);
    notify(group_event::after_forward, 0);
    const bool recompute = training && recompute_;
    calls_.clear();
    if (recompute) calls_.assign(layers_.size(), {});
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      xs_.push_back(output(M, C));
      if (recompute)
        for (linear* l : layers_[i].linears()) calls_[i].push_back(l->calls_in_step());
      notify(group_event::before_forward, i + 1);
      layers_[i].forward(xs_[i], xs_[i + 1], b, training);
      notify(group_event::after_forward, i + 1);
      if (recompute) layers_[i].drop_saved();  // only the input xs_[i] is kept
    }
    trained_ = training;
    if (chunks_.chunked(M)) {  // nn/head_loss.hpp: the logits a chunk at a time, the head's backward with them
      dlogits_.reset();
      notify(group_event::before_forward, layers_.size() + 1);
      // Training: the head's gradients are made in this forward, so the group's before_backward
      // comes here and its after_forward not at all (its weights stay for the final norm's
      // backward); backward() sends only its after_backward.
      if (training) notify(group_event::before_backward, layers_.size() + 1);
      chunks_.forward(*be_, final_norm_, head_, xs_.back(), targets, mask, loss_, training);
      if (!training) notify(group_event::after_forward, layers_.size() + 1);
    } else {
      chunks_.release_saved();
      tensor logits = output(M, c_.vocab);  // (M, V)
      notify(group_event::before_forward, layers_.size() + 1);
      head_.forward_quantized(final_norm_.forward_quantized(xs_.back(), head_.input_requests(M, training), nullptr), nullptr, logits,
                              training);
      notify(group_event::after_forward, layers_.size() + 1);
      be_->cross_entropy(logits, targets, loss_, training, mask);
      dlogits_ = training ? logits : tensor{};  // the gradient, in place
    }
    if (!training) {
      xs_.clear();
      final_norm_.release_saved();
      embedding_.release_saved();
    }
    return loss_;
  }
  // The same from host token vectors: uploads them (range-checked) and reads the loss back (a
  // synchronizing convenience for tests and one-off evaluations; the trainer does not use it).
  // mask: empty (every target counts) or one 0/1 per target.
  double forward(const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets, const batch_shape& b,
                 bool training, const std::vector<std::int32_t>& mask = {}) {
    detail::require(tokens.size() == b.tokens() && targets.size() == b.tokens(), "model: ", tokens.size(), " tokens and ",
                    targets.size(), " targets for a batch of ", b.batch, "x", b.seq);
    detail::require(mask.empty() || mask.size() == b.tokens(), "model: a loss mask of ", mask.size(), " for ", b.tokens(), " targets");
    tensor t = be_->alloc(b.tokens(), 1, dtype::i32, mem_tag::activation), g = be_->alloc(b.tokens(), 1, dtype::i32, mem_tag::activation);
    be_->write_tokens(t, tokens, c_.vocab);
    be_->write_tokens(g, targets, c_.vocab);
    tensor m;
    if (!mask.empty()) {
      m = be_->alloc(b.tokens(), 1, dtype::i32, mem_tag::activation);
      be_->write_tokens(m, mask, 2);  // 0 or 1, checked on the host
    }
    return be_->read_scalar(forward(t, g, b, training, mask.empty() ? nullptr : &m));
  }
  // The loss of the last forward: (1, 1) f64 in backend memory.
  const tensor& loss() const noexcept { return loss_; }
  // The activation dtype: the recipe's, or f64 in an f64 model.
  dtype activation_type() const noexcept { return c_.type == dtype::f64 ? dtype::f64 : recipe_.activations; }

  // Gradients of the last training forward, accumulated into every trainable parameter.
  void backward() {
    detail::require(trained_, "model: backward without a training forward");
    trained_ = false;
    const std::size_t M = shape_.tokens(), C = c_.layer.d_model;
    tensor dn;
    if (chunks_.chunked(M)) {
      dn = chunks_.backward();  // (made by forward, after the group's before_backward)
    } else {
      dn = output(M, C);
      notify(group_event::before_backward, layers_.size() + 1);
      head_.backward(dlogits_, &dn);
    }
    tensor dx = act(M, C);
    final_norm_.backward(dn, dx);
    notify(group_event::after_backward, layers_.size() + 1);
    for (std::size_t i = layers_.size(); i-- > 0;) {
      notify(group_event::before_backward, i + 1);
      if (!calls_.empty()) recompute_forward(i);
      const bool need_dx = i > 0 || embedding_.table().trainable;
      tensor dprev = need_dx ? output(M, C) : tensor{};
      layers_[i].backward(dx, need_dx ? &dprev : nullptr, shape_);
      dx = dprev;
      notify(group_event::after_backward, i + 1);
    }
    calls_.clear();
    notify(group_event::before_backward, 0);
    if (embedding_.table().trainable) embedding_.backward(dx);
    notify(group_event::after_backward, 0);
    dlogits_.reset();
    xs_.clear();
    final_norm_.release_saved();
    embedding_.release_saved();
  }

  // Activation recomputation per layer (Chen et al. 2016, "Training Deep Nets with Sublinear
  // Memory Cost"): a training forward keeps only each layer's input and frees what the layer saved;
  // backward runs the layer's forward again, then its backward. The recomputed forward draws the
  // same Philox streams and records the same amaxes (max-combined: no change), so the gradients
  // are the same bits as without; the cost is one more forward of every layer.
  void set_recompute(bool on) noexcept {
    recompute_ = on;
    ++configuration_epoch_;
  }
  // Every layer's linears' memory trade (linear.hpp: linear_memory). The head keeps its cache: its
  // chunks (head_loss.hpp) read its weight copy twice each.
  void set_layer_memory(const linear_memory& m) {
    for (transformer_layer& l : layers_) l.set_memory(m);
    ++configuration_epoch_;
  }
  bool recompute() const noexcept { return recompute_; }

  // Gradient groups, in the order parameters() lists them: 0 the embedding, 1 .. L the layers,
  // L + 1 the final norm and the head. forward() and backward() call the hook around each group's
  // work: data parallelism starts a group's gradient reduction at after_backward, as soon as its
  // gradients are complete (L + 1 first, 0 last), while backward goes on; full sharding gathers a
  // group's weights at before_forward/before_backward and frees them after (data_parallel.hpp).
  std::vector<std::vector<parameter*>> gradient_groups() {
    std::vector<std::vector<parameter*>> g(layers_.size() + 2);
    g[0].push_back(&embedding_.table());
    for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i].collect(g[i + 1]);
    g.back().push_back(&final_norm_.weight());
    head_.collect(g.back());
    return g;
  }
  void set_group_hook(std::function<void(group_event, std::size_t group)> hook) {
    group_hook_ = std::move(hook);
    ++configuration_epoch_;
  }
  // Whether the next backward (with its recomputed forwards) reads p's value: the norm gains yes;
  // the embedding table no (its gradient needs the tokens only); a linear's weight only where its
  // cached quantized copies do not serve (linear::backward_reads_master). Full sharding gathers
  // only these before a group's backward.
  // The linear whose weight p is (null for the embedding table and the norm gains).
  linear* linear_of(const parameter& p) {
    for (linear* l : linears())
      if (&p == &l->weight()) return l;
    return &p == &head_.weight() ? &head_ : nullptr;
  }
  // Whether the forward running now (or the last one) trains: group hooks quantize for it.
  bool training_forward() const noexcept { return training_forward_; }
  bool backward_reads_value(const parameter& p) {
    if (&p == &embedding_.table()) return false;
    for (linear* l : linears())
      if (&p == &l->weight()) return l->backward_reads_master();
    if (&p == &head_.weight()) return head_.backward_reads_master();
    return true;
  }

  // The training forward the next micro-batch is within its step (its Philox streams): micro-batch
  // j of a step draws the same bits whichever rank runs it, and however many micro-batches the
  // rank runs.
  void set_micro_batch(std::uint64_t j) noexcept {
    for (linear* l : linears()) l->set_calls_in_step(j);
    head_.set_calls_in_step(j);
  }

  // Every trainable gradient reads as zeros from here on; nothing is written (parameter.hpp:
  // the next backward overwrites each gradient, the optimizer writes any it did not reach).
  void zero_grad() { mark_grads_zero(parameters()); }

  // After the optimizer step: one fused delayed-scaling update of every FP8 tensor; step counters.
  void end_step() {
    if (table_) be_->update_scales(*table_);
    for (auto& l : layers_) l.end_step();
    head_.end_step();
  }

  // The training step the next forward belongs to (Philox streams; a resumed run sets it).
  void set_step(std::uint64_t step) noexcept {
    for (linear* l : linears()) l->set_step(step);
    head_.set_step(step);
  }

  // Switches the layers' linears to another recipe (the head too if the high precision changes).
  // FP8 scaling starts fresh: a new table.
  void set_recipe(const recipe& r) {
    check_config(r);
    const bool head_changes = !(r.high == recipe_.high);
    recipe_ = r;
    table_ = make_table(r);
    for (std::size_t i = 0; i < layers_.size(); ++i)
      layers_[i].set_recipe(layer_recipe(r, i, layers_.size()), table_, i * transformer_layer::scaling_rows);
    if (head_changes) head_.set_recipe(head_recipe(r));
    chunks_ = head_loss(chunks_.chunk(), activation_type());  // (the recipe's activations may have changed)
    ++configuration_epoch_;
  }
  // The delayed-scaling state of every FP8 tensor of the layers (null without FP8 operands).
  const std::shared_ptr<scaling_table>& scaling() const noexcept { return table_; }
  const recipe& current_recipe() const noexcept { return recipe_; }
  // Counts the changes to what a training step runs and to the tensors it keeps across steps
  // (set_recipe, set_recompute, set_layer_memory, set_group_hook, freeze_all, add_lora): a step
  // recorded before one is not replayed after it (train/training.hpp).
  std::uint64_t configuration_epoch() const noexcept { return configuration_epoch_; }

  // LoRA fine-tuning: everything frozen, adapters added to the targeted linears of every layer.
  void freeze_all() {
    for (parameter* p : parameters()) freeze(*p);
    ++configuration_epoch_;
  }
  void add_lora(const lora_targets& t, const lora_config& c, std::uint64_t seed) {
    for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i].add_lora(t, c, seed + 16 * i);
    ++configuration_epoch_;
  }

  std::vector<parameter*> parameters() {
    std::vector<parameter*> out{&embedding_.table()};
    for (auto& l : layers_) l.collect(out);
    out.push_back(&final_norm_.weight());
    head_.collect(out);
    return out;
  }
  std::vector<parameter*> trainable_parameters() {
    std::vector<parameter*> out;
    for (parameter* p : parameters())
      if (p->trainable) out.push_back(p);
    return out;
  }
  // The linears that follow the recipe (every layer's QKV, output, gate/up, down).
  std::vector<linear*> linears() {
    std::vector<linear*> out;
    for (auto& l : layers_)
      for (linear* x : l.linears()) out.push_back(x);
    return out;
  }
  std::vector<transformer_layer>& layers() noexcept { return layers_; }
  linear& head() noexcept { return head_; }
  embedding& token_embedding() noexcept { return embedding_; }
  rmsnorm& final_norm() noexcept { return final_norm_; }
  const model_config& config() const noexcept { return c_; }
  // The head and its loss by chunks of rows (nn/head_loss.hpp; chunk() 0: every batch whole).
  const head_loss& loss_chunks() const noexcept { return chunks_; }
  backend& be() noexcept { return *be_; }

  static recipe head_recipe(const recipe& r) { return recipes::uniform("head (" + r.name + " high precision)", r.high); }

 private:
  tensor act(std::size_t rows, std::size_t cols) { return be_->alloc(rows, cols, activation_type(), mem_tag::activation); }
  // An activation the next operation overwrites whole (embedding, layer, GEMM): no zero fill.
  tensor output(std::size_t rows, std::size_t cols) {
    return be_->alloc_uninitialized(rows, cols, activation_type(), mem_tag::activation);
  }
  void notify(group_event e, std::size_t group) {
    if (group_hook_) group_hook_(e, group);
  }
  // Layer i's training forward again, from its kept input, drawing the streams it drew first.
  void recompute_forward(std::size_t i) {
    const std::vector<linear*> ls = layers_[i].linears();
    for (std::size_t k = 0; k < ls.size(); ++k) ls[k]->set_calls_in_step(calls_[i][k]);
    tensor y = output(shape_.tokens(), c_.layer.d_model);
    layers_[i].forward(xs_[i], y, shape_, true);
  }
  std::shared_ptr<scaling_table> make_table(const recipe& r) {
    if (!r.uses(precision::fp8)) return nullptr;
    const std::array<fp8_type, 3> t = linear::scaling_types(r);
    std::vector<fp8_type> types;
    for (std::size_t i = 0; i < c_.n_layers * transformer_layer::scaling_rows / linear::scaling_rows; ++i) types.insert(types.end(), t.begin(), t.end());
    return be_->make_scaling_table(r.scaling, types);
  }

  backend* be_;
  model_config c_;
  recipe recipe_;
  tensor loss_;                           // (1, 1) f64
  std::shared_ptr<scaling_table> table_;  // FP8 recipes: 3 rows per linear of every layer
  embedding embedding_;
  std::vector<transformer_layer> layers_;
  rmsnorm final_norm_;
  linear head_;
  batch_shape shape_;
  std::vector<tensor> xs_;
  tensor dlogits_;
  head_loss chunks_;
  bool trained_ = false;  // the last forward trains: backward() may follow
  bool recompute_ = false;
  std::uint64_t configuration_epoch_ = 0;
  std::vector<std::vector<std::uint64_t>> calls_;  // recomputation: each layer's linears' calls before its forward
  std::function<void(group_event, std::size_t)> group_hook_;
  bool training_forward_ = false;
};

}  // namespace nn
MXKIT_END_NAMESPACE
