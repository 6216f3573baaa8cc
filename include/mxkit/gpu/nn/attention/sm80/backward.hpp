// SPDX-License-Identifier: Apache-2.0
#pragma once
// The backward kernels of the m16n8k16 path (gpu/nn/attention.hpp: Delta, then dK dV per key
// tile, then dQ per query tile; no float atomics, so the same inputs give the same bits).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/nn/attention/sm80/fragments.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/nn/reduce.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

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

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
