// SPDX-License-Identifier: Apache-2.0
// A recording's memory (gpu/memory.hpp, gpu/graph.hpp): allocation_meter measures a launched
// sequence of allocations and frees, a capture of the same sequence given that many bytes places
// every allocation in the graph's block (freed places reused, as launched), the graph's launches
// compute what launched work computes, and a place the recording did not free stays the block's
// until the host frees it, the block outliving the graph until then. Also under memcheck (a
// recording's first launch is where allocation nodes were misread).
#include <mxkit/gpu/graph.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>

#include <cstdint>
#include <vector>

#include "../catch.hpp"

namespace {

namespace gpu = mxkit::gpu;

__global__ void write_words(std::uint32_t* p, std::size_t n, std::uint32_t tag) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<std::uint32_t>(i) * 3u + tag;
}
__global__ void sum_words(const std::uint32_t* a, const std::uint32_t* b, std::size_t n, std::uint32_t* out) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

constexpr std::size_t n = 4096;  // words of each temporary

// The work recorded: two temporaries written, summed into `out` (kept), freed; a third allocated
// in the first's place; `tenant` receives an allocation the work does not free.
void sequence(gpu::stream_t s, std::uint32_t* out, void** tenant, std::vector<void*>* seen) {
  auto* a = static_cast<std::uint32_t*>(gpu::allocate_async(n * 4, s));
  auto* b = static_cast<std::uint32_t*>(gpu::allocate_async(3 * n * 4, s));
  write_words<<<16, 256, 0, s>>>(a, n, 1);
  write_words<<<16, 256, 0, s>>>(b, 3 * n, 2);
  sum_words<<<16, 256, 0, s>>>(a, b, n, out);
  gpu::deallocate_async(a, s);
  auto* c = static_cast<std::uint32_t*>(gpu::allocate_async(n * 4, s));  // a's place, once a is freed
  write_words<<<16, 256, 0, s>>>(c, n, 5);
  sum_words<<<16, 256, 0, s>>>(out, c, n, out);
  gpu::deallocate_async(b, s);
  gpu::deallocate_async(c, s);
  *tenant = gpu::allocate_async(64, s);
  write_words<<<1, 16, 0, s>>>(static_cast<std::uint32_t*>(*tenant), 16, 7);
  if (seen) *seen = {a, b, c, *tenant};
}

}  // namespace

TEST_CASE("gpu graph memory: a recording placed in a measured block computes what launched work does", "[gpu][memory][graph]") {
  gpu::stream s;
  gpu::device_buffer<std::uint32_t> launched(n, s), recorded(n, s);
  void* tenant = nullptr;
  std::size_t block_bytes = 0;
  {
    gpu::allocation_meter meter(s);
    sequence(s, launched.data(), &tenant, nullptr);
    block_bytes = meter.block_bytes();
  }
  gpu::deallocate_async(tenant, s);
  // a (16 KiB) and b (48 KiB) side by side, c in a's place, the tenant in a's place too (b is
  // freed by then, so first fit takes the lowest): 64 KiB.
  CHECK(block_bytes == 4 * n + 12 * n);
  const std::size_t blocks_before = gpu::detail::recorded_block_count().load();
  std::vector<void*> seen;
  {
    gpu::graph g = gpu::graph::capture(s, [&] { sequence(s, recorded.data(), &tenant, &seen); }, block_bytes);
    REQUIRE(g.block() != nullptr);
    const auto* base = static_cast<const std::uint8_t*>(g.block());
    for (void* p : seen) {
      const auto* q = static_cast<const std::uint8_t*>(p);
      CHECK((q >= base && q < base + block_bytes));  // every allocation in the block: no allocation node
    }
    CHECK(seen[2] == seen[0]);  // c took a's freed place
    CHECK(gpu::detail::recorded_block_count().load() == blocks_before + 1);  // the tenant outlives the capture
    for (int launch = 0; launch < 3; ++launch) {
      recorded.fill_bytes(0, s);
      g.launch(s);
      CHECK(recorded.to_host(s) == launched.to_host(s));
      std::vector<std::uint32_t> t(16);
      MXKIT_GPU_CHECK(gpu::memcpy_async(t.data(), tenant, 64, gpu::copy_kind::device_to_host, s));
      s.synchronize();
      CHECK((t[0] == 7u && t[15] == 15u * 3u + 7u));
    }
  }
  // The graph is gone; its block stays for the tenant, and goes with it.
  CHECK(gpu::detail::recorded_block_count().load() == blocks_before + 1);
  gpu::deallocate_async(tenant, s);
  CHECK(gpu::detail::recorded_block_count().load() == blocks_before);
  s.synchronize();
}

TEST_CASE("gpu graph memory: what a block too small cannot hold becomes an allocation node", "[gpu][memory][graph]") {
  gpu::stream s;
  gpu::device_buffer<std::uint32_t> launched(n, s), recorded(n, s);
  void* tenant = nullptr;
  sequence(s, launched.data(), &tenant, nullptr);
  gpu::deallocate_async(tenant, s);
  // Room for a alone: b becomes a node. (A capture without a block, all nodes, is not run here:
  // memcheck misreads nodes whose addresses the graph reuses, this sequence's c at a's.)
  for (const std::size_t block_bytes : {4 * n}) {
    std::vector<void*> seen;
    {
      gpu::graph g = gpu::graph::capture(s, [&] { sequence(s, recorded.data(), &tenant, &seen); }, block_bytes);
      const auto* base = static_cast<const std::uint8_t*>(g.block());
      const auto in_block = [&](void* p) { return base && static_cast<const std::uint8_t*>(p) >= base && static_cast<const std::uint8_t*>(p) < base + block_bytes; };
      CHECK(in_block(seen[0]));
      CHECK(!in_block(seen[1]));  // b does not fit: a node
      recorded.fill_bytes(0, s);
      g.launch(s);
      CHECK(recorded.to_host(s) == launched.to_host(s));
    }
    gpu::deallocate_async(tenant, s);  // the block's: it goes with this last tenant
    s.synchronize();
  }
}
