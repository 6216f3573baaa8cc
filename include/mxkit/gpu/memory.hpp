// SPDX-License-Identifier: Apache-2.0
#pragma once
// Device memory: one stream-ordered allocator and the owning buffer built on it. Every mxkit
// launcher that needs memory (GEMM scratch, device tensors, the training backend's arenas) takes
// it from here, and no other file names the vendor's allocation API.
//
// Memory comes from one mxkit pool per device that keeps what is freed (release threshold: all of
// it) until trim_device_memory(): the driver's default pool returns memory at every
// synchronization, and mapping it again costs time on every large call. Allocation and free are
// ordered on a stream, like kernels: a free waits for the work already enqueued on that stream,
// never for the whole device. Memory allocated on one stream and used on another must be ordered
// (an event, or synchronizing the first stream) before that use, and before its free.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/gpu/offset_allocator.hpp>
#include <mxkit/gpu/platform.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

namespace detail {
inline constexpr int max_devices = 64;
// The pool of the current device, created on first use.
inline mem_pool_t device_pool() {
  static std::array<mem_pool_t, max_devices> pools{};
  static std::array<std::once_flag, max_devices> once;
  int dev = 0;
  MXKIT_GPU_CHECK(get_device(&dev));
  mxkit::detail::require(dev >= 0 && dev < max_devices, "gpu memory: device ordinal ", dev, " is outside [0, ", max_devices, ")");
  std::call_once(once[static_cast<std::size_t>(dev)], [dev] {
    mem_pool_t pool{};
    MXKIT_GPU_CHECK(mem_pool_create_on_device(&pool, dev));
    MXKIT_GPU_CHECK(mem_pool_set_release_threshold(pool, ~std::uint64_t{0}));
    pools[static_cast<std::size_t>(dev)] = pool;
  });
  return pools[static_cast<std::size_t>(dev)];
}

// What a recording (gpu/graph.hpp) took from its block (capture_memory) and had not freed by its
// end: tensors a recorded step hands to the steps after it, which the host frees later, outside
// any capture. Such a free is not the pool's (the memory is the block's); the block, once its
// graph is gone, goes back to the pool with the last of them.
struct recorded_block {
  std::uint8_t* base = nullptr;
  stream_t stream = nullptr;
  std::vector<void*> outstanding;  // taken in the recording, not freed in it
  bool graph_alive = true;
};
inline std::mutex& recorded_blocks_mutex() {
  static std::mutex m;
  return m;
}
inline std::vector<recorded_block>& recorded_blocks() {
  static std::vector<recorded_block> b;
  return b;
}
inline std::atomic<std::size_t>& recorded_block_count() noexcept {
  static std::atomic<std::size_t> n{0};
  return n;
}
}  // namespace detail

// The memory side of a stream capture (gpu/graph.hpp), installed on the capturing thread while
// the capture lasts. With a block (allocated before the capture, owned by the graph), every
// allocation on the captured stream is placed in it (offset_allocator: first fit, freed places
// reused), so the recording has no allocation nodes: on one stream the graph's work runs in the
// order it was enqueued, as launched work does, so a place freed in the recording may be taken
// again later in it. An allocation the block cannot hold, or any without a block, becomes one of
// the graph's allocation nodes (cudaMallocFromPoolAsync under capture: "the allocation is owned
// by the graph instead of the memory pool", at an address fixed across launches; CUDA
// programming guide, "Graph Memory Nodes") and its free within the capture a free node. A free of
// memory allocated before the capture is not recorded (a free node may free only graph
// allocations) and not done: the captured work may read that memory at every launch, so it is
// kept until the graph goes.
//
// Why a block: compute-sanitizer's memcheck misreads allocation nodes whose addresses the graph
// reuses (on the H200, in-bounds writes reported "out of bounds ... inside the nearest
// allocation" in a recording's first launch only), and one block keeps the graph's memory to
// the step's own high-water mark.
class capture_memory {
 public:
  explicit capture_memory(stream_t s, std::uint8_t* block = nullptr, std::size_t block_bytes = 0)
      : stream_(s), previous_(current()), block_(block), block_bytes_(block ? block_bytes : 0), layout_(block_bytes_) {
    current() = this;
  }
  capture_memory(const capture_memory&) = delete;
  capture_memory& operator=(const capture_memory&) = delete;
  ~capture_memory() { current() = previous_; }
  // Memory allocated before the capture that the captured work freed: to be freed after the
  // graph's last launch.
  std::vector<void*> take_kept() noexcept { return std::exchange(kept_, {}); }
  // What the capture placed in the block and did not free (outside any capture, a free of one of
  // these returns it to the block's record; detail::recorded_block).
  const std::vector<void*>& block_outstanding() const noexcept { return in_block_; }
  static capture_memory*& current() noexcept {
    static thread_local capture_memory* c = nullptr;
    return c;
  }

 private:
  friend void* allocate_async(std::size_t, stream_t);
  friend void deallocate_async(void*, stream_t) noexcept;
  stream_t stream_;
  capture_memory* previous_;
  std::uint8_t* block_;
  std::size_t block_bytes_;
  offset_allocator layout_;
  std::vector<void*> allocated_;  // the graph's allocations (nodes) not yet freed in the capture
  std::vector<void*> in_block_;   // places in the block not yet freed in the capture
  std::vector<void*> kept_;
};

// Lays the allocations and frees on stream `s` of this thread out as a recording with a block
// would (offset_allocator), while it lives: block_bytes() is then the block a recording of the
// same sequence needs. A free of memory allocated before it is not the sequence's (ignored).
class allocation_meter {
 public:
  explicit allocation_meter(stream_t s) : stream_(s), previous_(current()) { current() = this; }
  allocation_meter(const allocation_meter&) = delete;
  allocation_meter& operator=(const allocation_meter&) = delete;
  ~allocation_meter() { current() = previous_; }
  std::size_t block_bytes() const noexcept { return layout_.high_water(); }
  static allocation_meter*& current() noexcept {
    static thread_local allocation_meter* m = nullptr;
    return m;
  }

 private:
  friend void* allocate_async(std::size_t, stream_t);
  friend void deallocate_async(void*, stream_t) noexcept;
  void note_allocation(void* p, std::size_t bytes) {
    if (const std::optional<std::size_t> at = layout_.take(bytes)) offsets_.emplace_back(p, *at);
  }
  void note_free(void* p) noexcept {
    for (auto it = offsets_.begin(); it != offsets_.end(); ++it)
      if (it->first == p) {
        try {
          (void)layout_.give_back(it->second);
        } catch (...) {  // no memory to note it: the measure errs large, never small
        }
        offsets_.erase(it);
        return;
      }
  }
  stream_t stream_;
  allocation_meter* previous_;
  offset_allocator layout_;
  std::vector<std::pair<void*, std::size_t>> offsets_;  // live allocations of the sequence
};

// Every allocation is a whole number of 16-byte units: NCCL and RCCL read a collective's input in
// 16-byte pieces, past the end of a buffer whose size is not a multiple of 16 (NVIDIA/nccl#265);
// the driver's granularity makes that harmless, but compute-sanitizer reports it as an
// out-of-bounds read of the caller's allocation, and an odd-sized tensor is a legal collective.
inline constexpr std::size_t allocation_unit = 16;

// `bytes` of device memory (rounded up to allocation_unit), usable in the order of stream `s`
// (null for 0 bytes).
inline void* allocate_async(std::size_t bytes, stream_t s) {
  if (bytes == 0) return nullptr;
  mxkit::detail::require(bytes <= ~std::size_t{0} - allocation_unit, "gpu::allocate_async: ", bytes, " bytes");
  bytes = (bytes + allocation_unit - 1) / allocation_unit * allocation_unit;
  capture_memory* c = capture_memory::current();
  if (c && c->stream_ != s) c = nullptr;
  if (c && c->block_) {
    if (const std::optional<std::size_t> at = c->layout_.take(bytes)) {
      void* p = c->block_ + *at;
      c->in_block_.push_back(p);
      return p;
    }
  }
  void* p = nullptr;
  MXKIT_GPU_CHECK(malloc_from_pool_async(&p, bytes, detail::device_pool(), s));
  if (c) c->allocated_.push_back(p);
  else if (allocation_meter* m = allocation_meter::current(); m && m->stream_ == s) m->note_allocation(p, bytes);
  return p;
}
// Returns memory from allocate_async to the pool once the work enqueued on `s` before it is done.
// While `s` is captured (capture_memory): a place in the recording's block is freed for the
// recording's later allocations; memory the capture allocated is freed by the graph (a free
// node); memory allocated before it is kept (capture_memory::kept), since the graph may read it
// at every launch. Outside a capture, memory a recording placed in its block and did not free is
// given back to that block's record (detail::recorded_block), never to the pool.
inline void deallocate_async(void* p, stream_t s) noexcept {
  if (!p) return;
  if (capture_memory* c = capture_memory::current(); c && c->stream_ == s) {
    if (c->block_) {
      auto it = std::find(c->in_block_.begin(), c->in_block_.end(), p);
      if (it != c->in_block_.end()) {
        try {
          (void)c->layout_.give_back(static_cast<std::size_t>(static_cast<std::uint8_t*>(p) - c->block_));
        } catch (...) {  // no memory to note the free place: it is not reused in this recording
        }
        c->in_block_.erase(it);
        return;
      }
    }
    auto it = std::find(c->allocated_.begin(), c->allocated_.end(), p);
    if (it == c->allocated_.end()) {
      try {
        c->kept_.push_back(p);
        return;
      } catch (...) {  // no memory for the list: the memory is not freed (a leak, never a free under a graph)
        return;
      }
    }
    c->allocated_.erase(it);
  } else if (detail::recorded_block_count().load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> lock(detail::recorded_blocks_mutex());
    std::vector<detail::recorded_block>& blocks = detail::recorded_blocks();
    for (auto b = blocks.begin(); b != blocks.end(); ++b) {
      auto it = std::find(b->outstanding.begin(), b->outstanding.end(), p);
      if (it == b->outstanding.end()) continue;
      b->outstanding.erase(it);
      if (b->outstanding.empty() && !b->graph_alive) {  // the graph went first: the block goes with its last tenant
        (void)free_async(b->base, s);
        blocks.erase(b);
        detail::recorded_block_count().fetch_sub(1, std::memory_order_acq_rel);
      }
      return;
    }
  }
  if (allocation_meter* m = allocation_meter::current(); m && m->stream_ == s) m->note_free(p);
  (void)free_async(p, s);  // never throws: called from destructors
}
// Hands the current device's pooled memory back to the driver, keeping `keep_bytes`, once the
// work that used it has finished.
inline void trim_device_memory(std::size_t keep_bytes = 0) { MXKIT_GPU_CHECK(mem_pool_trim_to(detail::device_pool(), keep_bytes)); }

// Bytes mxkit's pool on the current device holds from the driver (in use or kept for reuse).
inline std::size_t pool_reserved_bytes() {
  std::uint64_t bytes = 0;
  MXKIT_GPU_CHECK(mem_pool_reserved_bytes(detail::device_pool(), &bytes));
  return static_cast<std::size_t>(bytes);
}

// Free and total device memory as the runtime reports them (what the driver has not handed out;
// memory kept by the pool counts as used).
struct device_memory_info {
  std::size_t free_bytes = 0, total_bytes = 0;
};
inline device_memory_info memory_info() {
  device_memory_info m;
  MXKIT_GPU_CHECK(mem_get_info(&m.free_bytes, &m.total_bytes));
  return m;
}

// Owning, move-only device allocation of n objects of trivially copyable T, stream-ordered on the
// stream given at construction (default: the null stream): allocated in its order, freed in its
// order (see the file comment for use on other streams). The null-stream constructor waits for
// the allocation, so such a buffer is usable on any stream at once, as a plain malloc would be.
template <class T>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "device buffers hold trivially copyable objects");

 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t n, stream_t s = nullptr) : stream_(s) {
    mxkit::detail::require(n <= ~std::size_t{0} / sizeof(T), "device_buffer: ", n, " objects of ", sizeof(T),
                           " bytes overflow the address space");
    data_ = static_cast<T*>(allocate_async(n * sizeof(T), s));
    size_ = n;
    if (n && s == nullptr) MXKIT_GPU_CHECK(stream_synchronize(nullptr));
  }
  explicit device_buffer(std::span<const T> host, stream_t s = nullptr) : device_buffer(host.size(), s) { copy_from(host, s); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), stream_(o.stream_) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      stream_ = o.stream_;
    }
    return *this;
  }
  ~device_buffer() { release(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  stream_t stream() const noexcept { return stream_; }

  // Asynchronous on `s`; the host span must stay alive until the stream reaches the copy.
  void copy_from(std::span<const T> host, stream_t s = nullptr) {
    mxkit::detail::require(host.size() == size_, "device_buffer::copy_from: ", host.size(), " objects into a buffer of ", size_);
    if (size_) MXKIT_GPU_CHECK(memcpy_async(data_, host.data(), bytes(), copy_kind::host_to_device, s));
  }
  // Synchronous: returns once the data is on the host.
  std::vector<T> to_host(stream_t s = nullptr) const {
    std::vector<T> out(size_);
    if (size_) {
      MXKIT_GPU_CHECK(memcpy_async(out.data(), data_, bytes(), copy_kind::device_to_host, s));
      MXKIT_GPU_CHECK(stream_synchronize(s));
    }
    return out;
  }
  void fill_bytes(std::uint8_t value, stream_t s = nullptr) {
    if (size_) MXKIT_GPU_CHECK(memset_async(data_, value, bytes(), s));
  }

 private:
  void release() noexcept {
    deallocate_async(data_, stream_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
  stream_t stream_ = nullptr;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
