// SPDX-License-Identifier: Apache-2.0
// The second CUDA translation unit of tests/package's GPU consumer. It includes the same
// kernel-defining GPU headers as gpu_main.cu, so the program links only if those headers can be
// included from two units, and computes one MXFP8 block's shared scale on the device.
#include <cstdint>
#include <span>
#include <vector>

#include <mxkit/block/quantize_block.hpp>
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/runtime.hpp>

namespace {
__global__ void block_scale(const float* x, std::uint8_t* out) {
  const mxkit::mx_block<mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>> q = mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>>(x, mxkit::quantize_options{}, 0);
  *out = q.scale.bits();
}
}  // namespace

// The device's E8M0 scale bits for the 32-element block x, and the host's in *host_bits.
std::uint8_t second_unit_block_scale(const std::vector<float>& x, std::uint8_t* host_bits) {
  namespace gpu = mxkit::gpu;
  gpu::device_buffer<float> dx{std::span<const float>(x)};
  gpu::device_buffer<std::uint8_t> out(1);
  block_scale<<<1, 1>>>(dx.data(), out.data());
  MXKIT_GPU_CHECK_LAUNCH();
  *host_bits = mxkit::quantize_block<mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>>(x.data(), mxkit::quantize_options{}, 0).scale.bits();
  return out.to_host()[0];
}
