// SPDX-License-Identifier: Apache-2.0
#pragma once
// What data parallelism (parallel/data_parallel.hpp) is asked to do: the communicator, the
// micro-batches per rank and step, how much is sharded (none, ZeRO-1, full), and full sharding's
// choices (quantized copies gathered, resharding after forward, overlapped reductions), and the
// element type of the gradient reduction. Apart from data_parallel: the training loop, the
// training program and the checkpoints name these settings without the machinery.
#include <cstddef>
#include <cstdint>

#include <mxkit/enum_names.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/parallel/communicator.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// none: every rank holds everything; optimizer: ZeRO-1; full: ZeRO-3 / FSDP.
enum class sharding : std::uint8_t { none, optimizer, full };

}  // namespace nn
template <>
struct enum_names<nn::sharding> {
  static constexpr const char* names[] = {"none", "optimizer", "full"};
  static constexpr nn::sharding last = nn::sharding::full;
};
namespace nn {

struct parallel_config {
  communicator* comm = nullptr;   // null: one rank
  std::size_t micro_batches = 1;  // per rank and step (gradient accumulation)
  sharding shard = sharding::none;
  // Full sharding: gather the weights that linears quantize as their quantized copies (exact: the
  // fp32 gather's bits), where the backend gathers copies (backend::copy_gatherer, copy_gather.hpp).
  bool gather_quantized = true;
  // The same for FP8 weights (delayed scaling: the rowwise copy, its transpose made after the
  // gather); off gathers them in fp32 at the same shard layout, with the same bits. (On 3 GPUs an
  // FP8 run's weights once differed from the fp32 gather's: that gather used another layout, and
  // NCCL's ring sums a gradient in an order that depends on the rank owning it;
  // docs/perf/multi_gpu.md.)
  bool gather_quantized_fp8 = true;
  // The same for bf16 weights (the rowwise copy, its transpose made after the gather); off gathers
  // them in fp32 at the same shard layout, with the same bits: on three or more ranks NCCL's ring
  // sums a gradient in an order that depends on the rank owning it, so only runs at one layout
  // compare bit for bit (tests/gpu/catch2_test_nccl_sharded_training.cu).
  bool gather_quantized_bf16 = true;
  // Full sharding: a group's linears drop their weight copies after its forward (and backward),
  // and its backward gathers them again (FSDP2's reshard_after_forward): the copies of one or two
  // groups resident instead of every layer's, for twice the gathered bytes. On by default, as in
  // FSDP2: the 8B shape's peak per GPU falls by a quarter for a few percent of step time
  // (docs/perf/multi_gpu.md).
  bool reshard_after_forward = true;
  // Full sharding: a group waits for its own gather only (communicator::join(mark)), and the
  // previous group's gradient reduction runs behind its backward. Off waits for every collective
  // called so far at each group (what it did before: the reductions exposed; for measurements).
  bool overlap_reductions = true;
  // The element type the gradients are reduced in (FSDP2's MixedPrecisionPolicy.reduce_dtype): f32
  // (the gradients' own type), or bf16, which halves the bytes of every gradient reduction
  // (reduce-scatter when sharded, all-reduce when not). Each rank's accumulated f32 gradients are
  // rounded to bf16 (nearest even: backend::copy) before the collective, the collective sums in
  // bf16 (NCCL's ncclBfloat16: every partial sum rounded to bf16; ref::thread_communicator alike,
  // in the order it documents), and the reduced bf16 values are widened (exactly) into the f32
  // gradients the optimizer reads. The numerics: docs/training.md, "Several ranks".
  dtype reduce_dtype = dtype::f32;
};

}  // namespace nn
MXKIT_END_NAMESPACE
