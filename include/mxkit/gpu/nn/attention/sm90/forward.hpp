// SPDX-License-Identifier: Apache-2.0
#pragma once
// Hopper flash attention, forward kernel (common.hpp describes the design).
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/nn/attention/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <mxkit/gpu/nn/attention/sm90/common.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

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
    attn_load_tiles<BM, D>(&sm.q_full, m0, b, attn_tma_tile{sm.q, &maps.m[0], q_col});
    // K and V in rings of their own: K_j's buffer frees once S_j is computed, V_j's only after
    // P_j V_j, so one shared ring would hold K_{j+2} back by most of an iteration.
    for (int j = 0; j < tiles; ++j) {
      attn_fill_stage<BN, D>(sm.k_ring, j, b, attn_tma_tile{sm.k[j % 2], &maps.m[0], k_col});
      attn_fill_stage<BN, D>(sm.v_ring, j, b, attn_tma_tile{sm.v[j % 2], &maps.m[0], v_col});
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
      wgmma_ss_kmajor<BN>(s, sm.q, BM, wg * 64, sm.k[j % 2], kk);
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
  attn_wgmma_wait<0>(s);
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
    attn_wgmma_wait<1>(s);  // S_j is in
    sm.k_ring.release(j);
    float alpha[2];
    softmax(j, alpha);  // overlaps the P V product still on the tensor cores
    attn_wgmma_wait<0>(o);
    sm.v_ring.release(j - 1);
    rescale_and_pack(alpha);
  }
  sm.v_ring.wait_filled(tiles - 1);
  issue_pv(tiles - 1);
  attn_wgmma_wait<0>(o);
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

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
