// SPDX-License-Identifier: Apache-2.0
#pragma once
// Hopper flash attention, backward: the dK/dV kernel (common.hpp describes the design).
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/nn/attention/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <mxkit/gpu/nn/attention/sm90/common.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

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
    if (pt == 0) attn_load_tiles<BN, D>(&sm.kv_full, n0, b, attn_tma_tile{sm.k, &maps.m[0], k_col}, attn_tma_tile{sm.v, &maps.m[0], v_col});
    for (int step = 0; step < steps; ++step) {
      const int s = step % S::stages, h = kvh * group + step / per_head, m0 = n0 + (step % per_head) * BM;
      sm.ring.wait_free(step);
      if (pt == 0)
        attn_load_tiles<BM, D>(sm.ring.filled(step), m0, b, attn_tma_tile{sm.q[s], &maps.m[1], h * D * 2},
                               attn_tma_tile{sm.dout[s], &maps.m[2], h * D * 2});
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
    fence_all(st, dpt);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      wgmma_ss_kmajor<BM>(st, sm.k, BN, wg * 64, sm.q[s], kk);
      wgmma_ss_kmajor<BM>(dpt, sm.v, BN, wg * 64, sm.dout[s], kk);
    }
    wgmma_commit();
  };
  // dV += P^T dO, dK += dS^T Q: the query index is the K dimension, dO and Q read MN-major.
  auto issue_grads = [&](int s) {
    fence_all(dv, dk);
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
  // the tensor cores, set the pace: docs/perf/training.md). A masked element's exponential may
  // overflow; the select drops it before anything multiplies it.
  auto gradients_of_scores = [&](int step, int s) {
    fence_all(st, dpt);
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
  // With `overlap` (attn_overlapped_steps, as dQ), step i's scores and exponentials overlap step
  // i - 1's gradient products. That needs both steps' fragments live: at D = 128 more than 240
  // registers (ptxas then serializes every wgmma), so there each step drains before the next.
  // A stage is released once its step's gradient products are done: they read its Q and dO.
  constexpr bool overlap = D <= 64;
  auto drain_grads = [&](int step) {
    attn_wgmma_wait<0>(dv, dk);
    sm.ring.release(step);
  };
  mbar_wait(&sm.kv_full, 0);
  if constexpr (overlap) {
    attn_overlapped_steps(sm.ring, steps, issue_scores, issue_grads, gradients_of_scores, drain_grads, pack);
  } else {
    for (int step = 0; step < steps; ++step) {
      const int s = step % S::stages;
      sm.ring.wait_filled(step);
      issue_scores(s);
      wgmma_wait<0>();
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

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
