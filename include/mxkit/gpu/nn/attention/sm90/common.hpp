// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal GQA flash attention on Hopper tensor cores (sm_90a): the same computation as the
// mma.sync kernels of gpu/nn/attention.hpp (the formulas are there), on warpgroup MMAs fed by TMA,
// in the structure of FlashAttention-3 (Shah et al., "FlashAttention-3: Fast and Accurate
// Attention with Asynchrony and Low-precision", 2024):
//  - warp specialization: one producer warpgroup issues the TMA copies into rings of stages
//    guarded by mbarriers; two consumer warpgroups (64 rows each) run the wgmmas and the softmax,
//    register budgets moved to them with setmaxnreg;
//  - P and dS stay in registers: a wgmma accumulator fragment of 16 columns is, rounded to bf16,
//    exactly the register A operand of the next wgmma (both use the m16n8k16 row/column split);
//  - within a warpgroup, step j's scores are computed while step j - 1's second product is still
//    on the tensor cores, and step j's exponentials overlap it (FA3 section 3.2,
//    "intra-warpgroup overlapping"): the forward, dQ, and dK/dV at D = 64 (at D = 128 the two
//    steps' fragments do not fit in 240 registers, and dK/dV drains each step).
// Every operand tile in shared memory is a TMA box of Q, K, V or dO rows with the 128-byte
// swizzle. The score products read it K-major (desc_sw128_lo, as the GEMM); the products whose
// second operand runs along the head dimension (P V, dS K, P^T dO, dS^T Q) read the same box
// MN-major (desc_sw128_mn_lo, wgmma's transposed B), so no operand is copied or transposed.
// The backward keeps the deterministic split of the mma.sync path: a dK/dV kernel per key tile
// that loops over the group's query heads, and a separate dQ kernel (no float atomics).
// Tiles: forward 128 query rows x 128 keys; dK/dV 128 keys x 64 query rows per step; dQ 128
// query rows x 64 keys. Shared memory at D = 128: 160 KiB each.
// This header: the pieces the three kernels share (warpgroup budgets, tensor maps, the mbarrier
// ring and the producer's tile loads into it, shared-memory layouts, descriptor, wgmma and
// fragment helpers); forward.hpp, backward_dkdv.hpp and backward_dq.hpp hold the kernels,
// launch.hpp the host side.
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/nn/attention/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/arch/cuda/sm90_ptx.hpp>
#include <mxkit/gpu/arch/cuda/sm90_runtime.hpp>  // CUtensorMap
#include <mxkit/gpu/nn/attention_params.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

inline constexpr int attn_threads = 384;  // warpgroups 0-1 consume, 2 produces
inline constexpr int attn_producer_regs = 24, attn_consumer_regs = 240;
static_assert(2 * 128 * attn_consumer_regs + 128 * attn_producer_regs <= 65536, "register file");

using detail::attention_params;
using detail::attn_log2e;

// Up to three tensor maps per kernel, passed by value as a __grid_constant__ parameter so that TMA
// reads them from parameter space.
struct attention_maps {
  CUtensorMap m[3];
};

// A ring of Stages shared-memory buffers guarded by mbarriers: loop step j uses stage
// j % Stages. `full` completes when the producer has filled the stage (the TMA's expect_tx
// arrival, plus `producer_threads` plain arrivals of threads that store into it), `empty` when
// all 256 consumer threads are done with it. A fresh barrier counts its parity-1 phase as
// complete, so the producer's first wait on each stage falls through.
template <int Stages>
struct attn_ring {
  static constexpr int stages = Stages;
  std::uint64_t full[Stages], empty[Stages];
#if MXKIT_SM90A
  static __device__ std::uint32_t phase(int j) { return static_cast<std::uint32_t>((j / Stages) & 1); }
  __device__ void init(std::uint32_t producer_threads = 0) {
    for (int s = 0; s < Stages; ++s) {
      mbar_init(&full[s], 1 + producer_threads);
      mbar_init(&empty[s], 256);
    }
  }
  __device__ std::uint64_t* filled(int j) { return &full[j % Stages]; }
  __device__ void wait_free(int j) { mbar_wait(&empty[j % Stages], phase(j) ^ 1); }
  __device__ void wait_filled(int j) { mbar_wait(&full[j % Stages], phase(j)); }
  __device__ void release(int j) { mbar_arrive(&empty[j % Stages]); }
#endif
};

// ---- shared-memory layouts (every tile a stack of 128-byte-wide panels, 1024-byte aligned) -----
// A tile of R rows of D bf16 is [D/64 panels][R rows][128 B]: one TMA box of 128-byte width per
// panel. Read K-major it is R x D; read MN-major it is the D x R transpose (sm90_ptx.hpp).
template <int D>
struct attn_forward_smem {
  static constexpr int BM = 128, BN = 128;
  alignas(1024) std::uint8_t q[BM * D * 2];     // [D/64][BM][128 B]
  alignas(1024) std::uint8_t k[2][BN * D * 2];  // [D/64][BN][128 B]
  alignas(1024) std::uint8_t v[2][BN * D * 2];
  std::uint64_t q_full;
  attn_ring<2> k_ring, v_ring;  // K and V in rings of their own (the kernel says why)
};
// The backward's loops read a stage's operands in both of a step's products; with the products
// of two steps in flight (the overlapped loops) a third stage lets the next step's TMA land.
template <int D>
struct attn_dkdv_smem {
  static constexpr int BN = 128, BM = 64, stages = 3;
  alignas(1024) std::uint8_t k[BN * D * 2];  // [D/64][BN][128 B]
  alignas(1024) std::uint8_t v[BN * D * 2];
  alignas(1024) std::uint8_t q[stages][BM * D * 2];  // [D/64][BM][128 B]
  alignas(1024) std::uint8_t dout[stages][BM * D * 2];
  float lse[stages][BM], delta[stages][BM];  // LSE in base 2; Delta
  std::uint64_t kv_full;
  attn_ring<stages> ring;  // Q, dO and the row statistics of one step
};
template <int D>
struct attn_dq_smem {
  static constexpr int BM = 128, BN = 64, stages = 3;
  alignas(1024) std::uint8_t q[BM * D * 2];  // [D/64][BM][128 B]
  alignas(1024) std::uint8_t dout[BM * D * 2];
  alignas(1024) std::uint8_t k[stages][BN * D * 2];  // [D/64][BN][128 B]
  alignas(1024) std::uint8_t v[stages][BN * D * 2];
  std::uint64_t q_full;
  attn_ring<stages> ring;  // K and V of one key tile
};
template <class Smem>
inline constexpr std::size_t attn_smem_bytes = sizeof(Smem) + 1024;  // + alignment slack
static_assert(attn_smem_bytes<attn_forward_smem<128>> <= 232448 && attn_smem_bytes<attn_dkdv_smem<128>> <= 232448 &&
                  attn_smem_bytes<attn_dq_smem<128>> <= 232448,
              "Hopper allows 227 KiB of shared memory per block");

#if MXKIT_SM90A
template <class Smem>
__device__ inline Smem& attn_smem() {
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  return *reinterpret_cast<Smem*>(smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u));
}

// ---- producer: TMA loads of operand tiles (one thread issues them) ------------------------------
// One tile to load: the box at byte column `col` of `map` into `dst`, [D/64 panels][R rows][128 B].
struct attn_tma_tile {
  std::uint8_t* dst;
  const CUtensorMap* map;
  int col;
};
// Loads tiles of R rows of D bf16 (rows row .. row + R - 1 of batch b) onto barrier `bar`: one
// expect_tx for all their bytes, then panel by panel, each tile's panel in turn.
template <int R, int D, std::same_as<attn_tma_tile>... Tiles>
__device__ inline void attn_load_tiles(std::uint64_t* bar, int row, int b, const Tiles&... tiles) {
  constexpr std::uint32_t bytes = sizeof...(Tiles) * R * D * 2;
  mbar_arrive_expect_tx(bar, bytes);
  for (int pn = 0; pn < D / 64; ++pn) (tma_load_3d(tiles.dst + pn * R * 128, tiles.map, bar, tiles.col + pn * 128, row, b), ...);
}
// Fills stage j of `ring` with row tile j (rows j R .. j R + R - 1) of the tiles, once the
// consumers have released the stage.
template <int R, int D, int Stages, std::same_as<attn_tma_tile>... Tiles>
__device__ inline void attn_fill_stage(attn_ring<Stages>& ring, int j, int b, const Tiles&... tiles) {
  ring.wait_free(j);
  attn_load_tiles<R, D>(ring.filled(j), j * R, b, tiles...);
}

// Descriptor low word of byte `offset` inside a tile of 128-byte panels: rows advance by 128
// bytes, a 16-wide K step by 32 bytes within a panel, the next panel by panel_bytes.
__device__ inline std::uint32_t attn_desc(const void* tile, int k_step, int panel_bytes, int row0 = 0) {
  const int offset = (k_step / 4) * panel_bytes + (k_step % 4) * 32 + row0 * 128;
  return desc_sw128_lo(smem_addr(tile) + static_cast<std::uint32_t>(offset));
}

// Fences every register of the accumulators (fence_operand), in order.
template <int N, int... M>
__device__ inline void fence_all(float (&r)[N], float (&... rest)[M]) {
#pragma unroll
  for (int i = 0; i < N; ++i) fence_operand(r[i]);
  if constexpr (sizeof...(M) > 0) fence_all(rest...);
}
// Waits until at most `Pending` wgmma groups are in flight; the accumulators `acc` that the
// finished groups wrote are fenced, so no read of them moves above the wait.
template <int Pending, int... N>
__device__ inline void attn_wgmma_wait(float (&... acc)[N]) {
  wgmma_wait<Pending>();
  fence_all(acc...);
}

// The backward's overlapped consumer loop over ring stages 0 .. steps - 1 (FA3 section 3.2): step
// i's score products (issue_scores(stage)) are issued before step i - 1's gradient product
// (issue_grads(stage)), and step i's elementwise pass (math(i, stage), which fences the score
// accumulators first) runs while that product is still on the tensor cores. retire(i) waits for
// step i's gradient product and releases its stage; only then does pack() overwrite the register
// operands that product reads.
template <int Stages, class Scores, class Grads, class Math, class Retire, class Pack>
__device__ inline void attn_overlapped_steps(attn_ring<Stages>& ring, int steps, Scores issue_scores, Grads issue_grads, Math math,
                                             Retire retire, Pack pack) {
  ring.wait_filled(0);
  issue_scores(0);
  wgmma_wait<0>();
  math(0, 0);
  pack();
  for (int i = 1; i < steps; ++i) {
    const int s = i % Stages;
    ring.wait_filled(i);  // before any wgmma is in flight (a spin loop)
    issue_scores(s);
    issue_grads((i - 1) % Stages);
    wgmma_wait<1>();
    math(i, s);
    retire(i - 1);
    pack();
  }
  issue_grads((steps - 1) % Stages);
  retire(steps - 1);
}

// Two floats rounded to nearest-even bf16 and packed (a in the low half) by one instruction
// (PTX 9.7.9.21 cvt.rn.bf16x2.f32: the first source goes to the upper half). It is the rounding
// of detail::round_to<bfloat16>, which the mma.sync kernels use; the hardware conversion matters
// here because the per-element software rounding made these kernels instruction-bound (ncu:
// docs/perf/training.md).
__device__ inline std::uint32_t attn_pack_bf16(float a, float b) {
  std::uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));
  return d;
}
// 2^x by the special-function unit alone (PTX ex2.approx.ftz.f32: the approximation exp2f also
// uses, with subnormal results flushed to zero and 2^-inf = +0). exp2f's range fix for subnormal
// results costs a compare and two predicated multiplies per element, and these loops are
// issue-bound (docs/perf/training.md); a probability under 2^-126 adds nothing visible to the
// bf16 products that follow.
__device__ inline float attn_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Accumulator columns 16 kk .. 16 kk + 15 as the register A operand of K step kk.
template <int N>
__device__ inline void attn_to_a(std::uint32_t (&a)[4], const float (&c)[N], int kk) {
  a[0] = attn_pack_bf16(c[8 * kk + 0], c[8 * kk + 1]);
  a[1] = attn_pack_bf16(c[8 * kk + 2], c[8 * kk + 3]);
  a[2] = attn_pack_bf16(c[8 * kk + 4], c[8 * kk + 5]);
  a[3] = attn_pack_bf16(c[8 * kk + 6], c[8 * kk + 7]);
}

// acc[64 x N] (+)= A . B^T at K step kk (step 0 overwrites): A the 64 rows from a_row0 of a
// tile of a_rows rows, B a tile of N rows, both [D/64][rows][128 B] read K-major.
template <int N>
__device__ inline void wgmma_ss_kmajor(float (&acc)[N / 2], const void* a, int a_rows, int a_row0, const void* b, int kk) {
  const std::uint32_t desc_a = attn_desc(a, kk, a_rows * 128, a_row0), desc_b = attn_desc(b, kk, N * 128), accumulate = kk > 0 ? 1u : 0u;
  if constexpr (N == 128) wgmma_bf16_ss_n128(acc, desc_a, desc_b, accumulate);
  else wgmma_step<64, mma_kind::bf16, mma_kind::bf16>(acc, desc_a, desc_b, accumulate);
}
// acc[64 x D] += A (registers, K step kk) . B, B the K step's 16 rows of a [D/64][rows][128 B]
// tile read MN-major.
template <int D>
__device__ inline void wgmma_rs_d(float (&acc)[D / 2], const std::uint32_t (&a)[4], const void* tile, int rows, int kk) {
  const std::uint32_t desc = desc_sw128_mn_lo(smem_addr(tile) + static_cast<std::uint32_t>(kk * 16 * 128), static_cast<std::uint32_t>(rows * 128));
  if constexpr (D == 128) wgmma_bf16_rs_n128(acc, a, desc, 1u);
  else wgmma_bf16_rs_n64(acc, a, desc, 1u);
}

// Stores rows r0 and r0 + 8 of a fragment (columns 8 i + 2 t) as bf16 pairs, times `scale`.
template <int N>
__device__ inline void attn_store_rows(std::uint16_t* dst, std::size_t ld, int r0, int rows, const float (&f)[N], float s0, float s1) {
  const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    if (r0 < rows)
      *reinterpret_cast<std::uint32_t*>(dst + static_cast<std::size_t>(r0) * ld + 8 * i + 2 * t) = attn_pack_bf16(f[4 * i] * s0, f[4 * i + 1] * s0);
    if (r0 + 8 < rows)
      *reinterpret_cast<std::uint32_t*>(dst + static_cast<std::size_t>(r0 + 8) * ld + 8 * i + 2 * t) =
          attn_pack_bf16(f[4 * i + 2] * s1, f[4 * i + 3] * s1);
  }
}
#endif  // MXKIT_SM90A

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
