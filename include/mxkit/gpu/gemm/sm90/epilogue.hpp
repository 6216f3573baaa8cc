// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Hopper GEMM's epilogues: scaled outputs (line factors or the per-tensor descale, alpha,
// beta * C) stored as pairs, or for bf16 D with 16-byte aligned rows as whole 16-byte groups
// after a quad transpose.
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/gemm/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/gemm/sm90/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

#if MXKIT_SM90A
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
// any test of `pair` (a branch between them left fp32 D about 10 % slower: docs/perf/training.md).
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

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
