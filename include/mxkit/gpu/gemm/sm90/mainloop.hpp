// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Hopper GEMM's mainloop pieces: block-scale loads (a stage ahead, converted once to floats in
// shared memory), the promotion of a fresh wgmma fragment into the accumulators, and the TMA
// loads of one K stage (K-major boxes or MN-major bf16 panels).
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/gemm/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/gemm/sm90/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

#if MXKIT_SM90A
// Four consecutive scale bytes (blocks kb..kb+3) of one line, packed little-endian; lines and
// blocks past the edge get 1.0 (their data is TMA zero fill, so any finite scale contributes 0).
// One 4-byte load when the row layout allows it (K a multiple of 128 and an aligned base).
__device__ inline std::uint32_t load_scales4(const std::uint8_t* scales, std::uint32_t ld, std::uint32_t line, std::uint32_t lines,
                                             std::uint32_t kb, std::uint32_t k_blocks, bool words) {
  if (line >= lines) return 0x7F7F7F7Fu;
  const std::uint8_t* row = scales + static_cast<std::size_t>(line) * ld + kb;
  if (words && kb + 4 <= k_blocks) return __ldg(reinterpret_cast<const unsigned int*>(row));
  std::uint32_t v = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) v |= static_cast<std::uint32_t>(kb + j < k_blocks ? __ldg(row + j) : std::uint8_t{127}) << (8 * j);
  return v;
}

// The scales one promotion needs: this thread's SN/4 column scales of a sub-tile (SN/16 float4,
// column_slot order) and its two row scales.
template <int SN>
struct sub_scales {
  float4 b[SN / 16];
  float a0, a1;
};
// acc += promoted P. Block-scaled: (P * sb) * sa per element, both scales powers of two, so only
// the add rounds. Line- and tensor-scaled: a plain add.
template <bool BlockScaled, int SN>
__device__ inline void promote(const float (&P)[SN / 2], float (&acc)[SN / 2], const sub_scales<SN>& s) {
  if constexpr (BlockScaled) {
#pragma unroll
    for (int j = 0; j < SN / 16; ++j) {
      const int i0 = 8 * j, i1 = 8 * j + 4;  // fragment registers of column groups 2j and 2j+1
      acc[i0 + 0] = fmaf(P[i0 + 0] * s.b[j].x, s.a0, acc[i0 + 0]);
      acc[i0 + 1] = fmaf(P[i0 + 1] * s.b[j].y, s.a0, acc[i0 + 1]);
      acc[i0 + 2] = fmaf(P[i0 + 2] * s.b[j].x, s.a1, acc[i0 + 2]);
      acc[i0 + 3] = fmaf(P[i0 + 3] * s.b[j].y, s.a1, acc[i0 + 3]);
      acc[i1 + 0] = fmaf(P[i1 + 0] * s.b[j].z, s.a0, acc[i1 + 0]);
      acc[i1 + 1] = fmaf(P[i1 + 1] * s.b[j].w, s.a0, acc[i1 + 1]);
      acc[i1 + 2] = fmaf(P[i1 + 2] * s.b[j].z, s.a1, acc[i1 + 2]);
      acc[i1 + 3] = fmaf(P[i1 + 3] * s.b[j].w, s.a1, acc[i1 + 3]);
    }
  } else {
    (void)s;
#pragma unroll
    for (int i = 0; i < SN / 2; ++i) acc[i] += P[i];
  }
}

// wgmma.wait_group with an immediate that is a constant after unrolling.
__device__ inline void wgmma_wait_n(int n) {
  switch (n) {
    case 0: wgmma_wait<0>(); break;
    case 1: wgmma_wait<1>(); break;
    case 2: wgmma_wait<2>(); break;
    case 3: wgmma_wait<3>(); break;
    case 4: wgmma_wait<4>(); break;
    case 5: wgmma_wait<5>(); break;
    default: wgmma_wait<6>(); break;
  }
}

// One stage (128 bytes of K) of an operand tile of `Lines` lines by TMA. K-major: one box of
// [Lines, 128 B]. MN-major (bf16): Lines / 64 panels, each 64 K rows of 64 lines (128 B), one
// after the other (the layout desc_sw128_mn_lo describes, the panel stride its leading offset).
inline constexpr int mn_panel_bytes = 64 * tile_k;
template <bool Mn, int Lines>
__device__ inline void tma_load_stage(std::uint8_t* dst, const CUtensorMap* map, std::uint64_t* bar, std::uint32_t k_byte0,
                                      std::uint32_t line0) {
  if constexpr (Mn) {
#pragma unroll
    for (int pn = 0; pn < Lines / 64; ++pn)
      tma_load_2d(dst + pn * mn_panel_bytes, map, bar, static_cast<int>(2 * (line0 + 64u * pn)), static_cast<int>(k_byte0 / 2));
  } else {
    tma_load_2d(dst, map, bar, static_cast<int>(k_byte0), static_cast<int>(line0));
  }
}
#endif  // MXKIT_SM90A

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
