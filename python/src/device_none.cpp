// SPDX-License-Identifier: Apache-2.0
// The device half in a module built without a GPU backend (MXKIT_GPU=OFF): every call says so.
#include <stdexcept>

#include "device.hpp"

namespace mxkit_python::device {
namespace {
[[noreturn]] void no_gpu() {
  throw std::runtime_error("mxkit was built without a GPU backend: rebuild the Python module with MXKIT_GPU=CUDA (docs/python.md)");
}
}  // namespace

bool built() noexcept { return false; }
pool_block::pool_block(std::size_t, int, std::uintptr_t) { no_gpu(); }
pool_block::~pool_block() = default;
void pool_block::used_on(std::uintptr_t) { no_gpu(); }
void quantize(const void*, input_type, std::size_t, std::size_t, std::size_t, mxkit::mx_type, const mxkit::quantize_options&,
              const quantize_targets&, int, std::uintptr_t) {
  no_gpu();
}
void gemm(mxkit::mx_const_view, mxkit::mx_const_view, void*, bool, std::size_t, float, int, std::uintptr_t) { no_gpu(); }
void gemm_sides(const gemm_side&, const gemm_side&, void*, bool, std::size_t, float, int, std::uintptr_t) { no_gpu(); }
void quantize_nvfp4(const void*, input_type, std::size_t, std::size_t, std::size_t, const mxkit::block_format&, const mxkit::nvfp4_options&,
                    std::optional<float>, const nvfp4_targets&, int, std::uintptr_t) {
  no_gpu();
}
void nvfp4_amax(const void*, input_type, std::size_t, std::size_t, std::size_t, const mxkit::block_format&, const mxkit::nvfp4_options&,
                mxkit::block_axis, float*, int, std::uintptr_t) {
  no_gpu();
}
void nvfp4_gemm(const mxkit::nvfp4_const_view&, const float*, const mxkit::nvfp4_const_view&, const float*, void*, bool, std::size_t, float, int,
                std::uintptr_t) {
  no_gpu();
}
void stream_wait(std::uintptr_t, std::uintptr_t, int) { no_gpu(); }
void fp8_cast(const void*, input_type, std::size_t, std::size_t, std::size_t, mxkit::fp8_type, const float*, float*, const fp8_cast_targets&,
              int, std::uintptr_t) {
  no_gpu();
}
void fp8_gemm(const std::uint8_t*, mxkit::fp8_type, const float*, const std::uint8_t*, mxkit::fp8_type, const float*, std::size_t,
              std::size_t, std::size_t, void*, bool, int, std::uintptr_t) {
  no_gpu();
}
void update_scales(float*, float*, const float*, std::size_t, std::size_t, const mxkit::nn::delayed_scaling_config&, int, std::uintptr_t) {
  no_gpu();
}
linear_step_result linear_steps(const linear_step_args&) { no_gpu(); }

}  // namespace mxkit_python::device
