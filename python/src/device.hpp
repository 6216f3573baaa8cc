// SPDX-License-Identifier: Apache-2.0
#pragma once
// The device half of the Python module, as plain C++ (no CUDA type crosses this line): the
// binding (module.cpp, a host compiler) calls these; device.cu (nvcc, MXKIT_GPU=CUDA) defines
// them over mxkit's GPU launchers (gpu/quantize.hpp, gpu/gemm/gemm.hpp), device_nvfp4.cu over the
// NVFP4 ones (gpu/quantize_nvfp4.hpp, gpu/gemm/nvfp4.hpp); device_none.cpp, in a host-only build,
// throws from each. Streams are the DLPack integers: a cudaStream_t's value,
// 1 the legacy default stream, 2 the per-thread default stream, 0 the null stream.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include <mxkit/block/quantize_options.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

#include "linear_step.hpp"  // linear_steps: the C++ linear on a device_backend

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
  // MXFP8 from a 16-bit input: the copies hold bf16 values (gpu::quantize_outputs::values_as_bf16),
  // and beyond_exact_range (one device int) gets the quantizer's flag.
  int* beyond_exact_range = nullptr;
};
void quantize(const void* in, input_type type, std::size_t rows, std::size_t cols, std::size_t ld, mxkit::mx_type format,
              const mxkit::quantize_options& options, const quantize_targets& out, int device_id, std::uintptr_t stream);

// D[P,Q] = alpha * A[P,R] . B[Q,R]^T on two device copies in mxkit's storage (row-major scales).
void gemm(mxkit::mx_const_view a, mxkit::mx_const_view b, void* d, bool bf16_output, std::size_t ld, float alpha, int device_id,
          std::uintptr_t stream);

// The same product where either side may be an MXFP8 copy held as bf16 values (mxkit.torch.Linear's
// MXFP8 route on a CUDA device: the rowwise copies, against the kept columnwise copies of codes):
// `values` non-null makes the side's view an mx_values_view with view.data as the values and
// *values as its flag.
struct gemm_side {
  mxkit::mx_const_view view;
  const int* values = nullptr;
};
void gemm_sides(const gemm_side& a, const gemm_side& b, void* d, bool bf16_output, std::size_t ld, float alpha, int device_id,
                std::uintptr_t stream);

// NVFP4 (gpu/quantize_nvfp4.hpp): the copies one quantize_nvfp4 call writes, each with its
// tensor scale as one device float (written there, never read back: no call waits for the
// device). A null data pointer skips that copy; an empty input's copies hold no byte, so there
// the tensor-scale pointer alone asks for the copy (gpu::quantize_nvfp4's rule).
struct nvfp4_targets {
  std::uint8_t* rowwise_data = nullptr;
  std::uint8_t* rowwise_scales = nullptr;
  float* rowwise_tensor_scale = nullptr;
  std::uint8_t* columnwise_data = nullptr;
  std::uint8_t* columnwise_scales = nullptr;
  float* columnwise_tensor_scale = nullptr;
  mxkit::scale_layout scales = mxkit::scale_layout::row_major;
};
// tensor_scale: the value to store for both copies, or none (each copy's from its amax).
void quantize_nvfp4(const void* in, input_type type, std::size_t rows, std::size_t cols, std::size_t ld, const mxkit::block_format& format,
                    const mxkit::nvfp4_options& options, std::optional<float> tensor_scale, const nvfp4_targets& out, int device_id,
                    std::uintptr_t stream);

// The amax the `axis` copy's tensor scale comes from (gpu::nvfp4_amax) into one device float.
void nvfp4_amax(const void* in, input_type type, std::size_t rows, std::size_t cols, std::size_t ld, const mxkit::block_format& format,
                const mxkit::nvfp4_options& options, mxkit::block_axis axis, float* amax, int device_id, std::uintptr_t stream);

// D[P,Q] = alpha * A[P,R] . B[Q,R]^T on two device NVFP4 copies in mxkit's storage (any block
// shape and scale layout), each tensor scale read from its device float.
void nvfp4_gemm(const mxkit::nvfp4_const_view& a, const float* a_tensor_scale, const mxkit::nvfp4_const_view& b, const float* b_tensor_scale,
                void* d, bool bf16_output, std::size_t ld, float alpha, int device_id, std::uintptr_t stream);

// FP8 delayed scaling (nn/delayed_scaling.hpp), what mxkit.torch.Linear's FP8 recipe runs: the
// cast of gpu::cast_fp8_delayed (code = cast(x * *scale), saturating; the amax max-combined into
// *history where given; the scale used written beside each copy), the per-tensor FP8 GEMM with
// the descales read from device memory (D[P,Q] = A[P,R] . B[Q,R]^T / (*a_scale * *b_scale)), and
// the fused update of a scaling table (gpu::update_scales). Null outputs are skipped.
struct fp8_cast_targets {
  std::uint8_t* data = nullptr;        // [rows, cols]
  std::uint8_t* transposed = nullptr;  // [cols, rows]
  float* data_scale = nullptr;
  float* transposed_scale = nullptr;
};
void fp8_cast(const void* in, input_type type, std::size_t rows, std::size_t cols, std::size_t ld, mxkit::fp8_type format,
              const float* scale, float* history, const fp8_cast_targets& out, int device_id, std::uintptr_t stream);
void fp8_gemm(const std::uint8_t* a, mxkit::fp8_type a_type, const float* a_scale, const std::uint8_t* b, mxkit::fp8_type b_type,
              const float* b_scale, std::size_t p, std::size_t q, std::size_t r, void* d, bool bf16_output, int device_id,
              std::uintptr_t stream);
void update_scales(float* history, float* scale, const float* fp8_max, std::size_t rows, std::size_t history_length,
                   const mxkit::nn::delayed_scaling_config& config, int device_id, std::uintptr_t stream);

// mxkit's C++ linear for a few steps on a gpu::device_backend of its own (linear_step.hpp; the
// Python tests' oracle of mxkit.torch.Linear on the GPU). Waits for the device (it reads results).
linear_step_result linear_steps(const linear_step_args& args);

// Makes `consumer` wait for the work enqueued on `producer` so far (an event; no host wait).
void stream_wait(std::uintptr_t consumer, std::uintptr_t producer, int device_id);

}  // namespace mxkit_python::device
