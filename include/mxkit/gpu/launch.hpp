// SPDX-License-Identifier: Apache-2.0
#pragma once
// Launch helpers shared by mxkit's launchers: the persistent-grid size of a kernel on the current
// device and the alignment checks of vector stores.
#include <atomic>
#include <cstddef>
#include <cstdint>

#include <mxkit/error.hpp>
#include <mxkit/gpu/platform.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

// Persistent grid: as many CTAs of `threads` threads (the kernel's one block size) as fit on the
// device at once, or fewer if there are fewer tiles. The occupancy query runs once per kernel
// and device: a quantize call is a few microseconds of GPU time, and the query costs about as
// much host time.
template <auto Kernel>
inline int persistent_grid(int threads, std::size_t tiles) {
  constexpr int max_devices = 64;
  static std::atomic<int> known[max_devices] = {};  // resident CTAs per device, 0 until queried
  int dev = 0;
  MXKIT_GPU_CHECK(get_device(&dev));
  int resident = dev >= 0 && dev < max_devices ? known[dev].load(std::memory_order_relaxed) : 0;
  if (resident == 0) {
    int sms = 0, per_sm = 0;
    MXKIT_GPU_CHECK(get_multiprocessor_count(&sms, dev));
    MXKIT_GPU_CHECK(max_active_blocks_per_multiprocessor(&per_sm, Kernel, threads, 0));
    resident = (per_sm < 1 ? 1 : per_sm) * sms;
    if (dev >= 0 && dev < max_devices) known[dev].store(resident, std::memory_order_relaxed);
  }
  return static_cast<int>(tiles < static_cast<std::size_t>(resident) ? tiles : static_cast<std::size_t>(resident));
}

// Kernels that store 16 bytes at a time need 16-byte aligned outputs.
inline void check_aligned16(const void* p, const char* entry, const char* what) {
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(p) % 16 == 0, entry, ": ", what,
                         " must be 16-byte aligned (it is written 16 bytes at a time)");
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
