// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Hopper GEMM's configuration (tile, stages, warpgroup registers, consumer shapes), its
// shared-memory layout, the scalings and the kernel parameters (kernel.hpp says what it computes).
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/gemm/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/arch/cuda/sm90_ptx.hpp>
#include <mxkit/gpu/arch/cuda/sm90_runtime.hpp>  // CUtensorMap
#include <mxkit/gpu/gemm/operand.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

inline constexpr int tile_k = 128, stages = 4;
inline constexpr int threads = 384;  // warpgroups 0-1 consume, 2 produces
inline constexpr int blocks_per_stage = tile_k / 32;
inline constexpr int producer_regs = 40, consumer_regs = 232;
static_assert(2 * 128 * consumer_regs + 128 * producer_regs <= 65536, "register file");

// Consumer shape: the CTA tile is BM x BN; each of the two consumer warpgroups computes BM/2 rows
// (one or two 64-row halves, `mh`) x BN columns, as BN/SN column sub-tiles of one m64nSNk32 wgmma
// per half, keeping RING fragments so that RING-1 wgmmas are in flight while the oldest is
// promoted (lag RING-1). Registers: (BM/2)*BN/128 accumulators + RING*SN/2 fragments. With two
// halves, the column scales of a sub-tile are read once and used for both (half the LDS traffic
// per element, which bounds the 64-row shape: docs/perf/gemm.md).
template <int BM, int BN, int SN, int RING, bool PF>
struct config {
  static constexpr int bm = BM, bn = BN, sn = SN, ring = RING, lag = RING - 1;
  static constexpr bool prefetch = PF;  // scales read one promotion ahead (more registers, no LDS stall)
  static constexpr int mh = BM / 128;   // 64-row halves per consumer warpgroup
  static constexpr int subs = BN / SN;  // column sub-tiles per 32-block
  static constexpr int frag = SN / 2;   // fp32 registers per thread per (half, sub-tile)
  static_assert((BM == 128 || BM == 256) && BN % SN == 0 && (SN == 32 || SN == 64) && RING >= 2 && BN <= 256);
  static_assert(mh * BN / 2 + RING * SN / 2 + (PF ? SN / 4 + 2 : 0) <= 204, "accumulators + fragments must leave room in 232 registers");
};

template <int BM, int BN>
struct smem_layout {
  alignas(1024) std::uint8_t a[stages][BM * tile_k];  // [BM rows][128 K], TMA 128B swizzle
  alignas(1024) std::uint8_t b[stages][BN * tile_k];  // [BN rows][128 K]
  alignas(16) float sa[stages][blocks_per_stage][BM];  // row scales as floats
  alignas(16) float sb[stages][blocks_per_stage][BN];  // column scales, permuted (column_slot)
  std::uint64_t full[stages], empty[stages];
  std::uint32_t tile_of[stages];  // dynamic tile order: the tile whose first stage fills slot s
  std::uint32_t fetched[2];       // dynamic tile order: the producer's last two fetched tiles
};
template <int BM, int BN>
inline constexpr std::size_t smem_bytes = sizeof(smem_layout<BM, BN>) + 1024;  // + alignment slack
static_assert(smem_bytes<128, 256> <= 232448 && smem_bytes<256, 128> <= 232448, "Hopper allows 227 KB of shared memory per block");

// How the operands are scaled, which decides what a promotion does:
//   block   MX: a scale per (line, 32-block) on each side; acc += (P * sb) * sa per block
//   line    MXFP4 folded into E5M2 (expand::fold): one factor per line, applied in the epilogue;
//           acc += P per block (or per 4 blocks, G = 4)
//   tensor  per-tensor FP8: 4 k32 wgmmas accumulate in the tensor core, acc += P per 128 K
enum class scaling { block, line, tensor };

struct params {
  std::uint32_t p = 0, q = 0;         // output rows, cols
  std::uint32_t k_blocks = 0;         // R / 32
  std::uint32_t tiles_p = 0, tiles_q = 0;
  const std::uint8_t* scale_a = nullptr;  // MX: [p, scale_ld_a] E8M0
  const std::uint8_t* scale_b = nullptr;
  std::uint32_t scale_ld_a = 0, scale_ld_b = 0;
  float post_scale = 1.0f;            // per-tensor FP8: 1 / (scale_a * scale_b); bf16: the host factors' product
  const float* tensor_scale_a = nullptr;  // per-tensor FP8, delayed scaling: the scales in device
  const float* tensor_scale_b = nullptr;  // memory, read by the epilogue in place of post_scale
  const float* decode_scale_a = nullptr;  // bf16 with device factors (gemm_operand::decode_scale):
  const float* decode_scale_b = nullptr;  // post_scale = *a * *b, read by the epilogue
  const float* line_scale_a = nullptr;  // scaling::line: [p] and [q] factors
  const float* line_scale_b = nullptr;
  launch_gate gate;                   // the kernel returns at once when the gate is closed
  bool vector_store = false;          // D (and C) rows allow 2-element stores
  gemm_output_desc out;
  // Split K (gridDim.y splits): split z covers stages [z, z + 1) * stages_per_split of the
  // reduction and writes its fp32 partial to out.d + z * split_stride; split_reduce adds them.
  std::uint32_t stages_per_split = 0;
  std::size_t split_stride = 0;
  // Dynamic tile order (kernel.hpp; unsplit launches): two words, zero before the launch and
  // zero again after it; null: the static order.
  std::uint32_t* tile_counter = nullptr;
};

// Slot of tile column c in a block's column-scale row. A thread t of a fragment holds, for each
// group of 16 columns g, columns 16g + 2t + {0,1} and 16g + 8 + 2t + {0,1}; those four scales
// share one float4 at slot 16g + 4t, so a thread reads SN/16 conflict-free LDS.128 per sub-tile.
MXKIT_HD constexpr int column_slot(int c) noexcept {
  const int g = c >> 4, h = (c >> 3) & 1, t = (c >> 1) & 3, e = c & 1;
  return (g << 4) | (t << 2) | (h << 1) | e;
}
// column_slot is a bijection on 0..255, and float4 j of thread t in sub-tile u (SN = 64) holds
// fragment column groups 2j, 2j+1 (x +0, +1), which promote() pairs with it.
constexpr bool column_slots_consistent() {
  bool seen[256] = {};
  for (int c = 0; c < 256; ++c) {
    if (seen[column_slot(c)]) return false;
    seen[column_slot(c)] = true;
  }
  for (int u = 0; u < 4; ++u)
    for (int t = 0; t < 4; ++t)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 4; ++k)
          if (column_slot(u * 64 + 8 * (2 * j + k / 2) + 2 * t + k % 2) != u * 64 + (j * 4 + t) * 4 + k) return false;
  return true;
}
static_assert(column_slots_consistent());

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
