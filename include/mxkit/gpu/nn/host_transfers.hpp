// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host <-> device transfers of the device backend (gpu/nn/backend.hpp) through page-locked host
// memory: the upload staging ring, the page-locked host arrays of the healing stash, waiting
// downloads, and the bookkeeping that keeps a host copy alive while an asynchronous upload still reads it. A copy
// from page-locked memory is asynchronous (the copy engine); from pageable memory the runtime
// stages it and returns only when the source may be reused, which would stall the host.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <mxkit/gpu/platform.hpp>  // first: the vendor runtime before any MXKIT_HD code

#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/operand.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// `bytes` of page-locked host memory, freed with the last handle.
inline std::shared_ptr<std::uint8_t[]> alloc_pinned_host(std::size_t bytes) {
  void* p = nullptr;
  MXKIT_GPU_CHECK(malloc_host_pinned(&p, bytes ? bytes : 1));
  return std::shared_ptr<std::uint8_t[]>(static_cast<std::uint8_t*>(p), [](std::uint8_t* d) { (void)free_host_pinned(d); });
}

// Device -> host: `bytes` at `src` once everything enqueued on `s` so far has run (waits).
inline std::vector<std::uint8_t> download_bytes(const void* src, std::size_t bytes, stream_t s) {
  std::vector<std::uint8_t> out(bytes);
  if (bytes) MXKIT_GPU_CHECK(memcpy_async(out.data(), src, bytes, copy_kind::device_to_host, s));
  MXKIT_GPU_CHECK(stream_synchronize(s));
  return out;
}

// Host -> device through page-locked staging memory, so the copy is asynchronous. The staging
// buffers form a ring: an upload waits only for the upload that last used its slot, several
// uploads back (a step uploads its tokens and targets, so the host may run a few steps ahead of
// the device instead of waiting for the previous step at every upload).
class staging_ring {
 public:
  staging_ring() = default;
  staging_ring(const staging_ring&) = delete;
  staging_ring& operator=(const staging_ring&) = delete;
  ~staging_ring() { release(); }

  void upload(void* dst, const void* src, std::size_t bytes, stream_t s) {
    if (bytes == 0) return;
    // Under stream capture the copy would be recorded from the slot's address and read again at
    // every replay, long after the slot was reused (and the wait below may not be captured).
    bool capturing = false;
    MXKIT_GPU_CHECK(stream_is_capturing(s, &capturing));
    mxkit::detail::require(!capturing, "device_backend: an upload of ", bytes,
                           " bytes from host memory inside a recorded step graph; upload before the step (nn/step_graph.hpp)");
    slot& sl = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    if (sl.done) MXKIT_GPU_CHECK(event_synchronize(sl.done));
    else MXKIT_GPU_CHECK(event_create_timing_off(&sl.done));
    if (bytes > sl.bytes) {
      if (sl.memory) MXKIT_GPU_CHECK(free_host_pinned(sl.memory));
      sl.memory = nullptr;
      sl.bytes = 0;
      MXKIT_GPU_CHECK(malloc_host_pinned(&sl.memory, bytes));
      sl.bytes = bytes;
    }
    std::memcpy(sl.memory, src, bytes);
    MXKIT_GPU_CHECK(memcpy_async(dst, sl.memory, bytes, copy_kind::host_to_device, s));
    MXKIT_GPU_CHECK(event_record(sl.done, s));
  }
  // Frees every slot; the streams that read them must have finished.
  void release() noexcept {
    for (slot& sl : slots_) {
      if (sl.memory) (void)free_host_pinned(sl.memory);
      if (sl.done) (void)event_destroy(sl.done);
      sl = {};
    }
  }

 private:
  struct slot {
    void* memory = nullptr;
    std::size_t bytes = 0;
    event_t done = nullptr;  // recorded after the slot's last upload
  };
  std::array<slot, 8> slots_{};
  std::size_t next_ = 0;
};

// The host codes of an upload in flight on a copy stream stay alive (a shared owner kept here)
// until the copy has finished: a caller may drop its host_fp8 as soon as import_fp8 returns.
// Finished ones are let go at the next keep() and whenever release_finished() is called.
class uploads_in_flight {
 public:
  uploads_in_flight() = default;
  uploads_in_flight(const uploads_in_flight&) = delete;
  uploads_in_flight& operator=(const uploads_in_flight&) = delete;
  ~uploads_in_flight() { release_finished(); }

  // Keeps `host` until everything enqueued on `copy_stream` so far has run.
  void keep(const nn::host_fp8& host, stream_t copy_stream) {
    release_finished();
    event_t done = nullptr;
    MXKIT_GPU_CHECK(event_create_timing_off(&done));
    MXKIT_GPU_CHECK(event_record(done, copy_stream));
    list_.push_back({host, done});
  }
  void release_finished() noexcept {
    std::erase_if(list_, [](const entry& f) {
      if (event_query(f.done) != success) return false;
      (void)event_destroy(f.done);
      return true;
    });
  }

 private:
  struct entry {
    nn::host_fp8 host;
    event_t done;
  };
  std::vector<entry> list_;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
