// SPDX-License-Identifier: Apache-2.0
#pragma once
// Linear layer Y[M,N] = X[M,K] . W[N,K]^T trained through a recipe (recipe.hpp):
//   forward   X quantized on the fly: the fprop copy (rowwise) and, when W trains, the wgrad
//             copy (columnwise), which is saved for backward instead of X (the device backend's
//             bf16 copy is X itself, read transposed by the GEMM: X stays unchanged until then).
//             W quantized once per optimizer step: the fprop copy (rowwise) and the dgrad copy
//             (columnwise, "transpose cache") are cached, keyed by the weight's version (bumped
//             by the optimizer) and, for FP8, W's scale version in the scaling table (bumped by
//             an update that may have moved W's scale): no float is compared, nothing is read.
//             The producer of X may write its quantized copies itself (input_requests, then
//             forward_quantized: the fused RMSNorm and SwiGLU producers). A residual C makes the
//             fprop GEMM write Y = X W^T + C (the residual add in the epilogue).
//   backward  dY quantized on the fly: dgrad copy (rowwise), wgrad copy (columnwise), or written
//             by dY's producer (dy_requests, then backward_quantized: the SwiGLU backward).
//             dX = dgrad(dY, W_col),  dW += wgrad(dY_col, X_col).
// linear_memory trades passes over memory for a lower peak: weight copies made per GEMM instead
// of cached, dY's two copies made one at a time.
// A frozen weight (LoRA base) has no gradient: its wgrad operands are never quantized and its
// wgrad GEMM never runs. A frozen weight may also drop its master copy after pre-quantization
// and live as quantized copies only (the LoRA healing recipe, healing.hpp).
// FP8 operands take their scale from one row per tensor (X, W, dY) of a scaling table in backend
// memory (nn/delayed_scaling.hpp): the model's table, shared by all its linears, or a 3-row table
// of the layer's own. Training casts write their amax into the row; the scales move in the one
// update_scales() per step (model::end_step, or end_step() here for a table of the layer's own).
// Philox streams: (layer id, tensor, training step, call in the step) per quantization, so
// stochastic rounding draws fresh bits every step, the two copies of one tensor draw apart
// (mx_tensor.hpp), and a run resumed at step n (set_step) draws what the uninterrupted run drew.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/lora.hpp>
#include <mxkit/nn/parameter.hpp>
#include <mxkit/nn/recipe.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// What a linear holds between and within its passes. The default (both off) makes the fewest
// passes over memory; both on give the lowest peak at the same results, bit for bit.
struct linear_memory {
  // The weight's quantized copies are made where a GEMM reads them and freed after it: the fprop
  // copy in forward, the dgrad copy in backward (TransformerEngine casts its FP8 weights this way
  // outside gradient accumulation). Two reads of the weight a step and no copy held between the
  // passes, where the cache holds both from forward to the next optimizer step. Weights without a
  // master (released, restored from the healing stash) keep their copies, but for an FP8 copy
  // restored from the stash only the fprop one: its dgrad copy, the exact transpose, is made per
  // backward GEMM (half the FP8 base: the 70B LoRA's base fits one 141 GB GPU).
  bool weight_copies_per_gemm = false;
  // Backward makes dY's wgrad copy, runs wgrad and frees the copy before it makes the dgrad copy:
  // a second read of dY, and the two copies are never held together. dY is then stored first
  // (no producer writes its copies: backward_quantized is refused).
  bool dy_copies_one_at_a_time = false;

  static constexpr linear_memory lean() noexcept { return {true, true}; }
};

class linear {
 public:
  linear() = default;
  // shared: rows first_row .. first_row + 2 of the model's scaling table (FP8 recipes); null: a
  // table of the layer's own.
  linear(backend& be, std::string name, std::size_t in, std::size_t out, std::uint32_t id, const recipe& r, dtype type,
         std::shared_ptr<scaling_table> shared = nullptr, std::size_t first_row = 0)
      : be_(&be), id_(id), in_(in), out_(out) {
    detail::require(in > 0 && out > 0, "linear '", name, "': zero-sized weight ", out, "x", in);
    weight_ = make_parameter(be, std::move(name), out, in, type);
    set_recipe(r, std::move(shared), first_row);
  }

  // The FP8 types of the layer's scaling rows under r: X, W, dY (E4M3 where a tensor is not FP8).
  static std::array<fp8_type, 3> scaling_types(const recipe& r) noexcept {
    return {fp8_type_of(r.fprop.a, r.wgrad.b), fp8_type_of(r.fprop.b, r.dgrad.b), fp8_type_of(r.dgrad.a, r.wgrad.a)};
  }
  static constexpr std::size_t scaling_rows = 3;

  // ---- configuration
  const std::string& name() const noexcept { return weight_.name; }
  std::size_t in_features() const noexcept { return in_; }
  std::size_t out_features() const noexcept { return out_; }
  parameter& weight() noexcept { return weight_; }
  const parameter& weight() const noexcept { return weight_; }
  const recipe& current_recipe() const noexcept { return recipe_; }

  void init_normal(std::uint64_t seed, double stddev) {
    initialize(*be_, weight_, parameter_init::normal(seed, mix_stream(id_, 0x1417), stddev));
    ++weight_.version;
  }

  // Switches the recipe: every quantized copy is dropped and FP8 scaling starts fresh (the
  // caller passes rows of a fresh shared table, or the layer makes a table of its own).
  void set_recipe(const recipe& r, std::shared_ptr<scaling_table> shared = nullptr, std::size_t first_row = 0) {
    check_config(r);
    check_dims(r, in_, "in_features K", gemm_product::fprop);
    check_dims(r, out_, "out_features N", gemm_product::dgrad);
    std::shared_ptr<scaling_table> table;
    bool own = false;
    if (r.uses(precision::fp8)) {
      const std::array<fp8_type, 3> types = scaling_types(r);
      if (shared) {
        detail::require(first_row + scaling_rows <= shared->rows(), "linear '", name(), "': scaling rows ", first_row, "..",
                        first_row + 2, " of a ", shared->rows(), "-row table");
        for (std::size_t i = 0; i < scaling_rows; ++i)
          detail::require(shared->type(first_row + i) == types[i], "linear '", name(), "': scaling row ", first_row + i, " holds ",
                          name_of(shared->type(first_row + i)), ", the recipe '", r.name, "' needs ", name_of(types[i]));
        table = std::move(shared);
      } else {
        table = be_->make_scaling_table(r.scaling, {types.begin(), types.end()});
        first_row = 0;
        own = true;
      }
    }
    recipe_ = r;
    drop_quantized();
    table_ = std::move(table);
    row0_ = first_row;
    owns_table_ = own;
  }

  void freeze() noexcept { nn::freeze(weight_); }

  // Weight copies per GEMM drops the cached ones now: they would never be read.
  void set_memory(const linear_memory& m) {
    memory_ = m;
    if (copies_per_gemm()) cache_ = {};
    else if (transposes_per_gemm()) cache_.columnwise.reset();
  }
  const linear_memory& memory() const noexcept { return memory_; }

  void add_lora(const lora_config& c, std::uint64_t seed) {
    lora_ = std::make_unique<lora_adapter>(*be_, weight_.name, in_, out_, c, weight_.value.defined() ? weight_.value.type() : dtype::f32,
                                           seed);
  }
  lora_adapter* lora() noexcept { return lora_.get(); }
  const lora_adapter* lora() const noexcept { return lora_.get(); }

  // ---- forward / backward
  // The copies of an (M, K) input that the next forward needs: the fprop copy, and the wgrad copy
  // when training a trainable weight. Draws the Philox stream of that forward: call it once per
  // forward, then forward_quantized() with the copies (made by the fused producer of X).
  quant_plan input_requests(std::size_t M, bool training) {
    const bool wgrad = training && weight_.trainable;
    if (wgrad && recipe_.wgrad.a.is<block_scaled_spec>()) {
      const int k = recipe_.wgrad.a.block_scaled().format.block_size();
      detail::require(M % static_cast<std::size_t>(k) == 0, "linear '", name(), "': wgrad in mx reduces over the M=", M,
                      " tokens, which must be a multiple of ", k);
    }
    // Evaluation passes draw from their own stream so that they do not shift training's.
    const std::uint32_t stream = training ? mix_stream(id_, 0, step_ * 4096 + calls_in_step_++) : mix_stream(id_, 3, step_);
    quant_plan p;
    p.rowwise = request(gemm_product::fprop, false, block_axis::rowwise, operand_use::fprop_x, slot(0, training), stream);
    p.rowwise.may_alias_input = true;  // used by the fprop GEMM right away, never kept
    if (wgrad) {
      p.columnwise = request(gemm_product::wgrad, true, block_axis::columnwise, operand_use::wgrad_x, slot(0, training), stream);
      p.columnwise.may_alias_input = true;  // kept until backward, while X stays as it is (forward's contract)
      p.columnwise_wanted = true;
    }
    pending_stream_ = stream;
    return p;
  }

  // x (M, K) -> y (M, N), overwritten (y = x W^T + residual when a residual is given).
  // training: save what backward needs, record FP8 amaxes. x must stay unchanged until
  // backward: a backend may keep x itself as the wgrad copy (quant_request::may_alias_input).
  void forward(const tensor& x, tensor& y, bool training, const tensor* residual = nullptr) {
    require_shape(x, x.rows(), in_, ("linear '" + name() + "' input").c_str());
    const quant_plan p = input_requests(x.rows(), training);
    qpair xq;
    if (p.columnwise_wanted) xq = be_->quantize_both(x, p.rowwise, p.columnwise);
    else xq.rowwise = be_->quantize(x, p.rowwise);
    forward_quantized(std::move(xq), &x, y, training, residual);
  }

  // The forward pass from the copies input_requests() asked for. x, the high-precision input, is
  // needed only by LoRA adapters (null otherwise).
  void forward_quantized(qpair xq, const tensor* x, tensor& y, bool training, const tensor* residual = nullptr) {
    detail::require(xq.rowwise.defined() && xq.rowwise.cols() == in_, "linear '", name(), "': forward needs the fprop copy of an (M, ",
                    in_, ") input");
    detail::require(!lora_ || x, "linear '", name(), "': LoRA adapters need the high-precision input");
    x_wgrad_ = std::move(xq.columnwise);  // (K, M) stored, when training a trainable weight
    const qtensor w = fprop_weight(training);
    be_->gemm(gemm_product::fprop, xq.rowwise, w, y, 1.0f, residual ? 1.0f : 0.0f, residual);
    if (lora_) lora_->forward(*be_, recipe_.high, *x, y, training);
    saved_ = training;
    saved_stream_ = pending_stream_;
  }

  // dy (M, N); dx (M, K) overwritten when given; dW accumulated when the weight trains. An
  // undefined *dx is allocated here (dy's type), after the wgrad GEMM has released the saved copy
  // of X: the layer's peak then never holds both.
  void backward(const tensor& dy, tensor* dx) {
    detail::require(saved_, "linear '", name(), "': backward without a training forward");
    require_shape(dy, dy.rows(), out_, ("linear '" + name() + "' dY").c_str());
    const quant_plan p = dy_requests();
    qpair qdy;
    if (p.columnwise_wanted && dx && !memory_.dy_copies_one_at_a_time) qdy = be_->quantize_both(dy, p.rowwise, p.columnwise);
    else if (p.columnwise_wanted) qdy.columnwise = be_->quantize(dy, p.columnwise);
    backward_from(std::move(qdy), p, &dy, dx, dy.type());
  }

  // The copies of dY that backward makes, for a producer that writes them itself (the SwiGLU
  // backward, then backward_quantized): the dgrad copy (rowwise), and the wgrad copy (columnwise)
  // when the weight trains. The same Philox stream however often it is asked.
  quant_plan dy_requests() const {
    const std::uint32_t stream = mix_stream(saved_stream_, 2);
    quant_plan p;
    p.rowwise = request(gemm_product::dgrad, false, block_axis::rowwise, operand_use::dgrad_dy, slot(2, true), stream);
    p.rowwise.may_alias_input = true;  // used by the dgrad GEMM right away, never kept
    p.columnwise = request(gemm_product::wgrad, false, block_axis::columnwise, operand_use::wgrad_dy, slot(2, true), stream);
    p.columnwise.may_alias_input = true;  // used by the wgrad GEMM right away
    p.columnwise_wanted = weight_.trainable;
    return p;
  }
  // Whether backward_quantized may take dY's copies from a producer: no adapter reads dY in high
  // precision, and the copies are not to be made one at a time.
  bool takes_quantized_dy() const noexcept { return !lora_ && !memory_.dy_copies_one_at_a_time; }

  // backward from dY's copies as dy_requests() planned them, made by dY's producer (the dgrad
  // copy is read only when dx is given); an undefined *dx is allocated in dx_type (dY's own type).
  void backward_quantized(qpair qdy, tensor* dx, dtype dx_type) {
    detail::require(saved_, "linear '", name(), "': backward without a training forward");
    detail::require(takes_quantized_dy(), "linear '", name(), "': backward_quantized with ",
                    lora_ ? "a LoRA adapter (it reads dY in high precision)" : "dY's copies to be made one at a time");
    const quant_plan p = dy_requests();
    const auto check = [&](const qtensor& q, const quant_request& r, const char* what) {
      detail::require(q.defined() && q.kind() == r.spec.kind() && q.axis() == r.axis && q.cols() == out_, "linear '", name(),
                      "': backward_quantized needs dY's ", what, " copy of an (M, ", out_, ") gradient as dy_requests planned it");
    };
    if (dx) check(qdy.rowwise, p.rowwise, "dgrad (rowwise)");
    if (p.columnwise_wanted) check(qdy.columnwise, p.columnwise, "wgrad (columnwise)");
    backward_from(std::move(qdy), p, nullptr, dx, dx_type);
  }

  // After the optimizer step: the step counter moves; a table of the layer's own gets its
  // delayed-scaling update (a shared table is updated once for all layers by its owner).
  void end_step() {
    if (owns_table_) be_->update_scales(*table_);
    set_step(step_ + 1);
  }
  // The training step the next forward belongs to (a resumed run sets it).
  void set_step(std::uint64_t step) noexcept {
    step_ = step;
    calls_in_step_ = 0;
  }
  // Training forwards so far in this step: the Philox stream of the next one. Micro-batch j of a
  // step draws call j on whichever rank runs it (data_parallel.hpp), and a recomputed forward
  // draws its original call again (model::set_recompute): the same bits as the run without.
  std::uint64_t calls_in_step() const noexcept { return calls_in_step_; }
  void set_calls_in_step(std::uint64_t n) noexcept { calls_in_step_ = n; }
  // Drops what a training forward saved for backward (activation recomputation runs it again).
  void release_saved() noexcept {
    x_wgrad_.reset();
    saved_ = false;
    if (lora_) lora_->release_saved();
  }

  // ---- quantized weight copies
  // Makes the cached weight copies now (the recipe's pre-quantization on entry to training); with
  // weight copies per GEMM there is no cache to fill.
  void prequantize() {
    if (!copies_per_gemm()) ensure_weight_copies(false);
  }

  // Frozen weights only: keep the quantized copies and free the master (quantized primary weights).
  void release_master() {
    detail::require(!weight_.trainable, "linear '", name(), "': only a frozen weight can drop its master copy");
    ensure_weight_copies(false);
    weight_.value.reset();
  }
  bool has_master() const noexcept { return weight_.value.defined(); }

  // Frees every quantized copy this layer holds (weight caches and saved operands).
  void drop_quantized() noexcept {
    cache_ = {};
    x_wgrad_.reset();
    saved_ = false;
    if (lora_) lora_->release_saved();
  }

  // Installs an FP8 rowwise weight copy (from the healing stash) as the layer's weight; the
  // dgrad copy is its transpose. The recipe must read W in that FP8 type in fprop and dgrad.
  void restore_fp8(const qtensor& rowwise) {
    detail::require(!has_master(), "linear '", name(), "': restore_fp8 replaces a released master; this weight still has one");
    detail::require(rowwise.kind() == precision::fp8 && rowwise.axis() == block_axis::rowwise && rowwise.rows() == out_ &&
                        rowwise.cols() == in_,
                    "linear '", name(), "': restore_fp8 needs an FP8 rowwise ", out_, "x", in_, " copy");
    for (const operand_spec* o : {&recipe_.fprop.b, &recipe_.dgrad.b})
      detail::require(*o == rowwise.request().spec, "linear '", name(), "': the recipe '", recipe_.name, "' does not read W as ",
                      name_of(rowwise.request().spec.fp8().type));
    cache_.rowwise = rowwise;
    cache_.columnwise = memory_.weight_copies_per_gemm ? qtensor{} : be_->transpose(rowwise, operand_use::dgrad_w, mem_tag::quantized_weight);
    cache_.version = weight_.version;
    cache_.scale_version = table_ ? table_->version(row0_ + 1) : 0;
  }

  // Full sharding's gather of the weight as its copies (data_parallel.hpp): whether the cached
  // copies can be assembled from the ranks' slabs of rows, byte for byte what quantizing the
  // gathered weight gives: both copies MX or NVFP4 rounded to nearest (stochastic rounding draws
  // by element index, which a slab's quantizer does not know; NVFP4's slabs take the whole
  // weight's amax, parallel/gathered_copies.hpp), both FP8 of one type (the dgrad
  // copy the rowwise one's transpose, the table the model's), or both bf16 (rounding to nearest
  // even, elementwise; the dgrad copy the rowwise one's transpose); the cache in use (no copies
  // per GEMM) and no adapter.
  bool weight_copies_gatherable() const noexcept {
    if (lora_ || memory_.weight_copies_per_gemm) return false;
    const operand_spec &f = recipe_.fprop.b, &d = recipe_.dgrad.b;
    if (f.is<block_scaled_spec>() && d.is<block_scaled_spec>())
      return f.block_scaled().round != rounding::stochastic && d.block_scaled().round != rounding::stochastic;
    if (f.is<bf16_spec>() && d.is<bf16_spec>()) return true;
    // FP8: W's scaling row in the model's shared table, whose amaxes data_parallel max-reduces.
    return f.is<fp8_spec>() && d == f && !owns_table_;
  }
  // The requests of the cached copies (fprop rowwise, dgrad columnwise) for a forward.
  quant_plan weight_plan(bool training) const {
    quant_plan p;
    p.rowwise = weight_request(gemm_product::fprop, training);
    p.columnwise = weight_request(gemm_product::dgrad, training);
    p.columnwise_wanted = true;
    return p;
  }
  // Installs copies assembled from the ranks' slabs as the cache of the weight's current version
  // (and W's current scale): what ensure_weight_copies would have made from the gathered weight.
  void install_weight_copies(qtensor rowwise, qtensor columnwise) {
    detail::require(weight_copies_gatherable(), "linear '", name(), "': install_weight_copies under recipe '", recipe_.name,
                    "', whose weight copies are not gathered");
    const quant_plan p = weight_plan(false);
    const auto check = [&](const qtensor& q, const quant_request& r) {
      detail::require(q.defined() && q.kind() == r.spec.kind() && q.axis() == r.axis && q.rows() == out_ && q.cols() == in_, "linear '",
                      name(), "': install_weight_copies needs the ", name_of(r.axis), " ", name_of(r.spec.kind()), " copy of the ", out_, "x",
                      in_, " weight");
    };
    check(rowwise, p.rowwise);
    check(columnwise, p.columnwise);
    cache_ = {std::move(rowwise), std::move(columnwise), weight_.version, table_ ? table_->version(row0_ + 1) : 0};
    ++weight_quantizations_;
  }

  // Frees the cached weight copies (full sharding's reshard after forward, data_parallel.hpp): the
  // next GEMM that reads W makes them again from the master, or they are installed again. A
  // frozen weight without a master keeps them: they are the only copy of it.
  void release_weight_copies() noexcept {
    if (weight_.trainable || has_master()) cache_ = {};
  }

  // Whether backward (and a recomputed forward before it) reads the master weight: not when the
  // cache holds both copies of the weight's current version (and, FP8, of W's current scale), no
  // adapter reads W and its copies are not made per GEMM. Full sharding (data_parallel.hpp) then
  // gathers no fp32 weight for this layer's backward: the copies forward made serve dgrad.
  bool backward_reads_master() const noexcept {
    if (lora_ || memory_.weight_copies_per_gemm || !cache_.rowwise.defined() || !cache_.columnwise.defined()) return true;
    if (cache_.version != weight_.version) return true;
    return recipe_.fprop.b.is<fp8_spec>() && cache_.scale_version != table_->version(row0_ + 1);
  }

  const qtensor& cached_rowwise() const noexcept { return cache_.rowwise; }
  const qtensor& cached_columnwise() const noexcept { return cache_.columnwise; }
  const qtensor& saved_wgrad_input() const noexcept { return x_wgrad_; }
  // Does this layer hold any copy of kind p (weight caches or saved operands)?
  bool holds(precision p) const noexcept {
    for (const qtensor* q : {&cache_.rowwise, &cache_.columnwise, &x_wgrad_})
      if (q->defined() && q->kind() == p) return true;
    return false;
  }
  // Bytes of this layer's weight memory: master, cached copies, LoRA adapters.
  std::size_t weight_bytes() const noexcept {
    std::size_t n = weight_.value.bytes() + cache_.rowwise.bytes() + cache_.columnwise.bytes();
    if (lora_) n += lora_->a().value.bytes() + lora_->b().value.bytes();
    return n;
  }
  std::uint64_t weight_quantizations() const noexcept { return weight_quantizations_; }

  // The scaling-table rows of X, W and dY (table null when the recipe has no FP8 operand).
  fp8_scaling_slot x_scaling() const noexcept { return {table_.get(), row0_ + 0}; }
  fp8_scaling_slot w_scaling() const noexcept { return {table_.get(), row0_ + 1}; }
  fp8_scaling_slot dy_scaling() const noexcept { return {table_.get(), row0_ + 2}; }
  const std::shared_ptr<scaling_table>& scaling() const noexcept { return table_; }

  // Every parameter of the layer: the weight, then the adapters.
  void collect(std::vector<parameter*>& out) {
    out.push_back(&weight_);
    if (lora_) {
      out.push_back(&lora_->a());
      out.push_back(&lora_->b());
    }
  }

 private:
  struct weight_cache {
    qtensor rowwise;     // fprop W (N, K)
    qtensor columnwise;  // dgrad W, stored (K, N)
    std::uint64_t version = 0;        // the weight version they were made from
    std::uint64_t scale_version = 0;  // FP8: W's scale version they were made with
  };

  static fp8_type fp8_type_of(const operand_spec& a, const operand_spec& b) noexcept {
    return a.is<fp8_spec>() ? a.fp8().type : b.is<fp8_spec>() ? b.fp8().type : fp8_type::e4m3;
  }

  void check_dims(const recipe& r, std::size_t n, const char* what, gemm_product g) const {
    const operand_spec& a = r.gemm(g).a;
    if (!a.is<block_scaled_spec>()) return;
    const int k = a.block_scaled().format.block_size();
    detail::require(n % static_cast<std::size_t>(k) == 0, "linear '", name(), "': ", name_of(g), " in mx reduces over ", what, "=", n,
                    ", which must be a multiple of ", k);
  }

  // Row `role` (0 X, 1 W, 2 dY) of the scaling table; training casts record their amax.
  fp8_scaling_slot slot(std::size_t role, bool record, std::uint64_t source = scaling_table::volatile_source) const noexcept {
    return {table_.get(), row0_ + role, record, source};
  }

  quant_request request(gemm_product g, bool operand_b, block_axis axis, operand_use use, fp8_scaling_slot fp8, std::uint32_t stream) const {
    const gemm_spec& s = recipe_.gemm(g);
    const operand_spec& o = operand_b ? s.b : s.a;
    quant_request r;
    r.spec = o;
    r.axis = axis;
    r.use = use;
    r.tag = use == operand_use::fprop_w || use == operand_use::dgrad_w ? mem_tag::quantized_weight : mem_tag::quantized_activation;
    r.fp8 = fp8;
    r.block = {s.hadamard, s.random_signs, s.seed, stream};
    return r;
  }

  // The GEMMs of backward: wgrad first (then the saved X and dY's wgrad copy go), then dgrad; the
  // dgrad copy of dY is made here from dy when the caller has not made it.
  void backward_from(qpair qdy, const quant_plan& p, const tensor* dy, tensor* dx, dtype dx_type) {
    if (p.columnwise_wanted) be_->gemm(gemm_product::wgrad, qdy.columnwise, x_wgrad_, weight_.grad, 1.0f, grad_beta(weight_));
    x_wgrad_.reset();
    qdy.columnwise.reset();
    if (dx) {
      if (!qdy.rowwise.defined()) qdy.rowwise = be_->quantize(*dy, p.rowwise);
      const std::size_t rows = qdy.rowwise.rows();
      const qtensor w = dgrad_weight();
      if (!dx->defined()) *dx = be_->alloc_uninitialized(rows, in_, dx_type, mem_tag::activation);
      be_->gemm(gemm_product::dgrad, qdy.rowwise, w, *dx);
    }
    if (lora_) lora_->backward(*be_, recipe_.high, *dy, dx);
    saved_ = false;
  }

  bool copies_per_gemm() const noexcept { return memory_.weight_copies_per_gemm && has_master(); }
  // A restored FP8 weight (no master) under weight copies per GEMM: the dgrad copy is the fprop
  // copy's transpose, made for each dgrad GEMM.
  bool transposes_per_gemm() const noexcept {
    return memory_.weight_copies_per_gemm && !has_master() && cache_.rowwise.defined() && cache_.rowwise.kind() == precision::fp8;
  }

  // The weight operands of fprop and dgrad: the cached copies, or made for this GEMM alone from
  // the same requests (the same bytes, W's amax recorded for the same version).
  qtensor fprop_weight(bool training) {
    if (copies_per_gemm()) return weight_copy(gemm_product::fprop, training);
    ensure_weight_copies(training);
    return cache_.rowwise;
  }
  qtensor dgrad_weight() {
    if (copies_per_gemm()) return weight_copy(gemm_product::dgrad, true);
    if (transposes_per_gemm()) return be_->transpose(cache_.rowwise, operand_use::dgrad_w, mem_tag::quantized_weight);
    if (!cache_.columnwise.defined()) ensure_weight_copies(true);  // set_memory switched to the cache after forward
    return cache_.columnwise;
  }
  qtensor weight_copy(gemm_product g, bool training) {
    ++weight_quantizations_;
    return be_->quantize(weight_.value, weight_request(g, training));
  }
  // fprop: the rowwise copy (N, K); dgrad: the columnwise copy, stored (K, N). The amax of W is
  // that of its value version: the table knows when W's scale may move.
  quant_request weight_request(gemm_product g, bool training) const {
    const fp8_scaling_slot s = slot(1, training, weight_.version + 1);
    const std::uint32_t stream = mix_stream(id_, 1, step_);
    quant_request r = g == gemm_product::fprop ? request(g, true, block_axis::rowwise, operand_use::fprop_w, s, stream)
                                               : request(g, true, block_axis::columnwise, operand_use::dgrad_w, s, stream);
    // The copies are read only while the weight's version is theirs (cache_fresh), or within one
    // GEMM, so a bf16 master may be its own bf16 copies: no bytes, no cast.
    r.may_alias_input = true;
    return r;
  }

  bool cache_fresh() const noexcept {
    if (!cache_.rowwise.defined()) return false;
    if (!has_master()) return true;  // quantized primary weights: the only copy there is
    if (cache_.version != weight_.version) return false;
    return !recipe_.fprop.b.is<fp8_spec>() || cache_.scale_version == table_->version(row0_ + 1);
  }

  void ensure_weight_copies(bool training) {
    if (cache_fresh()) return;
    detail::require(has_master(), "linear '", name(), "': the weight has no master copy and no quantized copy under recipe '",
                    recipe_.name, "' (restore it from the healing stash first)");
    const std::uint64_t scale_version = table_ ? table_->version(row0_ + 1) : 0;
    cache_ = {};  // free the stale copies first: old and new are never co-resident
    qpair both = be_->quantize_both(weight_.value, weight_request(gemm_product::fprop, training),
                                    weight_request(gemm_product::dgrad, training));
    cache_ = {std::move(both.rowwise), std::move(both.columnwise), weight_.version, scale_version};
    ++weight_quantizations_;
  }

  backend* be_ = nullptr;
  std::uint32_t id_ = 0;
  std::size_t in_ = 0, out_ = 0;
  parameter weight_;  // (N, K)
  recipe recipe_;
  weight_cache cache_;
  std::shared_ptr<scaling_table> table_;  // FP8 recipes: rows row0_ .. row0_ + 2 are X, W, dY
  std::size_t row0_ = 0;
  bool owns_table_ = false;
  qtensor x_wgrad_;  // saved wgrad copy of X
  bool saved_ = false;
  std::uint32_t saved_stream_ = 0, pending_stream_ = 0;
  std::uint64_t step_ = 0, calls_in_step_ = 0, weight_quantizations_ = 0;
  std::unique_ptr<lora_adapter> lora_;
  linear_memory memory_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
