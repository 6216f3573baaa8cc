// SPDX-License-Identifier: Apache-2.0
#pragma once
// The device half of the Python module, as plain C++ (no CUDA type crosses this line): the
// binding (module.cpp, a host compiler) calls these; device.cu (nvcc, MXKIT_GPU=CUDA) defines
// them over mxkit's GPU launchers (gpu/quantize.hpp, gpu/gemm/gemm.hpp); device_none.cpp, in a
// host-only build, throws from each. Streams are the DLPack integers: a cudaStream_t's value,
// 1 the legacy default stream, 2 the per-thread default stream, 0 the null stream.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include <mxkit/block/quantize_options.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

namespace mxkit_python::device {

bool built() noexcept;  // the module has a GPU backend

// Device memory for results whose input came from a framework that does not allocate them for
// us (torch and CuPy do): a block of mxkit's stream-ordered pool (gpu/memory.hpp), allocated on
// `stream` and freed there, never with cudaMalloc / cudaFree per call (cudaFree waits for the
// whole device). A stream it is handed to through DLPack (used_on) has an event recorded when
// the block is freed, which the free waits for: the consumer's work enqueued so far finishes
// before the memory is reused, as torch's record_stream arranges for its own blocks.
class pool_block {
 public:
  pool_block(std::size_t bytes, int device_id, std::uintptr_t stream);
  ~pool_block();
  pool_block(const pool_block&) = delete;
  pool_block& operator=(const pool_block&) = delete;
  void* data() const noexcept { return data_; }
  void used_on(std::uintptr_t stream);

 private:
  void* data_ = nullptr;
  int device_id_ = 0;
  std::uintptr_t stream_ = 0;
  std::mutex users_mutex_;  // exports (with the GIL) and the free (from any thread) may meet
  std::vector<std::uintptr_t> users_;
};

enum class input_type : std::uint8_t { f32, bf16, f16 };

// The copies one quantize call writes; a null data pointer skips that copy.
struct quantize_targets {
  std::uint8_t* rowwise_data = nullptr;
  std::uint8_t* rowwise_scales = nullptr;
  std::uint8_t* columnwise_data = nullptr;
  std::uint8_t* columnwise_scales = nullptr;
  mxkit::scale_layout scales = mxkit::scale_layout::row_major;
};
void quantize(const void* in, input_type type, std::size_t rows, std::size_t cols, std::size_t ld, mxkit::mx_type format,
              const mxkit::quantize_options& options, const quantize_targets& out, int device_id, std::uintptr_t stream);

// D[P,Q] = alpha * A[P,R] . B[Q,R]^T on two device copies in mxkit's storage (row-major scales).
void gemm(mxkit::mx_const_view a, mxkit::mx_const_view b, void* d, bool bf16_output, std::size_t ld, float alpha, int device_id,
          std::uintptr_t stream);

// Makes `consumer` wait for the work enqueued on `producer` so far (an event; no host wait).
void stream_wait(std::uintptr_t consumer, std::uintptr_t producer, int device_id);

}  // namespace mxkit_python::device
