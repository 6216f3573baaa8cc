// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fragment pieces of the m16n8k16 attention kernels (sm80/forward.hpp, sm80/backward.hpp):
// block geometry, the A/B/C fragment loads and packs, the tile copies and the shared-memory sizes.
// On sm_80+ the product is one mma.sync (arch/cuda/mma_sm80.hpp); elsewhere (AMD this round, and
// the tests' `portable` runs on NVIDIA) the same fragment code runs on an emulation of that
// instruction with lane shuffles and fp32 FMAs (portable_mma), so the kernels have one source.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/format/float16.hpp>
#include <mxkit/gpu/arch/cuda/mma_sm80.hpp>
#include <mxkit/gpu/device.hpp>
#include <mxkit/gpu/nn/attention_params.hpp>

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

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
