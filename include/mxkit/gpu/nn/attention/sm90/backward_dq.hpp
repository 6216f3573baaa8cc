// SPDX-License-Identifier: Apache-2.0
#pragma once
// Hopper flash attention, backward: the dQ kernel (common.hpp describes the design).
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/nn/attention/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <mxkit/gpu/nn/attention/sm90/common.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

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
    attn_load_tiles<BM, D>(&sm.q_full, m0, b, attn_tma_tile{sm.q, &maps.m[0], q_col}, attn_tma_tile{sm.dout, &maps.m[1], q_col});
    for (int j = 0; j < tiles; ++j) {
      const int s = j % S::stages;
      attn_fill_stage<BN, D>(sm.ring, j, b, attn_tma_tile{sm.k[s], &maps.m[2], k_col}, attn_tma_tile{sm.v[s], &maps.m[2], v_col});
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
    fence_all(sc, dp);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      wgmma_ss_kmajor<BN>(sc, sm.q, BM, wg * 64, sm.k[s], kk);
      wgmma_ss_kmajor<BN>(dp, sm.dout, BM, wg * 64, sm.v[s], kk);
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
  auto score_gradients = [&](int j, int) {
    fence_all(sc, dp);
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
    attn_wgmma_wait<0>(dq);
    sm.ring.release(j);
  };
  mbar_wait(&sm.q_full, 0);
  // Tile j's scores and dS overlap tile j - 1's dQ product (as the forward).
  attn_overlapped_steps(sm.ring, tiles, issue_scores, issue_dq, score_gradients, drain_dq, pack);
  std::uint16_t* dst = p.dqkv + static_cast<std::size_t>(b) * T * p.stride + static_cast<std::size_t>(h) * D;
  attn_store_rows<D / 2>(dst, p.stride, r0, T, dq, p.scale, p.scale);
#else
  (void)maps;
  (void)p;
#endif
}

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
