// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal grouped-query attention (Ainslie et al. 2023) on the device, forward and backward, the
// kernels of ref/nn/attention.hpp computed FlashAttention-2 style (Dao, "FlashAttention-2:
// Faster Attention with Better Parallelism and Work Partitioning", 2023): the T x T scores never
// leave the chip; the forward keeps an online softmax (running row max m and row sum l) per query
// row and saves only the log-sum-exp LSE = m + log(l) per row; the backward recomputes
// P = exp(S - LSE) tile by tile.
//   forward   S = q k^T / sqrt(D) (u <= t),  P = softmax(S),  O = P v,  LSE_t = log sum_u exp S_tu
//   backward  Delta_t = rowsum(dO_t * O_t)  (Dao 2023, algorithm 2, line 4)
//             dP = dO v^T,  dS = P * (dP - Delta),  dq = dS k / sqrt(D),
//             dk = dS^T q / sqrt(D),  dv = P^T dO
// Layout (nn::head_shape): qkv (B*T, row_stride) bf16 with row [q heads | k heads | v heads],
// query head h reads kv head h / (H / Hkv); out (B*T, H*D) bf16; lse (B*H, T) float; dqkv has
// qkv's layout and stride and is overwritten.
//
// Work partition (Dao 2023, section 3.2): one block of 4 warps per (64 query rows, b, h) in the
// forward, each warp owning 16 query rows, so the softmax statistics stay in one warp (no
// shared-memory exchange between warps). Grid x is (b, head) and y the tile, heaviest first (the
// causal triangle: query tile i visits i + 1 key tiles): blocks start in x-fastest order, so the
// long blocks of every head start early and the tail is short.
// Backward, deterministic (no float atomics, whose sum depends on the order they land in):
//   dkdv  one block per (64 key rows, b, kv head) owns its dK and dV in registers and loops over
//         the group's query heads in order and, for each, over the query tiles at or after its
//         keys (Dao 2023, algorithm 2: the outer loop over key/value blocks); the GQA sum over
//         the group is this fixed loop, not a reduction across blocks.
//   dq    one block per (64 query rows, b, h) loops over the key tiles in order and accumulates
//         dQ = dS K in registers: a second recomputation of S and dP (two more matmuls than the
//         atomic dQ of Dao 2023) buys a result that is the same bits on every run.
// On an sm_90a device (a program built with compute_90a device code) the same computation runs on
// the Hopper kernels of nn/attention/sm90/ (wgmma, TMA, larger tiles); the kernels
// below are the path everywhere else.
// Arithmetic: bf16 operands on the tensor cores (mma.sync m16n8k16, fp32 accumulation) on
// sm_80+; P and dS are rounded to bf16 to feed the second matmul of each pair, as Dao 2023;
// softmax, LSE and Delta in fp32. Elsewhere (AMD this round, and the tests' `portable` runs on
// NVIDIA) the same fragment code runs on an emulation of the instruction with lane shuffles and
// fp32 FMAs (portable_mma below); MFMA on gfx942/gfx950 is future work. Shared memory per block
// at D = 128: forward 68 KiB, dkdv 68.5 KiB, dq 102 KiB (48 KiB or less at D = 64 except dq's
// 54 KiB): within Hopper's 227 KiB and gfx950's 160 KiB LDS; gfx942's 64 KiB LDS needs smaller
// tiles there (future work; the launch reports the error, nothing runs silently wrong).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/gpu/arch/cuda/mma_sm80.hpp>
#include <mxkit/gpu/device.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/nn/attention_params.hpp>
#include <mxkit/gpu/nn/reduce.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/kernel_args.hpp>
#if MXKIT_GPU_CUDA
#include <mxkit/gpu/nn/attention/sm90/launch.hpp>
#endif

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int attn_threads = 128;  // 4 teams of 32 lanes (a warp; half a wave64 on AMD)
inline constexpr int attn_tile = 64;      // query rows of a forward / dq block, key rows of a dkdv block
inline constexpr int attn_dkdv_q = 32;    // query rows per step of the dkdv loop (registers: dK, dV)

// --- fragments ---------------------------------------------------------------------------------
// A team is 32 lanes (a warp on NVIDIA; on a wave64 each half is one team and every shuffle stays
// inside it). All fragment code uses the m16n8k16 layout of arch/cuda/mma_sm80.hpp.
__device__ inline int team_lane() noexcept { return lane_id() & 31; }

__device__ inline float bf16_lo(std::uint32_t w) noexcept { return __uint_as_float(w << 16); }
__device__ inline float bf16_hi(std::uint32_t w) noexcept { return __uint_as_float(w & 0xFFFF0000u); }
// Two floats rounded to nearest-even bf16, packed (a in the low half): an A or B operand word.
__device__ inline std::uint32_t pack_bf16(float a, float b) noexcept {
  return static_cast<std::uint32_t>(round_to<bfloat16>(a).bits()) |
         (static_cast<std::uint32_t>(round_to<bfloat16>(b).bits()) << 16);
}
__device__ inline std::uint32_t lds32(const std::uint16_t* p) noexcept { return *reinterpret_cast<const std::uint32_t*>(p); }
// Two bf16 of one column, rows r and r + 1 (a B operand of a row-major [k][n] tile: the transposed
// read; 16-bit loads, conflict-free with the 8-element row padding).
__device__ inline std::uint32_t lds_pair(const std::uint16_t* p, int ld) noexcept {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[ld]) << 16);
}

// c += a b, the m16n8k16 instruction's result in its layout, from lane shuffles and fp32 FMAs:
// lane (g, t) gathers row g / g + 8 of A from lanes 4g..4g+3 and columns 2t, 2t + 1 of B from
// lanes 8t..8t+7. Slow (32 shuffles per instruction) but the same fragment code as the tensor-core
// path, so the kernels have one source; the plain per-thread FMA tile the AMD path is allowed this
// round.
__device__ inline void portable_mma(float (&c)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) noexcept {
  const int l = team_lane(), base = lane_id() - l, g = l >> 2, t = l & 3;
  for (int j = 0; j < 4; ++j) {
    const std::uint32_t a0 = shfl(a[0], base + 4 * g + j), a1 = shfl(a[1], base + 4 * g + j);
    const std::uint32_t a2 = shfl(a[2], base + 4 * g + j), a3 = shfl(a[3], base + 4 * g + j);
    const std::uint32_t b00 = shfl(b[0], base + 8 * t + j), b01 = shfl(b[1], base + 8 * t + j);
    const std::uint32_t b10 = shfl(b[0], base + 8 * t + 4 + j), b11 = shfl(b[1], base + 8 * t + 4 + j);
    auto dot = [](std::uint32_t x0, std::uint32_t y0, std::uint32_t x1, std::uint32_t y1, float acc) {
      acc = fmaf(bf16_lo(x0), bf16_lo(y0), acc);
      acc = fmaf(bf16_hi(x0), bf16_hi(y0), acc);
      acc = fmaf(bf16_lo(x1), bf16_lo(y1), acc);
      return fmaf(bf16_hi(x1), bf16_hi(y1), acc);
    };
    c[0] = dot(a0, b00, a2, b01, c[0]);
    c[1] = dot(a0, b10, a2, b11, c[1]);
    c[2] = dot(a1, b00, a3, b01, c[2]);
    c[3] = dot(a1, b10, a3, b11, c[3]);
  }
}

template <bool Portable>
__device__ inline void mma(float (&c)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) noexcept {
#if MXKIT_HAS_MMA_SM80
  if constexpr (!Portable) {
    sm80::mma_bf16_16816(c, a, b);
    return;
  }
#endif
  portable_mma(c, a, b);
}

// A fragment of rows [r0, r0 + 16) x columns [k0, k0 + 16) of a row-major bf16 tile.
__device__ inline void load_a(std::uint32_t (&a)[4], const std::uint16_t* tile, int ld, int r0, int k0) noexcept {
  const int l = team_lane(), g = l >> 2, t = l & 3;
  const std::uint16_t* p = tile + (r0 + g) * ld + k0 + 2 * t;
  a[0] = lds32(p);
  a[1] = lds32(p + 8 * ld);
  a[2] = lds32(p + 8);
  a[3] = lds32(p + 8 * ld + 8);
}
// B fragment (k x n = 16 x 8) read from a row-major tile holding B^T: rows n0.., columns k0.. .
__device__ inline void load_b_nk(std::uint32_t (&b)[2], const std::uint16_t* tile, int ld, int n0, int k0) noexcept {
  const int l = team_lane(), g = l >> 2, t = l & 3;
  const std::uint16_t* p = tile + (n0 + g) * ld + k0 + 2 * t;
  b[0] = lds32(p);
  b[1] = lds32(p + 8);
}
// B fragment read from a row-major tile holding B itself: rows k0.., columns n0.. .
__device__ inline void load_b_kn(std::uint32_t (&b)[2], const std::uint16_t* tile, int ld, int k0, int n0) noexcept {
  const int l = team_lane(), g = l >> 2, t = l & 3;
  const std::uint16_t* p = tile + (k0 + 2 * t) * ld + n0 + g;
  b[0] = lds_pair(p, ld);
  b[1] = lds_pair(p + 8 * ld, ld);
}
// B fragments of two adjacent n-tiles (columns n0.. and n0 + 8..) from a row-major [k][n] tile:
// one ldmatrix.x4.trans on NVIDIA (each lane supplies a row address: lanes 0-7 rows k0.., 8-15
// rows k0 + 8.., then the same at column n0 + 8) instead of eight 16-bit loads; with the 8-element
// row padding the 8 rows of each phase fall in distinct banks.
template <bool Portable>
__device__ inline void load_b_kn2(std::uint32_t (&b0)[2], std::uint32_t (&b1)[2], const std::uint16_t* tile, int ld, int k0,
                                  int n0) noexcept {
#if MXKIT_HAS_LDMATRIX
  if constexpr (!Portable) {
    const int l = team_lane();
    std::uint32_t m[4];
    ldmatrix_x4_trans(tile + (k0 + (l & 7) + (l & 8)) * ld + n0 + (l >> 4) * 8, m);
    b0[0] = m[0];
    b0[1] = m[1];
    b1[0] = m[2];
    b1[1] = m[3];
    return;
  }
#endif
  load_b_kn(b0, tile, ld, k0, n0);
  load_b_kn(b1, tile, ld, k0, n0 + 8);
}

// The C fragments of two adjacent n-tiles (columns 16 kk .. 16 kk + 15) as an A fragment: the
// probabilities of the first matmul feed the second without a trip through shared memory (Dao
// 2023, section 3.1).
__device__ inline void c_to_a(std::uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) noexcept {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// Rows [row0, row0 + Rows) of a (tokens, stride) bf16 matrix, D columns from `col`, into a
// shared tile of leading dimension D + 8 (16-byte copies; rows at or past `rows` are zero).
template <int Rows, int D>
__device__ inline void load_tile(std::uint16_t* tile, const std::uint16_t* src, std::size_t stride, std::size_t col, int row0,
                                 int rows) noexcept {
  constexpr int chunks = D / 8, ld = D + 8;
  for (int c = static_cast<int>(threadIdx.x); c < Rows * chunks; c += attn_threads) {
    const int r = c / chunks, k = (c % chunks) * 8;
    const bool ok = row0 + r < rows;
    const std::uint16_t* s = ok ? src + static_cast<std::size_t>(row0 + r) * stride + col + k : src;
    async_copy16(tile + r * ld + k, s, ok ? 16 : 0);
  }
}

// Forward and dq double-buffer the key/value tiles: tile i + 1 is copied (cp.async) while tile i
// is computed on (Dao 2023, section 3.3's pipelining of loads and math).
template <int D>
inline constexpr int attn_forward_smem = 4 * attn_tile * (D + 8) * 2;
template <int D>
inline constexpr int attn_dq_smem = 6 * attn_tile * (D + 8) * 2;
template <int D>  // K, V, then two buffers of (Q, dO, LSE, Delta): the next step's copy overlaps the math
inline constexpr int attn_dkdv_smem = (2 * attn_tile + 4 * attn_dkdv_q) * (D + 8) * 2 + 4 * attn_dkdv_q * 4;

// --- forward -----------------------------------------------------------------------------------
template <int D, bool Portable>
MXKIT_GLOBAL void __launch_bounds__(attn_threads) attention_forward_kernel(const attention_params p) {
  constexpr int B = attn_tile, ld = D + 8, KD = D / 16;
  extern __shared__ uint4 attn_smem[];
  std::uint16_t* kv_smem = reinterpret_cast<std::uint16_t*>(attn_smem);  // [2 buffers][K, V][B][ld]
  const int m_tile = static_cast<int>(gridDim.y) - 1 - static_cast<int>(blockIdx.y);  // heaviest first
  const int bh = static_cast<int>(blockIdx.x), b = bh / p.heads, h = bh % p.heads;
  const int kvh = h / (p.heads / p.kv_heads), T = p.seq;
  const std::size_t q_col = static_cast<std::size_t>(h) * D;
  const std::size_t k_col = static_cast<std::size_t>(p.heads + kvh) * D, v_col = k_col + static_cast<std::size_t>(p.kv_heads) * D;
  const std::uint16_t* base = p.qkv + static_cast<std::size_t>(b) * T * p.stride;
  const int team = static_cast<int>(threadIdx.x) / 32, l = team_lane(), g = l >> 2, t = l & 3;
  const int m0 = m_tile * B, r0 = m0 + team * 16 + g, r1 = r0 + 8;

  // This team's 16 query rows as A fragments, straight from global memory into registers.
  std::uint32_t qf[KD][4];
  for (int kk = 0; kk < KD; ++kk) {
    const std::size_t c = q_col + static_cast<std::size_t>(kk * 16 + 2 * t);
    const std::uint16_t* q0 = base + static_cast<std::size_t>(r0) * p.stride + c;
    const std::uint16_t* q1 = base + static_cast<std::size_t>(r1) * p.stride + c;
    qf[kk][0] = r0 < T ? lds32(q0) : 0u;
    qf[kk][1] = r1 < T ? lds32(q1) : 0u;
    qf[kk][2] = r0 < T ? lds32(q0 + 8) : 0u;
    qf[kk][3] = r1 < T ? lds32(q1 + 8) : 0u;
  }
  float o[D / 8][4];
  for (int d = 0; d < D / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  load_tile<B, D>(kv_smem, base, p.stride, k_col, 0, T);
  load_tile<B, D>(kv_smem + B * ld, base, p.stride, v_col, 0, T);
  async_commit();
  for (int n_tile = 0; n_tile <= m_tile; ++n_tile) {  // key tiles up to the diagonal (B == B)
    const int n0 = n_tile * B;
    const std::uint16_t* ks = kv_smem + (n_tile & 1) * 2 * B * ld;
    const std::uint16_t* vs = ks + B * ld;
    if (n_tile < m_tile) {  // the next tile into the other buffer, read two iterations ago
      std::uint16_t* next = kv_smem + ((n_tile + 1) & 1) * 2 * B * ld;
      load_tile<B, D>(next, base, p.stride, k_col, n0 + B, T);
      load_tile<B, D>(next + B * ld, base, p.stride, v_col, n0 + B, T);
      async_commit();
      async_wait<1>();
    } else {
      async_wait<0>();
    }
    sync_threads();

    float s[B / 8][4];
    for (int j = 0; j < B / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    for (int kk = 0; kk < KD; ++kk)
      for (int j = 0; j < B / 8; ++j) {
        std::uint32_t bf[2];
        load_b_nk(bf, ks, ld, j * 8, kk * 16);
        mma<Portable>(s[j], qf[kk], bf);
      }
    // Causal mask (and the ragged end: keys at or past T), scale to base 2, online softmax.
    float mx[2] = {-INFINITY, -INFINITY};
    for (int j = 0; j < B / 8; ++j)
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + j * 8 + 2 * t + (e & 1), row = e < 2 ? r0 : r1;
        s[j][e] = col <= row && col < T ? s[j][e] * p.scale_log2 : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
      }
    float alpha[2];
    for (int i = 0; i < 2; ++i) {  // the 4 lanes of a quad share a row
      mx[i] = fmaxf(mx[i], shfl_xor(mx[i], 1));
      mx[i] = fmaxf(mx[i], shfl_xor(mx[i], 2));
      const float m_new = fmaxf(m_run[i], mx[i]);
      // Every row meets at least key n0 <= its own index (n0 <= m0), so m_new is finite; the
      // guard keeps a fully masked row at 0 instead of NaN all the same.
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      alpha[i] = exp2f(m_run[i] - m_use);
      m_run[i] = m_new;
      mx[i] = m_use;
    }
    float rs[2] = {0.0f, 0.0f};
    for (int j = 0; j < B / 8; ++j)
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - mx[e >> 1]);
        rs[e >> 1] += s[j][e];
      }
    for (int i = 0; i < 2; ++i) l_run[i] = l_run[i] * alpha[i] + rs[i];  // a lane's partial row sum
    for (int d = 0; d < D / 8; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }
    for (int kk = 0; kk < B / 16; ++kk) {
      std::uint32_t a[4];
      c_to_a(a, s[2 * kk], s[2 * kk + 1]);
      for (int d = 0; d < D / 8; d += 2) {
        std::uint32_t b0[2], b1[2];
        load_b_kn2<Portable>(b0, b1, vs, ld, kk * 16, d * 8);
        mma<Portable>(o[d], a, b0);
        mma<Portable>(o[d + 1], a, b1);
      }
    }
    sync_threads();  // this buffer's reads are done before the copy of tile n_tile + 2 into it
  }
  // Row sums over the quad in a fixed order, then O / l and LSE = (m + log2 l) / log2(e).
  for (int i = 0; i < 2; ++i) {
    l_run[i] += shfl_xor(l_run[i], 1);
    l_run[i] += shfl_xor(l_run[i], 2);
  }
  const float inv0 = 1.0f / l_run[0], inv1 = 1.0f / l_run[1];
  const std::size_t od = static_cast<std::size_t>(p.heads) * D;
  std::uint16_t* out0 = p.out + (static_cast<std::size_t>(b) * T + r0) * od + q_col + 2 * t;
  std::uint16_t* out1 = out0 + 8 * od;
  for (int d = 0; d < D / 8; ++d) {
    if (r0 < T) *reinterpret_cast<std::uint32_t*>(out0 + d * 8) = pack_bf16(o[d][0] * inv0, o[d][1] * inv0);
    if (r1 < T) *reinterpret_cast<std::uint32_t*>(out1 + d * 8) = pack_bf16(o[d][2] * inv1, o[d][3] * inv1);
  }
  if (t == 0) {
    float* lse = p.lse + static_cast<std::size_t>(bh) * T;
    if (r0 < T) lse[r0] = (m_run[0] + log2f(l_run[0])) / attn_log2e;
    if (r1 < T) lse[r1] = (m_run[1] + log2f(l_run[1])) / attn_log2e;
  }
}

// --- backward ----------------------------------------------------------------------------------
// Delta = rowsum(dO * O) per (token, head), fp32. A row is D / 8 lanes, each with one 16-byte
// chunk of 8 bf16 of each input (an element per lane made the loads 2 bytes wide and the kernel
// far slower than a copy of its inputs: docs/perf/training.md); each lane adds its 8 products
// in order, then the lanes of a row combine by a fixed xor tree: the same bits on every run.
template <int D>
MXKIT_GLOBAL void __launch_bounds__(256) attention_delta_kernel(const attention_params p) {
  constexpr int lanes = D / 8, rows_per_warp = warp_size / lanes;
  static_assert(D % 8 == 0 && warp_size % lanes == 0, "whole 8-element chunks, whole rows in a warp");
  const std::size_t rows = static_cast<std::size_t>(p.batch) * p.seq * p.heads, warps = 256 / warp_size;
  const int sub = lane_id() % lanes;
  for (std::size_t r0 = blockIdx.x * warps + threadIdx.x / warp_size; r0 * rows_per_warp < rows; r0 += gridDim.x * warps) {
    const std::size_t r = r0 * rows_per_warp + static_cast<std::size_t>(lane_id() / lanes);
    float acc = 0.0f;
    if (r < rows) {  // (token, head) row r starts at token * H * D + h * D = r * D
      float dO[8], O[8];
      load_chunk<8>(reinterpret_cast<const bfloat16*>(p.dout) + r * D, static_cast<std::size_t>(sub) * 8, D, dO);
      load_chunk<8>(reinterpret_cast<const bfloat16*>(p.o) + r * D, static_cast<std::size_t>(sub) * 8, D, O);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc = fmaf(dO[k], O[k], acc);
    }
#pragma unroll
    for (int m = lanes / 2; m > 0; m /= 2) acc += shfl_xor(acc, m);  // every lane of the warp takes part
    if (sub == 0 && r < rows) {
      const std::size_t token = r / static_cast<std::size_t>(p.heads), h = r % static_cast<std::size_t>(p.heads);
      const std::size_t b = token / static_cast<std::size_t>(p.seq), tt = token % static_cast<std::size_t>(p.seq);
      p.delta[(b * p.heads + h) * p.seq + tt] = acc;
    }
  }
}

template <int D>
inline void launch_attention_delta(const attention_params& p, std::size_t rows, stream_t stream) {
  constexpr std::size_t rows_per_block = 256 * 8 / D;  // D / 8 lanes a row
  const int grid = persistent_grid<attention_delta_kernel<D>>(256, (rows + rows_per_block - 1) / rows_per_block);
  attention_delta_kernel<D><<<grid, 256, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

// dK, dV of 64 key rows of one kv head (16 per team), over the group's query heads in order.
template <int D, bool Portable>
MXKIT_GLOBAL void __launch_bounds__(attn_threads) attention_dkdv_kernel(const attention_params p) {
  constexpr int BN = attn_tile, BM = attn_dkdv_q, ld = D + 8, KD = D / 16;
  extern __shared__ uint4 attn_smem[];
  std::uint16_t* ks = reinterpret_cast<std::uint16_t*>(attn_smem);
  std::uint16_t* vs = ks + BN * ld;
  std::uint16_t* qdo_smem = vs + BN * ld;                             // [2][Q, dO][BM][ld]
  float* stat_smem = reinterpret_cast<float*>(qdo_smem + 4 * BM * ld);  // [2][LSE log2(e), Delta][BM]
  const int n_tile = static_cast<int>(blockIdx.y);  // longest first: tile 0 meets every query tile
  const int bk = static_cast<int>(blockIdx.x), b = bk / p.kv_heads, kvh = bk % p.kv_heads;
  const int group = p.heads / p.kv_heads, T = p.seq;
  const std::size_t k_col = static_cast<std::size_t>(p.heads + kvh) * D, v_col = k_col + static_cast<std::size_t>(p.kv_heads) * D;
  const std::size_t od = static_cast<std::size_t>(p.heads) * D;
  const std::uint16_t* base = p.qkv + static_cast<std::size_t>(b) * T * p.stride;
  const std::uint16_t* dbase = p.dout + static_cast<std::size_t>(b) * T * od;
  const int team = static_cast<int>(threadIdx.x) / 32, l = team_lane(), g = l >> 2, t = l & 3;
  const int n0 = n_tile * BN, j0 = n0 + team * 16 + g, j1 = j0 + 8;

  // Steps: the group's heads in order (dK, dV's fixed sum over the group), and for each the query
  // tiles at or after the keys (n0 % BM == 0); one flat loop, so the copy of the next step's
  // tiles overlaps this step's math across head boundaries too.
  const int per_head = (T - n0 + BM - 1) / BM, steps = group * per_head;
  auto load_step = [&](int step, int buf) {
    const int h = kvh * group + step / per_head, m0 = n0 + (step % per_head) * BM;
    const std::size_t q_col = static_cast<std::size_t>(h) * D, bh = static_cast<std::size_t>(b) * p.heads + h;
    std::uint16_t* q = qdo_smem + buf * 2 * BM * ld;
    load_tile<BM, D>(q, base, p.stride, q_col, m0, T);
    load_tile<BM, D>(q + BM * ld, dbase, od, q_col, m0, T);
    if (threadIdx.x < BM) {  // plain stores: visible after the barrier before this buffer's use
      const int r = m0 + static_cast<int>(threadIdx.x);
      float* st = stat_smem + buf * 2 * BM;
      st[threadIdx.x] = r < T ? p.lse_in[bh * T + r] * attn_log2e : 0.0f;
      st[BM + threadIdx.x] = r < T ? p.delta[bh * T + r] : 0.0f;
    }
  };
  load_tile<BN, D>(ks, base, p.stride, k_col, n0, T);
  load_tile<BN, D>(vs, base, p.stride, v_col, n0, T);
  load_step(0, 0);
  async_commit();
  float dk[D / 8][4], dv[D / 8][4];
  for (int d = 0; d < D / 8; ++d)
    for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.0f;

  for (int step = 0; step < steps; ++step) {
    {
      const int buf = step & 1, m0 = n0 + (step % per_head) * BM;
      const std::uint16_t* qs = qdo_smem + buf * 2 * BM * ld;
      const std::uint16_t* dos = qs + BM * ld;
      const float* lse_s = stat_smem + buf * 2 * BM;
      const float* delta_s = lse_s + BM;
      if (step + 1 < steps) {  // into the other buffer, whose reads ended with the last barrier
        load_step(step + 1, buf ^ 1);
        async_commit();
        async_wait<1>();
      } else {
        async_wait<0>();
      }
      sync_threads();

      // S^T = K Q^T and dP^T = V dO^T: 16 key rows x 32 query columns per team.
      float st[BM / 8][4], dpt[BM / 8][4];
      for (int j = 0; j < BM / 8; ++j)
        for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.0f;
      for (int kk = 0; kk < KD; ++kk) {
        std::uint32_t ka[4], va[4];
        load_a(ka, ks, ld, team * 16, kk * 16);
        load_a(va, vs, ld, team * 16, kk * 16);
        for (int j = 0; j < BM / 8; ++j) {
          std::uint32_t bq[2], bo[2];
          load_b_nk(bq, qs, ld, j * 8, kk * 16);
          load_b_nk(bo, dos, ld, j * 8, kk * 16);
          mma<Portable>(st[j], ka, bq);
          mma<Portable>(dpt[j], va, bo);
        }
      }
      // P^T = exp2(S^T scale log2 e - LSE log2 e) (0 where masked), dS^T = P^T (dP^T - Delta).
      for (int j = 0; j < BM / 8; ++j)
        for (int e = 0; e < 4; ++e) {
          const int qi = j * 8 + 2 * t + (e & 1), q = m0 + qi, key = e < 2 ? j0 : j1;
          const bool ok = q >= key && q < T;
          const float pt = ok ? exp2f(st[j][e] * p.scale_log2 - lse_s[qi]) : 0.0f;
          st[j][e] = pt;
          dpt[j][e] = pt * (dpt[j][e] - delta_s[qi]);
        }
      // dV += P^T dO, dK += dS^T Q (the query index is the k dimension).
      for (int kk = 0; kk < BM / 16; ++kk) {
        std::uint32_t pa[4], sa[4];
        c_to_a(pa, st[2 * kk], st[2 * kk + 1]);
        c_to_a(sa, dpt[2 * kk], dpt[2 * kk + 1]);
        for (int d = 0; d < D / 8; d += 2) {
          std::uint32_t bo0[2], bo1[2], bq0[2], bq1[2];
          load_b_kn2<Portable>(bo0, bo1, dos, ld, kk * 16, d * 8);
          load_b_kn2<Portable>(bq0, bq1, qs, ld, kk * 16, d * 8);
          mma<Portable>(dv[d], pa, bo0);
          mma<Portable>(dv[d + 1], pa, bo1);
          mma<Portable>(dk[d], sa, bq0);
          mma<Portable>(dk[d + 1], sa, bq1);
        }
      }
    }
    sync_threads();  // this buffer's reads are done before the copy of step + 2 into it
  }
  std::uint16_t* dst = p.dqkv + static_cast<std::size_t>(b) * T * p.stride;
  for (int d = 0; d < D / 8; ++d) {
    const std::size_t c = static_cast<std::size_t>(d * 8 + 2 * t);
    if (j0 < T) {
      std::uint16_t* row = dst + static_cast<std::size_t>(j0) * p.stride;
      *reinterpret_cast<std::uint32_t*>(row + k_col + c) = pack_bf16(dk[d][0] * p.scale, dk[d][1] * p.scale);
      *reinterpret_cast<std::uint32_t*>(row + v_col + c) = pack_bf16(dv[d][0], dv[d][1]);
    }
    if (j1 < T) {
      std::uint16_t* row = dst + static_cast<std::size_t>(j1) * p.stride;
      *reinterpret_cast<std::uint32_t*>(row + k_col + c) = pack_bf16(dk[d][2] * p.scale, dk[d][3] * p.scale);
      *reinterpret_cast<std::uint32_t*>(row + v_col + c) = pack_bf16(dv[d][2], dv[d][3]);
    }
  }
}

// dQ of 64 query rows of one head (16 per team), over the key tiles in order.
template <int D, bool Portable>
MXKIT_GLOBAL void __launch_bounds__(attn_threads) attention_dq_kernel(const attention_params p) {
  constexpr int B = attn_tile, ld = D + 8, KD = D / 16;
  extern __shared__ uint4 attn_smem[];
  std::uint16_t* qs = reinterpret_cast<std::uint16_t*>(attn_smem);
  std::uint16_t* dos = qs + B * ld;
  std::uint16_t* kv_smem = dos + B * ld;  // [2 buffers][K, V][B][ld]
  const int m_tile = static_cast<int>(gridDim.y) - 1 - static_cast<int>(blockIdx.y);  // heaviest first
  const int bh = static_cast<int>(blockIdx.x), b = bh / p.heads, h = bh % p.heads;
  const int kvh = h / (p.heads / p.kv_heads), T = p.seq;
  const std::size_t q_col = static_cast<std::size_t>(h) * D;
  const std::size_t k_col = static_cast<std::size_t>(p.heads + kvh) * D, v_col = k_col + static_cast<std::size_t>(p.kv_heads) * D;
  const std::size_t od = static_cast<std::size_t>(p.heads) * D;
  const std::uint16_t* base = p.qkv + static_cast<std::size_t>(b) * T * p.stride;
  const int team = static_cast<int>(threadIdx.x) / 32, l = team_lane(), g = l >> 2, t = l & 3;
  const int m0 = m_tile * B, r0 = m0 + team * 16 + g, r1 = r0 + 8;

  load_tile<B, D>(qs, base, p.stride, q_col, m0, T);
  load_tile<B, D>(dos, p.dout + static_cast<std::size_t>(b) * T * od, od, q_col, m0, T);
  load_tile<B, D>(kv_smem, base, p.stride, k_col, 0, T);
  load_tile<B, D>(kv_smem + B * ld, base, p.stride, v_col, 0, T);
  async_commit();
  const float* lse = p.lse_in + static_cast<std::size_t>(bh) * T;
  const float* delta = p.delta + static_cast<std::size_t>(bh) * T;
  const float lse0 = r0 < T ? lse[r0] * attn_log2e : 0.0f, lse1 = r1 < T ? lse[r1] * attn_log2e : 0.0f;
  const float dl0 = r0 < T ? delta[r0] : 0.0f, dl1 = r1 < T ? delta[r1] : 0.0f;
  float dq[D / 8][4];
  for (int d = 0; d < D / 8; ++d) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;

  for (int n_tile = 0; n_tile <= m_tile; ++n_tile) {
    const int n0 = n_tile * B;
    const std::uint16_t* ks = kv_smem + (n_tile & 1) * 2 * B * ld;
    const std::uint16_t* vs = ks + B * ld;
    if (n_tile < m_tile) {
      std::uint16_t* next = kv_smem + ((n_tile + 1) & 1) * 2 * B * ld;
      load_tile<B, D>(next, base, p.stride, k_col, n0 + B, T);
      load_tile<B, D>(next + B * ld, base, p.stride, v_col, n0 + B, T);
      async_commit();
      async_wait<1>();
    } else {
      async_wait<0>();
    }
    sync_threads();
    float s[B / 8][4], dp[B / 8][4];
    for (int j = 0; j < B / 8; ++j)
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
    for (int kk = 0; kk < KD; ++kk) {
      std::uint32_t qa[4], oa[4];
      load_a(qa, qs, ld, team * 16, kk * 16);
      load_a(oa, dos, ld, team * 16, kk * 16);
      for (int j = 0; j < B / 8; ++j) {
        std::uint32_t bk[2], bv[2];
        load_b_nk(bk, ks, ld, j * 8, kk * 16);
        load_b_nk(bv, vs, ld, j * 8, kk * 16);
        mma<Portable>(s[j], qa, bk);
        mma<Portable>(dp[j], oa, bv);
      }
    }
    for (int j = 0; j < B / 8; ++j)
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + j * 8 + 2 * t + (e & 1), row = e < 2 ? r0 : r1;
        const bool ok = col <= row && col < T;
        const float pr = ok ? exp2f(s[j][e] * p.scale_log2 - (e < 2 ? lse0 : lse1)) : 0.0f;
        s[j][e] = pr * (dp[j][e] - (e < 2 ? dl0 : dl1));  // dS
      }
    for (int kk = 0; kk < B / 16; ++kk) {
      std::uint32_t sa[4];
      c_to_a(sa, s[2 * kk], s[2 * kk + 1]);
      for (int d = 0; d < D / 8; d += 2) {
        std::uint32_t b0[2], b1[2];
        load_b_kn2<Portable>(b0, b1, ks, ld, kk * 16, d * 8);
        mma<Portable>(dq[d], sa, b0);
        mma<Portable>(dq[d + 1], sa, b1);
      }
    }
    sync_threads();  // this buffer's reads are done before the copy of tile n_tile + 2 into it
  }
  std::uint16_t* dst = p.dqkv + static_cast<std::size_t>(b) * T * p.stride + q_col + 2 * t;
  for (int d = 0; d < D / 8; ++d) {
    if (r0 < T) *reinterpret_cast<std::uint32_t*>(dst + static_cast<std::size_t>(r0) * p.stride + d * 8) = pack_bf16(dq[d][0] * p.scale, dq[d][1] * p.scale);
    if (r1 < T) *reinterpret_cast<std::uint32_t*>(dst + static_cast<std::size_t>(r1) * p.stride + d * 8) = pack_bf16(dq[d][2] * p.scale, dq[d][3] * p.scale);
  }
}

inline void attention_check(const char* entry, const nn::head_shape& s, std::size_t stride) {
  mxkit::detail::require(s.head_dim == 64 || s.head_dim == 128, entry, ": head_dim is ", s.head_dim, ", supported: 64 and 128");
  mxkit::detail::require(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, entry, ": n_heads ", s.n_heads,
                         " is not a multiple of n_kv_heads ", s.n_kv_heads);
  mxkit::detail::require(stride >= s.qkv_dim() && stride % 8 == 0, entry, ": row stride ", stride,
                         " must be >= qkv_dim ", s.qkv_dim(), " and a multiple of 8 (16-byte rows)");
  mxkit::detail::require(s.seq <= 65535u * attn_tile, entry, ": seq ", s.seq, " exceeds the limit ", 65535u * attn_tile,
                         " (64-row tiles on grid y)");
  mxkit::detail::require(s.batch * s.n_heads <= (1u << 30), entry, ": batch * n_heads is ", s.batch * s.n_heads,
                         ", the limit is 2^30");
}

template <class Kernel>
inline void attention_launch(Kernel kernel, dim3 grid, int smem, const attention_params& p, stream_t stream) {
  MXKIT_GPU_CHECK(set_max_dynamic_shared_bytes(kernel, smem));
  kernel<<<grid, attn_threads, static_cast<std::size_t>(smem), stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

inline attention_params attention_make_params(const bfloat16* qkv, std::size_t stride, const nn::head_shape& s) {
  attention_params p{};
  p.qkv = reinterpret_cast<const std::uint16_t*>(qkv);
  p.stride = stride;
  p.batch = static_cast<int>(s.batch);
  p.seq = static_cast<int>(s.seq);
  p.heads = static_cast<int>(s.n_heads);
  p.kv_heads = static_cast<int>(s.n_kv_heads);
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  p.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(s.head_dim)));
  return p;
}

// Which kernels run: the Hopper wgmma/TMA ones (nn/attention/sm90/; needs sm_90a
// device code and such a device), the mma.sync ones above (sm_80+), or the same fragment code on
// the instruction's emulation (the AMD build's path; on NVIDIA, a test of it).
enum class attention_kernels { sm90, tensor_core, portable };

inline attention_kernels attention_default_kernels() {
#if MXKIT_GPU_CUDA
  if (sm90::available()) return attention_kernels::sm90;
#endif
  return attention_kernels::tensor_core;
}

// Workspace: the backward's Delta (B*H*T floats); the forward needs none. The same whichever
// kernels run.
inline std::size_t attention_delta_bytes(const nn::head_shape& s) noexcept { return s.batch * s.n_heads * s.seq * sizeof(float); }

inline void attention_check_workspace(const char* entry, std::span<std::byte> workspace, std::size_t need) {
  mxkit::detail::require(workspace.size() >= need && (need == 0 || workspace.data() != nullptr), entry, ": workspace of ",
                         workspace.size(), " bytes, need ", need);
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(workspace.data()) % 16 == 0, entry, ": workspace is not 16-byte aligned");
}

// The entries: compiled in the kernel library when one is used (gpu/kernel_library.hpp).
#if !defined(MXKIT_GPU_LIBRARY_HAS_ATTENTION) || defined(MXKIT_GPU_LIBRARY_DEFINES_ATTENTION)
#if defined(MXKIT_GPU_LIBRARY_DEFINES_ATTENTION)
#define MXKIT_GPU_ATTENTION_ENTRY  // the kernel library's one definition
#else
#define MXKIT_GPU_ATTENTION_ENTRY inline
#endif
MXKIT_GPU_ATTENTION_ENTRY void attention_forward_impl(const bfloat16* qkv, std::size_t stride, bfloat16* out, float* lse, const nn::head_shape& s,
                                   std::span<std::byte> workspace, attention_kernels kernels, stream_t stream) {
  constexpr const char* entry = "gpu::attention_forward";
  attention_check(entry, s, stride);
  if (s.tokens() == 0) return;
  mxkit::detail::require(qkv && out && lse, entry, ": null pointer (qkv ", qkv != nullptr, ", out ", out != nullptr, ", lse ",
                         lse != nullptr, ")");
  check_aligned16(qkv, entry, "qkv");
  check_aligned16(out, entry, "out");
  attention_check_workspace(entry, workspace, 0);
  attention_params p = attention_make_params(qkv, stride, s);
  p.out = reinterpret_cast<std::uint16_t*>(out);
  p.lse = lse;
#if MXKIT_GPU_CUDA
  if (kernels == attention_kernels::sm90) {
    if (s.head_dim == 64) sm90::attention_forward<64>(p, stream);
    else sm90::attention_forward<128>(p, stream);
    return;
  }
#endif
  // x: (b, head), y: tile; blocks start in x-fastest order, so every head's heaviest tile goes first.
  const dim3 grid(static_cast<unsigned>(s.batch * s.n_heads), static_cast<unsigned>((s.seq + attn_tile - 1) / attn_tile));
  const bool portable = kernels == attention_kernels::portable;
  if (s.head_dim == 64) {
    if (portable) attention_launch(attention_forward_kernel<64, true>, grid, attn_forward_smem<64>, p, stream);
    else attention_launch(attention_forward_kernel<64, false>, grid, attn_forward_smem<64>, p, stream);
  } else {
    if (portable) attention_launch(attention_forward_kernel<128, true>, grid, attn_forward_smem<128>, p, stream);
    else attention_launch(attention_forward_kernel<128, false>, grid, attn_forward_smem<128>, p, stream);
  }
}

template <int D, bool Portable>
void attention_backward_mma(const attention_params& p, const dim3& grid_q, const dim3& grid_kv, stream_t stream) {
  attention_launch(attention_dkdv_kernel<D, Portable>, grid_kv, attn_dkdv_smem<D>, p, stream);
  attention_launch(attention_dq_kernel<D, Portable>, grid_q, attn_dq_smem<D>, p, stream);
}

MXKIT_GPU_ATTENTION_ENTRY void attention_backward_impl(const bfloat16* dout, const bfloat16* qkv, std::size_t stride, const bfloat16* out,
                                    const float* lse, bfloat16* dqkv, const nn::head_shape& s, std::span<std::byte> workspace,
                                    attention_kernels kernels, stream_t stream) {
  constexpr const char* entry = "gpu::attention_backward";
  attention_check(entry, s, stride);
  if (s.tokens() == 0) return;
  mxkit::detail::require(dout && qkv && out && lse && dqkv, entry, ": null pointer (dout ", dout != nullptr, ", qkv ",
                         qkv != nullptr, ", out ", out != nullptr, ", lse ", lse != nullptr, ", dqkv ", dqkv != nullptr, ")");
  attention_check_workspace(entry, workspace, attention_delta_bytes(s));
  check_aligned16(dout, entry, "dout");
  check_aligned16(qkv, entry, "qkv");
  check_aligned16(dqkv, entry, "dqkv");
  attention_params p = attention_make_params(qkv, stride, s);
  p.dout = reinterpret_cast<const std::uint16_t*>(dout);
  p.o = reinterpret_cast<const std::uint16_t*>(out);
  p.lse_in = lse;
  p.delta = reinterpret_cast<float*>(workspace.data());
  p.dqkv = reinterpret_cast<std::uint16_t*>(dqkv);
  const std::size_t rows = s.batch * s.n_heads * s.seq;
  if (s.head_dim == 64) launch_attention_delta<64>(p, rows, stream);
  else launch_attention_delta<128>(p, rows, stream);
#if MXKIT_GPU_CUDA
  if (kernels == attention_kernels::sm90) {
    if (s.head_dim == 64) sm90::attention_backward<64>(p, stream);
    else sm90::attention_backward<128>(p, stream);
    return;
  }
#endif
  const unsigned tiles = static_cast<unsigned>((s.seq + attn_tile - 1) / attn_tile);
  const dim3 grid_q(static_cast<unsigned>(s.batch * s.n_heads), tiles), grid_kv(static_cast<unsigned>(s.batch * s.n_kv_heads), tiles);
  const bool portable = kernels == attention_kernels::portable;
  if (s.head_dim == 64) {
    if (portable) attention_backward_mma<64, true>(p, grid_q, grid_kv, stream);
    else attention_backward_mma<64, false>(p, grid_q, grid_kv, stream);
  } else {
    if (portable) attention_backward_mma<128, true>(p, grid_q, grid_kv, stream);
    else attention_backward_mma<128, false>(p, grid_q, grid_kv, stream);
  }
}
#else
void attention_forward_impl(const bfloat16* qkv, std::size_t stride, bfloat16* out, float* lse, const nn::head_shape& s,
                            std::span<std::byte> workspace, attention_kernels kernels, stream_t stream);
void attention_backward_impl(const bfloat16* dout, const bfloat16* qkv, std::size_t stride, const bfloat16* out, const float* lse,
                             bfloat16* dqkv, const nn::head_shape& s, std::span<std::byte> workspace, attention_kernels kernels,
                             stream_t stream);
#endif

}  // namespace detail

// Bytes of device workspace the forward and the backward need, used only between the kernels a
// call enqueues: the backward's Delta; the forward needs none today (every path reads its
// operands in place), and callers that ask keep working if a path comes to need some.
inline std::size_t attention_forward_workspace(const nn::head_shape& s) noexcept {
  (void)s;
  return 0;
}
inline std::size_t attention_backward_workspace(const nn::head_shape& s) noexcept { return detail::attention_delta_bytes(s); }

// Causal GQA forward. qkv (B*T, qkv_stride) bf16, row [q heads | k heads | v heads] (stride a
// multiple of 8 elements, >= s.qkv_dim()); out (B*T, H*D) bf16; lse (B*H, T) float, the natural
// log-sum-exp of each row's scaled scores. D = s.head_dim is 64 or 128. Device pointers, qkv and
// out 16-byte aligned; workspace at least attention_forward_workspace(s) bytes, 16-byte aligned.
// Asynchronous on `stream`; no allocation.
inline void attention_forward(const bfloat16* qkv, std::size_t qkv_stride, bfloat16* out, float* lse, const nn::head_shape& s,
                              std::span<std::byte> workspace, stream_t stream = nullptr) {
  detail::attention_forward_impl(qkv, qkv_stride, out, lse, s, workspace, detail::attention_default_kernels(), stream);
}

// Causal GQA backward: dqkv (qkv's layout and stride, every element overwritten) from dout
// (B*T, H*D), qkv, the forward's out and lse. workspace: at least attention_backward_workspace(s)
// bytes of device memory, 16-byte aligned. Deterministic: the same inputs give the same bits on
// every run. Asynchronous on `stream`; no allocation.
inline void attention_backward(const bfloat16* dout, const bfloat16* qkv, std::size_t qkv_stride, const bfloat16* out,
                               const float* lse, bfloat16* dqkv, const nn::head_shape& s, std::span<std::byte> workspace,
                               stream_t stream = nullptr) {
  detail::attention_backward_impl(dout, qkv, qkv_stride, out, lse, dqkv, s, workspace, detail::attention_default_kernels(), stream);
}

}  // namespace gpu
MXKIT_END_NAMESPACE
