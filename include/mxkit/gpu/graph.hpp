// SPDX-License-Identifier: Apache-2.0
#pragma once
// One stream's work recorded once and launched again: a CUDA graph (HIP graph on AMD), built by
// stream capture (CUDA programming guide, "CUDA Graphs", "Creating a Graph Using Stream
// Capture"). A launch runs every recorded kernel and copy with the arguments and addresses it had
// when recorded, as one submission: no host enqueue per operation, no gap between launches.
//   gpu::graph g = gpu::graph::capture(s, [&] { enqueue_the_work(s); });  // nothing runs yet
//   g.launch(s);                                                           // runs it; again, and again
// What the recorded work may not do (the capture fails, or the replay reads a stale value):
// synchronize or read back to the host, upload from host memory that changes, or take anything
// that changes between launches as a kernel argument by value. Memory it allocates on the stream
// becomes the graph's (gpu/memory.hpp, capture_memory): placed in one block the graph keeps when
// the capture is given its size (capture(s, work, block_bytes); allocation_meter measures it on
// a launched run of the same work), else allocation nodes; memory allocated before the capture
// and freed by the captured work is freed when the graph goes, after its last launch.
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/platform.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

class graph {
 public:
  graph() = default;
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  graph(graph&& o) noexcept
      : exec_(std::exchange(o.exec_, nullptr)),
        stream_(std::exchange(o.stream_, nullptr)),
        kept_(std::exchange(o.kept_, {})),
        block_(std::exchange(o.block_, nullptr)),
        block_registered_(std::exchange(o.block_registered_, false)) {}
  graph& operator=(graph&& o) noexcept {
    if (this != &o) {
      release();
      exec_ = std::exchange(o.exec_, nullptr);
      stream_ = std::exchange(o.stream_, nullptr);
      kept_ = std::exchange(o.kept_, {});
      block_ = std::exchange(o.block_, nullptr);
      block_registered_ = std::exchange(o.block_registered_, false);
    }
    return *this;
  }
  ~graph() { release(); }

  // Records what `work()` enqueues on `s` (none of it runs) and instantiates it. An exception
  // from `work` ends the capture, discards what was recorded and propagates: the work did not
  // run, though the host state it changed stays changed (the caller's to handle). `block_bytes`:
  // the block the captured allocations are placed in (0: none, allocation nodes).
  template <class Work>
  static graph capture(stream_t s, Work&& work, std::size_t block_bytes = 0) {
    graph g;
    g.stream_ = s;
    if (block_bytes) g.block_ = static_cast<std::uint8_t*>(allocate_async(block_bytes, s));  // before the capture: not a node
    capture_memory memory(s, g.block_, block_bytes);
    MXKIT_GPU_CHECK(stream_begin_capture(s));
    graph_t recorded = nullptr;
    try {
      work();
    } catch (...) {
      (void)stream_end_capture(s, &recorded);  // ends the capture however it went
      if (recorded) (void)graph_destroy(recorded);
      g.kept_ = memory.take_kept();  // freed by ~graph, in stream order (nothing recorded reads them)
      throw;
    }
    g.kept_ = memory.take_kept();
    g.register_block(memory.block_outstanding());
    MXKIT_GPU_CHECK(stream_end_capture(s, &recorded));
    const error_t e = graph_instantiate(&g.exec_, recorded);
    (void)graph_destroy(recorded);  // the executable graph holds what it needs
    MXKIT_GPU_CHECK(e);
    return g;
  }

  bool empty() const noexcept { return exec_ == nullptr; }
  // The block the captured allocations were placed in (null: none).
  const void* block() const noexcept { return block_; }
  // Enqueues the recorded work on `s` (stream-ordered, as the work itself would have been).
  void launch(stream_t s) const {
    mxkit::detail::require(exec_ != nullptr, "gpu::graph::launch: nothing was captured");
    MXKIT_GPU_CHECK(graph_launch(exec_, s));
  }

 private:
  void release() noexcept {
    if (exec_) (void)graph_exec_destroy(exec_);  // a launch in flight completes first (the runtime's rule)
    exec_ = nullptr;
    for (void* p : kept_) deallocate_async(p, stream_);  // after the last launch enqueued on stream_
    kept_.clear();
    release_block();
  }
  // Places the recording took and did not free: their later frees (outside any capture) come to
  // the block's record, and the block outlives the graph until the last of them.
  void register_block(const std::vector<void*>& outstanding) {
    if (!block_ || outstanding.empty()) return;
    std::lock_guard<std::mutex> lock(detail::recorded_blocks_mutex());
    detail::recorded_blocks().push_back({block_, stream_, outstanding, true});
    detail::recorded_block_count().fetch_add(1, std::memory_order_acq_rel);
    block_registered_ = true;
  }
  void release_block() noexcept {
    if (!block_) return;
    bool free_now = true;
    if (block_registered_) {
      std::lock_guard<std::mutex> lock(detail::recorded_blocks_mutex());
      std::vector<detail::recorded_block>& blocks = detail::recorded_blocks();
      for (auto b = blocks.begin(); b != blocks.end(); ++b) {
        if (b->base != block_) continue;
        if (b->outstanding.empty()) {
          blocks.erase(b);
          detail::recorded_block_count().fetch_sub(1, std::memory_order_acq_rel);
        } else {
          b->graph_alive = false;  // freed with its last tenant (deallocate_async)
          free_now = false;
        }
        break;
      }
    }
    if (free_now) (void)free_async(block_, stream_);  // not deallocate_async: a tenant may sit at its first byte
    block_ = nullptr;
    block_registered_ = false;
  }

  graph_exec_t exec_ = nullptr;
  stream_t stream_ = nullptr;
  std::vector<void*> kept_;  // freed by the captured work, allocated before it
  std::uint8_t* block_ = nullptr;  // where the captured allocations were placed
  bool block_registered_ = false;  // with tenants in detail::recorded_blocks()
};

// Whether the current device's runtime records stream-ordered allocations in a capture (CUDA
// 11.4 and later do: graph memory nodes; a HIP runtime may not): one allocation and its free
// captured on a stream of its own, instantiated and launched, once per device. A step graph is
// only made where this holds, so a runtime without it launches every step instead of failing.
inline bool captures_allocations() {
  static std::array<int, detail::max_devices> cached{};
  static std::array<std::once_flag, detail::max_devices> once;
  int dev = 0;
  if (get_device(&dev) != success || dev < 0 || dev >= detail::max_devices) return false;
  std::call_once(once[static_cast<std::size_t>(dev)], [dev] {
    try {
      stream s;
      graph g = graph::capture(s, [&] { deallocate_async(allocate_async(allocation_unit, s), s); });
      g.launch(s);
      s.synchronize();
      cached[static_cast<std::size_t>(dev)] = 1;
    } catch (const std::exception&) {
      (void)get_last_error();  // the failed call's error is not the caller's
    }
  });
  return cached[static_cast<std::size_t>(dev)] == 1;
}

}  // namespace gpu
MXKIT_END_NAMESPACE
