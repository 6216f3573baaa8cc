// SPDX-License-Identifier: Apache-2.0
#pragma once
// Data parallelism over the ranks of an nn::communicator (communicator.hpp), backend-agnostic:
// the same code runs on ref::host_backend with rank threads (parallel/thread_communicator.hpp) and
// on the device backend with NCCL/RCCL.
//
// A step on N ranks with K micro-batches each (trainer, training.hpp):
//   micro-batch j = r K + k of the step (rank r, its k-th): batch number step N K + j of the
//       loader, Philox call j of every linear (model::set_micro_batch); so N ranks x K micro-batches
//       of b sequences see the samples, and draw the bits, of one rank with N K micro-batches;
//   forward, backward; the gradients add up over the rank's K micro-batches (gradient
//       accumulation). In the last micro-batch's backward, model::backward's hook starts each
//       gradient group's reduction (the final norm and head first, then every layer, the embedding
//       last) as soon as the group's gradients are complete, on the communicator (its own stream on
//       a device: overlapped with the rest of backward); one flat buffer per group, so one
//       collective per group (a bucket);
//   join(); the optimizer works on the sum of N K micro-batch gradients with divisor N K
//       (adamw::set_distribution): the norm of the mean gradient is global, clipping compares it
//       with clip_norm, and the factor 1/(N K) rides on the clip factor into the update;
//   FP8 delayed scaling: one MAX all_reduce of the scaling table's amax history before the fused
//       update (TransformerEngine's amax reduction group), so every rank computes the same scales.
//       Past columns are equal on every rank already; the whole (rows, H) history is reduced
//       because column 0 is not contiguous (rows x H x 4 bytes: 1.5 MB for the 8B model's 384 rows
//       at H = 1024). MX block scales are computed per block from local data and need nothing.
//   The logged loss is the all-reduced sum of every micro-batch's mean loss / (N K).
//
// Sharding (ZeRO-1, Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models"): each group's flat gradient buffer is reduce-scattered instead of all-reduced;
// rank r owns elements [r S, (r + 1) S) of the group (S a multiple of 32 elements, every parameter
// starting on a multiple of 32 elements: a shard never splits a 32-block of a row); the optimizer
// keeps AdamW moments for that shard only and updates that shard of the fp32 weights (views into
// one flat weight buffer per group), then the weights are all-gathered in place. The gradient norm
// combines the ranks' shard norms (an all_gather of N f64 norms, then the norm of those).
//
// The gradients' reduction in bf16 (parallel_config::reduce_dtype, FSDP2's reduce_dtype): the
// group's f32 gradients are rounded into a bf16 buffer the collective reads (and, unsharded or
// ZeRO-1, writes in place), and the result is widened into the f32 gradients once a join covers
// it (release_reduced); under full sharding the whole f32 gradients go as soon as they are rounded.
//
// Full sharding (ZeRO-3 / FSDP): a rank keeps its shard of each group's fp32 weights and reduced
// gradients; a group's weights are all-gathered before its forward, and before its backward only
// the parameters the backward reads (model::backward_reads_value: norm gains; a linear weight
// whose cached quantized copies serve its dgrad is not read), broadcast from their owners.
// The next group's gather is called before this group's work (the prefetch), and a group's work
// waits for its own gather only (communicator::join(mark)), not for the gradient reduction of the
// group before it, which is called later and runs behind this group's backward. Where a linear's
// recipe quantizes its weight, the ranks gather its quantized copies instead of the fp32 weight
// (parallel_config::gather_quantized; how, and why it is exact: parallel/gathered_copies.hpp).
// The flat layout of a group's buffers: parallel/gradient_group.hpp; the settings:
// parallel/parallel_config.hpp.
//
// Resharding after forward (parallel_config::reshard_after_forward, full sharding; FSDP2's
// reshard_after_forward=True): the copies otherwise stay in every linear's cache from a layer's
// forward to its backward, so all layers' copies are resident at the start of backward. With it on,
// a group's linears drop their cached weight copies at after_forward and after_backward (the final
// norm and head group keeps them after forward: its backward follows at once), and the group's
// backward gathers them again: the copies' bytes where they are gathered (send_weight_copies,
// installed at the join as forward does, the prefetch of the next group alike), else the fp32
// weight, which the linear quantizes again (linear::backward_reads_master: its cache is gone). The
// re-gathered copies are the forward's bytes (same weight version and scale); the re-gather records
// no FP8 amax (forward recorded the same slabs'), and the fp32 path's quantization records W's amax
// of the same version again, a max with itself: the scales do not move. Activation recomputation
// reads the copies installed for backward; each micro-batch's forward gathers again. The cost: the
// copy-gathered bytes twice per micro-batch and step (forward and backward).
//
// Construction from a model built with deferred memory (model_build_hooks::defer_memory): each
// rank fills only what it keeps from the parameters' counter-based initializers (parameter.hpp),
// so no rank makes or holds the whole model; the values are the eager construction's bits.
//
// Agreement with one rank accumulating N K micro-batches (tests/parallel/catch2_test_data_parallel.cpp):
// the micro-batches' losses and gradients are the same bits; what differs is the order of the fp32
// sums. A GEMM-produced weight gradient adds micro-batch products one at a time on one rank
// (beta = 1) and in rank order on N ranks with K = 1: the same order, the same bits. Gradients
// summed token by token (the embedding) or from double partials (norm gains) add the same terms in
// another order; each of the two results is within m u sum|t| of the exact sum (m additions, each
// rounding once, u = 2^-24, t the terms), so they differ by at most 2 m u sum|t|. ZeRO-1 reduces the
// same sums in the same order, so its gradients and, without clipping, its weights are the same
// bits as unsharded data parallelism; its norm differs in the last bits of an f64 (a sum of squared
// shard norms), which moves the clip factor as much when clipping is active.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/nn/parameter.hpp>
#include <mxkit/parallel/communicator.hpp>
#include <mxkit/parallel/copy_gather.hpp>
#include <mxkit/parallel/gathered_copies.hpp>
#include <mxkit/parallel/gradient_group.hpp>
#include <mxkit/parallel/parallel_config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

class data_parallel {
 public:
  data_parallel(model& m, const parallel_config& c) : m_(&m), c_(c) {
    detail::require(c.micro_batches >= 1, "data_parallel: micro_batches must be at least 1, got ", c.micro_batches);
    detail::check_enum(c.shard, sharding::full, "sharding", "data_parallel");
    detail::require(c.shard == sharding::none || c.comm, "data_parallel: sharding '", name_of(c.shard), "' needs a communicator");
    detail::require(c.reduce_dtype == dtype::f32 || c.reduce_dtype == dtype::bf16, "data_parallel: reduce_dtype must be f32 or bf16, got ",
                    name_of(c.reduce_dtype));
    backend& be = m.be();
    // A model built with deferred memory (model_build_hooks::defer_memory): unsharded, or frozen,
    // parameters get their whole memory here; sharded groups get what the rank keeps, below.
    // Normal fills use this rank's part of the host's threads.
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(ranks()));
    for (parameter* p : m.parameters())
      if (p->deferred() && (c.shard == sharding::none || !c.comm || !p->trainable)) allocate_deferred(be, *p, threads);
    if (!c.comm) return;
    const std::size_t n = static_cast<std::size_t>(ranks());
    const std::size_t r = static_cast<std::size_t>(rank());
    bool gather_initial = false;  // ZeRO-1 from deferred memory: every rank's shard all-gathered
    for (std::vector<parameter*>& members : m.gradient_groups()) {
      group g;
      for (parameter* p : members)
        if (p->trainable && (p->value.defined() || p->deferred())) {
          if (!g.params.empty() && p->value.type() != g.params[0]->value.type())
            detail::fail("data_parallel: parameter '", p->name, "' is ", name_of(p->value.type()), ", its group's first is ",
                         name_of(g.params[0]->value.type()));
          if (!g.params.empty() && p->deferred() != g.params[0]->deferred())
            detail::fail("data_parallel: parameter '", p->name, "' and '", g.params[0]->name,
                         "' of one group are not both built with deferred memory");
          g.params.push_back(p);
          g.weight_of.push_back(m.linear_of(*p));
          g.rows.push_back(p->rows());
          g.cols.push_back(p->cols());
        }
      // The flat layout: parameters one after another from multiples of 32 elements; with copies
      // gathered, a linear weight of whole 32-row blocks from a multiple of its 32-row slab, and
      // the shard a multiple of every such slab, unless that pads the group by more than a quarter
      // of the plain layout (small models on many ranks; the 8B shape on 4 ranks: under 1 %): the
      // plain layout then, and the fp32 gather. Recipes set later keep the layout.
      std::size_t total = 0, slab = shard_alignment;
      const auto lay_out = [&](bool slabs) {
        total = 0;
        slab = shard_alignment;
        g.offsets.clear();
        g.linears.assign(g.params.size(), nullptr);
        for (std::size_t i = 0; i < g.params.size(); ++i) {
          linear* l = slabs ? m.linear_of(*g.params[i]) : nullptr;
          if (l && !l->weight_copies_gatherable()) l = nullptr;  // (the recipe at construction: high-precision weights stay plain)
          const std::size_t rows_slab = shard_alignment * g.cols[i];  // whole columnwise blocks of any format
          if (l && g.rows[i] % shard_alignment == 0 && slab <= (std::size_t{1} << 40) / rows_slab) {
            total = round_up(total, rows_slab);
            slab = std::lcm(slab, rows_slab);
            g.linears[i] = l;
          }
          g.offsets.push_back(total);
          total += round_up(g.rows[i] * g.cols[i], shard_alignment);
        }
      };
      const auto padded = [&] { return n * round_up((total + n - 1) / n, slab); };  // the group's elements on all ranks
      lay_out(false);
      if (c.shard == sharding::full && c.gather_quantized) {
        const std::size_t plain = padded();
        lay_out(true);
        if (4 * padded() > 5 * plain) lay_out(false);
      }
      if (g.params.empty()) {
        groups_.push_back(std::move(g));
        continue;
      }
      const dtype type = g.params[0]->value.type();
      const bool deferred = g.params[0]->deferred();
      g.shard = round_up((total + n - 1) / n, slab);
      const std::size_t lo = r * g.shard, hi = lo + g.shard;
      if (!deferred || c.shard != sharding::full) {
        g.grads = be.alloc(1, n * g.shard, type, mem_tag::gradient);  // zeros: the padding stays 0
        bind_grads(g);
      }
      if (deferred) {
        // Only this rank's elements [lo, hi) are made: full sharding keeps them as its shard;
        // ZeRO-1 writes them into its part of the whole buffer and all-gathers the others'.
        if (c.shard == sharding::full) {
          g.shard_values = be.alloc(1, g.shard, type, mem_tag::parameter);  // zeros: the padding stays 0
          write_initial_shard(g, g.shard_values, lo, threads);
        } else {
          g.values = be.alloc(1, n * g.shard, type, mem_tag::parameter);
          write_initial_shard(g, view_of(g.values, lo, 1, g.shard), lo, threads);
          const comm_buffer all = buffer_of(g.values);
          c_.comm->all_gather({static_cast<char*>(all.data) + lo * size_of(all.type), g.shard, all.type}, all);
          gather_initial = true;
          for (std::size_t i = 0; i < g.params.size(); ++i) g.params[i]->value = view_of(g.values, g.offsets[i], g.rows[i], g.cols[i]);
        }
      } else if (c.shard != sharding::none) {
        g.values = be.alloc(1, n * g.shard, type, mem_tag::parameter);
        for (std::size_t i = 0; i < g.params.size(); ++i) {
          parameter& p = *g.params[i];
          tensor v = view_of(g.values, g.offsets[i], p.rows(), p.cols());
          be.copy(p.value, v);
          p.value = v;
        }
      }
      if (c.shard == sharding::full) {  // this rank keeps its shard of the weights and of the reduced gradients only
        if (!deferred) {
          g.shard_values = be.alloc(1, g.shard, type, mem_tag::parameter);
          be.copy(view_of(g.values, lo, 1, g.shard), g.shard_values);
        }
        g.shard_grads = be.alloc(1, g.shard, type, mem_tag::gradient);
        release_weights(g);
        release_grads(g);
      }
      for (std::size_t i = 0; c.shard != sharding::none && i < g.params.size(); ++i) {
        parameter& p = *g.params[i];
        const std::size_t size = g.rows[i] * g.cols[i];
        const std::size_t a = std::max(lo, g.offsets[i]), b = std::min(hi, g.offsets[i] + size);
        if (a >= b) continue;
        parameter piece;
        piece.name = p.name + "[" + std::to_string(a - g.offsets[i]) + ":" + std::to_string(b - g.offsets[i]) + "]";
        piece.value = c.shard == sharding::full ? view_of(g.shard_values, a - lo, 1, b - a) : view_of(g.values, a, 1, b - a);
        piece.grad = c.shard == sharding::full ? view_of(g.shard_grads, a - lo, 1, b - a) : view_of(g.grads, a, 1, b - a);
        piece.decay = p.decay;
        g.pieces.push_back(std::move(piece));
        g.piece_of.push_back(i);
        g.piece_begin.push_back(a - g.offsets[i]);
      }
      groups_.push_back(std::move(g));
    }
    if (gather_initial) c_.comm->join();
    m.set_group_hook([this](group_event e, std::size_t group) { on_group(e, group); });
  }
  ~data_parallel() {
    if (c_.comm) m_->set_group_hook(nullptr);
  }
  data_parallel(const data_parallel&) = delete;
  data_parallel& operator=(const data_parallel&) = delete;

  int rank() const noexcept { return c_.comm ? c_.comm->rank() : 0; }
  int ranks() const noexcept { return c_.comm ? c_.comm->size() : 1; }
  std::size_t micro_batches() const noexcept { return c_.micro_batches; }
  // Micro-batches whose gradients a step sums: the optimizer's divisor.
  std::size_t global_micro_batches() const noexcept { return static_cast<std::size_t>(ranks()) * c_.micro_batches; }
  // Micro-batch k of this rank within the step (its loader batch and Philox call index).
  std::size_t micro_batch_index(std::size_t k) const noexcept { return static_cast<std::size_t>(rank()) * c_.micro_batches + k; }
  // The optimizer works on shards (ZeRO-1 or full sharding).
  bool sharded() const noexcept { return c_.comm && c_.shard != sharding::none; }
  bool fully_sharded() const noexcept { return c_.comm && c_.shard == sharding::full; }
  communicator* comm() const noexcept { return c_.comm; }
  const parallel_config& config() const noexcept { return c_; }

  // The parameters the optimizer updates: the model's trainable ones, or this rank's pieces of
  // them (sharded: views of the flat buffers; their names say the element range).
  std::vector<parameter*> optimizer_parameters() {
    if (!sharded()) return m_->trainable_parameters();
    std::vector<parameter*> out;
    for (group& g : groups_)
      for (parameter& p : g.pieces) out.push_back(&p);
    return out;
  }

  // Set before each micro-batch's backward: the last one's backward reduces the gradients.
  void set_reducing(bool last_micro_batch) noexcept { reducing_ = last_micro_batch; }
  // After the last backward: every reduction is visible to what the backend runs next.
  void finish_gradients() {
    if (!c_.comm) return;
    c_.comm->join();
    release_reduced();
  }
  // After the optimizer step: sharded weights gathered (every rank holds every updated weight),
  // every parameter's version moves (its quantized copies are stale).
  // (Full sharding: the next forward gathers them.)
  void finish_update() {
    if (!sharded()) return;
    if (!fully_sharded()) {
      const std::size_t r = static_cast<std::size_t>(rank());
      for (group& g : groups_) {
        if (g.params.empty()) continue;
        const comm_buffer all = buffer_of(g.values);
        c_.comm->all_gather({static_cast<char*>(all.data) + r * g.shard * size_of(all.type), g.shard, all.type}, all);
      }
      c_.comm->join();
    }
    for (group& g : groups_)
      for (parameter* p : g.params) ++p->version;
  }
  // Full sharding: every group's weights gathered (checkpoint loading, evaluation of a whole model
  // on the host); release_all(true) keeps what was written into them, as this rank's shard.
  void gather_all() {
    if (!fully_sharded()) return;
    for (group& g : groups_) gather(g, gather_for::whole);
    c_.comm->join();
  }
  void release_all(bool keep_written) {
    if (!fully_sharded()) return;
    const std::size_t lo = static_cast<std::size_t>(rank());
    for (group& g : groups_) {
      if (!g.values.defined()) {  // not gathered, or only some parameters (for a backward)
        release_weights(g);
        continue;
      }
      if (keep_written) m_->be().copy(view_of(g.values, lo * g.shard, 1, g.shard), g.shard_values);
      release_weights(g);
    }
  }
  // Before update_scales: every rank's amaxes, max-combined.
  void reduce_amax() {
    if (!c_.comm || !m_->scaling()) return;
    c_.comm->all_reduce(m_->scaling()->history(), reduce_op::max);
    c_.comm->join();
  }
  // The loss sum of every rank (a logging step).
  void reduce_loss(tensor& loss_sum) {
    if (!c_.comm) return;
    c_.comm->all_reduce(loss_sum, reduce_op::sum);
    c_.comm->join();
  }

  // Sharded: this rank's pieces, by group (checkpoints).
  struct piece_ref {
    parameter* whole;
    parameter* piece;
    std::size_t begin;  // first element of the piece within the whole parameter
  };
  std::vector<piece_ref> pieces() {
    std::vector<piece_ref> out;
    for (group& g : groups_)
      for (std::size_t i = 0; i < g.pieces.size(); ++i) out.push_back({g.params[g.piece_of[i]], &g.pieces[i], g.piece_begin[i]});
    return out;
  }

 private:
  using group = gradient_group;
  enum class gather_for : std::uint8_t { forward, backward, whole };

  // Elements [lo, lo + dst.size()) of the group's flat buffer, from its deferred parameters'
  // initializers (the padding between parameters is left as it is: zeros).
  void write_initial_shard(const group& g, tensor dst, std::size_t lo, unsigned threads) {
    const std::size_t hi = lo + dst.size();
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      const std::size_t a = std::max(lo, g.offsets[i]), b = std::min(hi, g.offsets[i] + g.rows[i] * g.cols[i]);
      if (a < b) write_initial_values(m_->be(), *g.params[i], view_of(dst, a - lo, 1, b - a), a - g.offsets[i], threads);
    }
  }
  void bind_grads(group& g) {
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      parameter& p = *g.params[i];
      p.grad = view_of(g.grads, g.offsets[i], g.rows[i], g.cols[i]);
    }
  }
  void release_grads(group& g) noexcept {
    for (parameter* p : g.params) p->grad.reset();
    g.grads.reset();
  }
  // The reductions the join of `joined` covered (all of them after a full join): a narrowed one's
  // result widened into the gradients the optimizer reads; under full sharding the whole gradients
  // freed.
  void release_reduced(std::optional<communicator::collective_mark> joined = std::nullopt) {
    std::erase_if(reduced_, [&](reduction& r) {
      if (joined && !(r.called <= *joined)) return false;
      if (r.wire.defined()) m_->be().copy(r.result, r.into);  // bf16 to f32: exact
      if (fully_sharded()) release_grads(groups_[r.group]);
      return true;
    });
  }
  void release_weights(group& g) noexcept {
    for (parameter* p : g.params) p->value.reset();
    g.values.reset();
    g.gathered = false;
  }
  // Resharding after forward: the group's linears drop their cached weight copies (the next pass
  // over the group gathers them again).
  void release_copies(group& g) noexcept {
    if (!c_.reshard_after_forward) return;
    for (linear* l : g.weight_of)
      if (l) l->release_weight_copies();
  }
  // Full sharding: the group's weights from every rank's shard (an all_gather into a new buffer;
  // visible after the next join()). Nothing if they are here already (prefetched).
  // For backward, only the parameters whose values the backward reads (model::backward_reads_value:
  // the norm gains; a linear weight whose forward-made quantized copies serve dgrad is not read):
  // each from the rank(s) whose shard holds it (a broadcast per owner), or nothing at all (the
  // embedding). The copies forward made are the bytes a fresh quantization of the gathered weight
  // gives (the weight's version has not moved), so the results are the full gather's bits.
  // For forward, a weight whose copies are gathered is not gathered itself: its copies are, unless
  // the linear's cached ones are current (send_weight_copies). For backward the same: current unless
  // resharding after forward dropped them; then the copies are sent again (recording no amax) and
  // installed at the join. A weight without gathered copies whose cache was dropped is read by
  // backward (backward_reads_value) and gathered in fp32.
  void gather(group& g, gather_for purpose) {
    if (g.params.empty() || g.gathered) return;
    g.gathered = true;
    std::vector<bool> read(g.params.size(), true);
    std::vector<std::size_t> copied;
    bool all = true;
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      if (purpose == gather_for::backward) read[i] = m_->backward_reads_value(*g.params[i]);
      if (purpose != gather_for::whole && gathers_copies(g, i)) {
        read[i] = false;
        if (g.linears[i]->backward_reads_master()) copied.push_back(i);  // else its cached copies are current
      }
      all = all && read[i];
    }
    if (!copied.empty()) send_weight_copies(g, std::move(copied), purpose == gather_for::forward && m_->training_forward(), m_->be(), *c_.comm);
    backend& be = m_->be();
    if (all) {
      g.values = be.alloc_uninitialized(1, static_cast<std::size_t>(ranks()) * g.shard, g.shard_values.type(), mem_tag::parameter);
      c_.comm->all_gather(buffer_of(g.shard_values), buffer_of(g.values));
      for (std::size_t i = 0; i < g.params.size(); ++i) g.params[i]->value = view_of(g.values, g.offsets[i], g.rows[i], g.cols[i]);
      g.ready = c_.comm->mark();
      return;
    }
    const std::size_t r = static_cast<std::size_t>(rank());
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      if (!read[i]) continue;
      parameter& p = *g.params[i];
      p.value = be.alloc_uninitialized(g.rows[i], g.cols[i], g.shard_values.type(), mem_tag::parameter);
      const std::size_t begin = g.offsets[i], end = begin + g.rows[i] * g.cols[i];
      for (std::size_t owner = begin / g.shard; owner * g.shard < end; ++owner) {  // ranks whose shard holds part of p
        const std::size_t a = std::max(begin, owner * g.shard), b = std::min(end, (owner + 1) * g.shard);
        tensor part = view_of(p.value, a - begin, 1, b - a);
        if (owner == r) be.copy(view_of(g.shard_values, a - owner * g.shard, 1, b - a), part);
        c_.comm->broadcast(buffer_of(part), static_cast<int>(owner));
      }
    }
    g.ready = c_.comm->mark();
  }

  bool gathers_copies(const group& g, std::size_t i) const {
    const copy_gather* gatherer = m_->be().copy_gatherer();
    if (!c_.gather_quantized || !g.linears[i] || !gatherer || !gatherer->gathers_copies() || !g.linears[i]->weight_copies_gatherable())
      return false;
    return g.linears[i]->current_recipe().fprop.b.visit(overloaded{
        [&](const fp8_spec&) { return c_.gather_quantized_fp8; },
        [&](bf16_spec) { return c_.gather_quantized_bf16; },
        [](const block_scaled_spec&) { return true; },
        [](native_spec) { return true; },  // (weight_copies_gatherable refuses native copies first)
    });
  }
  void on_group(group_event e, std::size_t index) {
    if (index >= groups_.size()) return;
    group& g = groups_[index];
    if (g.params.empty()) return;
    const bool full = fully_sharded();
    switch (e) {
      case group_event::before_forward:
      case group_event::before_backward: {
        if (!full) return;
        const gather_for purpose = e == group_event::before_forward ? gather_for::forward : gather_for::backward;
        gather(g, purpose);
        // Only the group's own collectives: in backward the previous group's gradient reduction,
        // called after this group's prefetch, goes on behind this group's backward.
        if (c_.overlap_reductions) c_.comm->join(g.ready);
        else c_.comm->join();
        install_gathered_copies(g, m_->be(), *c_.comm);
        if (e == group_event::before_backward) {
          // The reductions the join covered are done for what the backend runs from here on: the
          // whole gradients they read can go before this group's are made, so backward holds at
          // most two groups' (the previous group's, still being reduced, and this one's).
          release_reduced(c_.overlap_reductions ? std::optional(g.ready) : std::nullopt);
          if (!g.grads.defined()) {  // zeros: the padding stays 0
            g.grads = m_->be().alloc(1, static_cast<std::size_t>(ranks()) * g.shard, g.shard_values.type(), mem_tag::gradient);
            bind_grads(g);
          }
        }
        // Prefetch the group that runs next (forward: index + 1, backward: index - 1), overlapped
        // with this group's work on a device communicator's stream.
        const std::size_t next = e == group_event::before_forward ? index + 1 : index - 1;
        if (next < groups_.size()) gather(groups_[next], purpose);
        return;
      }
      case group_event::after_forward:
        if (!full) return;
        if (index + 1 < groups_.size()) release_copies(g);  // (the head group's backward follows at once)
        release_weights(g);
        return;
      case group_event::after_backward: break;
    }
    reduction red{index, {}, {}, {}, {}};
    if (reducing_) {
      backend& be = m_->be();
      for (parameter* p : g.params) materialize_grad(be, *p);  // a gradient the backward did not reach: zeros
      const std::size_t r = static_cast<std::size_t>(rank());
      // reduce_dtype narrower than the gradients: the collective reads and writes a rounded copy
      // (the wire), and its result is widened into `into` once a join covers it (release_reduced).
      const bool narrowed = c_.reduce_dtype != g.grads.type();
      tensor into = full ? g.shard_grads : sharded() ? view_of(g.grads, r * g.shard, 1, g.shard) : g.grads;
      if (narrowed) {
        red.wire = be.alloc_uninitialized(1, g.grads.size(), c_.reduce_dtype, mem_tag::gradient);
        be.copy(g.grads, red.wire);  // rounded to nearest even
        red.result = full ? be.alloc_uninitialized(1, g.shard, c_.reduce_dtype, mem_tag::gradient)
                          : sharded() ? view_of(red.wire, r * g.shard, 1, g.shard) : red.wire;
        red.into = into;
        if (full) release_grads(g);  // the collective reads the wire: the whole f32 gradients can go now
      }
      const comm_buffer all = buffer_of(narrowed ? red.wire : g.grads);
      const comm_buffer out = buffer_of(narrowed ? red.result : into);  // in place within `all` unless fully sharded
      if (sharded()) c_.comm->reduce_scatter(all, out, reduce_op::sum);
      else c_.comm->all_reduce(all, out, reduce_op::sum);
    }
    if (full) {
      release_copies(g);
      release_weights(g);
    }
    // Freed (full sharding) or widened (a narrowed reduction) after a join covers the reduction: a
    // device may still read them.
    if (reducing_ && (full || red.wire.defined())) {
      red.called = c_.comm->mark();
      reduced_.push_back(std::move(red));
    }
  }

  model* m_;
  parallel_config c_;
  std::vector<group> groups_;
  bool reducing_ = false;
  struct reduction {
    std::size_t group;
    communicator::collective_mark called;  // after its collective
    tensor wire;    // reduce_dtype narrower than the gradients: the rounded whole gradients the collective reads
    tensor result;  // the collective's output (this rank's chunk of the wire, or its own buffer under full sharding)
    tensor into;    // the f32 gradients the result is widened into
  };
  // Reductions waiting for a join: full sharding's (whole gradients freed then), and narrowed
  // ones (their results widened then).
  std::vector<reduction> reduced_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
