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
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/arch/cuda/sm90_ptx.hpp>
#include <mxkit/gpu/arch/cuda/sm90_runtime.hpp>
#include <mxkit/gpu/nn/attention_params.hpp>
#include <mxkit/gpu/runtime.hpp>

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

// Descriptor low word of byte `offset` inside a tile of 128-byte panels: rows advance by 128
// bytes, a 16-wide K step by 32 bytes within a panel, the next panel by panel_bytes.
__device__ inline std::uint32_t attn_desc(const void* tile, int k_step, int panel_bytes, int row0 = 0) {
  const int offset = (k_step / 4) * panel_bytes + (k_step % 4) * 32 + row0 * 128;
  return desc_sw128_lo(smem_addr(tile) + static_cast<std::uint32_t>(offset));
}

template <int N>
__device__ inline void fence_all(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) fence_operand(r[i]);
}

// Two floats rounded to nearest-even bf16 and packed (a in the low half) by one instruction
// (PTX 9.7.9.21 cvt.rn.bf16x2.f32: the first source goes to the upper half). It is the rounding
// of detail::round_to<bfloat16>, which the mma.sync kernels use; the hardware conversion matters
// here because the per-element software rounding made these kernels instruction-bound (ncu:
// bench/NOTES_training.md).
__device__ inline std::uint32_t attn_pack_bf16(float a, float b) {
  std::uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));
  return d;
}
// 2^x by the special-function unit alone (PTX ex2.approx.ftz.f32: the approximation exp2f also
// uses, with subnormal results flushed to zero and 2^-inf = +0). exp2f's range fix for subnormal
// results costs a compare and two predicated multiplies per element, and these loops are
// issue-bound (bench/NOTES_training.md); a probability under 2^-126 adds nothing visible to the
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

// ---- forward ------------------------------------------------------------------------------------
// Map 0: qkv (box 128 rows). Grid: x = (b, head), y = query tile, heaviest (the last) first.
template <int D>
MXKIT_GLOBAL void __launch_bounds__(attn_threads, 1) attention_forward_kernel(const __grid_constant__ attention_maps maps, const attention_params p) {
#if MXKIT_SM90A
  using S = attn_forward_smem<D>;
  constexpr int BM = S::BM, BN = S::BN, KD = D / 16;
  S& sm = attn_smem<S>();
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128;
  const int m_tile = static_cast<int>(gridDim.y) - 1 - static_cast<int>(blockIdx.y);
  const int bh = static_cast<int>(blockIdx.x), b = bh / p.heads, h = bh % p.heads, kvh = h / (p.heads / p.kv_heads), T = p.seq;
  const int m0 = m_tile * BM, tiles = m_tile + 1;  // key tiles 0..m_tile (BN == BM)
  if (tid == 0) {
    mbar_init(&sm.q_full, 1);
    sm.k_ring.init();
    sm.v_ring.init();
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 2) {
    reg_dealloc<attn_producer_regs>();
    if (tid != 256) return;
    const int q_col = h * D * 2, k_col = (p.heads + kvh) * D * 2, v_col = k_col + p.kv_heads * D * 2;
    mbar_arrive_expect_tx(&sm.q_full, BM * D * 2);
    for (int pn = 0; pn < D / 64; ++pn) tma_load_3d(sm.q + pn * BM * 128, &maps.m[0], &sm.q_full, q_col + pn * 128, m0, b);
    // K and V in rings of their own: K_j's buffer frees once S_j is computed, V_j's only after
    // P_j V_j, so one shared ring would hold K_{j+2} back by most of an iteration.
    for (int j = 0; j < tiles; ++j) {
      const int s = j % 2;
      sm.k_ring.wait_free(j);
      mbar_arrive_expect_tx(sm.k_ring.filled(j), BN * D * 2);
      for (int pn = 0; pn < D / 64; ++pn) tma_load_3d(sm.k[s] + pn * BN * 128, &maps.m[0], sm.k_ring.filled(j), k_col + pn * 128, j * BN, b);
      sm.v_ring.wait_free(j);
      mbar_arrive_expect_tx(sm.v_ring.filled(j), BN * D * 2);
      for (int pn = 0; pn < D / 64; ++pn) tma_load_3d(sm.v[s] + pn * BN * 128, &maps.m[0], sm.v_ring.filled(j), v_col + pn * 128, j * BN, b);
    }
    return;
  }
  reg_alloc<attn_consumer_regs>();
  const int warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r0 = m0 + wg * 64 + warp * 16 + g, r1 = r0 + 8;
  float o[D / 2], s[BN / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  std::uint32_t pa[BN / 16][4];

  auto issue_s = [&](int j) {
    fence_all(s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KD; ++kk)
      wgmma_bf16_ss_n128(s, attn_desc(sm.q, kk, BM * 128, wg * 64), attn_desc(sm.k[j % 2], kk, BN * 128), kk > 0 ? 1u : 0u);
    wgmma_commit();
  };
  auto issue_pv = [&](int j) {
    fence_all(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs_d<D>(o, pa[kk], sm.v[j % 2], BN, kk);
    wgmma_commit();
  };
  // Mask, scale to base 2, new row maxima; exponentiates s in place and returns the factor
  // exp2(m_old - m_new) by which the running output and sum shrink.
  auto softmax = [&](int j, float (&alpha)[2]) {
    const int n0 = j * BN;
    if (j == m_tile || n0 + BN > T) {
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = n0 + 8 * i + 2 * t + (e & 1), row = e < 2 ? r0 : r1;
          s[4 * i + e] = col <= row && col < T ? s[4 * i + e] * p.scale_log2 : -INFINITY;
        }
    } else {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) s[i] *= p.scale_log2;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
      mx[0] = fmaxf(mx[0], fmaxf(s[4 * i], s[4 * i + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[4 * i + 2], s[4 * i + 3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], shfl_xor(mx[r], 1));
      mx[r] = fmaxf(mx[r], shfl_xor(mx[r], 2));
      const float m_new = fmaxf(m_run[r], mx[r]);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a fully masked row stays at 0, not NaN
      alpha[r] = attn_exp2(m_run[r] - m_use);
      m_run[r] = m_new;
      mx[r] = m_use;
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[4 * i + e] = attn_exp2(s[4 * i + e] - mx[e >> 1]);
        rs[e >> 1] += s[4 * i + e];
      }
    l_run[0] = l_run[0] * alpha[0] + rs[0];
    l_run[1] = l_run[1] * alpha[1] + rs[1];
  };
  auto rescale_and_pack = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      o[4 * i] *= alpha[0];
      o[4 * i + 1] *= alpha[0];
      o[4 * i + 2] *= alpha[1];
      o[4 * i + 3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) attn_to_a(pa[kk], s, kk);
  };

  mbar_wait(&sm.q_full, 0);
  sm.k_ring.wait_filled(0);
  issue_s(0);
  wgmma_wait<0>();
  fence_all(s);
  sm.k_ring.release(0);
  {
    float alpha[2];
    softmax(0, alpha);
    rescale_and_pack(alpha);
  }
  for (int j = 1; j < tiles; ++j) {
    // Both waits come before the wgmmas: a spin loop while a wgmma is in flight makes ptxas
    // serialize them (C7514).
    sm.k_ring.wait_filled(j);
    sm.v_ring.wait_filled(j - 1);
    issue_s(j);       // S_j = Q K_j^T ...
    issue_pv(j - 1);  // ... while O += P_{j-1} V_{j-1} queues behind it
    wgmma_wait<1>();  // S_j is in
    fence_all(s);
    sm.k_ring.release(j);
    float alpha[2];
    softmax(j, alpha);  // overlaps the P V product still on the tensor cores
    wgmma_wait<0>();
    fence_all(o);
    sm.v_ring.release(j - 1);
    rescale_and_pack(alpha);
  }
  sm.v_ring.wait_filled(tiles - 1);
  issue_pv(tiles - 1);
  wgmma_wait<0>();
  fence_all(o);
  sm.v_ring.release(tiles - 1);

  // O / l and LSE = (m + log2 l) / log2(e): row sums over the quad in a fixed order.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += shfl_xor(l_run[r], 1);
    l_run[r] += shfl_xor(l_run[r], 2);
  }
  const std::size_t od = static_cast<std::size_t>(p.heads) * D;
  attn_store_rows<D / 2>(p.out + static_cast<std::size_t>(b) * T * od + static_cast<std::size_t>(h) * D, od, r0, T, o,
                         1.0f / l_run[0], 1.0f / l_run[1]);
  if (t == 0) {
    float* lse = p.lse + static_cast<std::size_t>(bh) * T;
    if (r0 < T) lse[r0] = (m_run[0] + log2f(l_run[0])) / attn_log2e;
    if (r1 < T) lse[r1] = (m_run[1] + log2f(l_run[1])) / attn_log2e;
  }
#else
  (void)maps;
  (void)p;
#endif
}

// ---- backward: dK, dV ---------------------------------------------------------------------------
// One CTA per (128 keys, b, kv head); each consumer warpgroup owns 64 keys' dK and dV in
// registers and steps through the group's query heads in order and, for each, the 64-row query
// tiles at or after its keys. Maps: 0 qkv (box 128 rows: K, V), 1 qkv (box 64 rows: Q), 2 dout
// (box 64 rows).
template <int D>
MXKIT_GLOBAL void __launch_bounds__(attn_threads, 1) attention_dkdv_kernel(const __grid_constant__ attention_maps maps, const attention_params p) {
#if MXKIT_SM90A
  using S = attn_dkdv_smem<D>;
  constexpr int BM = S::BM, BN = S::BN, KD = D / 16;
  S& sm = attn_smem<S>();
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128;
  const int n_tile = static_cast<int>(blockIdx.y);  // tile 0 meets every query tile: first
  const int bk = static_cast<int>(blockIdx.x), b = bk / p.kv_heads, kvh = bk % p.kv_heads;
  const int group = p.heads / p.kv_heads, T = p.seq, n0 = n_tile * BN;
  const int per_head = (T - n0 + BM - 1) / BM, steps = group * per_head;
  if (tid == 0) {
    mbar_init(&sm.kv_full, 1);
    sm.ring.init(128);  // every producer thread also stores LSE or Delta into the stage
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 2) {
    reg_dealloc<attn_producer_regs>();
    const int pt = tid - 256;
    const int k_col = (p.heads + kvh) * D * 2, v_col = k_col + p.kv_heads * D * 2;
    if (pt == 0) {
      mbar_arrive_expect_tx(&sm.kv_full, 2 * BN * D * 2);
      for (int pn = 0; pn < D / 64; ++pn) {
        tma_load_3d(sm.k + pn * BN * 128, &maps.m[0], &sm.kv_full, k_col + pn * 128, n0, b);
        tma_load_3d(sm.v + pn * BN * 128, &maps.m[0], &sm.kv_full, v_col + pn * 128, n0, b);
      }
    }
    for (int step = 0; step < steps; ++step) {
      const int s = step % S::stages, h = kvh * group + step / per_head, m0 = n0 + (step % per_head) * BM;
      sm.ring.wait_free(step);
      if (pt == 0) {
        mbar_arrive_expect_tx(sm.ring.filled(step), 2 * BM * D * 2);
        for (int pn = 0; pn < D / 64; ++pn) {
          tma_load_3d(sm.q[s] + pn * BM * 128, &maps.m[1], sm.ring.filled(step), h * D * 2 + pn * 128, m0, b);
          tma_load_3d(sm.dout[s] + pn * BM * 128, &maps.m[2], sm.ring.filled(step), h * D * 2 + pn * 128, m0, b);
        }
      }
      const std::size_t row = (static_cast<std::size_t>(b) * p.heads + h) * T;
      const int r = m0 + (pt % BM);
      if (pt < BM) sm.lse[s][pt] = r < T ? p.lse_in[row + r] * attn_log2e : 0.0f;
      else sm.delta[s][pt - BM] = r < T ? p.delta[row + r] : 0.0f;
      mbar_arrive(sm.ring.filled(step));  // release: the stores above are visible to the waiters
    }
    return;
  }
  reg_alloc<attn_consumer_regs>();
  const int warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int j0 = n0 + wg * 64 + warp * 16 + g, j1 = j0 + 8;  // this thread's two keys
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;
  float st[BM / 2], dpt[BM / 2];
  std::uint32_t pa[BM / 16][4], sa[BM / 16][4];
  // S^T = K Q^T and dP^T = V dO^T of step `step` (stage s): 64 keys x 64 queries per warpgroup.
  auto issue_scores = [&](int s) {
    fence_all(st);
    fence_all(dpt);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      wgmma_step<64, mma_kind::bf16, mma_kind::bf16>(st, attn_desc(sm.k, kk, BN * 128, wg * 64), attn_desc(sm.q[s], kk, BM * 128),
                                                      kk > 0 ? 1u : 0u);
      wgmma_step<64, mma_kind::bf16, mma_kind::bf16>(dpt, attn_desc(sm.v, kk, BN * 128, wg * 64),
                                                      attn_desc(sm.dout[s], kk, BM * 128), kk > 0 ? 1u : 0u);
    }
    wgmma_commit();
  };
  // dV += P^T dO, dK += dS^T Q: the query index is the K dimension, dO and Q read MN-major.
  auto issue_grads = [&](int s) {
    fence_all(dv);
    fence_all(dk);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      wgmma_rs_d<D>(dv, pa[kk], sm.dout[s], BM, kk);
      wgmma_rs_d<D>(dk, sa[kk], sm.q[s], BM, kk);
    }
    wgmma_commit();
  };
  // P^T = exp2(S^T scale log2 e - LSE log2 e) (0 where masked), dS^T = P^T (dP^T - Delta).
  // Branch-free: the exponential of every element, then a select where the tile crosses the
  // diagonal or the sequence end (a branch and a reconvergence per element made this loop, not
  // the tensor cores, set the pace: bench/NOTES_training.md). A masked element's exponential may
  // overflow; the select drops it before anything multiplies it.
  auto gradients_of_scores = [&](int step, int s) {
    const int m0 = n0 + (step % per_head) * BM;
    auto body = [&](auto edge) {
#pragma unroll
      for (int i = 0; i < BM / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = 8 * i + 2 * t + (e & 1);
          float pr = attn_exp2(st[4 * i + e] * p.scale_log2 - sm.lse[s][qi]);
          if constexpr (decltype(edge)::value) {
            const int q = m0 + qi;
            pr = q >= (e < 2 ? j0 : j1) && q < T ? pr : 0.0f;
          }
          st[4 * i + e] = pr;
          dpt[4 * i + e] = pr * (dpt[4 * i + e] - sm.delta[s][qi]);
        }
    };
    if (m0 < n0 + BN || m0 + BM > T) body(std::true_type{});
    else body(std::false_type{});
  };
  auto pack = [&] {
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      attn_to_a(pa[kk], st, kk);
      attn_to_a(sa[kk], dpt, kk);
    }
  };
  // With `overlap`, step i's scores run on the tensor cores while step i - 1's gradient products
  // queue behind them, and step i's exponentials overlap those products (as the forward). It
  // needs both steps' fragments live: at D = 128 that is more than 240 registers (ptxas then
  // serializes every wgmma), so there each step drains before the next. A stage is released
  // once its step's gradient products are done: they read its Q and dO.
  constexpr bool overlap = D <= 64;
  auto drain_grads = [&](int step) {
    wgmma_wait<0>();
    fence_all(dv);
    fence_all(dk);
    sm.ring.release(step);
  };
  auto scores_in = [&] {
    fence_all(st);
    fence_all(dpt);
  };
  mbar_wait(&sm.kv_full, 0);
  if constexpr (overlap) {
    sm.ring.wait_filled(0);
    issue_scores(0);
    wgmma_wait<0>();
    scores_in();
    gradients_of_scores(0, 0);
    pack();
    for (int step = 1; step < steps; ++step) {
      const int s = step % S::stages;
      sm.ring.wait_filled(step);  // before any wgmma is in flight (a spin loop)
      issue_scores(s);
      issue_grads((step - 1) % S::stages);
      wgmma_wait<1>();
      scores_in();
      gradients_of_scores(step, s);
      drain_grads(step - 1);
      pack();
    }
    issue_grads((steps - 1) % S::stages);
    drain_grads(steps - 1);
  } else {
    for (int step = 0; step < steps; ++step) {
      const int s = step % S::stages;
      sm.ring.wait_filled(step);
      issue_scores(s);
      wgmma_wait<0>();
      scores_in();
      gradients_of_scores(step, s);
      pack();
      issue_grads(s);
      drain_grads(step);
    }
  }
  const int k_col = (p.heads + kvh) * D, v_col = k_col + p.kv_heads * D;
  std::uint16_t* dst = p.dqkv + static_cast<std::size_t>(b) * T * p.stride;
  attn_store_rows<D / 2>(dst + k_col, p.stride, j0, T, dk, p.scale, p.scale);
  attn_store_rows<D / 2>(dst + v_col, p.stride, j0, T, dv, 1.0f, 1.0f);
#else
  (void)maps;
  (void)p;
#endif
}

// ---- backward: dQ -------------------------------------------------------------------------------
// One CTA per (128 query rows, b, head), over the key tiles in order; dQ = dS K accumulates in
// registers. Maps: 0 qkv (box 128 rows: Q), 1 dout (box 128 rows), 2 qkv (box 64 rows: K, V).
template <int D>
MXKIT_GLOBAL void __launch_bounds__(attn_threads, 1) attention_dq_kernel(const __grid_constant__ attention_maps maps, const attention_params p) {
#if MXKIT_SM90A
  using S = attn_dq_smem<D>;
  constexpr int BM = S::BM, BN = S::BN, KD = D / 16;
  S& sm = attn_smem<S>();
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128;
  const int m_tile = static_cast<int>(gridDim.y) - 1 - static_cast<int>(blockIdx.y);  // heaviest first
  const int bh = static_cast<int>(blockIdx.x), b = bh / p.heads, h = bh % p.heads, kvh = h / (p.heads / p.kv_heads), T = p.seq;
  const int m0 = m_tile * BM, key_tiles = (T + BN - 1) / BN;
  const int tiles = (m0 + BM) / BN < key_tiles ? (m0 + BM) / BN : key_tiles;
  if (tid == 0) {
    mbar_init(&sm.q_full, 1);
    sm.ring.init();
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 2) {
    reg_dealloc<attn_producer_regs>();
    if (tid != 256) return;
    const int q_col = h * D * 2, k_col = (p.heads + kvh) * D * 2, v_col = k_col + p.kv_heads * D * 2;
    mbar_arrive_expect_tx(&sm.q_full, 2 * BM * D * 2);
    for (int pn = 0; pn < D / 64; ++pn) {
      tma_load_3d(sm.q + pn * BM * 128, &maps.m[0], &sm.q_full, q_col + pn * 128, m0, b);
      tma_load_3d(sm.dout + pn * BM * 128, &maps.m[1], &sm.q_full, q_col + pn * 128, m0, b);
    }
    for (int j = 0; j < tiles; ++j) {
      const int s = j % S::stages;
      sm.ring.wait_free(j);
      mbar_arrive_expect_tx(sm.ring.filled(j), 2 * BN * D * 2);
      for (int pn = 0; pn < D / 64; ++pn) {
        tma_load_3d(sm.k[s] + pn * BN * 128, &maps.m[2], sm.ring.filled(j), k_col + pn * 128, j * BN, b);
        tma_load_3d(sm.v[s] + pn * BN * 128, &maps.m[2], sm.ring.filled(j), v_col + pn * 128, j * BN, b);
      }
    }
    return;
  }
  reg_alloc<attn_consumer_regs>();
  const int warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r0 = m0 + wg * 64 + warp * 16 + g, r1 = r0 + 8;
  const std::size_t row = static_cast<std::size_t>(bh) * T;
  const float lse0 = r0 < T ? p.lse_in[row + r0] * attn_log2e : 0.0f, lse1 = r1 < T ? p.lse_in[row + r1] * attn_log2e : 0.0f;
  const float dl0 = r0 < T ? p.delta[row + r0] : 0.0f, dl1 = r1 < T ? p.delta[row + r1] : 0.0f;
  float dq[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dq[i] = 0.0f;
  float sc[BN / 2], dp[BN / 2];
  std::uint32_t sa[BN / 16][4];
  auto issue_scores = [&](int s) {  // S = Q K^T, dP = dO V^T
    fence_all(sc);
    fence_all(dp);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      wgmma_step<64, mma_kind::bf16, mma_kind::bf16>(sc, attn_desc(sm.q, kk, BM * 128, wg * 64), attn_desc(sm.k[s], kk, BN * 128),
                                                      kk > 0 ? 1u : 0u);
      wgmma_step<64, mma_kind::bf16, mma_kind::bf16>(dp, attn_desc(sm.dout, kk, BM * 128, wg * 64),
                                                      attn_desc(sm.v[s], kk, BN * 128), kk > 0 ? 1u : 0u);
    }
    wgmma_commit();
  };
  auto issue_dq = [&](int s) {  // dQ += dS K (K read MN-major)
    fence_all(dq);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs_d<D>(dq, sa[kk], sm.k[s], BN, kk);
    wgmma_commit();
  };
  // dS = P (dP - Delta), P = exp2(S scale log2 e - LSE log2 e), masked by a select (as dK/dV).
  auto score_gradients = [&](int j) {
    const int n0 = j * BN;
    auto body = [&](auto edge) {
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float pr = attn_exp2(sc[4 * i + e] * p.scale_log2 - (e < 2 ? lse0 : lse1));
          if constexpr (decltype(edge)::value) {
            const int col = n0 + 8 * i + 2 * t + (e & 1);
            pr = col <= (e < 2 ? r0 : r1) && col < T ? pr : 0.0f;
          }
          sc[4 * i + e] = pr * (dp[4 * i + e] - (e < 2 ? dl0 : dl1));
        }
    };
    if (n0 + BN > m0 || n0 + BN > T) body(std::true_type{});
    else body(std::false_type{});
  };
  auto pack = [&] {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) attn_to_a(sa[kk], sc, kk);
  };
  // A stage is released once tile j's dQ product is done (it reads K).
  auto drain_dq = [&](int j) {
    wgmma_wait<0>();
    fence_all(dq);
    sm.ring.release(j);
  };
  mbar_wait(&sm.q_full, 0);
  sm.ring.wait_filled(0);
  issue_scores(0);
  wgmma_wait<0>();
  fence_all(sc);
  fence_all(dp);
  score_gradients(0);
  pack();
  for (int j = 1; j < tiles; ++j) {  // tile j's scores and dS overlap tile j - 1's dQ product (as the forward)
    const int s = j % S::stages;
    sm.ring.wait_filled(j);  // before any wgmma is in flight (a spin loop)
    issue_scores(s);
    issue_dq((j - 1) % S::stages);
    wgmma_wait<1>();
    fence_all(sc);
    fence_all(dp);
    score_gradients(j);
    drain_dq(j - 1);
    pack();
  }
  issue_dq((tiles - 1) % S::stages);
  drain_dq(tiles - 1);
  std::uint16_t* dst = p.dqkv + static_cast<std::size_t>(b) * T * p.stride + static_cast<std::size_t>(h) * D;
  attn_store_rows<D / 2>(dst, p.stride, r0, T, dq, p.scale, p.scale);
#else
  (void)maps;
  (void)p;
#endif
}

// ---- host side ----------------------------------------------------------------------------------
// A 3-D map over `batch` blocks of `rows` x `row_bytes` bytes (block stride rows * ld_bytes,
// row stride ld_bytes), read in boxes of `box_rows` x 128 bytes with the 128-byte swizzle; rows
// past `rows` within a block and bytes past `row_bytes` are zero-filled.
inline CUtensorMap make_attention_map(const void* data, std::size_t row_bytes, std::size_t rows, std::size_t batch, std::size_t ld_bytes,
                                      std::uint32_t box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {row_bytes, rows, batch};
  const cuuint64_t strides[2] = {ld_bytes, ld_bytes * rows};
  const cuuint32_t box[3] = {128, box_rows, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(data), dims, strides, box, elem_strides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  mxkit::detail::require(r == CUDA_SUCCESS, "attention (sm90): cuTensorMapEncodeTiled failed with ", static_cast<int>(r), " for ",
                         batch, " x ", rows, " x ", row_bytes, " bytes");
  return map;
}

template <class Kernel>
inline void attention_launch(Kernel kernel, std::size_t smem, dim3 grid, const attention_maps& maps, const attention_params& p,
                             stream_t stream) {
  MXKIT_GPU_CHECK(set_max_dynamic_shared_bytes(kernel, static_cast<int>(smem)));
  kernel<<<grid, attn_threads, smem, stream>>>(maps, p);
  MXKIT_GPU_CHECK_LAUNCH();
}

// Forward: one kernel over the qkv rows.
template <int D>
void attention_forward(const attention_params& p, stream_t stream) {
  const std::size_t rows = static_cast<std::size_t>(p.seq), batch = static_cast<std::size_t>(p.batch);
  attention_maps maps{};
  maps.m[0] = make_attention_map(p.qkv, p.stride * 2, rows, batch, p.stride * 2, 128);
  const dim3 grid(static_cast<unsigned>(p.batch * p.heads), static_cast<unsigned>((p.seq + 127) / 128));
  attention_launch(attention_forward_kernel<D>, attn_smem_bytes<attn_forward_smem<D>>, grid, maps, p, stream);
}

// Backward (Delta already in p.delta): the dK/dV kernel, then the dQ kernel.
template <int D>
void attention_backward(const attention_params& p, stream_t stream) {
  const std::size_t rows = static_cast<std::size_t>(p.seq), batch = static_cast<std::size_t>(p.batch);
  const std::size_t od = static_cast<std::size_t>(p.heads) * D;
  const CUtensorMap qkv128 = make_attention_map(p.qkv, p.stride * 2, rows, batch, p.stride * 2, 128);
  const CUtensorMap qkv64 = make_attention_map(p.qkv, p.stride * 2, rows, batch, p.stride * 2, 64);
  const CUtensorMap dout64 = make_attention_map(p.dout, od * 2, rows, batch, od * 2, 64);
  const CUtensorMap dout128 = make_attention_map(p.dout, od * 2, rows, batch, od * 2, 128);
  const unsigned tiles = static_cast<unsigned>((p.seq + 127) / 128);
  attention_launch(attention_dkdv_kernel<D>, attn_smem_bytes<attn_dkdv_smem<D>>, dim3(static_cast<unsigned>(p.batch * p.kv_heads), tiles),
                   attention_maps{{qkv128, qkv64, dout64}}, p, stream);
  attention_launch(attention_dq_kernel<D>, attn_smem_bytes<attn_dq_smem<D>>, dim3(static_cast<unsigned>(p.batch * p.heads), tiles),
                   attention_maps{{qkv128, dout128, qkv64}}, p, stream);
}

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
