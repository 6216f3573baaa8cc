// SPDX-License-Identifier: Apache-2.0
// gpu::offset_allocator (gpu/offset_allocator.hpp), the layout of a recorded step's memory block:
// first fit, aligned offsets, freed places merged and reused, the end given back, a capacity
// refused past, and the high-water mark a meter reads; against a brute-force model of the bytes.
#include <mxkit/gpu/offset_allocator.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "catch.hpp"

using mxkit::gpu::offset_allocator;

TEST_CASE("offset_allocator: first fit, merging, the end, the capacity", "[memory]") {
  offset_allocator a;
  const std::size_t u = offset_allocator::alignment;
  CHECK(a.take(1) == 0u);
  CHECK(a.take(u + 1) == u);          // two units
  CHECK(a.take(0) == 3 * u);          // 0 bytes take one unit
  CHECK(a.take(4 * u) == 4 * u);
  CHECK(a.high_water() == 8 * u);
  CHECK(a.give_back(u));              // [u, 3u) free
  CHECK(!a.give_back(u));             // nothing starts there now
  CHECK(!a.give_back(5));             // nor inside an allocation
  CHECK(a.take(u) == u);              // first fit: the lowest hole that holds it
  CHECK(a.take(2 * u) == 8 * u);      // the hole [2u, 3u) is too small: at the end
  CHECK(a.give_back(u));
  CHECK(a.give_back(3 * u));          // merged with the hole [u, 3u): [u, 4u) free
  CHECK(a.take(3 * u) == u);
  CHECK(a.give_back(8 * u));          // the last one: the end moves back
  CHECK(a.give_back(4 * u));          // the end moves back again
  CHECK(a.take(6 * u) == 4 * u);      // from the new end
  CHECK(a.high_water() == 10 * u);
  CHECK(a.allocations() == 3);
  CHECK(a.taken_bytes() == 10 * u);

  offset_allocator b(4 * u);
  CHECK(b.take(3 * u) == 0u);
  CHECK(!b.take(2 * u).has_value());  // past the capacity
  CHECK(b.take(u) == 3 * u);
  CHECK(!b.take(1).has_value());
  CHECK(!offset_allocator(u).take(u + 1).has_value());
  CHECK(b.give_back(0));
  CHECK(b.take(2 * u) == 0u);
  CHECK(b.high_water() == 4 * u);
}

TEST_CASE("offset_allocator: random sequences never overlap, stay aligned, and reuse what is freed", "[memory]") {
  std::mt19937_64 rng(0x5EED);
  for (int round = 0; round < 50; ++round) {
    offset_allocator a;
    std::map<std::size_t, std::size_t> live;  // offset -> rounded bytes
    std::size_t live_bytes = 0, peak_live = 0;
    for (int op = 0; op < 400; ++op) {
      if (live.empty() || rng() % 3 != 0) {
        const std::size_t bytes = rng() % 5000;
        const auto at = a.take(bytes);
        REQUIRE(at.has_value());
        const std::size_t need = bytes == 0 ? offset_allocator::alignment
                                            : (bytes + offset_allocator::alignment - 1) / offset_allocator::alignment * offset_allocator::alignment;
        CHECK(*at % offset_allocator::alignment == 0);
        const auto next = live.lower_bound(*at);
        if (next != live.end()) CHECK(*at + need <= next->first);
        if (next != live.begin()) CHECK(std::prev(next)->first + std::prev(next)->second <= *at);
        live.emplace(*at, need);
        live_bytes += need;
        peak_live = std::max(peak_live, live_bytes);
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
        CHECK(a.give_back(it->first));
        live_bytes -= it->second;
        live.erase(it);
      }
      CHECK(a.taken_bytes() == live_bytes);
    }
    CHECK(a.high_water() >= peak_live);
    // Everything freed: the block is one hole again, and a take of the whole high water fits at 0.
    for (const auto& [at, bytes] : live) CHECK(a.give_back(at));
    CHECK(a.take(a.high_water()) == 0u);
  }
}
