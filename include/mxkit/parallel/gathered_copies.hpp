// SPDX-License-Identifier: Apache-2.0
#pragma once
// The mechanics of full sharding's quantized weight gather, which data_parallel.hpp calls from its
// group hook: send_weight_copies (this rank's slabs quantized, packed into a wire of bytes, the
// wire all-gathered) and, after the join, install_gathered_copies (the whole copies assembled and
// installed in the linears), both through the backend's copy gather (parallel/copy_gather.hpp).
// Apart from data_parallel, which decides when a group's weights move, and whether as copies.
//
// Gathering the weights as their quantized copies (parallel_config::gather_quantized, full
// sharding): where a linear's recipe quantizes its weight (MX or NVFP4 rounded to nearest, FP8 for
// both fprop and dgrad, or bf16 for both: the bf16 recipe, the bf16 first/last layers of a recipe,
// the LM head in bf16 high precision; linear::weight_copies_gatherable), the ranks gather the copies
// instead of the fp32 weight, and the fp32 weight is not gathered at all (norm gains, the embedding
// and other weights, native or of mixed kinds, are gathered as before). The group's layout makes
// that exact: such a weight starts on a multiple of 32 rows (32 x cols elements) and the shard is a
// multiple of every such 32-row slab, so each rank's piece of the weight is whole 32-row slabs.
// Before the group's forward each rank quantizes its slab into both copies (MX and NVFP4: the
// fprop rowwise copy and the dgrad columnwise copy, whose 32-row blocks and 16 x 16 tiles the slab
// keeps whole, NVFP4's with the whole weight's amax, reduce_whole_amaxes; FP8: the rowwise
// copy, with the table's scale, the same on every rank; bf16: the rowwise copy, rounded
// elementwise), the ranks all-gather the bytes (copy_gather::pack_copy, u8), and every rank
// assembles the whole copies (copy_gather::assemble_copy, parallel/copy_gather.hpp, the backend's
// copy_gatherer(); FP8's and bf16's dgrad copy is the rowwise one's transpose, backend::transpose)
// and installs them as the linear's cached copies: the bytes quantizing the gathered weight gives,
// so the results are the fp32 gather's bits. FP8's W amax is recorded per slab; the MAX reduction
// of the scaling table before the update (reduce_amax) makes it the whole weight's, as it does for
// every amax (bf16 and MX copies have no table). Per element gathered: MXFP4 2 x 17/32 bytes (both
// copies), NVFP4 2 x 9/16 (and 4 bytes a slab), MXFP8 2 x 33/32, FP8 1, bf16 2 (PyTorch FSDP2's
// bf16 gather), against 4 for fp32.
// Copies still current (a second micro-batch of the step) are not gathered again.
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/backend_checks.hpp>
#include <mxkit/nn/linear.hpp>
#include <mxkit/nn/operand.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/parallel/communicator.hpp>
#include <mxkit/parallel/copy_gather.hpp>
#include <mxkit/parallel/gradient_group.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// The backend's copy gather: there whenever data_parallel chose to gather a weight's copies.
inline copy_gather& copy_gatherer_of(backend& be) {
  copy_gather* gatherer = be.copy_gatherer();
  detail::require(gatherer != nullptr, "data_parallel: backend '", be.name(), "' has no copy gather");
  return *gatherer;
}

// Whether a weight's copies travel as the rowwise one only (FP8, bf16: the dgrad copy is its
// transpose), else both (MX).
inline bool rowwise_travels_alone(const quant_plan& p) { return backend::columnwise_is_transpose(p.rowwise.spec.kind()); }
// Wire bytes of parameter i's copies from `rows` rows: MX both copies, FP8 and bf16 the rowwise one.
inline std::size_t weight_copies_bytes(const quant_plan& p, std::size_t rows, std::size_t cols) {
  std::size_t n = copy_gather::copy_wire_bytes(p.rowwise, rows, cols);
  if (!rowwise_travels_alone(p)) n += copy_gather::copy_wire_bytes(p.columnwise, rows, cols);
  return n;
}

// Rank r's rows of parameter i (a view of its shard; undefined where it holds none).
inline tensor slab_values(const gradient_group& g, std::size_t i, std::size_t r) {
  const auto [first, count] = g.slab_of(i, r);
  return count ? view_of(g.shard_values, g.offsets[i] + first * g.cols[i] - r * g.shard, count, g.cols[i]) : tensor{};
}

// The whole weights' amaxes for their NVFP4 copies (copy_gather.hpp): each rank's slab amax
// (backend::copy_amax; 0 without a slab), one MAX all_reduce over the ranks for the group, set as
// the requests' tensor_amax. A copy that does not rotate quantizes the weight's own values, so
// both unrotated copies share one amax. The slabs are quantized after it, so the backend's stream
// waits for this reduction and, on a device, for the collectives called before it (join(mark)).
inline void reduce_whole_amaxes(gradient_group& g, const std::vector<std::size_t>& copied, backend& be, communicator& comm) {
  std::size_t slots = 0;
  const auto shares_rowwise_amax = [](const quant_plan& p) { return !p.rowwise.block.hadamard && !p.columnwise.block.hadamard; };
  for (const quant_plan& p : g.copy_plans)
    if (has_tensor_scale(p.rowwise) || has_tensor_scale(p.columnwise))
      slots += has_tensor_scale(p.rowwise) && has_tensor_scale(p.columnwise) && !shares_rowwise_amax(p) ? 2 : 1;
  if (slots == 0) return;
  tensor amaxes = be.alloc(1, slots, dtype::f32, mem_tag::quantized_weight);  // zeros: a rank without a slab adds nothing
  const std::size_t r = static_cast<std::size_t>(comm.rank());
  std::size_t k = 0;
  for (std::size_t j = 0; j < copied.size(); ++j) {
    quant_plan& p = g.copy_plans[j];
    const tensor slab = slab_values(g, copied[j], r);
    tensor shared;
    for (quant_request* q : {&p.rowwise, &p.columnwise}) {
      if (!has_tensor_scale(*q)) continue;
      if (shared.defined() && shares_rowwise_amax(p)) {
        q->tensor_amax = shared;
        continue;
      }
      q->tensor_amax = shared = view_of(amaxes, k++, 1, 1);
      if (slab.defined()) be.copy_amax(slab, *q, q->tensor_amax);
    }
  }
  comm.all_reduce(amaxes, reduce_op::max);
  comm.join(comm.mark());
}

// This rank's slabs of the weights in `copied`, quantized and packed at its chunk of a new wire,
// all-gathered (every rank sends the largest rank's byte count; the rest of a chunk is unread).
// record_amax (a training forward): a rank without a slab of an FP8 weight notes W's amax source
// as the others do, so every rank's table decides its scale versions alike (its amax comes
// through the MAX reduction). A backward's re-gather records nothing: the forward of this weight
// version recorded the same slabs' amaxes.
inline void send_weight_copies(gradient_group& g, std::vector<std::size_t> copied, bool record_amax, backend& be, communicator& comm) {
  copy_gather& gatherer = copy_gatherer_of(be);
  const std::size_t n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  g.copy_plans.clear();
  for (std::size_t i : copied) g.copy_plans.push_back(g.linears[i]->weight_plan(record_amax));
  reduce_whole_amaxes(g, copied, be, comm);
  g.chunk = 0;
  for (std::size_t k = 0; k < n; ++k) {
    std::size_t bytes = 0;
    for (std::size_t j = 0; j < copied.size(); ++j) bytes += weight_copies_bytes(g.copy_plans[j], g.slab_of(copied[j], k).second, g.cols[copied[j]]);
    g.chunk = std::max(g.chunk, bytes);
  }
  g.wire = be.alloc_uninitialized(1, (n * g.chunk + 3) / 4, dtype::f32, mem_tag::quantized_weight);
  std::size_t at = r * g.chunk;
  for (std::size_t j = 0; j < copied.size(); ++j) {
    const std::size_t i = copied[j];
    const quant_plan& p = g.copy_plans[j];
    const std::size_t count = g.slab_of(i, r).second;
    if (count == 0) {
      if (p.rowwise.spec.kind() == precision::fp8 && p.rowwise.fp8.record_amax) p.rowwise.fp8.table->note_amax(p.rowwise.fp8.row, p.rowwise.fp8.source);
      continue;
    }
    const tensor slab = slab_values(g, i, r);
    if (rowwise_travels_alone(p)) {
      gatherer.pack_copy(be.quantize(slab, p.rowwise), g.wire, at);
    } else {
      const qpair q = be.quantize_both(slab, p.rowwise, p.columnwise);
      gatherer.pack_copy(q.rowwise, g.wire, at);
      gatherer.pack_copy(q.columnwise, g.wire, at + copy_gather::copy_wire_bytes(p.rowwise, count, g.cols[i]));
    }
    at += weight_copies_bytes(p, count, g.cols[i]);
  }
  char* wire = static_cast<char*>(g.wire.data());
  comm.all_gather({wire + r * g.chunk, g.chunk, comm_type::u8}, {wire, n * g.chunk, comm_type::u8});
  g.copied = std::move(copied);
}

// After the join: the whole copies assembled from the ranks' slabs, installed in the linears.
inline void install_gathered_copies(gradient_group& g, backend& be, communicator& comm) {
  if (g.copied.empty()) return;
  copy_gather& gatherer = copy_gatherer_of(be);
  const std::size_t n = static_cast<std::size_t>(comm.size());
  std::vector<std::size_t> at(n);
  for (std::size_t k = 0; k < n; ++k) at[k] = k * g.chunk;
  for (std::size_t j = 0; j < g.copied.size(); ++j) {
    const std::size_t i = g.copied[j];
    const quant_plan& p = g.copy_plans[j];
    const bool alone = rowwise_travels_alone(p);
    std::vector<copy_slab> row_slabs, col_slabs;
    for (std::size_t k = 0; k < n; ++k) {
      const auto [first, count] = g.slab_of(i, k);
      if (count == 0) continue;
      row_slabs.push_back({at[k], first, count});
      if (!alone) col_slabs.push_back({at[k] + copy_gather::copy_wire_bytes(p.rowwise, count, g.cols[i]), first, count});
      at[k] += weight_copies_bytes(p, count, g.cols[i]);
    }
    qtensor row = gatherer.assemble_copy(p.rowwise, g.rows[i], g.cols[i], g.wire, row_slabs);
    qtensor col = alone ? be.transpose(row, operand_use::dgrad_w, mem_tag::quantized_weight)
                        : gatherer.assemble_copy(p.columnwise, g.rows[i], g.cols[i], g.wire, col_slabs);
    g.linears[i]->install_weight_copies(std::move(row), std::move(col));
  }
  g.wire.reset();
  g.copied.clear();
  g.copy_plans.clear();
}

}  // namespace nn
MXKIT_END_NAMESPACE
