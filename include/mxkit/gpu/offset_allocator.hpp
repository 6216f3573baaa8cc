// SPDX-License-Identifier: Apache-2.0
#pragma once
// First-fit placement of allocations at byte offsets of one block, and the largest end any of them
// reached: how a recorded step's memory is laid out in the one block its graph keeps
// (gpu/memory.hpp's capture_memory), and, run over the allocations of a launched step
// (allocation_meter), how large that block must be for the same sequence. The same code in both
// places, so the measured size is exactly what the recording then takes. Host code only.
#include <cstddef>
#include <iterator>
#include <limits>
#include <map>
#include <optional>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

class offset_allocator {
 public:
  // Every offset is a multiple of this (the pool's own blocks are 256-byte aligned; TMA and
  // 16-byte vector accesses need less).
  static constexpr std::size_t alignment = 256;

  explicit offset_allocator(std::size_t capacity = std::numeric_limits<std::size_t>::max()) noexcept : capacity_(capacity) {}

  // The offset of `bytes` (rounded up to the alignment; 0 bytes take one unit) at the lowest free
  // place that holds them, or nothing when the block cannot.
  std::optional<std::size_t> take(std::size_t bytes) {
    if (bytes > capacity_) return std::nullopt;
    const std::size_t need = bytes == 0 ? alignment : (bytes + alignment - 1) / alignment * alignment;
    for (auto it = holes_.begin(); it != holes_.end(); ++it) {
      const auto [at, size] = *it;
      if (size >= need) {
        holes_.erase(it);
        if (size > need) holes_.emplace(at + need, size - need);
        return place(at, need);
      }
    }
    // At the end: from the last hole when it reaches the end, else from the end itself.
    std::size_t at = end_;
    if (!holes_.empty()) {
      const auto last = std::prev(holes_.end());
      if (last->first + last->second == end_) at = last->first;
    }
    if (at > capacity_ || capacity_ - at < need) return std::nullopt;
    if (at != end_) holes_.erase(std::prev(holes_.end()));
    end_ = at + need;
    return place(at, need);
  }
  // Frees what take() placed at `offset`; false (and nothing changes) when nothing starts there.
  bool give_back(std::size_t offset) {
    const auto it = taken_.find(offset);
    if (it == taken_.end()) return false;
    std::size_t at = offset, size = it->second;
    taken_.erase(it);
    taken_bytes_ -= size;
    // Merged with the holes on either side; a hole that reaches the end shortens the end instead.
    auto next = holes_.lower_bound(at);
    if (next != holes_.end() && at + size == next->first) {
      size += next->second;
      next = holes_.erase(next);
    }
    if (next != holes_.begin()) {
      const auto before = std::prev(next);
      if (before->first + before->second == at) {
        at = before->first;
        size += before->second;
        holes_.erase(before);
      }
    }
    if (at + size == end_) end_ = at;
    else holes_.emplace(at, size);
    return true;
  }
  // The largest end any allocation reached: the block size this sequence needs.
  std::size_t high_water() const noexcept { return high_water_; }
  std::size_t taken_bytes() const noexcept { return taken_bytes_; }
  std::size_t allocations() const noexcept { return taken_.size(); }

 private:
  std::size_t place(std::size_t at, std::size_t need) {
    taken_.emplace(at, need);
    taken_bytes_ += need;
    if (at + need > high_water_) high_water_ = at + need;
    return at;
  }

  std::size_t capacity_;
  std::size_t end_ = 0;  // everything at or past it is free
  std::size_t high_water_ = 0, taken_bytes_ = 0;
  std::map<std::size_t, std::size_t> holes_;  // offset -> bytes, free places below end_
  std::map<std::size_t, std::size_t> taken_;  // offset -> bytes
};

}  // namespace gpu
MXKIT_END_NAMESPACE
