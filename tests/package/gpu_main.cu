// SPDX-License-Identifier: Apache-2.0
// The GPU consumer of tests/package (CONSUME_CUDA=ON), with gpu_second.cu: two .cu files of a
// project that links mxkit::gpu and nothing else (no include path, no -std, no runtime library,
// no mxkit option of its own). Both include kernel-defining GPU headers, so the program links
// only if those headers can be included from two units. A kernel quantizes one MXFP4 block with
// mxkit's device functions; the second unit checks an MXFP8 scale; the host side uses mxkit's
// runtime layer. ctest runs it: without a GPU it exits 77 (skipped), on a GPU it exits 1 if the
// device's bytes differ from the host's.
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include <mxkit/block/pack.hpp>
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/runtime.hpp>

using fp4 = mxkit::mx_format<mxkit::mx_type::mxfp4>;

std::uint8_t second_unit_block_scale(const std::vector<float>& x, std::uint8_t* host_bits);  // gpu_second.cu

__global__ void quantize_one_block(const float* x, std::uint8_t* out) {  // 16 packed bytes + scale
  float v[mxkit::mx_block_size];
  for (int i = 0; i < mxkit::mx_block_size; ++i) v[i] = x[i];
  const mxkit::mx_block<fp4> q = mxkit::quantize_block<fp4>(v, mxkit::quantize_options{}, 0);
  for (int i = 0; i < mxkit::mx_block_size / 2; ++i) out[i] = mxkit::pack_fp4x2(q.elements[2 * i].bits(), q.elements[2 * i + 1].bits());
  out[mxkit::mx_block_size / 2] = q.scale.bits();
}

int main() {
  namespace gpu = mxkit::gpu;
  if (gpu::device_count() == 0) {
    std::printf("no GPU: built only\n");
    return 77;
  }
  std::vector<float> x(mxkit::mx_block_size);
  for (int i = 0; i < mxkit::mx_block_size; ++i) x[i] = 0.25f * static_cast<float>(i - 13);
  gpu::device_buffer<float> dx{std::span<const float>(x)};
  gpu::device_buffer<std::uint8_t> out(mxkit::mx_block_size / 2 + 1);
  quantize_one_block<<<1, 1>>>(dx.data(), out.data());
  MXKIT_GPU_CHECK_LAUNCH();
  const std::vector<std::uint8_t> got = out.to_host();
  const mxkit::mx_block<fp4> q = mxkit::quantize_block<fp4>(x.data(), mxkit::quantize_options{}, 0);
  bool same = got[mxkit::mx_block_size / 2] == q.scale.bits();
  for (int i = 0; i < mxkit::mx_block_size / 2; ++i)
    same = same && got[i] == mxkit::pack_fp4x2(q.elements[2 * i].bits(), q.elements[2 * i + 1].bits());
  std::printf("device block %s the host's\n", same ? "equals" : "DIFFERS from");
  std::uint8_t host_scale = 0;
  const std::uint8_t device_scale = second_unit_block_scale(x, &host_scale);
  std::printf("second unit: MXFP8 scale 0x%02x on the device, 0x%02x on the host\n", device_scale, host_scale);
  return same && device_scale == host_scale ? 0 : 1;
}
