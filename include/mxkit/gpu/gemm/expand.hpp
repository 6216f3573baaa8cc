// SPDX-License-Identifier: Apache-2.0
#pragma once
// Re-encodes the element codes of an MX copy as E4M3 bytes, keeping its scales: every E2M1,
// E2M3 and E3M2 value is exactly an E4M3 value (fewer exponent and mantissa bits), so the FP8
// tensor-core path computes MXFP4/MXFP6 products exactly. One pass over the operand
// ([lines, K] codes in, [lines, K] bytes out, a few microseconds at the benchmark shapes) instead
// of a conversion inside the GEMM, where it would take issue slots from the scale promotion that
// bounds the Hopper kernel (gpu/gemm/sm90/; docs/perf/gemm.md has the count).
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/block/bf16_values.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace expand {

inline constexpr int threads = 256;

// E4M3 code of element code c of type t (exact for E2M1, E2M3, E3M2, E4M3).
MXKIT_HD constexpr std::uint8_t to_e4m3(mx_type t, std::uint8_t c) noexcept {
  return e4m3::from_float(decode_mx_element(t, c)).bits();
}
static_assert(to_e4m3(mx_type::mxfp4, 0x7) == 0x4C && to_e4m3(mx_type::mxfp4, 0x9) == 0xB0);  // 6, -0.5

// One 16-byte chunk of to_e4m3_kernel's output: chunk `chunk` of line `line`.
__device__ inline void to_e4m3_chunk(const std::uint8_t* src, std::size_t src_line_bytes, mx_type t, const std::uint8_t* lut,
                                     std::uint8_t* dst, std::size_t k, std::size_t line, std::size_t chunk) {
  std::uint32_t out[4];
  if (t == mx_type::mxfp4) {  // 16 elements in 8 bytes, element 2j in the low nibble of byte j
    const uint2 in = *reinterpret_cast<const uint2*>(src + line * src_line_bytes + chunk * 8);
    const std::uint32_t w[2] = {in.x, in.y};
    for (int h = 0; h < 2; ++h)
      for (int b = 0; b < 2; ++b) {
        const std::uint32_t x = w[h] >> (16 * b);
        out[2 * h + b] = lut[x & 0xF] | (lut[(x >> 4) & 0xF] << 8) | (lut[(x >> 8) & 0xF] << 16) |
                         (static_cast<std::uint32_t>(lut[(x >> 12) & 0xF]) << 24);
      }
  } else {
    const uint4 in = *reinterpret_cast<const uint4*>(src + line * src_line_bytes + chunk * 16);
    const std::uint32_t w[4] = {in.x, in.y, in.z, in.w};
    for (int j = 0; j < 4; ++j)
      out[j] = lut[w[j] & 0xFF] | (lut[(w[j] >> 8) & 0xFF] << 8) | (lut[(w[j] >> 16) & 0xFF] << 16) |
               (static_cast<std::uint32_t>(lut[w[j] >> 24]) << 24);
  }
  *reinterpret_cast<uint4*>(dst + line * k + chunk * 16) = make_uint4(out[0], out[1], out[2], out[3]);
}

// Chunk i is the 16 output bytes [16 i, 16 i + 16) of the [lines, k] result (k % 32 == 0). A
// grid of at most the resident CTAs strides over the chunks: behind the fold's closed gate (its
// fallback, rarely wanted) the launch then costs a few microseconds, not a grid sized to the
// operand.
MXKIT_GLOBAL void __launch_bounds__(threads) to_e4m3_kernel(const std::uint8_t* src, std::size_t src_line_bytes, mx_type t,
                                                          std::uint8_t* dst, std::size_t lines, std::size_t k, launch_gate gate) {
  if (gate.closed()) return;
  __shared__ std::uint8_t lut[256];
  for (int c = static_cast<int>(threadIdx.x); c < 256; c += threads) lut[c] = to_e4m3(t, static_cast<std::uint8_t>(c));
  __syncthreads();
  const std::size_t chunks_per_line = k / 16, chunks = lines * chunks_per_line;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * threads;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * threads + threadIdx.x; i < chunks; i += stride)
    to_e4m3_chunk(src, src_line_bytes, t, lut, dst, k, i / chunks_per_line, i % chunks_per_line);
}

// Does operand o need this pass before an FP8 tensor-core path?
inline bool needed(const gemm_operand& o) noexcept {
  return o.kind == operand_kind::mx && (o.type == mx_type::mxfp4 || o.type == mx_type::mxfp6_e2m3 || o.type == mx_type::mxfp6_e3m2);
}
inline std::size_t bytes(const gemm_operand& o) noexcept { return needed(o) ? o.lines * o.length : 0; }

// dst: [o.lines, o.length] bytes, 16-byte aligned. Source lines must be 8-byte (FP4) or 16-byte
// (FP6) aligned, as the quantizer's padded lines are.
inline void launch(const gemm_operand& o, std::uint8_t* dst, stream_t stream, launch_gate gate = {}) {
  mxkit::detail::require(needed(o) && o.length % 32 == 0, "expand: operand is not an MXFP4/MXFP6 copy");
  const std::size_t align = o.type == mx_type::mxfp4 ? 8 : 16;
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(o.data) % align == 0 && o.line_bytes % align == 0 &&
                             reinterpret_cast<std::uintptr_t>(dst) % 16 == 0,
                         "expand: operand rows are not ", align, "-byte aligned");
  const std::size_t work = o.lines * (o.length / 16);
  if (work == 0) return;
  const int grid = gpu::detail::persistent_grid<to_e4m3_kernel>(threads, (work + threads - 1) / threads);
  to_e4m3_kernel<<<grid, threads, 0, stream>>>(o.data, o.line_bytes, o.type, dst, o.lines, o.length, gate);
  MXKIT_GPU_CHECK_LAUNCH();
}

// ---- MXFP4 with the block scales folded into the bytes ----------------------------------------
// An E2M1 value has one mantissa bit, so v * 2^d is exactly an E5M2 value for every shift d in
// [-15, 13] (0.5 * 2^-15 is E5M2's least subnormal, 6 * 2^13 = 49152 <= 57344). A line whose
// non-zero blocks' scale exponents e_b span at most 28 binades is stored as E5M2 bytes
// v * 2^(e_b - r) with one line factor 2^r, r = max e_b - 13: every block product of the GEMM is
// then the same exact number times 2^-(r_a + r_b), the tensor cores need no per-block scales, and
// the factors are applied once per output (gpu/gemm/sm90/, scaling::line). All-zero blocks (their
// scale carries no information) do not widen the span; a NaN scale makes the line factor NaN,
// as every output it touches is NaN in the reference. A line that does not fit, or whose
// exponents leave [-48, 48] (then an fp32 intermediate could round differently from the
// reference's per-block products), sets `unsafe`, and the caller's block-scaled fallback runs.
namespace fold {

inline constexpr int shift_min = -15, shift_max = 13, shifts = shift_max - shift_min + 1;
inline constexpr int max_span = shift_max - shift_min, max_exponent = bf16_values::max_exponent;  // the same fp32 argument

MXKIT_HD constexpr std::uint8_t e5m2_code(std::uint8_t fp4_code, int shift) noexcept {
  return e5m2::from_float(e2m1::from_bits(fp4_code).to_float() * mxkit::detail::exp2i(shift)).bits();
}
constexpr bool exact_everywhere() {
  for (int d = shift_min; d <= shift_max; ++d)
    for (int c = 0; c < 16; ++c) {
      const float want = e2m1::from_bits(static_cast<std::uint8_t>(c)).to_float() * mxkit::detail::exp2i(d);
      const float got = e5m2::from_bits(e5m2_code(static_cast<std::uint8_t>(c), d)).to_float();
      if (got != want || bit_cast<std::uint32_t>(got) >> 31 != static_cast<std::uint32_t>(c >> 3)) return false;
    }
  return true;
}
static_assert(exact_everywhere() && e5m2_code(0x1, shift_min) == 0x01 && e5m2_code(0x7, shift_max) == 0x7A);

// The E5M2 bytes of the eight E2M1 magnitudes (codes 0-7) shifted by `shift`, byte m of the
// value: the table a byte permute indexes with each code's three magnitude bits.
MXKIT_HD constexpr std::uint64_t magnitude_table(int shift) noexcept {
  std::uint64_t t = 0;
  for (int m = 0; m < 8; ++m) t |= static_cast<std::uint64_t>(e5m2_code(static_cast<std::uint8_t>(m), shift)) << (8 * m);
  return t;
}

// Four E2M1 codes (the low 16 bits of `codes`, the first in the low nibble) as four E5M2 bytes
// (the first in the low byte) under the shift whose magnitude_table is `table`: the magnitudes by
// one byte permute, the signs (bit 3 of each nibble, bit 7 of each byte: +-0 stay signed zeros)
// by another, which picks 0x80 for a set sign and 0 for a clear one. Two permutes and a few logic
// operations for four codes, where a table in shared memory costs a load a code.
MXKIT_HD constexpr std::uint32_t fold4(std::uint32_t codes, std::uint64_t table) noexcept {
  const std::uint32_t magnitudes =
      hw::byte_permute(static_cast<std::uint32_t>(table), static_cast<std::uint32_t>(table >> 32), codes & 0x7777u);
  const std::uint32_t signs = hw::byte_permute(0x80u, 0u, (~codes >> 3) & 0x1111u);
  return magnitudes | signs;
}
// fold4 against e5m2_code at every shift, for every code in every nibble beside every other code.
constexpr bool fold4_matches_e5m2_code() {
  for (int d = shift_min; d <= shift_max; ++d) {
    const std::uint64_t t = magnitude_table(d);
    std::uint8_t want[16] = {};
    for (int c = 0; c < 16; ++c) want[c] = e5m2_code(static_cast<std::uint8_t>(c), d);
    for (std::uint32_t a = 0; a < 16; ++a)
      for (std::uint32_t b = 0; b < 16; ++b) {
        const std::uint32_t got = fold4(a | b << 4 | a << 8 | b << 12 | 0xABCD0000u, t);  // high bits ignored
        if (got != (want[a] | want[b] << 8 | static_cast<std::uint32_t>(want[a]) << 16 | static_cast<std::uint32_t>(want[b]) << 24))
          return false;
      }
  }
  return true;
}
static_assert(fold4_matches_e5m2_code());

// The pieces both fold kernels share. The shift tables, a byte a thread (byte m of table d:
// magnitude m under shift d + shift_min), so a CTA's start costs one conversion a thread.
__device__ inline void fill_tables(std::uint64_t* tables) {
  for (int i = static_cast<int>(threadIdx.x); i < 8 * shifts; i += static_cast<int>(blockDim.x))
    reinterpret_cast<std::uint8_t*>(tables)[i] = e5m2_code(static_cast<std::uint8_t>(i % 8), i / 8 + shift_min);
}
// Block b of a line (codes w, scale byte s) into a line's running span: the max and min scale
// byte over its non-zero blocks (+-0 are codes 0x0 and 0x8) and whether any scale is NaN.
struct line_span {
  unsigned hi = 0, lo = 255, nan = 0;
  __device__ void add(const uint4& w, unsigned s) {
    if (s == 0xFF) nan = 1;
    else if (((w.x | w.y | w.z | w.w) & 0x77777777u) != 0) {
      hi = s > hi ? s : hi;
      lo = s < lo ? s : lo;
    }
  }
  __device__ void reduce_warp() {
    hi = warp_max(hi);
    lo = 255u - warp_max(255u - lo);
    nan = warp_max(nan);
  }
  // The line factor's exponent r, and (from one thread: `write`) the line factor and the flag.
  __device__ int finish(bool write, float* line_scale, int* unsafe) const {
    const bool any = hi >= lo;
    const int r = any ? static_cast<int>(hi) - 127 - shift_max : 0;
    if (write) {
      const bool fits = !any || (static_cast<int>(hi - lo) <= max_span && static_cast<int>(hi) - 127 <= max_exponent &&
                                 static_cast<int>(lo) - 127 >= -max_exponent);
      if (!fits) atomicOr(unsafe, 1);
      *line_scale = nan ? bit_cast<float>(0x7FC00000u) : mxkit::detail::exp2i(r);
    }
    return r;
  }
};
// A half-block (16 codes in 8 bytes, scale byte s) as 16 E5M2 bytes under line exponent r.
__device__ inline uint4 fold_half(uint2 w, unsigned s, int r, const std::uint64_t* tables) {
  int d = static_cast<int>(s) - 127 - r;  // zero and NaN blocks hold only +-0 codes: any shift
  d = d < shift_min ? shift_min : (d > shift_max ? shift_max : d);
  const std::uint64_t t = tables[d - shift_min];
  return make_uint4(fold4(w.x, t), fold4(w.x >> 16, t), fold4(w.y, t), fold4(w.y >> 16, t));
}

// One warp per line. Pass 1: lanes take the line's blocks in turn (16 code bytes each) and find
// the exponent span of the non-zero blocks. Pass 2: lanes take half-blocks in turn (16 codes, 8
// bytes in and 16 out each), so that every warp load and store is one contiguous run, and fold
// them with the shift's table (one 8-byte shared-memory read a half-block). Each pass loads a
// batch of a lane's next blocks or half-blocks before it uses any of them. The second pass reads
// the codes again: from L2 while the lines in flight fit it, which lines of up to long_line_blocks
// blocks do (the long ones take fold_long_kernel).
inline constexpr int span_batch = 4;  // blocks a lane loads at once in pass 1 (64 bytes)
inline constexpr int fold_batch = 8;  // half-blocks a lane loads at once in pass 2 (64 bytes)
MXKIT_GLOBAL void __launch_bounds__(threads) e2m1_to_e5m2_kernel(const std::uint8_t* src, std::size_t src_line_bytes,
                                                               const std::uint8_t* scales, std::size_t scale_ld,
                                                               std::size_t lines, std::size_t blocks, std::uint8_t* dst,
                                                               float* line_scale, int* unsafe) {
  __shared__ std::uint64_t tables[shifts];
  fill_tables(tables);
  __syncthreads();
  const std::size_t line = (static_cast<std::size_t>(blockIdx.x) * threads + threadIdx.x) / warp_size;
  if (line >= lines) return;  // whole warps leave together
  const int lane = lane_id();
  const std::uint8_t* codes = src + line * src_line_bytes;
  const std::uint8_t* sc = scales + line * scale_ld;
  line_span span;
  for (std::size_t b0 = static_cast<std::size_t>(lane); b0 < blocks; b0 += span_batch * warp_size) {
    uint4 w[span_batch];
    unsigned s[span_batch];
#pragma unroll
    for (int j = 0; j < span_batch; ++j) {  // past the line's end: an all-zero block, which counts for nothing
      const std::size_t b = b0 + static_cast<std::size_t>(j) * warp_size;
      w[j] = b < blocks ? *reinterpret_cast<const uint4*>(codes + 16 * b) : make_uint4(0u, 0u, 0u, 0u);
      s[j] = b < blocks ? sc[b] : 0u;
    }
#pragma unroll
    for (int j = 0; j < span_batch; ++j) span.add(w[j], s[j]);
  }
  span.reduce_warp();
  const int r = span.finish(lane == 0, line_scale + line, unsafe);
  std::uint8_t* out = dst + line * (32 * blocks);
  const std::size_t halves = 2 * blocks;
  for (std::size_t h0 = static_cast<std::size_t>(lane); h0 < halves; h0 += fold_batch * warp_size) {
    uint2 w[fold_batch];
    unsigned s[fold_batch];
#pragma unroll
    for (int j = 0; j < fold_batch; ++j) {
      const std::size_t h = h0 + static_cast<std::size_t>(j) * warp_size;
      w[j] = h < halves ? *reinterpret_cast<const uint2*>(codes + 8 * h) : make_uint2(0u, 0u);
      s[j] = h < halves ? sc[h / 2] : 127u;
    }
#pragma unroll
    for (int j = 0; j < fold_batch; ++j) {
      const std::size_t h = h0 + static_cast<std::size_t>(j) * warp_size;
      if (h >= halves) break;
      *reinterpret_cast<uint4*>(out + 16 * h) = fold_half(w[j], s[j], r, tables);
    }
  }
}

// Long lines: one CTA a line, its codes and scales read from memory once into shared memory (17
// bytes a block; 16 KB of codes for 1,024 blocks), the span reduced over the CTA, and the second
// pass folded from there. With a warp a line, every line of a [8192, 28672] operand is in flight
// at once (117 MB of codes against a 50 MB L2), so the second pass's reads came from DRAM again.
inline constexpr std::size_t long_line_blocks = 256, max_long_line_blocks = 1024;
inline std::size_t long_line_smem(std::size_t blocks) noexcept { return 17 * blocks; }
MXKIT_GLOBAL void __launch_bounds__(threads) fold_long_kernel(const std::uint8_t* src, std::size_t src_line_bytes,
                                                            const std::uint8_t* scales, std::size_t scale_ld, std::size_t blocks,
                                                            std::uint8_t* dst, float* line_scale, int* unsafe) {
  extern __shared__ uint4 staged[];  // [blocks] codes, then [blocks] scale bytes
  __shared__ std::uint64_t tables[shifts];
  __shared__ unsigned partial[3][threads / warp_size];
  fill_tables(tables);
  std::uint8_t* staged_scales = reinterpret_cast<std::uint8_t*>(staged + blocks);
  const std::size_t line = blockIdx.x;
  const std::uint8_t* codes = src + line * src_line_bytes;
  const std::uint8_t* sc = scales + line * scale_ld;
  line_span span;
  for (std::size_t b0 = threadIdx.x; b0 < blocks; b0 += span_batch * threads) {
    uint4 w[span_batch];
    unsigned s[span_batch];
#pragma unroll
    for (int j = 0; j < span_batch; ++j) {  // every load of the batch before any store
      const std::size_t b = b0 + static_cast<std::size_t>(j) * threads;
      w[j] = b < blocks ? *reinterpret_cast<const uint4*>(codes + 16 * b) : make_uint4(0u, 0u, 0u, 0u);
      s[j] = b < blocks ? sc[b] : 0u;
    }
#pragma unroll
    for (int j = 0; j < span_batch; ++j) {
      const std::size_t b = b0 + static_cast<std::size_t>(j) * threads;
      if (b >= blocks) break;
      staged[b] = w[j];
      staged_scales[b] = static_cast<std::uint8_t>(s[j]);
      span.add(w[j], s[j]);
    }
  }
  span.reduce_warp();
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  if (lane_id() == 0) {
    partial[0][warp] = span.hi;
    partial[1][warp] = span.lo;
    partial[2][warp] = span.nan;
  }
  __syncthreads();  // the staged line, the tables and the warps' spans
  line_span all;
  for (int w = 0; w < threads / warp_size; ++w) {
    all.hi = partial[0][w] > all.hi ? partial[0][w] : all.hi;
    all.lo = partial[1][w] < all.lo ? partial[1][w] : all.lo;
    all.nan |= partial[2][w];
  }
  const int r = all.finish(threadIdx.x == 0, line_scale + line, unsafe);
  std::uint8_t* out = dst + line * (32 * blocks);
  const uint2* halves = reinterpret_cast<const uint2*>(staged);
  for (std::size_t h = threadIdx.x; h < 2 * blocks; h += threads)
    *reinterpret_cast<uint4*>(out + 16 * h) = fold_half(halves[h], staged_scales[h / 2], r, tables);
}

// MXFP4 copies whose lines are 16-byte aligned (the quantizer's always are: K % 32 == 0).
inline bool applies(const gemm_operand& o) noexcept {
  return o.kind == operand_kind::mx && o.type == mx_type::mxfp4 && o.length % 32 == 0 && o.blocks * 32 == o.length &&
         reinterpret_cast<std::uintptr_t>(o.data) % 16 == 0 && o.line_bytes % 16 == 0;
}

// dst: [o.lines, o.length] E5M2 bytes (16-byte aligned); line_scale: o.lines floats; unsafe: an
// int the caller zeroed, set when any line needs the block-scaled fallback.
inline void launch(const gemm_operand& o, std::uint8_t* dst, float* line_scale, int* unsafe, stream_t stream) {
  mxkit::detail::require(applies(o), "expand::fold: operand is not an MXFP4 copy with 16-byte aligned lines");
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(dst) % 16 == 0, "expand::fold: destination is not 16-byte aligned");
  if (o.lines == 0) return;
  if (o.blocks > long_line_blocks && o.blocks <= max_long_line_blocks) {
    mxkit::detail::require(o.lines <= 0x7FFFFFFF, "expand::fold: operand too large");
    fold_long_kernel<<<static_cast<unsigned>(o.lines), threads, long_line_smem(o.blocks), stream>>>(
        o.data, o.line_bytes, o.scales, o.blocks, o.blocks, dst, line_scale, unsafe);
    MXKIT_GPU_CHECK_LAUNCH();
    return;
  }
  constexpr std::size_t lines_per_cta = threads / warp_size;
  const std::size_t grid = (o.lines + lines_per_cta - 1) / lines_per_cta;
  mxkit::detail::require(grid <= 0x7FFFFFFF, "expand::fold: operand too large");
  e2m1_to_e5m2_kernel<<<static_cast<unsigned>(grid), threads, 0, stream>>>(o.data, o.line_bytes, o.scales, o.blocks, o.lines,
                                                                            o.blocks, dst, line_scale, unsafe);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace fold


// ---- MXFP8 as bf16 with the block scales applied ----------------------------------------------
// Each code times its block scale as a bf16 value (block/bf16_values.hpp: exact), so the GEMM is a
// plain bf16 product with fp32 accumulation on tensor cores that run at half the FP8 rate but
// need no per-block promotion. A non-zero block beyond +-48 binades sets `unsafe` and the
// caller's block-scaled FP8 fallback runs. A NaN scale makes its block NaN, which reaches exactly
// the outputs the reference makes NaN.
namespace to_bf16 {

inline constexpr int max_exponent = bf16_values::max_exponent;
inline constexpr int chunks_per_thread = 2;  // a chunk: 8 codes in (8 bytes), 8 bf16 out (16 bytes)
inline constexpr std::size_t chunks_per_cta = static_cast<std::size_t>(threads) * chunks_per_thread;
using bf16_values::beyond_exact_range;
using bf16_values::four_bf16;

// The [lines, length] operand as chunks of 8 codes, numbered along the lines (length / 8 a
// line): a CTA takes chunks_per_cta consecutive chunks, each thread two of them a CTA width
// apart, so every load (8 bytes a lane) and store (16 bytes a lane) of a warp is one contiguous
// run. Chunk c's block scale is scales[c / 4] (the scales are [lines, length / 32], dense) and
// its output dst[8 c ...]; its codes are at 8 c plus, for padded source lines, the padding of
// the lines before it (the only division, and only then).
template <bool E4M3>
MXKIT_GLOBAL void __launch_bounds__(threads) mxfp8_kernel(const std::uint8_t* src, std::size_t src_line_bytes,
                                                        const std::uint8_t* scales, std::size_t length, std::size_t chunks,
                                                        std::uint16_t* dst, int* unsafe) {
  const std::size_t pad = src_line_bytes - length, chunks_per_line = length / 8;
  std::size_t c[chunks_per_thread];
  uint2 in[chunks_per_thread] = {};
  unsigned s[chunks_per_thread] = {};
#pragma unroll
  for (int j = 0; j < chunks_per_thread; ++j) {  // every load first: two in flight a thread
    c[j] = static_cast<std::size_t>(blockIdx.x) * chunks_per_cta + static_cast<std::size_t>(j) * threads + threadIdx.x;
    if (c[j] >= chunks) continue;
    in[j] = *reinterpret_cast<const uint2*>(src + 8 * c[j] + (pad ? c[j] / chunks_per_line * pad : 0));
    s[j] = scales[c[j] / 4];
  }
#pragma unroll
  for (int j = 0; j < chunks_per_thread; ++j) {
    if (c[j] >= chunks) continue;
    const float scale = e8m0::from_bits(static_cast<std::uint8_t>(s[j])).to_float();  // NaN for 0xFF
    if (beyond_exact_range(s[j], in[j].x | in[j].y)) atomicOr(unsafe, 1);
    uint4 out;
    four_bf16<E4M3>(in[j].x, scale, out.x, out.y);
    four_bf16<E4M3>(in[j].y, scale, out.z, out.w);
    *reinterpret_cast<uint4*>(dst + 8 * c[j]) = out;
  }
}

// MXFP8 copies with 16-byte aligned lines.
inline bool applies(const gemm_operand& o) noexcept {
  return o.kind == operand_kind::mx && (o.type == mx_type::mxfp8_e4m3 || o.type == mx_type::mxfp8_e5m2) && o.length % 32 == 0 &&
         o.blocks * 32 == o.length && reinterpret_cast<std::uintptr_t>(o.data) % 16 == 0 && o.line_bytes % 16 == 0;
}
inline std::size_t bytes(const gemm_operand& o) noexcept { return applies(o) && !o.bf16_values ? 2 * o.lines * o.length : 0; }

// dst: [o.lines, o.length] bf16 (16-byte aligned); unsafe: an int the caller zeroed. Reads
// o.scales as [o.lines, o.blocks], dense.
inline void launch(const gemm_operand& o, std::uint16_t* dst, int* unsafe, stream_t stream) {
  mxkit::detail::require(applies(o) && !o.bf16_values, "expand::to_bf16: operand is not an MXFP8 copy of codes with 16-byte aligned lines");
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(dst) % 16 == 0, "expand::to_bf16: destination is not 16-byte aligned");
  mxkit::detail::require(o.line_bytes >= o.length, "expand::to_bf16: lines of ", o.line_bytes, " bytes hold no ", o.length, " codes");
  const std::size_t chunks = o.lines * (o.length / 8);
  if (chunks == 0) return;
  const std::size_t grid = (chunks + chunks_per_cta - 1) / chunks_per_cta;
  mxkit::detail::require(grid <= 0x7FFFFFFF, "expand::to_bf16: operand too large");
  if (o.type == mx_type::mxfp8_e4m3)
    mxfp8_kernel<true><<<static_cast<unsigned>(grid), threads, 0, stream>>>(o.data, o.line_bytes, o.scales, o.length, chunks, dst, unsafe);
  else
    mxfp8_kernel<false><<<static_cast<unsigned>(grid), threads, 0, stream>>>(o.data, o.line_bytes, o.scales, o.length, chunks, dst, unsafe);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace to_bf16

// ---- the way back: an operand of bf16 values as its codes -------------------------------------
// An MXFP8 operand held as bf16 values (gemm_operand::bf16_values, as the quantizer writes them
// with values_as_bf16) as [lines, padded length] codes, for every route that reads codes: the
// block-scaled fallback behind the bf16 route's gate, and the paths without a bf16 route. Each
// value divided by its block scale is its code's value exactly (bf16_values::code_of).
namespace from_bf16 {

// Chunk c is values [8 c, 8 c + 8) (16 bytes in) as 8 code bytes; the scales are [lines, blocks]
// dense and the lines a whole number of blocks, so chunk c's scale is scales[c / 4]. A grid of
// at most the resident CTAs strides over the chunks: behind a closed gate (the common case: the
// fallback is rarely wanted) the launch then costs a few microseconds, not a grid sized to the
// operand.
template <bool E4M3>
MXKIT_GLOBAL void __launch_bounds__(threads) codes_kernel(const std::uint16_t* src, const std::uint8_t* scales, std::size_t chunks,
                                                         std::uint8_t* dst, launch_gate gate) {
  if (gate.closed()) return;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * threads;
  for (std::size_t c = static_cast<std::size_t>(blockIdx.x) * threads + threadIdx.x; c < chunks; c += stride) {
    const uint4 in = *reinterpret_cast<const uint4*>(src + 8 * c);
    const unsigned s = scales[c / 4];
    const std::uint32_t w[4] = {in.x, in.y, in.z, in.w};
    std::uint32_t out[2] = {0u, 0u};
    for (int j = 0; j < 8; ++j) {
      const auto bits = static_cast<std::uint16_t>(w[j / 2] >> (16 * (j % 2)));
      out[j / 4] |= static_cast<std::uint32_t>(bf16_values::code_of<E4M3>(bits, s)) << (8 * (j % 4));
    }
    *reinterpret_cast<uint2*>(dst + 8 * c) = make_uint2(out[0], out[1]);
  }
}

inline bool applies(const gemm_operand& o) noexcept {
  return o.kind == operand_kind::mx && o.bf16_values && (o.type == mx_type::mxfp8_e4m3 || o.type == mx_type::mxfp8_e5m2) &&
         o.line_bytes % 64 == 0 && o.line_bytes / 64 == o.blocks && reinterpret_cast<std::uintptr_t>(o.data) % 16 == 0;
}
// Bytes of the codes of o (0 for an operand of codes).
inline std::size_t bytes(const gemm_operand& o) noexcept { return o.bf16_values ? o.lines * (o.line_bytes / 2) : 0; }
// The operand of codes that launch wrote at `codes`.
inline gemm_operand as_codes(const gemm_operand& o, const std::uint8_t* codes) noexcept {
  gemm_operand c = o;
  c.data = codes;
  c.line_bytes = o.line_bytes / 2;
  c.bf16_values = false;
  c.beyond_exact_range = nullptr;
  return c;
}

// dst: bytes(o) bytes, 8-byte aligned.
inline void launch(const gemm_operand& o, std::uint8_t* dst, stream_t stream, launch_gate gate = {}) {
  mxkit::detail::require(applies(o), "expand::from_bf16: operand is not an MXFP8 copy of bf16 values with dense lines of whole blocks");
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(dst) % 8 == 0, "expand::from_bf16: destination is not 8-byte aligned");
  const std::size_t chunks = o.lines * (o.line_bytes / 16);
  if (chunks == 0) return;
  const std::size_t ctas = (chunks + threads - 1) / threads;
  const auto* src = reinterpret_cast<const std::uint16_t*>(o.data);
  if (o.type == mx_type::mxfp8_e4m3)
    codes_kernel<true><<<gpu::detail::persistent_grid<codes_kernel<true>>(threads, ctas), threads, 0, stream>>>(src, o.scales, chunks, dst, gate);
  else
    codes_kernel<false><<<gpu::detail::persistent_grid<codes_kernel<false>>(threads, ctas), threads, 0, stream>>>(src, o.scales, chunks, dst, gate);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace from_bf16

}  // namespace expand
}  // namespace gpu
MXKIT_END_NAMESPACE
