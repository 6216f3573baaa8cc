// SPDX-License-Identifier: Apache-2.0
// Example 02: your own GPU kernel calls mxkit's device functions. A fused "activation + MXFP4
// quantize" kernel, as a ROCm or CUDA training framework would write it: each thread computes
// 32 values of squared ReLU (Primer; relu(x)^2, exact on any IEEE machine) in registers, quantizes them as one MX block with the 16-point Hadamard
// rotation (mxkit::quantize_block, the same function the host reference and mxkit's own kernels
// call), packs FP4 two per byte (element 2i in the low nibble) and writes the E8M0 scale in the
// layout cuBLAS expects. The same source compiles with nvcc and with hipcc/clang in HIP mode;
// nothing in it names a vendor API except through <mxkit/gpu/runtime.hpp>.
// Checks every output byte against the host (the same functions on the CPU) and prints a few.
// Without a GPU it says so and exits 0 (77 when MXKIT_SKIP_EXIT_CODE=77, as ctest runs it).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include <mxkit/block/pack.hpp>
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/scale_layout.hpp>

#include "example_arguments.hpp"

namespace {

constexpr int rows = 256, cols = 512;  // (tokens, channels); blocks of 32 along channels
constexpr int blocks_per_row = cols / mxkit::mx_block_size;
using fp4 = mxkit::mx_format<mxkit::mx_type::mxfp4>;  // the MXFP4 descriptor: E2M1 elements, packed

// Your math, in host and device code alike (no transcendental: host libm and device math
// functions may differ in the last bit, and then so could a quantized code).
MXKIT_HD float relu2(float x) { return x > 0.0f ? x * x : 0.0f; }

// One thread per 32-element block: x (rows, cols) row-major -> packed (rows, cols/2) FP4 bytes
// and one E8M0 scale per block at its cuBLAS 128x4 position.
__global__ void relu2_mxfp4(const float* x, std::uint8_t* packed, std::uint8_t* scales, mxkit::quantize_options o) {
  const int b = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b >= rows * blocks_per_row) return;
  const int row = b / blocks_per_row, blk = b % blocks_per_row;
  float v[mxkit::mx_block_size];  // the block lives in registers
  for (int i = 0; i < mxkit::mx_block_size; ++i) v[i] = relu2(x[row * cols + blk * mxkit::mx_block_size + i]);
  const mxkit::mx_block<fp4> q = mxkit::quantize_block<fp4>(v, o, static_cast<std::uint64_t>(b) * 32);
  for (int i = 0; i < mxkit::mx_block_size / 2; ++i)
    packed[b * 16 + i] = mxkit::pack_fp4x2(q.elements[2 * i].bits(), q.elements[2 * i + 1].bits());
  scales[mxkit::scale_offset(mxkit::scale_layout::cublas_128x4, rows, blocks_per_row, row, blk)] = q.scale.bits();
}

// The usage (example_arguments.hpp: --help, and any other argument refused).
constexpr const char* usage =
    "usage: 02_embed_device_quantize [--help]\n"
    "Runs a user's own kernel (squared ReLU, then MXFP4 with the Hadamard rotation, cuBLAS 128x4 scales)\n"
    "that calls mxkit's device functions, and checks every byte against the host. Needs a GPU; without\n"
    "one it says so and exits 0.\n";

}  // namespace

int main(int argc, char** argv) {
  if (const int stop = example::no_arguments(argc, argv, "02_embed_device_quantize", usage); stop >= 0) return stop;
  namespace gpu = mxkit::gpu;
  if (gpu::device_count() == 0) {
    std::printf("no GPU here: the kernel was compiled; run this on a machine with a GPU\n");
    const char* code = std::getenv("MXKIT_SKIP_EXIT_CODE");
    return code ? std::atoi(code) : 0;
  }
  std::vector<float> x(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 3.0f * std::sin(0.013f * static_cast<float>(i)) + (i % 97 == 0 ? 20.0f : 0.0f);
  mxkit::quantize_options o;
  o.hadamard = true;  // the MXFP4 recipe's rotation; o.rule, o.round, o.seed as the recipe says

  const std::size_t scale_bytes = mxkit::scale_storage_size(mxkit::scale_layout::cublas_128x4, rows, blocks_per_row);
  gpu::device_buffer<float> dx{std::span<const float>(x)};
  gpu::device_buffer<std::uint8_t> packed(rows * cols / 2), scales(scale_bytes);
  scales.fill_bytes(0);  // padding of the 128x4 tiles (none at this shape)
  const int threads = 128, grid = (rows * blocks_per_row + threads - 1) / threads;
  relu2_mxfp4<<<grid, threads>>>(dx.data(), packed.data(), scales.data(), o);
  MXKIT_GPU_CHECK_LAUNCH();
  const std::vector<std::uint8_t> got = packed.to_host(), got_scales = scales.to_host();

  // The same computation on the host: identical bytes expected.
  std::size_t bad = 0;
  for (int b = 0; b < rows * blocks_per_row; ++b) {
    const int row = b / blocks_per_row, blk = b % blocks_per_row;
    float v[mxkit::mx_block_size];
    for (int i = 0; i < mxkit::mx_block_size; ++i) v[i] = relu2(x[row * cols + blk * mxkit::mx_block_size + i]);
    const auto q = mxkit::quantize_block<fp4>(v, o, static_cast<std::uint64_t>(b) * 32);
    for (int i = 0; i < 16; ++i) bad += got[b * 16 + i] != mxkit::pack_fp4x2(q.elements[2 * i].bits(), q.elements[2 * i + 1].bits());
    bad += got_scales[mxkit::scale_offset(mxkit::scale_layout::cublas_128x4, rows, blocks_per_row, row, blk)] != q.scale.bits();
  }
  std::printf("relu^2 + Hadamard + MXFP4 in a user kernel on %s: %d blocks, %zu packed bytes, %zu scale bytes (cuBLAS layout)\n",
              gpu::properties().name, rows * blocks_per_row, got.size(), got_scales.size());
  std::printf("block 0: scale 2^%d, first bytes %02x %02x %02x %02x\n", mxkit::e8m0::from_bits(got_scales[0]).exponent(), got[0],
              got[1], got[2], got[3]);
  std::printf("device bytes equal to the host's: %s\n", bad == 0 ? "yes" : "NO");
  return bad == 0 ? 0 : 1;
}
