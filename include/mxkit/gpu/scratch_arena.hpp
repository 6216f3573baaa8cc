// SPDX-License-Identifier: Apache-2.0
#pragma once
// GEMM scratch from one block of device memory kept by its owner (a backend), instead of a pool
// allocation per call: the bf16 or FP8 copies an sm90 product expands its operands into, split
// K's partial sums, the NVFP4 expansion, cuBLASLt's workspace. One stream's GEMMs run one after
// another, so each call can reuse the block from its start: the kernels of the next call are
// ordered after those of the last.
//
// Why not the pool: while a step is recorded (gpu/nn/device_step_graph.hpp) every pool
// allocation becomes one of the graph's allocation nodes, and the driver lays the graph's
// allocations out anew, the memory of a freed one reused for a larger one at the same address.
// compute-sanitizer's memcheck misreads exactly those: on the H200 it reported in-bounds writes
// of the bf16 expansion (gpu/gemm/expand.hpp) into such scratch as past the earlier, smaller
// allocation at that address, in a recording's first launch only. Memory allocated before the
// recording is the graph's kept memory, not its nodes, and a replay reads the addresses recorded.
//
// The block grows to the largest demand it has seen, only between calls (nothing taken) and never
// while its stream is captured; a call that does not fit then takes pool memory as before. A block
// that moves counts up the owner's epoch: a recording that read the old one is no longer valid
// (nn::step_graph::valid).
//
//   gpu::scratch_arena arena{stream, &epoch};        // the owner's; options.scratch = &arena
//   void* p = gpu::allocate_scratch(bytes, stream);   // inside gpu::gemm: the arena's, or the pool's
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/memory.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

class scratch_arena {
 public:
  // Scratch of stream `s`; `epoch` (may be null) is counted up each time the block moves.
  explicit scratch_arena(stream_t s = nullptr, std::uint64_t* epoch = nullptr) noexcept : stream_(s), epoch_(epoch) {}
  scratch_arena(const scratch_arena&) = delete;
  scratch_arena& operator=(const scratch_arena&) = delete;
  ~scratch_arena() { release(); }

  // Makes this arena the one allocate_scratch uses for its stream on this thread while the scope
  // lives (null: no change); scopes nest.
  class scope {
   public:
    explicit scope(scratch_arena* a) noexcept : previous_(current()) {
      if (a) current() = a;
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() { current() = previous_; }

   private:
    scratch_arena* previous_;
  };

  // Grows the block to the largest demand seen, if nothing is taken and the stream is not being
  // captured (before a step is recorded, so that the recording takes no scratch from the pool).
  void reserve_seen() {
    if (taken_.empty() && wanted_ > capacity_ && !captured()) grow(wanted_);
  }
  // Frees the block after the work enqueued on the stream (the owner's stream must outlive this).
  void release() noexcept {
    if (base_) deallocate_async(base_, stream_);
    base_ = nullptr;
    capacity_ = 0;
    taken_.clear();
  }
  std::size_t capacity() const noexcept { return capacity_; }
  stream_t stream() const noexcept { return stream_; }
  // Whether `p` lies in the block (scratch the arena handed out, not the pool's).
  bool holds(const void* p) const noexcept {
    const auto* b = static_cast<const std::uint8_t*>(p);
    return base_ && b >= base_ && b < base_ + capacity_;
  }

 private:
  friend void* allocate_scratch(std::size_t, stream_t);
  friend void deallocate_scratch(void*, stream_t) noexcept;
  static constexpr std::size_t alignment = 256;       // TMA and 16-byte vector accesses need less
  static constexpr std::size_t granularity = 2 << 20;  // growth in whole 2 MiB, as the driver maps

  static scratch_arena*& current() noexcept {
    static thread_local scratch_arena* a = nullptr;
    return a;
  }
  static std::size_t round_up(std::size_t n, std::size_t to) noexcept { return (n + to - 1) / to * to; }
  // Whether the stream is being captured (a query that fails counts as captured: no growth).
  bool captured() const noexcept {
    bool capturing = true;
    return stream_is_capturing(stream_, &capturing) != success || capturing;
  }
  void grow(std::size_t bytes) {
    const std::size_t capacity = round_up(bytes, granularity);
    auto* fresh = static_cast<std::uint8_t*>(allocate_async(capacity, stream_));
    if (base_) deallocate_async(base_, stream_);  // its last users are enqueued before anything that takes the new block
    base_ = fresh;
    capacity_ = capacity;
    if (epoch_) ++*epoch_;
  }
  // `bytes` from the block, or null where they do not fit (the demand is remembered).
  void* take(std::size_t bytes) {
    const std::size_t top = taken_.empty() ? 0 : taken_.back().second;
    const std::size_t end = round_up(top, alignment) + bytes;
    wanted_ = std::max(wanted_, end);
    if (end > capacity_) {
      if (!taken_.empty() || captured()) return nullptr;
      grow(std::max(end, wanted_));
    }
    const std::size_t start = end - bytes;
    taken_.emplace_back(start, end);
    return base_ + start;
  }
  void give_back(const void* p) noexcept {
    const std::size_t start = static_cast<std::size_t>(static_cast<const std::uint8_t*>(p) - base_);
    // Calls free their scratch in the reverse order of taking it (scoped in one GEMM call); any
    // order is accepted, the top then being the end of the last still taken.
    for (auto it = taken_.end(); it != taken_.begin();) {
      --it;
      if (it->first == start) {
        taken_.erase(it);
        return;
      }
    }
  }

  stream_t stream_;
  std::uint64_t* epoch_;
  std::uint8_t* base_ = nullptr;
  std::size_t capacity_ = 0, wanted_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> taken_;  // [start, end) of what calls hold
};

// `bytes` of scratch usable in the order of stream `s` (null for 0 bytes): from the arena of the
// innermost scratch_arena::scope on this thread when it is `s`'s and they fit, else from the pool
// (allocate_async, stream-ordered, a graph's allocation while `s` is captured).
inline void* allocate_scratch(std::size_t bytes, stream_t s) {
  if (bytes == 0) return nullptr;
  if (scratch_arena* a = scratch_arena::current(); a && a->stream_ == s)
    if (void* p = a->take(bytes)) return p;
  return allocate_async(bytes, s);
}
// Returns scratch from allocate_scratch (to its arena, or to the pool in the order of `s`).
inline void deallocate_scratch(void* p, stream_t s) noexcept {
  if (!p) return;
  if (scratch_arena* a = scratch_arena::current(); a && a->stream_ == s && a->holds(p)) {
    a->give_back(p);
    return;
  }
  deallocate_async(p, s);
}

}  // namespace gpu
MXKIT_END_NAMESPACE
