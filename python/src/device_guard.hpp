// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the module's device units (device.cu, device_nvfp4.cu; nvcc only) share: the DLPack
// stream integer as a runtime stream, and the device made current for one call.
#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/runtime.hpp>

#include <cstdint>

namespace mxkit_python::device {

inline mxkit::gpu::stream_t as_stream(std::uintptr_t s) noexcept {  // 1, 2: the legacy and per-thread defaults
  return reinterpret_cast<mxkit::gpu::stream_t>(s);
}

// Makes `device_id` current for one call, as torch's device guard does.
class device_guard {
 public:
  explicit device_guard(int device_id) {
    MXKIT_GPU_CHECK(mxkit::gpu::get_device(&previous_));
    changed_ = device_id != previous_;
    if (changed_) MXKIT_GPU_CHECK(mxkit::gpu::set_device(device_id));
  }
  ~device_guard() {
    if (changed_) (void)mxkit::gpu::set_device(previous_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace mxkit_python::device
