// SPDX-License-Identifier: Apache-2.0
#pragma once
// gfx950 (CDNA4: MI350X/MI355X) MX GEMM on the native block-scaled MFMA
//   v_mfma_scale_f32_32x32x64_f8f6f4  D[32x32] += (A[32x64] * sa) . (B[64x32] * sb)
// where A and B elements are FP8 (E4M3/E5M2), FP6 (E2M3/E3M2) or FP4 (E2M1), chosen per operand
// (the cbsz / blgp operands), and each lane brings one E8M0 scale for its 32 K elements: one MX
// block per lane, so the hardware applies both scales of every block and accumulates in fp32.
// Operand layout (wave64, CDNA4 ISA "MFMA scaled" layouts, as LLVM's
// llvm.amdgcn.mfma.scale.f32.32x32x64.f8f6f4 takes them): lane l holds A row l%32 and B column
// l%32, K elements 32*(l/32) .. +31; FP8 one byte each (8 VGPRs), FP6 packed 6 bits each
// (6 VGPRs), FP4 packed 4 bits each (4 VGPRs, element 2i in the low nibble, as mxkit stores it).
// The result: lane l, register j holds row 8*(j/4) + 4*(l/32) + j%4, column l%32.
//
// THIS CODE IS COMPILED AND ITS ISA INSPECTED (tests/isa checks that the instruction is
// emitted), NEVER RUN: there is no AMD GPU here. Treat it as unverified until it passes
// tests/gpu on an MI350-class device. gfx942 (MI300) has no MX MFMA and uses the portable kernel.
// The kernel is deliberately simple (operands straight from global memory, one 32x32 tile per
// wave, 64x64 per workgroup): its purpose is a correct use of the instruction, not speed.
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_HIP
#error "mxkit/gpu/gemm/gfx950/ is AMD CDNA4 code: include it only in a HIP build"  // and nothing below compiles
#else
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace gfx950 {

inline constexpr int threads = 256, tile = 64;  // 4 waves of 64, each a 32x32 quarter

// Format code of the cbsz/blgp operands; -1: not an MFMA format (MXINT8).
MXKIT_HD constexpr int format_code(mx_type t) noexcept {
  switch (t) {
    case mx_type::mxfp8_e4m3: return 0;
    case mx_type::mxfp8_e5m2: return 1;
    case mx_type::mxfp6_e2m3: return 2;
    case mx_type::mxfp6_e3m2: return 3;
    case mx_type::mxfp4: return 4;
    case mx_type::mxint8: break;
  }
  return -1;
}

struct params {
  gemm_operand a, b;
  gemm_output_desc out;
};

typedef int v8i __attribute__((ext_vector_type(8)));
typedef float v16f __attribute__((ext_vector_type(16)));

// One lane's MFMA operand: the 32 codes of block `blk` of `line` (zeros past the edges).
template <int F>
__device__ inline v8i load_block(const gemm_operand& o, std::size_t line, std::size_t blk) {
  v8i r = {0, 0, 0, 0, 0, 0, 0, 0};
  if (line >= o.lines || blk * 32 >= o.length) return r;
  const std::uint8_t* src = o.data + line * o.line_bytes;
  if constexpr (F == 4) {  // 16 bytes, already in MFMA order
    const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(src + blk * 16);
    for (int i = 0; i < 4; ++i) r[i] = static_cast<int>(w[i]);
  } else if constexpr (F <= 1) {  // 32 bytes
    const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(src + blk * 32);
    for (int i = 0; i < 8; ++i) r[i] = static_cast<int>(w[i]);
  } else {  // FP6: stored one per byte (low 6 bits); the MFMA wants 6-bit fields, element i at bit 6i
    const std::uint8_t* b = src + blk * 32;
    std::uint32_t packed[6] = {};
    for (int i = 0; i < 32; ++i) {
      const std::uint32_t v = b[i] & 0x3Fu, bit = 6u * static_cast<std::uint32_t>(i);
      packed[bit / 32] |= v << (bit % 32);
      if (bit % 32 > 26) packed[bit / 32 + 1] |= v >> (32 - bit % 32);
    }
    for (int i = 0; i < 6; ++i) r[i] = static_cast<int>(packed[i]);
  }
  return r;
}

__device__ inline int load_scale(const gemm_operand& o, std::size_t line, std::size_t blk) {
  return (line < o.lines && blk < o.blocks) ? o.scales[line * o.blocks + blk] : 127;  // 127: 1.0 over zero data
}

template <int FA, int FB>
__global__ void __launch_bounds__(threads) gemm_kernel(const params p) {
#if MXKIT_ARCH_GFX950
  const int wave = static_cast<int>(threadIdx.x) / 64, lane = static_cast<int>(threadIdx.x) % 64;
  const std::size_t p0 = static_cast<std::size_t>(blockIdx.y) * tile + static_cast<std::size_t>(wave / 2) * 32;
  const std::size_t q0 = static_cast<std::size_t>(blockIdx.x) * tile + static_cast<std::size_t>(wave % 2) * 32;
  const std::size_t row = p0 + static_cast<std::size_t>(lane % 32), col = q0 + static_cast<std::size_t>(lane % 32);
  const std::size_t half = static_cast<std::size_t>(lane / 32), nblocks = p.a.length / 32;
  v16f acc = {};
  for (std::size_t kb = 0; kb < nblocks; kb += 2) {
    const std::size_t blk = kb + half;
    const v8i av = load_block<FA>(p.a, row, blk), bv = load_block<FB>(p.b, col, blk);
    const int sa = load_scale(p.a, row, blk), sb = load_scale(p.b, col, blk);
    // (A, B, C, A format, B format, A scale byte select, A scale, B scale byte select, B scale)
    acc = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(av, bv, acc, FA, FB, 0, sa, 0, sb);
  }
  const gemm_output_desc& o = p.out;
  for (int j = 0; j < 16; ++j) {
    const std::size_t r = p0 + static_cast<std::size_t>(8 * (j / 4) + 4 * (lane / 32) + j % 4);
    if (r >= p.a.lines || col >= p.b.lines) continue;
    float v = o.alpha * acc[j];
    if (o.bf16) {
      std::uint16_t* d = static_cast<std::uint16_t*>(o.d) + r * o.ldd + col;
      if (o.beta != 0.0f)
        v = v + o.beta * bit_cast<float>(static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(o.c)[r * o.ldc + col]) << 16);
      *d = bf16_output_bits(v);
    } else {
      float* d = static_cast<float*>(o.d) + r * o.ldd + col;
      if (o.beta != 0.0f) v = v + o.beta * static_cast<const float*>(o.c)[r * o.ldc + col];
      *d = v;
    }
  }
#else
  (void)p;
#endif
}

// MX operands of MFMA formats, lines 4-byte aligned (the loads are dword loads).
inline bool mfma_supports(const gemm_operand& a, const gemm_operand& b) noexcept {
  auto ok = [](const gemm_operand& o) {
    return o.kind == operand_kind::mx && format_code(o.type) >= 0 && reinterpret_cast<std::uintptr_t>(o.data) % 4 == 0 &&
           o.line_bytes % 4 == 0;
  };
  return ok(a) && ok(b);
}

#if MXKIT_GPU_HIP
// Is the current device a gfx950? (Asked once per device.)
inline bool available() {
  static int cached[64] = {};
  int dev = 0;
  if (get_device(&dev) != success || dev < 0 || dev >= 64) return false;
  if (cached[dev] == 0) {
    hipDeviceProp_t prop{};
    cached[dev] = hipGetDeviceProperties(&prop, dev) == hipSuccess && std::strncmp(prop.gcnArchName, "gfx950", 6) == 0 ? 1 : 2;
  }
  return cached[dev] == 1;
}
#else
inline bool available() { return false; }
#endif

template <int FA, int FB>
void launch_typed(const params& prm, stream_t stream) {
  const std::size_t gx = (prm.b.lines + tile - 1) / tile, gy = (prm.a.lines + tile - 1) / tile;
  gemm_kernel<FA, FB><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), threads, 0, stream>>>(prm);
  MXKIT_GPU_CHECK_LAUNCH();
}
template <int FA>
void launch_b(int fb, const params& prm, stream_t stream) {
  switch (fb) {
    case 0: launch_typed<FA, 0>(prm, stream); break;
    case 1: launch_typed<FA, 1>(prm, stream); break;
    case 2: launch_typed<FA, 2>(prm, stream); break;
    case 3: launch_typed<FA, 3>(prm, stream); break;
    default: launch_typed<FA, 4>(prm, stream); break;
  }
}

// Compiled where gemm.hpp's dispatch is (as sm90::launch_wgmma; gpu/kernel_library.hpp): this
// non-template function instantiates all 25 kernels in every file that includes it.
#if !defined(MXKIT_GPU_LIBRARY_HAS_GEMM) || defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
inline void launch_mfma(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t stream) {
  mxkit::detail::require(mfma_supports(a, b), "gemm (gfx950): needs MX operands with FP4/FP6/FP8 elements");
  if (a.lines == 0 || b.lines == 0) return;
  mxkit::detail::require((a.lines + tile - 1) / tile <= 65535, "gemm (gfx950): ", a.lines, " rows exceed the grid");
  const params prm{a, b, out};
  switch (format_code(a.type)) {
    case 0: launch_b<0>(format_code(b.type), prm, stream); break;
    case 1: launch_b<1>(format_code(b.type), prm, stream); break;
    case 2: launch_b<2>(format_code(b.type), prm, stream); break;
    case 3: launch_b<3>(format_code(b.type), prm, stream); break;
    default: launch_b<4>(format_code(b.type), prm, stream); break;
  }
}
#endif

}  // namespace gfx950
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_HIP
