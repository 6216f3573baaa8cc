// SPDX-License-Identifier: Apache-2.0
// gpu::scratch_arena (gpu/scratch_arena.hpp): scratch taken from one kept block while a scope
// names it, nested calls side by side, the block grown only between calls and never under stream
// capture (where scratch comes from the pool, as the graph's own allocation), its moves counted
// in the owner's epoch. (The device backend's GEMMs take their scratch from its arena: their bits
// against the host oracle are catch2_test_device_backend's and catch2_test_device_training's.)
#include <mxkit/gpu/graph.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/gpu/scratch_arena.hpp>

#include <cstdint>
#include <vector>

#include "../catch.hpp"

namespace {

namespace gpu = mxkit::gpu;

// Writes i + tag to every word of [p, p + n), then the host reads them back: the memory is usable
// for all of its length.
__global__ void fill_words(std::uint32_t* p, std::size_t n, std::uint32_t tag) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = static_cast<std::uint32_t>(i) + tag;
}

bool filled(std::uint32_t* p, std::size_t n, std::uint32_t tag, gpu::stream& s) {
  fill_words<<<64, 256, 0, s>>>(p, n, tag);
  MXKIT_GPU_CHECK_LAUNCH();
  std::vector<std::uint32_t> host(n);
  MXKIT_GPU_CHECK(gpu::memcpy_async(host.data(), p, n * 4, gpu::copy_kind::device_to_host, s));
  s.synchronize();
  for (std::size_t i = 0; i < n; ++i)
    if (host[i] != static_cast<std::uint32_t>(i) + tag) return false;
  return true;
}

}  // namespace

TEST_CASE("gpu scratch arena: nested calls, growth between calls only, the epoch", "[gpu][memory]") {
  gpu::stream s;
  std::uint64_t epoch = 0;
  gpu::scratch_arena arena(s, &epoch);
  {
    // No scope: the pool's memory, not the arena's.
    void* p = gpu::allocate_scratch(1000, s);
    CHECK(!arena.holds(p));
    gpu::deallocate_scratch(p, s);
    CHECK(arena.capacity() == 0);
  }
  const gpu::scratch_arena::scope scope(&arena);
  CHECK(gpu::allocate_scratch(0, s) == nullptr);
  auto* a = static_cast<std::uint32_t*>(gpu::allocate_scratch(1000, s));
  CHECK(arena.holds(a));
  CHECK(arena.capacity() >= 1000);
  CHECK(epoch == 1);  // the first block
  const std::size_t first_capacity = arena.capacity();
  // Nested, as split K's partials inside an expanded product: beside the first, 256-byte aligned.
  auto* b = static_cast<std::uint32_t*>(gpu::allocate_scratch(4096, s));
  CHECK(arena.holds(b));
  CHECK(reinterpret_cast<std::uintptr_t>(b) % 256 == 0);
  CHECK(reinterpret_cast<std::uint8_t*>(b) >= reinterpret_cast<std::uint8_t*>(a) + 1000);
  CHECK(filled(a, 250, 7, s));
  CHECK(filled(b, 1024, 9, s));
  // Larger than what is left while the others are taken: the pool's, and the demand remembered.
  const std::size_t big = first_capacity + (1u << 20);
  auto* c = static_cast<std::uint32_t*>(gpu::allocate_scratch(big, s));
  CHECK(!arena.holds(c));
  CHECK(filled(c, big / 4, 11, s));
  CHECK(arena.capacity() == first_capacity);
  CHECK(epoch == 1);
  gpu::deallocate_scratch(c, s);
  gpu::deallocate_scratch(b, s);
  gpu::deallocate_scratch(a, s);
  // Nothing taken: the next call grows the block to the largest demand seen.
  auto* d = static_cast<std::uint32_t*>(gpu::allocate_scratch(64, s));
  CHECK(arena.holds(d));
  CHECK(arena.capacity() >= big);
  CHECK(epoch == 2);
  CHECK(filled(d, 16, 13, s));
  gpu::deallocate_scratch(d, s);
  // Another stream's scratch never comes from this arena.
  gpu::stream other;
  void* e = gpu::allocate_scratch(64, other);
  CHECK(!arena.holds(e));
  gpu::deallocate_scratch(e, other);
  s.synchronize();
  other.synchronize();
}

TEST_CASE("gpu scratch arena: under stream capture it hands out only what it holds", "[gpu][memory][graph]") {
  gpu::stream s;
  std::uint64_t epoch = 0;
  gpu::scratch_arena arena(s, &epoch);
  const gpu::scratch_arena::scope scope(&arena);
  gpu::deallocate_scratch(gpu::allocate_scratch(1 << 20, s), s);  // a 1 MiB demand, grown to it
  const std::size_t capacity = arena.capacity();
  REQUIRE(epoch == 1);
  gpu::device_buffer<std::uint32_t> out(2, s);
  bool fit_held = false, larger_held = true;
  gpu::graph g = gpu::graph::capture(s, [&] {
    auto* fit = static_cast<std::uint32_t*>(gpu::allocate_scratch(4096, s));
    auto* larger = static_cast<std::uint32_t*>(gpu::allocate_scratch(capacity * 2, s));  // pool: a graph allocation
    fit_held = arena.holds(fit);
    larger_held = arena.holds(larger);
    fill_words<<<64, 256, 0, s>>>(fit, 1024, 3);
    fill_words<<<64, 256, 0, s>>>(larger, capacity / 2, 5);
    MXKIT_GPU_CHECK(gpu::memcpy_async(out.data(), fit + 1023, 4, gpu::copy_kind::device_to_device, s));
    MXKIT_GPU_CHECK(gpu::memcpy_async(out.data() + 1, larger + capacity / 2 - 1, 4, gpu::copy_kind::device_to_device, s));
    gpu::deallocate_scratch(larger, s);
    gpu::deallocate_scratch(fit, s);
  });
  CHECK(fit_held);
  CHECK(!larger_held);
  CHECK(arena.capacity() == capacity);  // no growth under capture
  CHECK(epoch == 1);
  for (int launch = 0; launch < 2; ++launch) {
    g.launch(s);
    const std::vector<std::uint32_t> got = out.to_host(s);
    CHECK(got[0] == 1023 + 3);
    CHECK(got[1] == static_cast<std::uint32_t>(capacity / 2 - 1 + 5));
  }
  // reserve_seen: the demand seen under capture, granted once nothing is taken and nobody captures.
  arena.reserve_seen();
  CHECK(arena.capacity() >= capacity * 2);
  CHECK(epoch == 2);
  s.synchronize();
}
