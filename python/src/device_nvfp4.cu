// SPDX-License-Identifier: Apache-2.0
// The NVFP4 half of the module's device code (nvcc, MXKIT_GPU=CUDA): gpu::quantize_nvfp4 and the
// NVFP4 GEMM (gpu/gemm/nvfp4.hpp) on the caller's stream, into memory the caller's framework or
// mxkit's pool allocated. A unit of its own: the NVFP4 kernels are header-only templates, and
// nothing in device.cu needs them. Each copy's tensor scale stays in device memory, where the
// quantizer writes it and the GEMM reads it: no call waits for the device.
#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/gemm/nvfp4.hpp>
#include <mxkit/gpu/quantize_nvfp4.hpp>

#include <type_traits>

#include "device.hpp"
#include "device_guard.hpp"

namespace mxkit_python::device {

void nvfp4_amax(const void* in, input_type type, std::size_t rows, std::size_t cols, std::size_t ld, const mxkit::block_format& format,
                const mxkit::nvfp4_options& options, mxkit::block_axis axis, float* amax, int device_id, std::uintptr_t stream) {
  device_guard g(device_id);
  const auto run = [&](auto* data) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(data)>>;
    mxkit::gpu::nvfp4_amax(mxkit::matrix_view<const T>{static_cast<const T*>(in), rows, cols, ld}, format, options,
                           axis == mxkit::block_axis::rowwise ? amax : nullptr, axis == mxkit::block_axis::columnwise ? amax : nullptr,
                           as_stream(stream));
  };
  switch (type) {
    case input_type::f32: run(static_cast<const float*>(nullptr)); break;
    case input_type::bf16: run(static_cast<const mxkit::bfloat16*>(nullptr)); break;
    case input_type::f16: run(static_cast<const mxkit::float16*>(nullptr)); break;
  }
}

void quantize_nvfp4(const void* in, input_type type, std::size_t rows, std::size_t cols, std::size_t ld, const mxkit::block_format& format,
                    const mxkit::nvfp4_options& options, std::optional<float> tensor_scale, const nvfp4_targets& out, int device_id,
                    std::uintptr_t stream) {
  device_guard g(device_id);
  const mxkit::gpu::nvfp4_outputs o{out.rowwise_data,      out.rowwise_scales,      out.scales, out.rowwise_tensor_scale,
                                    out.columnwise_data,   out.columnwise_scales,   out.scales, out.columnwise_tensor_scale,
                                    nullptr};
  const auto run = [&](auto* data) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(data)>>;
    mxkit::gpu::quantize_nvfp4(mxkit::matrix_view<const T>{static_cast<const T*>(in), rows, cols, ld}, format, options, o, tensor_scale,
                               as_stream(stream));
  };
  switch (type) {
    case input_type::f32: run(static_cast<const float*>(nullptr)); break;
    case input_type::bf16: run(static_cast<const mxkit::bfloat16*>(nullptr)); break;
    case input_type::f16: run(static_cast<const mxkit::float16*>(nullptr)); break;
  }
}

void nvfp4_gemm(const mxkit::nvfp4_const_view& a, const float* a_tensor_scale, const mxkit::nvfp4_const_view& b, const float* b_tensor_scale,
                void* d, bool bf16_output, std::size_t ld, float alpha, int device_id, std::uintptr_t stream) {
  device_guard g(device_id);
  const mxkit::gpu::nvfp4_operand oa(a, a_tensor_scale), ob(b, b_tensor_scale);
  const std::size_t p = a.layout.lines(), q = b.layout.lines();
  if (bf16_output)
    mxkit::gpu::gemm(oa, ob, mxkit::matrix_view<mxkit::bfloat16>{static_cast<mxkit::bfloat16*>(d), p, q, ld}, {alpha, 0.0f}, as_stream(stream));
  else
    mxkit::gpu::gemm(oa, ob, mxkit::matrix_view<float>{static_cast<float*>(d), p, q, ld}, {alpha, 0.0f}, as_stream(stream));
}

}  // namespace mxkit_python::device
