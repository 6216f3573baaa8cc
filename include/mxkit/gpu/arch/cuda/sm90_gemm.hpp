// SPDX-License-Identifier: Apache-2.0
#pragma once
// Hopper (sm_90a) GEMM on tensor cores: D[P,Q] = alpha * A.B^T + beta * C with A [P,R], B [Q,R]
// K-major, FP8 (E4M3 or E5M2, any mix) or bf16, in one of three scalings (enum scaling):
//   block   MX as stored: one E8M0 scale per 32-block on each side. Each block is one
//           m64n64k32 wgmma into a fresh fp32 fragment P, promoted in registers:
//           acc += (P * sb[col]) * sa[row]. MXFP6 (and MXFP4 lines that cannot fold) run here
//           after a byte expansion to E4M3 (expand.hpp); MXINT8 stays on the portable kernel.
//   line    MXFP4 folded into E5M2 bytes with one factor per line (expand::fold): the same
//           per-block wgmmas and fresh fragments, so every block sum stays exact, but the
//           promotion is a plain add and the factors multiply once in the epilogue. G = 4
//           lets the tensor core sum four blocks first (gemm_options::exact_block_sums).
//   tensor  per-tensor FP8: four k32 wgmmas (128 K) accumulate in the tensor core, then
//           acc += P; the descale multiplies the final sum (as cuBLASLt's default, not its
//           "fast accumulation" mode, promotes periodically). bf16 (also MXFP8 expanded with its
//           scales applied, expand::to_bf16) accumulates all of K in the tensor core with
//           m64n256k16 wgmmas: bf16 products and sums keep fp32 precision.
//
// Why block scaling is slow on Hopper (DeepGEMM promotes every 128 K with one scale per 128x128
// tile; its Hopper MXFP8 kernel waits for every k32 wgmma and spends 3 FP32 ops per element-block
// with scales read as bytes): MX puts a different scale on every (row, block) and (column, block),
// so each accumulator needs (P*sb)*sa per 32 K, 2 FP32 instructions per element per block, more
// issue time than the FP8 MMA itself (an SM does 4096 FP8 FMA per clock but 128 FP32 lanes), and
// the scale loads from shared memory sit on the critical path. The line and tensor scalings
// remove the per-block scales, which is why MXFP4 and MXFP8 default to them. In block mode:
//  - scales are converted once, by the producer warpgroup, to floats in shared memory, laid out
//    (column_slot) so each consumer thread's 16 column scales of a 64-column sub-tile are 4
//    conflict-free LDS.128 and its two row scales two LDS.32; the bytes are fetched a stage ahead;
//  - each consumer warpgroup owns 64 x 256 outputs as four 64x64 sub-tiles and keeps two P
//    fragments: the wgmma of sub-tile n+1 is issued before sub-tile n is promoted;
//  - each 128-byte K stage is straight-line code that drains its wgmmas at the end (a result
//    live across the loop's back edge makes ptxas serialize every wgmma);
//  - operands arrive by TMA (128-byte swizzle, 4 stages of 128 bytes of K) from one producer
//    thread, the producer warpgroup keeping 40 registers (setmaxnreg) so consumers get 232.
// Throughput of each route against cuBLAS: bench/NOTES_gemm.md and bench/RESULTS.md.
// bf16 operands may also be MN-major (major_order::mn_major: wgrad's dY and X as stored), loaded
// as 64-line panels and read with wgmma's transpose bits, so wgrad needs no transposed copies.
// Tile 128 x 256 (2 consumer warpgroups x 64 rows), 384 threads, ~216 KB shared memory, one CTA
// per SM, grouped raster order for L2 reuse. A closed launch_gate makes the kernel return at once
// (a fast path and its fallback are both enqueued; gemm.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/arch/cuda/sm90_ptx.hpp>
#include <mxkit/gpu/arch/cuda/sm90_runtime.hpp>
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>

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
// per element, which bounds the 64-row shape: bench/NOTES_gemm.md).
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
  float post_scale = 1.0f;            // per-tensor FP8: 1 / (scale_a * scale_b)
  const float* tensor_scale_a = nullptr;  // per-tensor FP8, delayed scaling: the scales in device
  const float* tensor_scale_b = nullptr;  // memory, read by the epilogue in place of post_scale
  const float* line_scale_a = nullptr;  // scaling::line: [p] and [q] factors
  const float* line_scale_b = nullptr;
  launch_gate gate;                   // the kernel returns at once when the gate is closed
  bool vector_store = false;          // D (and C) rows allow 2-element stores
  gemm_output_desc out;
  // Split K (gridDim.y splits): split z covers stages [z, z + 1) * stages_per_split of the
  // reduction and writes its fp32 partial to out.d + z * split_stride; split_reduce adds them.
  std::uint32_t stages_per_split = 0;
  std::size_t split_stride = 0;
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

// An output element's value is alpha * ((v * fcol) * frow) (+ beta * C), where frow is the row's
// line factor or the per-tensor descale and fcol the column's line factor or 1: scaled_output,
// then plus_c where beta != 0.
__device__ inline float scaled_output(const gemm_output_desc& o, float v, float frow, float fcol) { return o.alpha * ((v * fcol) * frow); }
__device__ inline float plus_c(const gemm_output_desc& o, float v, std::size_t ci) {
  const float c = o.bf16 ? bit_cast<float>(static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(o.c)[ci]) << 16)
                         : static_cast<const float*>(o.c)[ci];
  return v + o.beta * c;
}

// Writes outputs (row, col) and (row, col + 1) of a fragment. Both values are formed before
// any test of `pair` (a branch between them left fp32 D about 10 % slower: NOTES_training.md).
__device__ inline void store_pair(const params& p, std::uint32_t row, std::uint32_t col, float v0, float v1, float frow,
                                  float fcol0, float fcol1) {
  const gemm_output_desc& o = p.out;
  if (row >= p.p || col >= p.q) return;
  const bool pair = col + 1 < p.q;
  const std::size_t di = blockIdx.y * p.split_stride + static_cast<std::size_t>(row) * o.ldd + col,
                    ci = static_cast<std::size_t>(row) * o.ldc + col;
  v0 = scaled_output(o, v0, frow, fcol0);
  v1 = scaled_output(o, v1, frow, fcol1);
  if (o.beta != 0.0f) {
    v0 = plus_c(o, v0, ci);
    if (pair) v1 = plus_c(o, v1, ci + 1);
  }
  if (o.bf16) {
    std::uint16_t* d = static_cast<std::uint16_t*>(o.d);
    if (pair && p.vector_store) {
      *reinterpret_cast<std::uint32_t*>(d + di) = bf16_output_bits(v0) | (static_cast<std::uint32_t>(bf16_output_bits(v1)) << 16);
    } else {
      d[di] = bf16_output_bits(v0);
      if (pair) d[di + 1] = bf16_output_bits(v1);
    }
  } else {
    float* d = static_cast<float*>(o.d);
    if (pair && p.vector_store) {
      *reinterpret_cast<float2*>(d + di) = make_float2(v0, v1);
    } else {
      d[di] = v0;
      if (pair) d[di + 1] = v1;
    }
  }
}

// w[k] of quad lane t becomes w[t] of quad lane k (a 4 x 4 transpose over the four lanes of a
// quad): 2 x 2 blocks trade across lanes t ^ 2, then the elements inside each block across t ^ 1.
__device__ inline void quad_transpose(std::uint32_t (&w)[4]) {
  const unsigned t = threadIdx.x & 3u;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const std::uint32_t got = __shfl_xor_sync(0xFFFFFFFFu, (t & 2u) ? w[k] : w[k + 2], 2);
    ((t & 2u) ? w[k] : w[k + 2]) = got;
  }
#pragma unroll
  for (int k = 0; k < 4; k += 2) {
    const std::uint32_t got = __shfl_xor_sync(0xFFFFFFFFu, (t & 1u) ? w[k] : w[k + 1], 1);
    ((t & 1u) ? w[k] : w[k + 1]) = got;
  }
}

// bf16 D, four 8-column groups of rows `row` and row + 8 from a fragment (a[4 k + 0..3]: columns
// col0 + 8 k + 2 t + {0, 1} of both rows). A quad's four lanes hold a group's 16 bytes of a row,
// so a warp of pair stores writes 16 of every 32-byte sector (ncu: half the sectors excess);
// after quad_transpose lane t holds group t whole, and the warp's 16-byte stores fill every
// sector with a quarter of the instructions. The caller has every row and column inside D and
// every lane of the warp here (the shuffles), and D's rows 16-byte aligned (wide_output).
__device__ inline void store_quad_rows(const params& p, std::uint32_t row, std::uint32_t col0, const float* a, float frow0, float frow1,
                                       const float (&fcol)[8]) {
  const gemm_output_desc& o = p.out;
  const std::uint32_t t = threadIdx.x & 3u;
  std::uint32_t w0[4], w1[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const std::uint32_t col = col0 + 8u * k + 2u * t;
    const std::size_t c0 = static_cast<std::size_t>(row) * o.ldc + col, c1 = c0 + 8 * o.ldc;
    float v[4] = {scaled_output(o, a[4 * k + 0], frow0, fcol[2 * k]), scaled_output(o, a[4 * k + 1], frow0, fcol[2 * k + 1]),
                  scaled_output(o, a[4 * k + 2], frow1, fcol[2 * k]), scaled_output(o, a[4 * k + 3], frow1, fcol[2 * k + 1])};
    if (o.beta != 0.0f) {
      v[0] = plus_c(o, v[0], c0);
      v[1] = plus_c(o, v[1], c0 + 1);
      v[2] = plus_c(o, v[2], c1);
      v[3] = plus_c(o, v[3], c1 + 1);
    }
    w0[k] = bf16_output_bits(v[0]) | (static_cast<std::uint32_t>(bf16_output_bits(v[1])) << 16);
    w1[k] = bf16_output_bits(v[2]) | (static_cast<std::uint32_t>(bf16_output_bits(v[3])) << 16);
  }
  quad_transpose(w0);
  quad_transpose(w1);
  std::uint16_t* d = static_cast<std::uint16_t*>(o.d) + static_cast<std::size_t>(row) * o.ldd + col0 + 8u * t;
  *reinterpret_cast<uint4*>(d) = make_uint4(w0[0], w0[1], w0[2], w0[3]);
  *reinterpret_cast<uint4*>(d + 8 * o.ldd) = make_uint4(w1[0], w1[1], w1[2], w1[3]);
}
#endif  // MXKIT_SM90A

// ---- kernel -----------------------------------------------------------------------------------
// G: 32-blocks per promotion, the k32 wgmmas that accumulate in the tensor core before an fp32
// add (1 keeps every block's product exact, as the reference; 4 is DeepGEMM's 128-K promotion).
// MnA, MnB: that bf16 operand is MN-major (tma_load_stage). WideD: bf16 D with 16-byte aligned
// rows, written through store_quad_rows (wide_output).
template <mma_kind TA, mma_kind TB, scaling S, int G, class Cfg, bool MnA = false, bool MnB = false, bool WideD = false>
MXKIT_GLOBAL void __launch_bounds__(threads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, const params p) {
#if MXKIT_SM90A
  static_assert(G == 1 || G == blocks_per_stage, "a promotion covers one block or one stage");
  static_assert(!(WideD && S == scaling::block), "block scaling keeps the pair stores");
  static_assert(TA == mma_kind::bf16 || !(MnA || MnB), "only 16-bit operands can be MN-major");
  static_assert(S != scaling::block || G == 1, "block scales change every 32 K");
  constexpr bool block_scaled = S == scaling::block;
  if (p.gate.closed()) return;  // uniform: every thread reads the same flag
  constexpr int BM = Cfg::bm, BN = Cfg::bn, SN = Cfg::sn;
  constexpr int a_stage_bytes = BM * tile_k, b_stage_bytes = BN * tile_k;
  // 1024-byte alignment (128B-swizzle atoms) by an offset from smem_raw, so the compiler still sees
  // shared-memory accesses (LDS, not generic loads) through `sm`.
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  smem_layout<BM, BN>& sm =
      *reinterpret_cast<smem_layout<BM, BN>*>(smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u));
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128;

  // Persistent: CTA x takes tiles x, x + gridDim.x, ..., so the CTAs in flight work on about one
  // grid's worth of neighbouring tiles at a time, and the stage pipeline runs on from one tile to
  // the next: the producer loads a tile's first stages while the consumers still store the
  // previous tile's outputs (with one CTA per SM, a fresh CTA per tile would wait for both).
  // Grouped raster: `group` row tiles share each column sweep, so the tiles in flight read about
  // as many A rows as B rows and both stay in L2.
  constexpr std::uint32_t group = 4096 / BM;
  const std::uint32_t tiles = p.tiles_p * p.tiles_q, per_group = group * p.tiles_q;
  std::uint32_t p0 = 0, q0 = 0;  // the current tile's first output row and column
  auto enter_tile = [&](std::uint32_t tile) {
    const std::uint32_t first = tile / per_group * group, rows_here = min(p.tiles_p - first, group);
    p0 = (first + (tile % per_group) % rows_here) * BM;
    q0 = (tile % per_group) / rows_here * BN;
  };
  // This CTA's share of the reduction: stages [k_first, k_first + k_stages).
  const std::uint32_t all_stages = (p.k_blocks + blocks_per_stage - 1) / blocks_per_stage;
  const std::uint32_t k_first = gridDim.y > 1 ? blockIdx.y * p.stages_per_split : 0u;
  const std::uint32_t k_stages = gridDim.y > 1 ? min(p.stages_per_split, all_stages - k_first) : all_stages;

  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&sm.full[s], 1 + 128);  // the TMA's expect_tx arrival + every producer thread (scales)
      mbar_init(&sm.empty[s], 256);     // every consumer thread
    }
    fence_mbar_init();
  }
  if (tid == 256) {
    prefetch_tensor_map(&map_a);
    prefetch_tensor_map(&map_b);
  }
  __syncthreads();

  if (wg == 2) {
    // ---- producer: TMA for A and B, scales to floats (producer thread pt converts rows pt and
    // pt + 128 of each side that has them) ----
    reg_dealloc<producer_regs>();
    const std::uint32_t pt = static_cast<std::uint32_t>(tid - 256);
    constexpr bool a2 = BM > 128;
    const bool b1 = pt < static_cast<std::uint32_t>(BN), b2 = pt + 128 < static_cast<std::uint32_t>(BN);
    // Scale bytes run one stage ahead in registers, so their global-load latency hides behind a
    // whole stage instead of stalling the stage that needs them.
    const bool words = p.scale_ld_a % 4 == 0 && p.scale_ld_b % 4 == 0 && reinterpret_cast<std::uintptr_t>(p.scale_a) % 4 == 0 &&
                       reinterpret_cast<std::uintptr_t>(p.scale_b) % 4 == 0;
    auto fetch = [&](std::uint32_t it, std::uint32_t (&w)[4]) {
      const std::uint32_t kb = (k_first + it) * 4;
      w[0] = load_scales4(p.scale_a, p.scale_ld_a, p0 + pt, p.p, kb, p.k_blocks, words);
      w[1] = a2 ? load_scales4(p.scale_a, p.scale_ld_a, p0 + 128 + pt, p.p, kb, p.k_blocks, words) : 0u;
      w[2] = load_scales4(p.scale_b, p.scale_ld_b, q0 + pt, p.q, kb, p.k_blocks, words);
      w[3] = b2 ? load_scales4(p.scale_b, p.scale_ld_b, q0 + 128 + pt, p.q, kb, p.k_blocks, words) : 0u;
    };
    const int c0 = column_slot(static_cast<int>(pt)), c1 = column_slot(static_cast<int>(pt) + 128);
    std::uint32_t filled = 0;  // stages filled so far, over all of this CTA's tiles
    for (std::uint32_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, filled += k_stages) {
      enter_tile(tile);
      std::uint32_t next[4] = {};
      if (block_scaled && k_stages > 0) fetch(0, next);
      for (std::uint32_t it = 0; it < k_stages; ++it) {
        const int s = static_cast<int>((filled + it) % stages);
        const std::uint32_t phase = ((filled + it) / stages) & 1;
        const std::uint32_t cur[4] = {next[0], next[1], next[2], next[3]};
        if (block_scaled && it + 1 < k_stages) fetch(it + 1, next);
        mbar_wait(&sm.empty[s], phase ^ 1);
        if (pt == 0) {
          mbar_arrive_expect_tx(&sm.full[s], a_stage_bytes + b_stage_bytes);
          const std::uint32_t k0 = (k_first + it) * tile_k;
          tma_load_stage<MnA, BM>(sm.a[s], &map_a, &sm.full[s], k0, p0);
          tma_load_stage<MnB, BN>(sm.b[s], &map_b, &sm.full[s], k0, q0);
        }
        if constexpr (block_scaled) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            sm.sa[s][j][pt] = e8m0::from_bits(static_cast<std::uint8_t>(cur[0] >> (8 * j))).to_float();
            if (a2) sm.sa[s][j][pt + 128] = e8m0::from_bits(static_cast<std::uint8_t>(cur[1] >> (8 * j))).to_float();
            if (b1) sm.sb[s][j][c0] = e8m0::from_bits(static_cast<std::uint8_t>(cur[2] >> (8 * j))).to_float();
            if (b2) sm.sb[s][j][c1] = e8m0::from_bits(static_cast<std::uint8_t>(cur[3] >> (8 * j))).to_float();
          }
        }
        mbar_arrive(&sm.full[s]);  // release: the scale stores above are visible to the waiters
      }
    }
  } else {
    // ---- consumers: warpgroup wg owns rows [BM/2 wg, BM/2 (wg+1)) x all BN columns ----
    reg_alloc<consumer_regs>();
    constexpr int mh = Cfg::mh, subs = Cfg::subs, frag = Cfg::frag, ring = Cfg::ring, lag = Cfg::lag;
    const int lane = tid % 32, warp = (tid / 32) % 4, t = lane % 4;
    const int row0 = wg * (BM / 2) + warp * 16 + lane / 4;  // this thread's first row in half 0 (others: +8, +64, +72)
    std::uint32_t consumed = 0;  // stages consumed so far, over all of this CTA's tiles
    for (std::uint32_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, consumed += k_stages) {
      enter_tile(tile);
      float acc[mh][subs][frag];
#pragma unroll
      for (int h = 0; h < mh; ++h)
#pragma unroll
        for (int u = 0; u < subs; ++u)
#pragma unroll
          for (int i = 0; i < frag; ++i) acc[h][u][i] = 0.0f;
      float P[ring][frag];

      // A warpgroup's BM/2 = 64 rows of an MN-major A are one panel, at the same offset.
      const std::uint32_t a_base = smem_addr(sm.a[0]) + static_cast<std::uint32_t>(wg) * (BM / 2) * tile_k, b_base = smem_addr(sm.b[0]);
      const std::uint32_t desc_a0 = MnA ? desc_sw128_mn_lo(a_base, mn_panel_bytes) : desc_sw128_lo(a_base);
      const std::uint32_t desc_b0 = MnB ? desc_sw128_mn_lo(b_base, mn_panel_bytes) : desc_sw128_lo(b_base);
      // Descriptor advances are in 16-byte units: stage, 64-row half, SN-row sub-tile, 32-byte K block.
      constexpr std::uint32_t a_stage = a_stage_bytes / 16, b_stage = b_stage_bytes / 16, half_rows = 64 * tile_k / 16,
                              sub_rows = SN * tile_k / 16, kblk = 32 / 16;

      // One stage (128 K) per iteration, as straight-line code: `steps` wgmma groups (G = 1: each
      // block x column sub-tile x row half; G = 4: each sub-tile x half, 4 k32 MMAs per group),
      // each issued `lag` groups before it is promoted. The ring drains at the end of each stage
      // (no wgmma result may be live across the loop's back edge, or ptxas serializes every wgmma:
      // warnings C7514/C7515); the other consumer warpgroup keeps the tensor cores busy meanwhile.
      constexpr int per_blk = subs * mh;
      constexpr int steps = G == 1 ? blocks_per_stage * per_blk : per_blk;
      static_assert(steps > lag, "the ring is shorter than a stage");
      // bf16: no promotion at all. Each stage is four m64n256k16 wgmmas straight into the
      // accumulators, drained before the stage is released; the other warpgroup's wgmmas fill the
      // tensor cores while this one waits. A k16 step is 32 bytes along a K-major row or 16 rows
      // (2048 bytes) down an MN-major panel.
      constexpr bool direct = TA == mma_kind::bf16;
      constexpr std::uint32_t k16_a = MnA ? 16 * tile_k / 16 : kblk, k16_b = MnB ? 16 * tile_k / 16 : kblk;
      static_assert(!direct || (mh == 1 && BN == 256 && SN == 64 && S == scaling::tensor), "bf16 uses the 64x256 warpgroup tile");
      for (std::uint32_t it = 0; direct && it < k_stages; ++it) {
        const int s = static_cast<int>((consumed + it) % stages);
        mbar_wait(&sm.full[s], ((consumed + it) / stages) & 1);
        const std::uint32_t da = desc_a0 + static_cast<std::uint32_t>(s) * a_stage, db = desc_b0 + static_cast<std::uint32_t>(s) * b_stage;
#pragma unroll
        for (int u = 0; u < subs; ++u)
#pragma unroll
          for (int i = 0; i < frag; ++i) fence_operand(acc[0][u][i]);
        wgmma_fence();
#pragma unroll
        for (int g = 0; g < blocks_per_stage; ++g)
          wgmma_m64n256k16_bf16<MnA, MnB>(acc[0], da + static_cast<std::uint32_t>(g) * k16_a, db + static_cast<std::uint32_t>(g) * k16_b);
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int u = 0; u < subs; ++u)
#pragma unroll
          for (int i = 0; i < frag; ++i) fence_operand(acc[0][u][i]);
        mbar_arrive(&sm.empty[s]);
      }
      for (std::uint32_t it = 0; !direct && it < k_stages; ++it) {
        const int s = static_cast<int>((consumed + it) % stages);
        mbar_wait(&sm.full[s], ((consumed + it) / stages) & 1);
        const float* sa_s = &sm.sa[s][0][0];
        const float* sb_s = &sm.sb[s][0][0];
        const std::uint32_t da = desc_a0 + static_cast<std::uint32_t>(s) * a_stage, db = desc_b0 + static_cast<std::uint32_t>(s) * b_stage;
        // Scales for promoting step n: its sub-tile's column scales are read at half 0 and kept for
        // the other half; the row scales are this thread's two rows of half h.
        float4 cs[SN / 16] = {};
        auto scales_of = [&](int n) {
          const int blk = G == 1 ? n / per_blk : 0, u = (n / mh) % subs, h = n % mh;
          sub_scales<SN> sc;
          if (h == 0) {
            const float4* sb = reinterpret_cast<const float4*>(sb_s + blk * BN + u * SN);
#pragma unroll
            for (int j = 0; j < SN / 16; ++j) cs[j] = sb[j * 4 + t];
          }
#pragma unroll
          for (int j = 0; j < SN / 16; ++j) sc.b[j] = cs[j];
          sc.a0 = sa_s[blk * BM + row0 + h * 64];
          sc.a1 = sa_s[blk * BM + row0 + h * 64 + 8];
          return sc;
        };
        // Scales are read between a wgmma commit and the following wait (both asm statements with
        // memory clobbers pin the loads there): read right before the wgmma.fence, the fence
        // stalls until they land. With Cfg::prefetch they are read one promotion ahead (`next`),
        // so their latency hides behind a whole promotion instead of stalling the first multiply.
        sub_scales<SN> cur{}, next{};
        if (block_scaled && Cfg::prefetch) cur = scales_of(0);
#pragma unroll
        for (int st = 0; st < steps; ++st) {
          const int blk = G == 1 ? st / per_blk : 0, u = (st / mh) % subs, h = st % mh;
          float(&Pn)[frag] = P[st % ring];
#pragma unroll
          for (int i = 0; i < frag; ++i) fence_operand(Pn[i]);
          wgmma_fence();
#pragma unroll
          for (int g = 0; g < G; ++g)
            wgmma_step<SN, TA, TB>(Pn, da + static_cast<std::uint32_t>(h) * half_rows + static_cast<std::uint32_t>(blk + g) * kblk,
                                  db + static_cast<std::uint32_t>(u) * sub_rows + static_cast<std::uint32_t>(blk + g) * kblk,
                                  g > 0 ? 1u : 0u);
          wgmma_commit();
          if (st >= lag) {  // promote step n = st - lag while this step's wgmma runs
            const int n = st - lag;
            if (block_scaled && Cfg::prefetch && n + 1 < steps) next = scales_of(n + 1);
            if (block_scaled && !Cfg::prefetch) cur = scales_of(n);
            wgmma_wait<lag>();
            promote<block_scaled, SN>(P[n % ring], acc[n % mh][(n / mh) % subs], cur);
            if (Cfg::prefetch) cur = next;
          }
        }
#pragma unroll
        for (int d = 0; d < lag; ++d) {  // drain the ring
          const int n = steps - lag + d;
          if (block_scaled && Cfg::prefetch && n + 1 < steps) next = scales_of(n + 1);
          if (block_scaled && !Cfg::prefetch) cur = scales_of(n);
          wgmma_wait_n(lag - 1 - d);
          promote<block_scaled, SN>(P[n % ring], acc[n % mh][(n / mh) % subs], cur);
          if (Cfg::prefetch) cur = next;
        }
        mbar_arrive(&sm.empty[s]);  // this thread is done with stage s (MMAs complete, scales read)
      }
      // ---- epilogue: fragment (rows +0/+8 of each half, column 8i + 2t + {0,1}) of each sub-tile ----
      // Line factors of rows and columns past the edge are never used (store_pair skips them).
      // WideD: 32 columns (four groups) at a time through store_quad_rows where the warp's 16
      // rows and the 32 columns are all inside D (warp-uniform, as its shuffles need), pairs at
      // the edges; otherwise the pair loop.
      auto line_factor = [](const float* f, std::uint32_t i, std::uint32_t n) { return i < n ? f[i] : 1.0f; };
      const float post_scale = p.tensor_scale_a ? (1.0f / *p.tensor_scale_a) * (1.0f / *p.tensor_scale_b) : p.post_scale;
#pragma unroll
      for (int h = 0; h < mh; ++h) {
        const std::uint32_t row = p0 + static_cast<std::uint32_t>(row0 + h * 64);
        float fr0 = post_scale, fr1 = post_scale;
        if constexpr (S == scaling::line) {
          fr0 = line_factor(p.line_scale_a, row, p.p);
          fr1 = line_factor(p.line_scale_a, row + 8, p.p);
        }
        if constexpr (WideD) {
          const bool warp_rows_in = p0 + static_cast<std::uint32_t>(wg * (BM / 2) + h * 64 + warp * 16 + 16) <= p.p;
#pragma unroll
          for (int u = 0; u < subs; ++u)
#pragma unroll
            for (int i0 = 0; i0 < SN / 8; i0 += 4) {
              const std::uint32_t col0 = q0 + static_cast<std::uint32_t>(u * SN + i0 * 8);
              float fc[8];
#pragma unroll
              for (int k = 0; k < 8; ++k) fc[k] = 1.0f;
              if constexpr (S == scaling::line) {
#pragma unroll
                for (int k = 0; k < 8; ++k) fc[k] = line_factor(p.line_scale_b, col0 + static_cast<std::uint32_t>(k / 2 * 8 + 2 * t + k % 2), p.q);
              }
              if (warp_rows_in && col0 + 32 <= p.q) {
                store_quad_rows(p, row, col0, &acc[h][u][i0 * 4], fr0, fr1, fc);
                continue;
              }
#pragma unroll
              for (int k = 0; k < 4; ++k) {
                const int i = i0 + k;
                const std::uint32_t col = col0 + static_cast<std::uint32_t>(k * 8 + 2 * t);
                store_pair(p, row, col, acc[h][u][i * 4 + 0], acc[h][u][i * 4 + 1], fr0, fc[2 * k], fc[2 * k + 1]);
                store_pair(p, row + 8, col, acc[h][u][i * 4 + 2], acc[h][u][i * 4 + 3], fr1, fc[2 * k], fc[2 * k + 1]);
              }
            }
        } else {
#pragma unroll
          for (int u = 0; u < subs; ++u)
#pragma unroll
            for (int i = 0; i < SN / 8; ++i) {
              const std::uint32_t col = q0 + static_cast<std::uint32_t>(u * SN + i * 8 + 2 * t);
              float fc0 = 1.0f, fc1 = 1.0f;
              if constexpr (S == scaling::line) {
                fc0 = line_factor(p.line_scale_b, col, p.q);
                fc1 = line_factor(p.line_scale_b, col + 1, p.q);
              }
              store_pair(p, row, col, acc[h][u][i * 4 + 0], acc[h][u][i * 4 + 1], fr0, fc0, fc1);
              store_pair(p, row + 8, col, acc[h][u][i * 4 + 2], acc[h][u][i * 4 + 3], fr1, fc0, fc1);
            }
        }
      }
    }
  }
#else
  (void)map_a;
  (void)map_b;
  (void)p;
#endif
}

// ---- split K ----------------------------------------------------------------------------------
// A wgrad-shaped product (a few hundred thousand outputs, K = tokens in the tens of thousands)
// has fewer 128 x 256 tiles than the GPU has SMs: the reduction is split across CTAs (gridDim.y)
// into fp32 partials, then added in split order, so every run gives the same bits.
// D = sum_z partial_z + beta * C, in D's type; alpha and the scales are in the partials already.
template <bool Bf16Out>
MXKIT_GLOBAL void split_reduce_kernel(const float* partials, std::uint32_t splits, std::size_t stride, std::uint32_t rows,
                                      std::uint32_t cols, gemm_output_desc o, launch_gate gate) {
  if (gate.closed()) return;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float v = partials[i];
    for (std::uint32_t z = 1; z < splits; ++z) v += partials[z * stride + i];
    const std::size_t r = i / cols, c = i % cols, di = r * o.ldd + c, ci = r * o.ldc + c;
    if constexpr (Bf16Out) {
      if (o.beta != 0.0f) v = v + o.beta * bit_cast<float>(static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(o.c)[ci]) << 16);
      static_cast<std::uint16_t*>(o.d)[di] = bf16_output_bits(v);
    } else {
      if (o.beta != 0.0f) v = v + o.beta * static_cast<const float*>(o.c)[ci];
      static_cast<float*>(o.d)[di] = v;
    }
  }
}

// SMs of the current device.
inline std::uint32_t multiprocessors() {
  int device = 0, n = 0;
  MXKIT_GPU_CHECK(get_device(&device));
  MXKIT_GPU_CHECK(get_multiprocessor_count(&n, device));
  return static_cast<std::uint32_t>(n);
}

// How many ways to split K for `tiles` output tiles over `k_stages` stages on `sms` SMs (one CTA
// per SM): the split count with the fewest waves per unit of work, at least 8 stages (1 KiB of
// K) per split, each extra split charged 3 % for its partial's write and read-back.
constexpr std::uint32_t choose_k_splits(std::uint32_t tiles, std::uint32_t k_stages, std::uint32_t sms) noexcept {
  if (tiles == 0 || sms == 0) return 1;
  std::uint32_t best = 1;
  double best_cost = static_cast<double>((tiles + sms - 1) / sms);
  for (std::uint32_t z = 2; z <= 16 && k_stages / z >= 8; ++z) {
    const double cost = static_cast<double>((tiles * z + sms - 1) / sms) / z * (1.0 + 0.03 * (z - 1));
    if (cost < best_cost) best = z, best_cost = cost;
  }
  return best;
}
static_assert(choose_k_splits(18, 128, 132) == 7 && choose_k_splits(384, 6, 132) == 1 && choose_k_splits(512, 64, 132) == 1);

// ---- launcher ---------------------------------------------------------------------------------
// [lines, k] bytes with `line_bytes` between lines, read in boxes of [box_lines, 128] bytes.
inline CUtensorMap make_tensor_map(const std::uint8_t* data, std::size_t lines, std::size_t k, std::size_t line_bytes,
                                   std::uint32_t box_lines) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {k, lines};
  const cuuint64_t strides[1] = {line_bytes};
  const cuuint32_t box[2] = {tile_k, box_lines};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<std::uint8_t*>(data), dims, strides,
                                          box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  mxkit::detail::require(r == CUDA_SUCCESS, "gemm (sm90): cuTensorMapEncodeTiled failed with ", static_cast<int>(r), " for a ",
                         lines, "x", k, " operand");
  return map;
}

// What the launcher needs beyond the operands: each side's wgmma element kind (after any
// expansion) and its byte matrix (the operand itself, or its expanded copy in scratch).
struct mma_operand {
  mma_kind kind = mma_kind::e4m3;
  const std::uint8_t* data = nullptr;
  std::size_t line_bytes = 0;
  const float* line_scale = nullptr;  // expand::fold's line factors (scaling::line)
};

// Can this path take these operands at all (before any expansion)? Types, alignment, sizes.
inline bool supports(const gemm_operand& a, const gemm_operand& b) noexcept {
  auto ok = [](const gemm_operand& o) {
    if (o.kind == operand_kind::mx && o.type == mx_type::mxint8) return false;
    if (o.mn_major && o.kind != operand_kind::bf16) return false;
    const bool expanded = o.kind == operand_kind::mx && o.type != mx_type::mxfp8_e4m3 && o.type != mx_type::mxfp8_e5m2;
    if (!expanded && (reinterpret_cast<std::uintptr_t>(o.data) % 16 != 0 || o.line_bytes % 16 != 0)) return false;
    return o.lines < (std::size_t{1} << 31) && o.length < (std::size_t{1} << 31);
  };
  return a.kind == b.kind && ok(a) && ok(b);
}

// The consumer configurations in use. Others that config<> can express were measured slower
// (bench/NOTES_gemm.md lists them with their figures).
using config_mx = config<128, 256, 64, 2, false>;
using config_fp8 = config<128, 256, 64, 2, false>;

// The tensor map of one side: K-major [lines, K bytes] in boxes of [box_lines, 128 B], or
// MN-major (bf16) [K rows, 2 lines bytes] in boxes of [64 rows, 128 B] (tma_load_stage's panels).
template <bool Mn>
CUtensorMap operand_map(const gemm_operand& o, const mma_operand& f, std::size_t k_bytes, std::uint32_t box_lines) {
  if constexpr (Mn) return make_tensor_map(f.data, o.length, 2 * o.lines, f.line_bytes, 64);
  else return make_tensor_map(f.data, o.lines, k_bytes, f.line_bytes, box_lines);
}

// Does D take the 16-byte epilogue (store_quad_rows)? bf16 rows 16-byte aligned.
inline bool wide_output(const gemm_output_desc& o) noexcept {
  return o.bf16 && o.ldd % 8 == 0 && reinterpret_cast<std::uintptr_t>(o.d) % 16 == 0;
}

template <mma_kind TA, mma_kind TB, scaling S, int G, class Cfg, bool MnA = false, bool MnB = false>
void launch_typed(const gemm_operand& a, const gemm_operand& b, const mma_operand& fa, const mma_operand& fb, params prm,
                  stream_t stream) {
  // The 16-byte epilogue is a kernel of its own: compiled into every kernel, it made those with
  // fp32 D (wgrad, split-K partials) 8-60 % slower on the H200 though they never took it
  // (bench/NOTES_training.md). Block scaling never takes it (ptxas spilled 372 bytes).
  constexpr bool can_widen = S != scaling::block;
  auto kernel = gemm_kernel<TA, TB, S, G, Cfg, MnA, MnB, false>;
  auto wide_kernel = gemm_kernel<TA, TB, S, G, Cfg, MnA, MnB, can_widen>;
  constexpr std::size_t smem = smem_bytes<Cfg::bm, Cfg::bn>;
  static const bool configured = [&] {
    MXKIT_GPU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    MXKIT_GPU_CHECK(cudaFuncSetAttribute(wide_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)configured;
  prm.tiles_p = static_cast<std::uint32_t>((a.lines + Cfg::bm - 1) / Cfg::bm);
  prm.tiles_q = static_cast<std::uint32_t>((b.lines + Cfg::bn - 1) / Cfg::bn);
  const std::size_t k_bytes = a.length * (TA == mma_kind::bf16 ? 2 : 1);
  const CUtensorMap ma = operand_map<MnA>(a, fa, k_bytes, Cfg::bm), mb = operand_map<MnB>(b, fb, k_bytes, Cfg::bn);
  const std::uint32_t tiles = prm.tiles_p * prm.tiles_q, k_stages = (prm.k_blocks + blocks_per_stage - 1) / blocks_per_stage;
  const std::uint32_t sms = multiprocessors(), splits = choose_k_splits(tiles, k_stages, sms);
  if (splits == 1) {  // persistent: one CTA per SM at most, each taking every sms-th tile
    (can_widen && wide_output(prm.out) ? wide_kernel : kernel)<<<std::min(tiles, sms), threads, smem, stream>>>(ma, mb, prm);
    MXKIT_GPU_CHECK_LAUNCH();
    return;
  }
  prm.stages_per_split = (k_stages + splits - 1) / splits;
  const std::uint32_t used = (k_stages + prm.stages_per_split - 1) / prm.stages_per_split;  // every split has work
  const gemm_output_desc out = prm.out;
  prm.split_stride = static_cast<std::size_t>(prm.p) * prm.q;
  float* partials = static_cast<float*>(allocate_async(used * prm.split_stride * sizeof(float), stream));
  prm.out = {partials, nullptr, prm.q, prm.q, false, out.alpha, 0.0f};
  prm.vector_store = prm.q % 2 == 0;
  kernel<<<dim3(tiles, used), threads, smem, stream>>>(ma, mb, prm);
  MXKIT_GPU_CHECK_LAUNCH();
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((prm.split_stride + 255) / 256, 4u * sms));
  if (out.bf16) split_reduce_kernel<true><<<blocks, 256, 0, stream>>>(partials, used, prm.split_stride, prm.p, prm.q, out, prm.gate);
  else split_reduce_kernel<false><<<blocks, 256, 0, stream>>>(partials, used, prm.split_stride, prm.p, prm.q, out, prm.gate);
  MXKIT_GPU_CHECK_LAUNCH();
  deallocate_async(partials, stream);
}

template <scaling S, int G, class Cfg>
void launch_kinds(const gemm_operand& a, const gemm_operand& b, const mma_operand& fa, const mma_operand& fb, const params& prm,
                  stream_t stream) {
  constexpr mma_kind E4 = mma_kind::e4m3, E5 = mma_kind::e5m2;
  switch (static_cast<int>(fa.kind) * 2 + static_cast<int>(fb.kind)) {
    case 0: launch_typed<E4, E4, S, G, Cfg>(a, b, fa, fb, prm, stream); break;
    case 1: launch_typed<E4, E5, S, G, Cfg>(a, b, fa, fb, prm, stream); break;
    case 2: launch_typed<E5, E4, S, G, Cfg>(a, b, fa, fb, prm, stream); break;
    default: launch_typed<E5, E5, S, G, Cfg>(a, b, fa, fb, prm, stream); break;
  }
}

// a, b: the original operands (shape, scales); fa, fb: their FP8 bytes. Line factors on both
// (expand::fold's E5M2 bytes) select scaling::line, whose promotions cover one block
// (exact_block_sums) or four; the kernel runs only if `gate` is open.
inline void launch(const gemm_operand& a, const gemm_operand& b, const mma_operand& fa, const mma_operand& fb,
                   const gemm_output_desc& out, stream_t stream, launch_gate gate = {}, bool exact_block_sums = true) {
  if (a.lines == 0 || b.lines == 0) return;
  params prm;
  prm.p = static_cast<std::uint32_t>(a.lines);
  prm.q = static_cast<std::uint32_t>(b.lines);
  const bool mx = a.kind == operand_kind::mx, bf16 = fa.kind == mma_kind::bf16;
  prm.k_blocks = static_cast<std::uint32_t>(((bf16 ? 2 : 1) * a.length + 31) / 32);  // 32-byte K steps
  prm.scale_a = a.scales;
  prm.scale_b = b.scales;
  prm.scale_ld_a = static_cast<std::uint32_t>(a.blocks);
  prm.scale_ld_b = static_cast<std::uint32_t>(b.blocks);
  prm.post_scale = a.kind == operand_kind::fp8 ? a.scale_inv * b.scale_inv : 1.0f;
  if (a.kind == operand_kind::fp8 && (a.scale || b.scale)) {
    mxkit::detail::require(a.scale && b.scale, "gemm (sm90): both FP8 scales on the device or neither");
    prm.tensor_scale_a = a.scale;
    prm.tensor_scale_b = b.scale;
  }
  prm.line_scale_a = fa.line_scale;
  prm.line_scale_b = fb.line_scale;
  prm.gate = gate;
  prm.out = out;
  const std::size_t elem = out.bf16 ? 2 : 4;
  prm.vector_store = out.ldd % 2 == 0 && reinterpret_cast<std::uintptr_t>(out.d) % (2 * elem) == 0 &&
                     (out.beta == 0.0f || (out.ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(out.c) % (2 * elem) == 0));
  if (bf16) {
    mxkit::detail::require(fb.kind == mma_kind::bf16, "gemm (sm90): bf16 pairs only with bf16");
    constexpr mma_kind B16 = mma_kind::bf16;
    constexpr int G = blocks_per_stage;
    switch (static_cast<int>(a.mn_major) * 2 + static_cast<int>(b.mn_major)) {
      case 0: launch_typed<B16, B16, scaling::tensor, G, config_fp8, false, false>(a, b, fa, fb, prm, stream); break;
      case 1: launch_typed<B16, B16, scaling::tensor, G, config_fp8, false, true>(a, b, fa, fb, prm, stream); break;
      case 2: launch_typed<B16, B16, scaling::tensor, G, config_fp8, true, false>(a, b, fa, fb, prm, stream); break;
      default: launch_typed<B16, B16, scaling::tensor, G, config_fp8, true, true>(a, b, fa, fb, prm, stream); break;
    }
  } else if (!mx) {
    launch_kinds<scaling::tensor, blocks_per_stage, config_fp8>(a, b, fa, fb, prm, stream);
  } else if (fa.line_scale && fb.line_scale) {
    mxkit::detail::require(fa.kind == mma_kind::e5m2 && fb.kind == mma_kind::e5m2, "gemm (sm90): line-scaled operands are E5M2");
    if (exact_block_sums) launch_typed<mma_kind::e5m2, mma_kind::e5m2, scaling::line, 1, config_mx>(a, b, fa, fb, prm, stream);
    else launch_typed<mma_kind::e5m2, mma_kind::e5m2, scaling::line, blocks_per_stage, config_mx>(a, b, fa, fb, prm, stream);
  } else {
    launch_kinds<scaling::block, 1, config_mx>(a, b, fa, fb, prm, stream);
  }
}

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
