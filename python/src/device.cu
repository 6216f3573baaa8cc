// SPDX-License-Identifier: Apache-2.0
// The device half of the Python module under nvcc (MXKIT_GPU=CUDA): mxkit's own launchers on the
// caller's stream, writing into memory the caller's framework allocated (torch, CuPy) or into
// blocks of mxkit's stream-ordered pool (pool_block, device.hpp). No call waits for the device.
#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/fp8_cast.hpp>
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/delayed_scaling.hpp>
#include <mxkit/gpu/quantize.hpp>

#include <type_traits>

#include "device.hpp"
#include "device_guard.hpp"

namespace mxkit_python::device {

bool built() noexcept { return true; }

pool_block::pool_block(std::size_t bytes, int device_id, std::uintptr_t stream) : device_id_(device_id), stream_(stream) {
  device_guard g(device_id);
  // Never a null pointer, even for an empty result: a DLPack consumer may look the pointer up
  // (torch's from_blob asks the driver which device it is on).
  data_ = mxkit::gpu::allocate_async(bytes == 0 ? 1 : bytes, as_stream(stream));
}
void pool_block::used_on(std::uintptr_t stream) {
  const std::lock_guard<std::mutex> lock(users_mutex_);
  for (std::uintptr_t s : users_)
    if (s == stream) return;
  users_.push_back(stream);
}
pool_block::~pool_block() {
  // Errors are dropped: this runs from a DLPack deleter (noexcept), possibly at interpreter exit
  // after the CUDA context is gone; the pool frees everything with the context then.
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  (void)cudaSetDevice(device_id_);
  for (std::uintptr_t s : users_) {
    cudaEvent_t e{};
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) continue;
    if (cudaEventRecord(e, as_stream(s)) == cudaSuccess) (void)cudaStreamWaitEvent(as_stream(stream_), e, 0);
    (void)cudaEventDestroy(e);
  }
  mxkit::gpu::deallocate_async(data_, as_stream(stream_));
  (void)cudaSetDevice(previous);
}

void quantize(const void* in, input_type type, std::size_t rows, std::size_t cols, std::size_t ld, mxkit::mx_type format,
              const mxkit::quantize_options& options, const quantize_targets& out, int device_id, std::uintptr_t stream) {
  device_guard g(device_id);
  mxkit::gpu::quantize_outputs o{out.rowwise_data, out.rowwise_scales, out.scales, out.columnwise_data, out.columnwise_scales,
                                 out.scales, nullptr};
  o.values_as_bf16 = out.beyond_exact_range != nullptr;
  o.beyond_exact_range = out.beyond_exact_range;
  switch (type) {
    case input_type::f32:
      mxkit::gpu::quantize(mxkit::matrix_view<const float>{static_cast<const float*>(in), rows, cols, ld}, format, options, o, as_stream(stream));
      break;
    case input_type::bf16:
      mxkit::gpu::quantize(mxkit::matrix_view<const mxkit::bfloat16>{static_cast<const mxkit::bfloat16*>(in), rows, cols, ld}, format, options, o,
                           as_stream(stream));
      break;
    case input_type::f16:
      mxkit::gpu::quantize(mxkit::matrix_view<const mxkit::float16>{static_cast<const mxkit::float16*>(in), rows, cols, ld}, format, options, o,
                           as_stream(stream));
      break;
  }
}

void gemm(mxkit::mx_const_view a, mxkit::mx_const_view b, void* d, bool bf16_output, std::size_t ld, float alpha, int device_id,
          std::uintptr_t stream) {
  device_guard g(device_id);
  const std::size_t p = a.layout.rows, q = b.layout.rows;
  if (bf16_output)
    mxkit::gpu::gemm(a, b, mxkit::matrix_view<mxkit::bfloat16>{static_cast<mxkit::bfloat16*>(d), p, q, ld}, {alpha, 0.0f}, as_stream(stream));
  else
    mxkit::gpu::gemm(a, b, mxkit::matrix_view<float>{static_cast<float*>(d), p, q, ld}, {alpha, 0.0f}, as_stream(stream));
}

void gemm_sides(const gemm_side& a, const gemm_side& b, void* d, bool bf16_output, std::size_t ld, float alpha, int device_id,
                std::uintptr_t stream) {
  device_guard g(device_id);
  auto values = [](const gemm_side& s) {
    return mxkit::mx_values_view{s.view.layout, s.view.options, reinterpret_cast<const mxkit::bfloat16*>(s.view.data), s.view.scales, s.values};
  };
  const std::size_t p = a.view.layout.lines(), q = b.view.layout.lines();
  auto run = [&](const auto& sa, const auto& sb) {
    if (bf16_output)
      mxkit::gpu::gemm(sa, sb, mxkit::matrix_view<mxkit::bfloat16>{static_cast<mxkit::bfloat16*>(d), p, q, ld}, {alpha, 0.0f}, as_stream(stream));
    else
      mxkit::gpu::gemm(sa, sb, mxkit::matrix_view<float>{static_cast<float*>(d), p, q, ld}, {alpha, 0.0f}, as_stream(stream));
  };
  if (a.values && b.values) run(values(a), values(b));
  else if (a.values) run(values(a), b.view);
  else if (b.values) run(a.view, values(b));
  else run(a.view, b.view);
}

void fp8_cast(const void* in, input_type type, std::size_t rows, std::size_t cols, std::size_t ld, mxkit::fp8_type format,
              const float* scale, float* history, const fp8_cast_targets& out, int device_id, std::uintptr_t stream) {
  device_guard g(device_id);
  const mxkit::gpu::fp8_outputs o{out.data, out.transposed, nullptr, out.data_scale, out.transposed_scale};
  const auto cast = [&](auto* data) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(data)>>;
    mxkit::gpu::cast_fp8_delayed(mxkit::matrix_view<const T>{static_cast<const T*>(in), rows, cols, ld}, format, scale, history, o,
                                 mxkit::overflow::saturate, as_stream(stream));
  };
  switch (type) {
    case input_type::f32: cast(static_cast<const float*>(nullptr)); break;
    case input_type::bf16: cast(static_cast<const mxkit::bfloat16*>(nullptr)); break;
    case input_type::f16: cast(static_cast<const mxkit::float16*>(nullptr)); break;
  }
}

// The device backend's FP8 GEMM (gpu/nn/backend_adapters.hpp, run_gemm): operands as fp8 views
// with the descale read from each copy's device scale.
void fp8_gemm(const std::uint8_t* a, mxkit::fp8_type a_type, const float* a_scale, const std::uint8_t* b, mxkit::fp8_type b_type,
              const float* b_scale, std::size_t p, std::size_t q, std::size_t r, void* d, bool bf16_output, int device_id,
              std::uintptr_t stream) {
  device_guard g(device_id);
  mxkit::gpu::gemm_operand oa = mxkit::gpu::make_operand(mxkit::fp8_view{a_type, p, r, 1.0f, a});
  mxkit::gpu::gemm_operand ob = mxkit::gpu::make_operand(mxkit::fp8_view{b_type, q, r, 1.0f, b});
  oa.scale = a_scale;
  ob.scale = b_scale;
  const mxkit::gpu::gemm_output_desc out{d, d, q, q, bf16_output, 1.0f, 0.0f};
  mxkit::gpu::detail::run(oa, ob, out, as_stream(stream), {});
}

void update_scales(float* history, float* scale, const float* fp8_max, std::size_t rows, std::size_t history_length,
                   const mxkit::nn::delayed_scaling_config& config, int device_id, std::uintptr_t stream) {
  device_guard g(device_id);
  mxkit::gpu::update_scales(history, scale, fp8_max, rows, history_length, config, as_stream(stream));
}

void stream_wait(std::uintptr_t consumer, std::uintptr_t producer, int device_id) {
  device_guard g(device_id);
  cudaEvent_t e{};
  MXKIT_GPU_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  MXKIT_GPU_CHECK(cudaEventRecord(e, as_stream(producer)));
  MXKIT_GPU_CHECK(cudaStreamWaitEvent(as_stream(consumer), e, 0));
  MXKIT_GPU_CHECK(cudaEventDestroy(e));  // released once the wait is done with it
}

}  // namespace mxkit_python::device
