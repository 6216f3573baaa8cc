// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a backend counts (nn/backend.hpp's backend::counters()): stored copies by use, GEMMs by
// product, public operations that passed their checks, host reads, uploads, synchronizations and
// driver allocations. Tests and benchmarks read them to show that a step did the work it should
// and no more (a host read or a device-wide synchronization inside a step is a stall).
#include <array>
#include <cstddef>
#include <cstdint>

#include <mxkit/config.hpp>
#include <mxkit/gemm/product.hpp>
#include <mxkit/nn/backend_observer.hpp>
#include <mxkit/nn/operand.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct backend_counters {
  std::array<std::uint64_t, operand_use_count> quantized{};  // stored copies produced, by use
  std::array<std::uint64_t, 3> gemms{};                       // by gemm_product
  std::array<std::uint64_t, backend_op_count> calls{};       // public operations that passed their checks
  std::uint64_t host_reads = 0;          // device -> host transfers the host waited for
  std::uint64_t uploads = 0;             // host -> device transfers (write, write_tokens, import_fp8)
  std::uint64_t synchronizations = 0;    // explicit synchronize() calls
  std::uint64_t driver_allocations = 0;  // allocations the pool could not serve (the backend counts)
  // Training steps recorded into a graph, and replays of recorded steps (nn/step_graph.hpp). A
  // replayed step runs no host code: the other counters do not move for it.
  std::uint64_t graph_captures = 0, graph_replays = 0;

  std::uint64_t copies(operand_use u) const noexcept { return quantized[static_cast<std::size_t>(u)]; }
  std::uint64_t gemm_calls(gemm_product g) const noexcept { return gemms[static_cast<std::size_t>(g)]; }
  std::uint64_t op_calls(backend_op o) const noexcept { return calls[static_cast<std::size_t>(o)]; }
};

}  // namespace nn
MXKIT_END_NAMESPACE
