// SPDX-License-Identifier: Apache-2.0
#pragma once
// An NVFP4 copy (E2M1 codes, one E4M3 scale per 16 along the line; tensor/nvfp4_tensor.hpp) as a
// K-major bf16 matrix [lines, K] with each block's scale folded in: element x scale, exactly.
// The device NVFP4 GEMM (gpu/gemm/nvfp4.hpp) runs the bf16 GEMM on two such copies; why that is
// exact is argued there. Here: an E2M1 value (0, 0.5 .. 6) has at most 2 significant bits and an
// E4M3 scale at most 4, so their product has at most 6 and lies in [2^-10, 2688] (or is 0): a
// bf16 value (8 significant bits, fp32's exponent range), which is the upper half of the exact
// fp32 product. A NaN scale (0x7F, 0xFF) makes its block bf16 NaN; a zero scale (+-0) its
// block +-0; the elements and scales are decoded by the format types (e2m1, e4m3), as the host
// decode is (block/nvfp4_scale.hpp: nvfp4_decode, whose last factor, the tensor scale, the GEMM
// applies to the sums).
//
// One thread per 16-element block: 8 code bytes and a scale byte in, 32 bytes out, consecutive
// threads on consecutive blocks of a line (coalesced loads and 16-byte stores). Any stored scale
// layout is read through the view's scale(). A header-only template kernel, not a kernel library
// family (gpu/kernel_library.hpp): like the NVFP4 quantizer's kernels (gpu/quantize_nvfp4.hpp)
// nothing but the NVFP4 GEMM calls it yet; a template launched from a template, so a translation
// unit that includes this header without launching it holds no unused internal kernel (clang's
// -Wunneeded-internal-declaration, the HIP stage's two-unit compile).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace nvfp4_expand {

inline constexpr int threads = 256;

// bf16 bits of element value v times block scale s (exact: the upper half of the fp32 product);
// the quiet NaN for a NaN scale whatever bits its float has.
MXKIT_HD constexpr std::uint32_t scaled_bits(float v, float s, bool nan) noexcept {
  return nan ? 0x7FC0u : bit_cast<std::uint32_t>(v * s) >> 16;
}
static_assert(scaled_bits(6.0f, 448.0f, false) == 0x4528u && scaled_bits(-0.5f, 0x1p-9f, false) == 0xBA80u &&
              scaled_bits(0.0f, 1.0f, true) == 0x7FC0u);  // 2688 = 1.3125 x 2^11; -2^-10

// Thread i expands block i % blocks of line i / blocks into dst[line, 16 (i % blocks) ...].
template <class View>
MXKIT_GLOBAL void __launch_bounds__(threads) to_bf16_kernel(View v, std::uint16_t* dst) {
  static_assert(std::is_same_v<View, nvfp4_const_view>, "an NVFP4 copy in device memory");
  __shared__ float value[16];  // every E2M1 code's value
  if (threadIdx.x < 16) value[threadIdx.x] = e2m1::from_bits(static_cast<std::uint8_t>(threadIdx.x)).to_float();
  __syncthreads();
  const std::size_t blocks = v.layout.blocks_per_line(), total = v.layout.lines() * blocks;
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * threads + threadIdx.x;
  if (i >= total) return;
  std::size_t line, b;
  if (total <= 0xFFFFFFFFu) {  // 32-bit division where it suffices (a 64-bit one is a long sequence)
    const std::uint32_t i32 = static_cast<std::uint32_t>(i), nb = static_cast<std::uint32_t>(blocks);
    line = i32 / nb;
    b = i32 - static_cast<std::uint32_t>(line) * nb;
  } else {
    line = i / blocks;
    b = i % blocks;
  }
  const uint2 in = *reinterpret_cast<const uint2*>(v.data + line * v.layout.line_bytes() + 8 * b);
  const e4m3 s = e4m3::from_bits(v.scale(line, b));
  const float scale = s.to_float();
  const bool nan = s.is_nan();
  const std::uint32_t w[2] = {in.x, in.y};
  std::uint32_t o[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {  // byte j holds elements 2j (low nibble) and 2j + 1
    const std::uint32_t x = w[j / 4] >> (8 * (j % 4));
    o[j] = scaled_bits(value[x & 0xF], scale, nan) | (scaled_bits(value[(x >> 4) & 0xF], scale, nan) << 16);
  }
  uint4* out = reinterpret_cast<uint4*>(dst + (line * blocks + b) * nvfp4_block_size);
  out[0] = make_uint4(o[0], o[1], o[2], o[3]);
  out[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

// Bytes of the expanded copy of `v`: [lines, padded_length] bf16.
template <class View>
std::size_t bytes(const View& v) noexcept {
  return 2 * v.layout.lines() * v.layout.padded_length();
}

// Expands `v` (device data 8-byte aligned, as the quantizer's; any scale layout) into dst
// ([lines, padded_length] bf16, 16-byte aligned), on `stream`. The caller checked the copy
// (gemm/nvfp4_product.hpp); this checks what the loads and stores need.
template <class View>
void launch(const View& v, std::uint16_t* dst, stream_t stream) {
  static_assert(std::is_same_v<View, nvfp4_const_view>, "an NVFP4 copy in device memory");
  const std::size_t work = v.layout.lines() * v.layout.blocks_per_line();
  if (work == 0) return;
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(v.data) % 8 == 0, "gemm (NVFP4): data ", static_cast<const void*>(v.data),
                         " must be 8-byte aligned (a block's 16 codes are read 8 bytes at a time)");
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(dst) % 16 == 0, "gemm (NVFP4): the bf16 scratch is not 16-byte aligned");
  const std::size_t grid = (work + threads - 1) / threads;
  mxkit::detail::require(grid <= 0x7FFFFFFF, "gemm (NVFP4): operand too large (", work, " blocks)");
  to_bf16_kernel<View><<<static_cast<unsigned>(grid), threads, 0, stream>>>(v, dst);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace nvfp4_expand
}  // namespace gpu
MXKIT_END_NAMESPACE
