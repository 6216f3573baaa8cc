// SPDX-License-Identifier: Apache-2.0
#pragma once
// Data parallelism over the ranks of an nn::communicator (communicator.hpp), backend-agnostic:
// the same code runs on ref::host_backend with rank threads (ref/nn/thread_communicator.hpp) and
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
// Agreement with one rank accumulating N K micro-batches (tests/nn/catch2_test_data_parallel.cpp):
// the micro-batches' losses and gradients are the same bits; what differs is the order of the fp32
// sums. A GEMM-produced weight gradient adds micro-batch products one at a time on one rank
// (beta = 1) and in rank order on N ranks with K = 1: the same order, the same bits. Gradients
// summed token by token (the embedding) or from double partials (norm gains) add the same terms in
// another order; each of the two results is within m u sum|t| of the exact sum (m additions, each
// rounding once, u = 2^-24, t the terms), so they differ by at most 2 m u sum|t|. ZeRO-1 reduces the
// same sums in the same order, so its gradients and, without clipping, its weights are the same
// bits as unsharded data parallelism; its norm differs in the last bits of an f64 (a sum of squared
// shard norms), which moves the clip factor as much when clipping is active.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/communicator.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/nn/parameter.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

enum class sharding : std::uint8_t { none, optimizer };

}  // namespace nn
template <>
struct enum_names<nn::sharding> {
  static constexpr const char* names[] = {"none", "optimizer"};
  static constexpr nn::sharding last = nn::sharding::optimizer;
};
namespace nn {

struct parallel_config {
  communicator* comm = nullptr;   // null: one rank
  std::size_t micro_batches = 1;  // per rank and step (gradient accumulation)
  sharding shard = sharding::none;
};

// Elements [offset, offset + rows cols) of `base` as a (rows, cols) tensor sharing its memory (the
// view keeps the allocation alive).
inline tensor view_of(const tensor& base, std::size_t offset, std::size_t rows, std::size_t cols) {
  detail::require(base.defined() && offset <= base.size() && rows * cols <= base.size() - offset, "view_of: ", rows, "x", cols,
                  " at ", offset, " does not fit a tensor of ", base.size(), " elements");
  auto keep = std::make_shared<tensor>(base);
  return tensor(base.type(), rows, cols, static_cast<char*>(base.data()) + offset * size_of(base.type()), std::move(keep));
}

inline constexpr std::size_t shard_alignment = 32;  // elements: the MX block

constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept { return (n + to - 1) / to * to; }

class data_parallel {
 public:
  data_parallel(model& m, const parallel_config& c) : m_(&m), c_(c) {
    detail::require(c.micro_batches >= 1, "data_parallel: micro_batches must be at least 1, got ", c.micro_batches);
    detail::check_enum(c.shard, sharding::optimizer, "sharding", "data_parallel");
    detail::require(c.shard == sharding::none || c.comm, "data_parallel: sharding '", name_of(c.shard), "' needs a communicator");
    if (!c.comm) return;
    backend& be = m.be();
    const std::size_t n = static_cast<std::size_t>(ranks());
    const std::size_t r = static_cast<std::size_t>(rank());
    for (std::vector<parameter*>& members : m.gradient_groups()) {
      group g;
      std::size_t total = 0;
      for (parameter* p : members)
        if (p->trainable && p->value.defined()) {
          if (!g.params.empty() && p->value.type() != g.params[0]->value.type())
            detail::fail("data_parallel: parameter '", p->name, "' is ", name_of(p->value.type()), ", its group's first is ",
                         name_of(g.params[0]->value.type()));
          g.params.push_back(p);
          g.offsets.push_back(total);
          total += round_up(p->value.size(), shard_alignment);
        }
      if (g.params.empty()) {
        groups_.push_back(std::move(g));
        continue;
      }
      const dtype type = g.params[0]->value.type();
      g.shard = round_up((total + n - 1) / n, shard_alignment);
      g.grads = be.alloc(1, n * g.shard, type, mem_tag::gradient);  // zeros: the padding stays 0
      for (std::size_t i = 0; i < g.params.size(); ++i) {
        parameter& p = *g.params[i];
        p.grad = view_of(g.grads, g.offsets[i], p.rows(), p.cols());
      }
      if (c.shard == sharding::optimizer) {
        g.values = be.alloc(1, n * g.shard, type, mem_tag::parameter);
        const std::size_t lo = r * g.shard, hi = lo + g.shard;
        for (std::size_t i = 0; i < g.params.size(); ++i) {
          parameter& p = *g.params[i];
          tensor v = view_of(g.values, g.offsets[i], p.rows(), p.cols());
          be.copy(p.value, v);
          p.value = v;
          const std::size_t a = std::max(lo, g.offsets[i]), b = std::min(hi, g.offsets[i] + p.value.size());
          if (a >= b) continue;
          parameter piece;
          piece.name = p.name + "[" + std::to_string(a - g.offsets[i]) + ":" + std::to_string(b - g.offsets[i]) + "]";
          piece.value = view_of(g.values, a, 1, b - a);
          piece.grad = view_of(g.grads, a, 1, b - a);
          piece.decay = p.decay;
          g.pieces.push_back(std::move(piece));
          g.piece_of.push_back(i);
          g.piece_begin.push_back(a - g.offsets[i]);
        }
      }
      groups_.push_back(std::move(g));
    }
    m.set_gradient_hook([this](std::size_t group) { on_gradients(group); });
  }
  ~data_parallel() {
    if (c_.comm) m_->set_gradient_hook(nullptr);
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
  bool sharded() const noexcept { return c_.comm && c_.shard == sharding::optimizer; }
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
    if (c_.comm) c_.comm->join();
  }
  // After the optimizer step: sharded weights gathered (every rank holds every updated weight),
  // every parameter's version moves (its quantized copies are stale).
  void finish_update() {
    if (!sharded()) return;
    const std::size_t r = static_cast<std::size_t>(rank());
    for (group& g : groups_) {
      if (g.params.empty()) continue;
      const comm_buffer all = buffer_of(g.values);
      c_.comm->all_gather({static_cast<char*>(all.data) + r * g.shard * size_of(all.type), g.shard, all.type}, all);
    }
    c_.comm->join();
    for (group& g : groups_)
      for (parameter* p : g.params) ++p->version;
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
  struct group {
    std::vector<parameter*> params;        // trainable, with a master, in gradient_groups() order
    std::vector<std::size_t> offsets;      // element offset of each in the flat buffers (multiples of 32)
    std::size_t shard = 0;                 // elements per rank (a multiple of 32)
    tensor grads;                          // (1, ranks x shard): every params[i].grad is a view of it
    tensor values;                         // sharded: (1, ranks x shard): every params[i].value is a view of it
    std::vector<parameter> pieces;         // sharded: this rank's part of each parameter it overlaps
    std::vector<std::size_t> piece_of, piece_begin;
  };

  void on_gradients(std::size_t index) {
    if (!reducing_ || index >= groups_.size()) return;
    group& g = groups_[index];
    if (g.params.empty()) return;
    for (parameter* p : g.params) materialize_grad(m_->be(), *p);  // a gradient the backward did not reach: zeros
    const comm_buffer all = buffer_of(g.grads);
    if (sharded()) {
      const std::size_t r = static_cast<std::size_t>(rank());
      c_.comm->reduce_scatter(all, {static_cast<char*>(all.data) + r * g.shard * size_of(all.type), g.shard, all.type}, reduce_op::sum);
    } else {
      c_.comm->all_reduce(all, all, reduce_op::sum);
    }
  }

  model* m_;
  parallel_config c_;
  std::vector<group> groups_;
  bool reducing_ = false;
};

}  // namespace nn
MXKIT_END_NAMESPACE
