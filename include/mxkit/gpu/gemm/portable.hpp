// SPDX-License-Identifier: Apache-2.0
#pragma once
// The portable GEMM kernel: plain CUDA/HIP C++ (shared memory, no matrix instructions), built by
// both backends, correct for every operand kind (any MX element pair, per-tensor FP8, bf16) and
// any shape. It is the path the tests trust first and the fallback of every other path.
//   D[P,Q] = alpha * A[P,R] . B[Q,R]^T + beta * C
// Numerics follow the reference (ref/gemm.hpp): each 32-wide K slice is summed in fp32 from
// unscaled element values, then promoted into the fp32 accumulator with the two block scales
// (acc += (partial * sb) * sa: both scales are powers of two, so only the add rounds). FP8 and
// bf16 use the same slices with scale 1; FP8's 1/(scale_a*scale_b) multiplies the final sum.
// Collective (tile loads + slice math) -> kernel -> launcher, as in the other paths.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/gemm/options.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace portable {

inline constexpr int tile_p = 64, tile_q = 64, tile_k = 32, threads = 256, per_thread = 4;
// The portable kernel specializes on the MX block, k = 32: one K slice is one block and one
// scale per operand line (a format of another block size needs its own slice).
static_assert(tile_k == mx_block_size, "one K slice is one MX block");
static_assert((tile_p / per_thread) * (tile_q / per_thread) == threads);

struct params {
  gemm_operand a, b;
  gemm_output_desc out;
};

// ---- collective: one operand tile [64 lines, 32 K] into shared memory, k-major ---------------
struct tile_smem {
  float lut_a[256], lut_b[256];
  float a[tile_k][tile_p + 1];  // +1: the column writes of one warp fall in distinct banks
  float b[tile_k][tile_q + 1];
  float sa[tile_p], sb[tile_q];
};

__device__ inline float load_element(const gemm_operand& o, const float* lut, std::size_t line, std::size_t pos) {
  if (line >= o.lines || pos >= o.length) return 0.0f;
  if (o.kind == operand_kind::bf16) {
    const std::uint8_t* e = o.mn_major ? o.data + pos * o.line_bytes + 2 * line : o.data + line * o.line_bytes + 2 * pos;
    const std::uint16_t h = static_cast<std::uint16_t>(e[0] | (e[1] << 8));
    return bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
  }
  return lut[load_code(o.data + line * o.line_bytes, pos, o.storage_bits())];
}

template <int Lines>
__device__ inline void load_tile(const gemm_operand& o, const float* lut, float (*dst)[Lines + 1], float* scale, std::size_t line0,
                                 std::size_t k0, int tid) {
  for (int e = tid; e < Lines * tile_k; e += threads) {
    // Consecutive threads read consecutive addresses: K of one line, or lines of one K row (mn_major).
    const int r = o.mn_major ? e % Lines : e / tile_k, k = o.mn_major ? e / Lines : e % tile_k;
    dst[k][r] = load_element(o, lut, line0 + static_cast<std::size_t>(r), k0 + static_cast<std::size_t>(k));
  }
  if (o.kind == operand_kind::mx)
    for (int r = tid; r < Lines; r += threads) {
      const std::size_t line = line0 + static_cast<std::size_t>(r);
      scale[r] = line < o.lines ? e8m0::from_bits(o.scales[line * o.blocks + k0 / tile_k]).to_float() : 0.0f;
    }
}

// ---- kernel -----------------------------------------------------------------------------------
MXKIT_GLOBAL void __launch_bounds__(threads) gemm_kernel(const params p) {
  __shared__ tile_smem sm;
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % (tile_q / per_thread), ty = tid / (tile_q / per_thread);
  const std::size_t p0 = static_cast<std::size_t>(blockIdx.y) * tile_p, q0 = static_cast<std::size_t>(blockIdx.x) * tile_q;
  for (int c = tid; c < 256; c += threads) {
    if (p.a.kind != operand_kind::bf16) sm.lut_a[c] = decode_operand_code(p.a, static_cast<std::uint8_t>(c));
    if (p.b.kind != operand_kind::bf16) sm.lut_b[c] = decode_operand_code(p.b, static_cast<std::uint8_t>(c));
  }
  const bool mx = p.a.kind == operand_kind::mx;
  float acc[per_thread][per_thread] = {};
  for (std::size_t k0 = 0; k0 < p.a.length; k0 += tile_k) {
    __syncthreads();  // the tables are written; the previous slice is consumed
    load_tile<tile_p>(p.a, sm.lut_a, sm.a, sm.sa, p0, k0, tid);
    load_tile<tile_q>(p.b, sm.lut_b, sm.b, sm.sb, q0, k0, tid);
    __syncthreads();
    float part[per_thread][per_thread] = {};
    for (int k = 0; k < tile_k; ++k) {
      float av[per_thread], bv[per_thread];
      for (int i = 0; i < per_thread; ++i) av[i] = sm.a[k][ty * per_thread + i];
      for (int j = 0; j < per_thread; ++j) bv[j] = sm.b[k][tx * per_thread + j];
      for (int i = 0; i < per_thread; ++i)
        for (int j = 0; j < per_thread; ++j) part[i][j] = fmaf(av[i], bv[j], part[i][j]);
    }
    for (int i = 0; i < per_thread; ++i)
      for (int j = 0; j < per_thread; ++j)
        acc[i][j] = mx ? fmaf(part[i][j] * sm.sb[tx * per_thread + j], sm.sa[ty * per_thread + i], acc[i][j]) : acc[i][j] + part[i][j];
  }
  // Epilogue: alpha * (acc * descale) + beta * C, as the reference orders it.
  const float descale = p.a.kind == operand_kind::mx ? 1.0f : tensor_factor(p.a, p.b);
  const gemm_output_desc& o = p.out;
  for (int i = 0; i < per_thread; ++i) {
    const std::size_t row = p0 + static_cast<std::size_t>(ty * per_thread + i);
    if (row >= p.a.lines) break;
    for (int j = 0; j < per_thread; ++j) {
      const std::size_t col = q0 + static_cast<std::size_t>(tx * per_thread + j);
      if (col >= p.b.lines) break;
      float v = o.alpha * (acc[i][j] * descale);
      if (o.bf16) {
        std::uint16_t* d = static_cast<std::uint16_t*>(o.d) + row * o.ldd + col;
        if (o.beta != 0.0f) {
          const std::uint16_t c = static_cast<const std::uint16_t*>(o.c)[row * o.ldc + col];
          v = v + o.beta * bit_cast<float>(static_cast<std::uint32_t>(c) << 16);
        }
        *d = bf16_output_bits(v);
      } else {
        float* d = static_cast<float*>(o.d) + row * o.ldd + col;
        if (o.beta != 0.0f) v = v + o.beta * static_cast<const float*>(o.c)[row * o.ldc + col];
        *d = v;
      }
    }
  }
}

// ---- launcher ---------------------------------------------------------------------------------
inline void launch(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t stream) {
  if (a.lines == 0 || b.lines == 0) return;
  const std::size_t gx = (b.lines + tile_q - 1) / tile_q, gy = (a.lines + tile_p - 1) / tile_p;
  mxkit::detail::require(gx <= 0x7FFFFFFF && gy <= 65535, "gemm (portable): ", a.lines, "x", b.lines, " output needs a grid of ",
                         gx, "x", gy, " tiles, beyond the launch limits");
  gemm_kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), threads, 0, stream>>>(params{a, b, out});
  MXKIT_GPU_CHECK_LAUNCH();
}

// The last entry of the GEMM's architecture list (gemm.hpp): every operand kind, every device.
struct gemm_arch {
  static constexpr gemm_path path = gemm_path::portable;
  static bool supports(const gemm_operand&, const gemm_operand&) { return true; }
  static void run(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s, const gemm_options&) {
    launch(a, b, out, s);
  }
};

}  // namespace portable
}  // namespace gpu
MXKIT_END_NAMESPACE
