// SPDX-License-Identifier: Apache-2.0
#pragma once
// A tensor the Python module reads or returns, on the host or a GPU, without a copy: the
// pointer, dtype, shape and strides, and a shared owner that keeps the memory alive (the
// producer's DLPack deleter, a Python buffer view, or a block of mxkit's device pool). Imported from
// a DLPack capsule or the buffer protocol, exported as a DLPack capsule (legacy or versioned).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dlpack.hpp"

namespace mxkit_python {
namespace device {
class pool_block;  // device.hpp
}

struct tensor_ref {
  void* data = nullptr;
  dlpack::DLDevice device{dlpack::kDLCPU, 0};
  dlpack::DLDataType dtype{dlpack::kDLUInt, 8, 1};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // elements; empty: compact row-major
  std::shared_ptr<void> owner;
  std::shared_ptr<device::pool_block> pool;  // results in mxkit's device pool: exports name their consumer streams to it
  std::uintptr_t stream = 0;  // device results: the stream their writes were enqueued on
  bool read_only = false;

  bool on_host() const noexcept { return device.device_type == dlpack::kDLCPU || device.device_type == dlpack::kDLCUDAHost; }
  bool on_cuda() const noexcept { return device.device_type == dlpack::kDLCUDA || device.device_type == dlpack::kDLCUDAManaged; }
  std::size_t itemsize() const noexcept { return (dtype.bits * dtype.lanes + 7u) / 8u; }
  std::size_t elements() const noexcept {
    std::size_t n = 1;
    for (std::int64_t s : shape) n *= static_cast<std::size_t>(s);
    return n;
  }
  std::size_t nbytes() const noexcept { return elements() * itemsize(); }
  // Compact row-major (strides absent or equal to the compact ones; extent-1 axes are free).
  bool compact() const noexcept {
    if (strides.empty()) return true;
    // No element, no address to get wrong: frameworks give empty tensors strides of their own
    // (torch: [K, 0] has strides [1, 1]), which the loop below would refuse.
    for (const std::int64_t n : shape)
      if (n == 0) return true;
    std::int64_t expect = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
      if (shape[i] != 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  }
  std::string dtype_name() const;
  std::string describe() const;  // "float32 [64, 128] on cpu"
};

}  // namespace mxkit_python
