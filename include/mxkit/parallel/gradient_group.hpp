// SPDX-License-Identifier: Apache-2.0
#pragma once
// One gradient group of data parallelism (parallel/data_parallel.hpp) laid out flat across the
// ranks: its parameters one after another from multiples of 32 elements (a linear weight whose
// copies are gathered from a multiple of its 32-row slab), one buffer each for the gradients and
// the weights, rank r owning elements [r shard, (r + 1) shard); what a rank keeps of them under
// each sharding, the optimizer's pieces, and under full sharding the quantized copies on their way
// (parallel/gathered_copies.hpp). Apart from data_parallel: the layout and its buffers are what
// the gathers and the copies read; data_parallel decides when each moves.
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include <mxkit/nn/linear.hpp>
#include <mxkit/nn/operand.hpp>
#include <mxkit/nn/parameter.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/parallel/communicator.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// Elements every parameter's offset and every shard is a multiple of: every format's block size
// (common_block_size, 32 while the formats are MX), so no block of a flat buffer spans two shards.
inline constexpr std::size_t shard_alignment = static_cast<std::size_t>(common_block_size);

constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept { return (n + to - 1) / to * to; }

// One group (model::gradient_groups(): the embedding, each layer, the final norm and head): its
// layout, its buffers and what this rank keeps of them.
struct gradient_group {
  std::vector<parameter*> params;        // trainable, with a master, in gradient_groups() order
  std::vector<std::size_t> offsets;      // element offset of each in the flat buffers (multiples of 32)
  std::vector<std::size_t> rows, cols;   // each parameter's shape (full sharding frees the tensors)
  std::size_t shard = 0;                 // elements per rank (a multiple of 32)
  tensor grads;                          // (1, ranks x shard): every params[i].grad is a view of it
  tensor values;                         // sharded: (1, ranks x shard): every params[i].value is a view of it
                                         // (full sharding: only while the group is gathered)
  tensor shard_values, shard_grads;      // full sharding: (1, shard) each, this rank's
  bool gathered = false;                 // full sharding: gather() called since the last release
  communicator::collective_mark ready;   // full sharding: after gather()'s collectives (join(ready) shows them)
  std::vector<parameter> pieces;         // sharded: this rank's part of each parameter it overlaps
  std::vector<std::size_t> piece_of, piece_begin;
  // Full sharding with copies gathered: the linear of each parameter laid out in whole 32-row
  // slabs (null: the others); the copies on their way (visible after the next join()): the wire
  // (ranks x chunk bytes), the parameters whose copies it carries and their requests.
  std::vector<linear*> linears;
  std::vector<linear*> weight_of;  // the linear whose weight each parameter is (null: norm gains, the embedding)
  tensor wire;
  std::size_t chunk = 0;
  std::vector<std::size_t> copied;
  std::vector<quant_plan> copy_plans;

  // Rows [first, first + count) of parameter i in rank k's shard: whole 32-row slabs (laid out so).
  std::pair<std::size_t, std::size_t> slab_of(std::size_t i, std::size_t k) const {
    const std::size_t begin = offsets[i], end = begin + rows[i] * cols[i];
    const std::size_t a = std::max(begin, k * shard), b = std::min(end, (k + 1) * shard);
    if (a >= b) return {0, 0};
    return {(a - begin) / cols[i], (b - a) / cols[i]};
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
