// SPDX-License-Identifier: Apache-2.0
#pragma once
// The forward kernel of the m16n8k16 path (gpu/nn/attention.hpp says what it computes and how the
// work is split): one block of 4 teams per (64 query rows, b, h), online softmax per team.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/nn/attention/sm80/fragments.hpp>
#include <mxkit/gpu/nn/reduce.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

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

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
