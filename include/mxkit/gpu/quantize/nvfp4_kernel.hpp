// SPDX-License-Identifier: Apache-2.0
#pragma once
// The NVFP4 quantizer's kernels (launched by gpu/quantize_nvfp4.hpp). The per-tensor fp32 scale
// needs the whole copy's amax before any block is quantized, so the work is two passes over the
// input, each reading it once for both copies (rowwise and columnwise) with a one-thread kernel
// between them:
//   nvfp4_amax_kernel          the largest finite |x| of the values each copy quantizes (rotated
//                              ones when the options rotate: block/nvfp4_scale.hpp's rule for the
//                              tensor scale; without the rotation both copies' amax is the
//                              input's) and optionally the input's amax as gpu::quantize writes it
//                              (amax_bits: NaN above Inf above every finite value); float bits,
//                              warp maximum then one atomicMax per warp and value;
//   nvfp4_zero_kernel          one thread: zeroes the accumulators below (the tensor-scale floats
//                              and the amax), one launch rather than a memset each;
//   nvfp4_tensor_scale_kernel  one thread: those bits to each copy's tensor scale
//                              (nvfp4_tensor_scale), or the caller's given one or given amax's,
//                              in the same float;
//   nvfp4_quantize_kernel      both copies' blocks through quantize_nvfp4_block with
//                              nvfp4_scaler{t}, t read from device memory (no host
//                              synchronization between the passes).
// So each byte is the host reference's (ref/nvfp4_quantize.hpp): the rounding rules live in
// block/nvfp4_block.hpp and block/nvfp4_scale.hpp only; this file moves values.
//
// Shape: CTAs of 256 threads loop over 64 x 64-element tiles of the input (persistent grid; the
// quantize pass in the reverse order of the amax pass, so that it starts with the tiles that pass
// read last, which a large L2 may still hold: the second read then costs less than a whole one). A
// tile is read with 16-byte vector loads (rows aligned: whole tiles; elsewhere element by
// element, zero past the matrix: the block padding), the next tile's loads issued before this one
// is quantized (a register double buffer), and staged as floats in shared memory, whose 16-byte
// chunks are XOR-swizzled (nvfp4_smem_chunk) so that the staging stores, the rowwise reads (four
// 16-byte reads a block) and the columnwise reads (a float per lane) are free of bank conflicts.
// Thread i then owns rowwise block (tile row i / 4, block i % 4) and columnwise block (tile column
// i / 4, block i % 4): the four blocks of a line in the tile go to adjacent threads, so each copy's
// codes leave as 32 contiguous bytes per line (8 a thread) and its scales as 4 contiguous ones in
// the row-major layout. A thread reads, rotates (H16 . D, in registers), quantizes and stores its
// rowwise block, then its columnwise block: one block's values live at a time, which keeps the
// registers down to a few CTAs per SM. For 16 x 16 blocks each thread's block amaxes go through
// shared memory to the 16 threads of their 16 x 16 tile (16-aligned inside the 64 x 64 one), and
// after that barrier the blocks are read and rotated again from the staged tile. Rounding to
// nearest even, the common case, divides each element through its block's reciprocal in five
// FMAs and codes it with the MX blocks' E2M1 encoder; stochastic rounding (Philox bits per four
// elements) rounds the same quotients in the block quantizer's loop, inlined with its mode a
// constant (block/nvfp4_reciprocal.hpp: both the same bytes as quantize_nvfp4_block); the other
// roundings call quantize_nvfp4_block out of line.
// The amax pass is the same tile walk: without the rotation it only folds the loaded values; with
// it it stages the tile and rotates each block as the quantize pass does. Options that change the
// code path (rotation, 16 x 16 blocks) are template arguments, so the common kernels carry no dead
// branch.
//
// The steps of one thread on one tile are MXKIT_HD functions (nvfp4_load_tile, nvfp4_stage_tile,
// nvfp4_tile_block_amax, nvfp4_tile_finish, nvfp4_amax_rotated, nvfp4_fold_chunks) over an explicit
// shared-memory array, and the kernels only sequence them between barriers: a host loop over the
// 256 thread numbers of each tile, one step at a time, runs the kernels' code
// (tests/gpu/nvfp4_tile_host.hpp does, against ref::quantize).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/block/nvfp4_reciprocal.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/gpu/quantize/scale_padding.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int nvfp4_threads = 256;  // threads per CTA of the amax and quantize kernels
inline constexpr int nvfp4_tile = 64;      // rows and columns of a tile
inline constexpr int nvfp4_tile_blocks = nvfp4_tile / nvfp4_block_size;  // blocks of a tile line: 4
inline constexpr int nvfp4_tile_chunks = nvfp4_tile * nvfp4_tile / 4;    // 16-byte float chunks of a staged tile
static_assert(nvfp4_threads == nvfp4_tile * nvfp4_tile_blocks, "one rowwise and one columnwise block per thread and tile");

// Loads of one thread per tile: 16-byte chunks of the input, 8 (16-bit) or 4 (float) elements each.
template <class T>
struct nvfp4_tile_loads {
  static constexpr int elems = 16 / static_cast<int>(sizeof(T));    // elements of a chunk
  static constexpr int per_row = nvfp4_tile / elems;                // chunks of a tile row: 8 or 16
  static constexpr int count = nvfp4_tile * per_row / nvfp4_threads;  // chunks a thread loads: 2 or 4
  static_assert(count * nvfp4_threads == nvfp4_tile * per_row);
};

// The input as the tile kernels read it.
template <class T>
struct nvfp4_tile_input {
  const T* in;  // [rows, ld]
  std::size_t rows, cols, ld;
  bool vector_loads;  // in and every row start are 16-byte aligned
  std::size_t tiles_k, tiles;  // tiles along cols, tiles in all (row-major order)

  // In 32-bit arithmetic (a 64-bit division is a long routine on a GPU): a matrix of 2^32 tiles
  // would hold 2^44 elements.
  MXKIT_HD constexpr void origin(std::size_t t, std::size_t& r0, std::size_t& c0) const noexcept {
    const std::uint32_t m = static_cast<std::uint32_t>(t) / static_cast<std::uint32_t>(tiles_k);
    r0 = static_cast<std::size_t>(m) * nvfp4_tile;
    c0 = static_cast<std::size_t>(static_cast<std::uint32_t>(t) - m * static_cast<std::uint32_t>(tiles_k)) * nvfp4_tile;
  }
};

template <class T>
nvfp4_tile_input<T> make_nvfp4_tile_input(matrix_view<const T> in) noexcept {
  const std::size_t tiles_m = (in.rows + nvfp4_tile - 1) / nvfp4_tile, tiles_k = (in.cols + nvfp4_tile - 1) / nvfp4_tile;
  const std::size_t ld = in.stride();  // a view's ld 0 means cols
  const bool aligned = reinterpret_cast<std::uintptr_t>(in.data) % 16 == 0 && ld * sizeof(T) % 16 == 0;
  return {in.data, in.rows, in.cols, ld, aligned, tiles_k, tiles_m * tiles_k};
}

// Where float chunk c4 (columns 4 c4 ... 4 c4 + 3) of staged tile row `row` lies, in chunks. Row
// bit 0 and the low two bits of row / 16, XORed with the half-row c4 / 8, permute the chunk within
// its half-row, so that each group of 8 lanes whose 16-byte accesses share a cycle hits 8 distinct
// 4-bank groups: the staging (one tile row's 8 input chunks; 16-bit inputs store their two float
// chunks in the order nvfp4_stage_tile gives), the rowwise reads (tile rows 2k and 2k + 1, blocks
// 0-3: c4 = 4 block + j) and, per float, the columnwise reads (8 columns x rows 16 b + i, b = 0-3).
MXKIT_HD constexpr int nvfp4_smem_chunk(int row, int c4) noexcept {
  return row * (nvfp4_tile / 4) + (c4 ^ ((row & 1) | ((((row >> 4) ^ (c4 >> 3)) & 3) << 1)));
}

// The chunks of tile t this thread loads (chunk q = thread + 256 k: tile row q / per_row, chunk
// q % per_row of it), zero past the matrix.
template <class T>
MXKIT_HD void nvfp4_load_tile(const nvfp4_tile_input<T>& p, std::size_t t, int thread, uint4* chunks) noexcept {
  using L = nvfp4_tile_loads<T>;
  std::size_t r0 = 0, c0 = 0;
  p.origin(t, r0, c0);
  const bool whole = p.vector_loads && r0 + nvfp4_tile <= p.rows && c0 + nvfp4_tile <= p.cols;
  for (int k = 0; k < L::count; ++k) {
    const int q = thread + nvfp4_threads * k, row = q / L::per_row, col = q % L::per_row * L::elems;
    const std::size_t r = r0 + static_cast<std::size_t>(row), c = c0 + static_cast<std::size_t>(col);
    if (whole) {
      chunks[k] = *reinterpret_cast<const uint4*>(p.in + r * p.ld + c);
    } else {
      std::uint32_t w[4] = {0, 0, 0, 0};
      const T* src = r < p.rows ? p.in + r * p.ld + c : p.in;  // not read past the rows
      for (int e = 0; e < L::elems; ++e)
        if (r < p.rows && c + static_cast<std::size_t>(e) < p.cols) {
          if constexpr (sizeof(T) == 4) {
            w[e] = bit_cast<std::uint32_t>(src[e]);
          } else {
            w[e / 2] |= static_cast<std::uint32_t>(src[e].bits()) << (16 * (e % 2));
          }
        }
      chunks[k] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

// Elements of one input chunk as floats (16-bit: two a word, the first in the low half).
template <class T>
MXKIT_HD void nvfp4_unpack_chunk(const uint4& c, float* v) noexcept {
  const std::uint32_t w[4] = {c.x, c.y, c.z, c.w};
  if constexpr (sizeof(T) == 4) {
    for (int k = 0; k < 4; ++k) v[k] = bit_cast<float>(w[k]);
  } else {
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = load_float(T::from_bits(static_cast<std::uint16_t>(w[k] & 0xFFFFu)));
      v[2 * k + 1] = load_float(T::from_bits(static_cast<std::uint16_t>(w[k] >> 16)));
    }
  }
}

// Stores this thread's loaded chunks into the staged tile (floats, nvfp4_smem_chunk's places);
// folds their amax_bits into `all` when `fold`.
template <class T>
MXKIT_HD void nvfp4_stage_tile(const uint4* chunks, int thread, float4* smem, bool fold, std::uint32_t& all) noexcept {
  using L = nvfp4_tile_loads<T>;
  for (int k = 0; k < L::count; ++k) {
    const int q = thread + nvfp4_threads * k, row = q / L::per_row, s = q % L::per_row;
    float v[L::elems];
    nvfp4_unpack_chunk<T>(chunks[k], v);
    if (fold)
      for (int e = 0; e < L::elems; ++e) all = amax_bits(all, v[e]);
    if constexpr (L::elems == 4) {
      smem[nvfp4_smem_chunk(row, s)] = make_float4(v[0], v[1], v[2], v[3]);
    } else {  // float chunks 2s and 2s + 1, the odd one first for odd s (conflict-free: nvfp4_smem_chunk)
      const float4 lo = make_float4(v[0], v[1], v[2], v[3]), hi = make_float4(v[4], v[5], v[6], v[7]);
      const bool odd = (s & 1) != 0;
      smem[nvfp4_smem_chunk(row, 2 * s + (odd ? 1 : 0))] = odd ? hi : lo;
      smem[nvfp4_smem_chunk(row, 2 * s + (odd ? 0 : 1))] = odd ? lo : hi;
    }
  }
}

// Folds the amax of loaded chunks without staging them: their amax_bits into `all` when `fold`,
// and the largest finite |x| (the tensor scale's amax without the rotation).
template <class T>
MXKIT_HD void nvfp4_fold_chunks(const uint4* chunks, std::uint32_t& finite, bool fold, std::uint32_t& all) noexcept {
  using L = nvfp4_tile_loads<T>;
  for (int k = 0; k < L::count; ++k) {
    float v[L::elems];
    nvfp4_unpack_chunk<T>(chunks[k], v);
    for (int e = 0; e < L::elems; ++e) {
      if (fold) all = amax_bits(all, v[e]);
      const std::uint32_t b = abs_bits(v[e]);
      if (b < 0x7F800000u && b > finite) finite = b;
    }
  }
}

MXKIT_HD constexpr void nvfp4_fold_finite(const float* v, std::uint32_t& finite) noexcept {
  for (int i = 0; i < nvfp4_block_size; ++i) {
    const std::uint32_t b = abs_bits(v[i]);
    if (b < 0x7F800000u && b > finite) finite = b;
  }
}

// This thread's block of a staged tile, rotated when the options rotate: rowwise, block `part` of
// tile row `line` (four 16-byte reads); columnwise, block `part` of tile column `line` (a float a
// row), with line = thread / 4 and part = thread % 4.
MXKIT_HD inline void nvfp4_read_block(const float4* smem, int thread, bool rowwise, const nvfp4_options& o, float* v) noexcept {
  const int line = thread / nvfp4_tile_blocks, part = thread % nvfp4_tile_blocks;
  if (rowwise) {
    for (int j = 0; j < 4; ++j) {
      const float4 f = smem[nvfp4_smem_chunk(line, 4 * part + j)];
      v[4 * j] = f.x;
      v[4 * j + 1] = f.y;
      v[4 * j + 2] = f.z;
      v[4 * j + 3] = f.w;
    }
  } else {
    const float* s = reinterpret_cast<const float*>(smem);
    for (int i = 0; i < nvfp4_block_size; ++i) v[i] = s[4 * nvfp4_smem_chunk(nvfp4_block_size * part + i, line / 4) + line % 4];
  }
  nvfp4_rotate_block(v, o);
}

// 16 x 16 blocks, step one: the amax_bits of this thread's blocks (those of the copies wanted)
// into tile_amax ([2][256] in shared memory: [0][thread] rowwise, [1][thread] columnwise), for
// nvfp4_tile_finish after a barrier.
MXKIT_HD inline void nvfp4_tile_block_amax(const float4* smem, int thread, const nvfp4_options& o, bool rowwise, bool columnwise,
                                           std::uint32_t* tile_amax) noexcept {
  float v[nvfp4_block_size];
  if (rowwise) {
    nvfp4_read_block(smem, thread, true, o, v);
    tile_amax[thread] = nvfp4_block_amax_bits(v);
  }
  if (columnwise) {
    nvfp4_read_block(smem, thread, false, o, v);
    tile_amax[nvfp4_threads + thread] = nvfp4_block_amax_bits(v);
  }
}

// The largest of the block amaxes of this thread's 16 x 16 tile in one copy's [256] amaxes: the
// threads of tile lines 16 g ... 16 g + 15 at the same block (the host's gather_nvfp4_group:
// lines past the matrix are zeros, amax 0, as if the tile spanned the lines there are).
MXKIT_HD inline std::uint32_t nvfp4_tile_amax(const std::uint32_t* amax, int thread) noexcept {
  const int line = thread / nvfp4_tile_blocks, part = thread % nvfp4_tile_blocks;
  const int first = line / nvfp4_block_size * nvfp4_block_size;
  std::uint32_t a = 0;
  for (int k = 0; k < nvfp4_block_size; ++k) {
    const std::uint32_t b = amax[(first + k) * nvfp4_tile_blocks + part];
    a = a > b ? a : b;
  }
  return a;
}

// quantize_nvfp4_block off the common paths (toward zero, nearest away; nearest-even blocks off
// the reciprocal path: NaN, Inf, extreme scales), packed: out of line, values in by value, so that
// its loop over the run-time modes does not move the caller's arrays to local memory.
struct nvfp4_block_values {
  float v[nvfp4_block_size];
};
MXKIT_HD inline __attribute__((noinline)) nvfp4_packed_block nvfp4_quantize_out_of_line(nvfp4_block_values x, std::uint32_t amax,
                                                                                        nvfp4_scaler scaler, nvfp4_options o,
                                                                                        std::uint64_t first_index) noexcept {
  return pack_nvfp4_block(quantize_nvfp4_block(x.v, amax, scaler, o, first_index));
}

// quantize_nvfp4_block, packed, with the rounding a constant on the common paths, nearest even
// and stochastic, both through the block's reciprocal (block/nvfp4_reciprocal.hpp: no division an
// element); the rest out of line.
MXKIT_HD inline nvfp4_packed_block nvfp4_quantize(const float* v, std::uint32_t amax, const nvfp4_reciprocal_scaler& scaler,
                                                  const nvfp4_options& o, std::uint64_t first_index) noexcept {
  if (o.round == rounding::nearest_even) {
    const nvfp4_reciprocal_block b = nvfp4_reciprocal_block::make(amax, scaler);
    if (b.path) {
      nvfp4_packed_block p{b.scale, {}};
      b.encode_nearest_even(v, p.words);
      return p;
    }
  } else if (o.round == rounding::stochastic) {
    // Stochastic rounding inline, its mode a constant: no call and no other mode's code. A block's
    // first index is a multiple of 16 (lines padded to whole blocks); written as a multiple of 4,
    // the compiler sees it and keeps only the one-Philox-call-per-four-elements path.
    nvfp4_options sr = o;
    sr.round = rounding::stochastic;
    return pack_nvfp4_block(quantize_nvfp4_block_by_reciprocal(v, amax, scaler, sr, first_index / 4 * 4));
  }
  nvfp4_block_values x;
  for (int i = 0; i < nvfp4_block_size; ++i) x.v[i] = v[i];
  return nvfp4_quantize_out_of_line(x, amax, scaler.scaler, o, first_index);
}

// One copy's addressing as the quantize kernel uses it, found on the host when the kernel's
// parameters are made, so that a block reads four numbers instead of deriving them. It was made
// when the layout's accessors divided by the format's run-time block size, a long 64-bit routine
// on a GPU, several times a block (docs/perf/quantize.md); they shift since block_layout
// (tensor/block_layout.hpp), and whether the kernel could read the layout directly as fast has not
// been measured.
struct nvfp4_copy_geometry {
  std::size_t lines = 0, blocks_per_line = 0, padded_length = 0, line_bytes = 0;

  MXKIT_HD static constexpr nvfp4_copy_geometry of(const block_layout& l) noexcept {
    return {l.lines(), l.blocks_per_line(), l.padded_length(), l.line_bytes()};
  }
  // nvfp4_view::scale_index with these numbers.
  MXKIT_HD constexpr std::size_t scale_index(scale_layout sl, std::size_t line, std::size_t blk) const noexcept {
    return sl == scale_layout::row_major ? line * blocks_per_line + blk : scale_offset(sl, lines, blocks_per_line, line, blk);
  }
};

// Quantizes values v (rotated) of block blk of `line` of copy c (addressed by g) under `scaler`
// and options o (c's, the rotation a constant), amax as quantize_nvfp4_block takes it, and stores
// its 8 code bytes and its scale.
MXKIT_HD inline void nvfp4_store_block(const nvfp4_view& c, const nvfp4_copy_geometry& g, const nvfp4_options& o,
                                       const nvfp4_reciprocal_scaler& scaler, std::size_t line, std::size_t blk, const float* v,
                                       std::uint32_t amax) noexcept {
  // Stochastic rounding numbers element (line, pos) line * padded_length + pos, as the host.
  const nvfp4_packed_block b = nvfp4_quantize(v, amax, scaler, o, line * g.padded_length + blk * nvfp4_block_size);
  c.scales[g.scale_index(c.scales_layout, line, blk)] = b.scale.bits();
  // The block's 16 codes are 8 whole bytes of its line, stored at once: line_bytes is a multiple
  // of 8 and the launcher checks the data's alignment.
  *reinterpret_cast<uint2*>(c.data + line * g.line_bytes + blk * (nvfp4_block_size / 2)) = make_uint2(b.words[0], b.words[1]);
}

// What the quantize kernel writes: each copy (data null: not written; options with the copy's
// stochastic stream) and its tensor scale in device memory.
template <class T>
struct nvfp4_quantize_params {
  nvfp4_tile_input<T> in;
  nvfp4_view row, col;
  const float *row_t, *col_t;  // device: each copy's t (nvfp4_tensor_scale_kernel's); null with its copy
  unsigned* amax;              // the input's amax_bits (null: not wanted), zeroed by the launcher
  nvfp4_copy_geometry row_geometry = nvfp4_copy_geometry::of(row.layout), col_geometry = nvfp4_copy_geometry::of(col.layout);
};

// Quantizes and stores this thread's blocks of staged tile t that lie in the matrix (a line past
// the matrix, or a block past the padded line, is not stored), one copy after the other, each
// block read and rotated again from the tile. ro, co: the copies' options (the streams theirs, the
// rotation nvfp4_kernel_options'). tile_amax: nvfp4_tile_block_amax's, read after the barrier
// (16 x 16 blocks), or null (1 x 16 blocks: each block's own amax).
template <class T>
MXKIT_HD void nvfp4_tile_finish(const nvfp4_quantize_params<T>& p, const nvfp4_options& ro, const nvfp4_options& co,
                                const nvfp4_reciprocal_scaler& row_scaler, const nvfp4_reciprocal_scaler& col_scaler, std::size_t t, int thread,
                                const float4* smem, const std::uint32_t* tile_amax) noexcept {
  std::size_t r0 = 0, c0 = 0;
  p.in.origin(t, r0, c0);
  const std::size_t line = static_cast<std::size_t>(thread / nvfp4_tile_blocks), part = static_cast<std::size_t>(thread % nvfp4_tile_blocks);
  float v[nvfp4_block_size];
  if (p.row.data) {
    const std::size_t r = r0 + line, blk = c0 / nvfp4_block_size + part;
    if (r < p.in.rows && blk < p.row_geometry.blocks_per_line) {
      nvfp4_read_block(smem, thread, true, ro, v);
      nvfp4_store_block(p.row, p.row_geometry, ro, row_scaler, r, blk, v, tile_amax ? nvfp4_tile_amax(tile_amax, thread) : nvfp4_block_amax_bits(v));
    }
  }
  if (p.col.data) {
    const std::size_t c = c0 + line, blk = r0 / nvfp4_block_size + part;
    if (c < p.in.cols && blk < p.col_geometry.blocks_per_line) {
      nvfp4_read_block(smem, thread, false, co, v);
      nvfp4_store_block(p.col, p.col_geometry, co, col_scaler, c, blk, v,
                        tile_amax ? nvfp4_tile_amax(tile_amax + nvfp4_threads, thread) : nvfp4_block_amax_bits(v));
    }
  }
}

// Options as the kernels apply them: the rotation fixed at compile time (its branch folds away).
template <bool Rotate>
MXKIT_HD constexpr nvfp4_options nvfp4_kernel_options(nvfp4_options o) noexcept {
  o.hadamard = Rotate;
  return o;
}

// Rotate = the options rotate, TwoD = 16 x 16 blocks. Steps k = blockIdx.x, + gridDim.x, ...: the
// same number for every thread of a CTA, so the barriers are uniform. Step k quantizes tile
// tiles - 1 - k: the reverse of the amax pass's order, so the tiles that pass read last, which a
// large L2 may still hold, are read first.
template <class T, bool Rotate, bool TwoD>
MXKIT_GLOBAL void __launch_bounds__(nvfp4_threads) nvfp4_quantize_kernel(const nvfp4_quantize_params<T> p) {
  using L = nvfp4_tile_loads<T>;
  __shared__ float4 smem[nvfp4_tile_chunks];
  __shared__ std::uint32_t tile_amax[TwoD ? 2 * nvfp4_threads : 1];
  const int thread = static_cast<int>(threadIdx.x);
  // Each copy's scaler with its tensor scale's reciprocal, found once (nvfp4_reciprocal_scaler).
  const nvfp4_reciprocal_scaler row_scaler = nvfp4_reciprocal_scaler::of({p.row.data ? *p.row_t : 1.0f}),
                                col_scaler = nvfp4_reciprocal_scaler::of({p.col.data ? *p.col_t : 1.0f});
  const nvfp4_options ro = nvfp4_kernel_options<Rotate>(p.row.options), co = nvfp4_kernel_options<Rotate>(p.col.options);
  const std::size_t last = p.in.tiles - 1;
  std::uint32_t all = 0;
  uint4 cur[L::count], next[L::count];
  std::size_t k = blockIdx.x;
  if (k < p.in.tiles) nvfp4_load_tile(p.in, last - k, thread, cur);
  for (; k < p.in.tiles; k += gridDim.x) {
    nvfp4_stage_tile<T>(cur, thread, smem, p.amax != nullptr, all);
    sync_threads();
    const std::size_t n = k + gridDim.x;
    if (n < p.in.tiles) nvfp4_load_tile(p.in, last - n, thread, next);  // in flight while this tile is quantized
    if constexpr (TwoD) {
      nvfp4_tile_block_amax(smem, thread, ro, p.row.data != nullptr, p.col.data != nullptr, tile_amax);
      sync_threads();
    }
    nvfp4_tile_finish(p, ro, co, row_scaler, col_scaler, last - k, thread, smem, TwoD ? tile_amax : nullptr);
    sync_threads();  // everyone is done with this tile before the next is staged
    for (int j = 0; j < L::count; ++j) cur[j] = next[j];
  }
  if (p.amax) {
    all = warp_max(all);
    if (lane_id() == 0) atomic_max(p.amax, all);
  }
  // Padding entries of padded scale layouts: zero, written once by the grid.
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * nvfp4_threads;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * nvfp4_threads + threadIdx.x;
  zero_scale_padding(p.row.data ? p.row.scales : nullptr, p.row.scales_layout, p.row_geometry.lines, p.row_geometry.blocks_per_line, first,
                     stride);
  zero_scale_padding(p.col.data ? p.col.scales : nullptr, p.col.scales_layout, p.col_geometry.lines, p.col_geometry.blocks_per_line, first,
                     stride);
}

// The amax pass: each copy's largest finite |x| after the rotation into *row_amax and *col_amax
// (float bits; null: that copy's not wanted) and the input's amax_bits into *input_amax (null: not
// wanted), all zeroed by the launcher.
template <class T>
struct nvfp4_amax_params {
  nvfp4_tile_input<T> in;
  nvfp4_options options;  // the rotation's
  unsigned *row_amax, *col_amax, *input_amax;
};

// One thread's part of staged tile t of the amax pass with the rotation: its wanted blocks read
// and rotated as the quantize pass does, their finite values folded.
MXKIT_HD inline void nvfp4_amax_rotated(const float4* smem, int thread, const nvfp4_options& o, bool rowwise, bool columnwise,
                                        std::uint32_t& row_finite, std::uint32_t& col_finite) noexcept {
  float v[nvfp4_block_size];
  if (rowwise) {
    nvfp4_read_block(smem, thread, true, o, v);
    nvfp4_fold_finite(v, row_finite);
  }
  if (columnwise) {
    nvfp4_read_block(smem, thread, false, o, v);
    nvfp4_fold_finite(v, col_finite);
  }
}

template <class T, bool Rotate>
MXKIT_GLOBAL void __launch_bounds__(nvfp4_threads) nvfp4_amax_kernel(const nvfp4_amax_params<T> p) {
  using L = nvfp4_tile_loads<T>;
  __shared__ float4 smem[Rotate ? nvfp4_tile_chunks : 1];
  const int thread = static_cast<int>(threadIdx.x);
  const nvfp4_options o = nvfp4_kernel_options<Rotate>(p.options);
  std::uint32_t row_finite = 0, col_finite = 0, all = 0;
  uint4 cur[L::count], next[L::count];
  std::size_t t = blockIdx.x;
  if (t < p.in.tiles) nvfp4_load_tile(p.in, t, thread, cur);
  for (; t < p.in.tiles; t += gridDim.x) {
    const std::size_t n = t + gridDim.x;
    if constexpr (Rotate) {
      nvfp4_stage_tile<T>(cur, thread, smem, p.input_amax != nullptr, all);
      sync_threads();
      if (n < p.in.tiles) nvfp4_load_tile(p.in, n, thread, next);
      nvfp4_amax_rotated(smem, thread, o, p.row_amax != nullptr, p.col_amax != nullptr, row_finite, col_finite);
      sync_threads();
    } else {
      if (n < p.in.tiles) nvfp4_load_tile(p.in, n, thread, next);
      nvfp4_fold_chunks<T>(cur, row_finite, p.input_amax != nullptr, all);
    }
    for (int k = 0; k < L::count; ++k) cur[k] = next[k];
  }
  if constexpr (!Rotate) col_finite = row_finite;  // both copies quantize the input's values
  // Every thread of the CTA reaches the reductions (no early exit above).
  row_finite = warp_max(row_finite);
  col_finite = warp_max(col_finite);
  all = warp_max(all);
  if (lane_id() == 0) {
    if (p.row_amax) atomic_max(p.row_amax, row_finite);
    if (p.col_amax) atomic_max(p.col_amax, col_finite);
    if (p.input_amax) atomic_max(p.input_amax, all);
  }
}

// Zeroes each non-null float (the amax accumulators of the passes), one launch for all three.
template <class F>
MXKIT_GLOBAL void nvfp4_zero_kernel(F* a, F* b, F* c) {
  static_assert(std::is_same_v<F, float>, "the accumulators are fp32 values");
  F* const ps[3] = {a, b, c};
  for (F* x : ps)
    if (x) *x = 0.0f;
}

// Each non-null *t = given when given (a valid tensor scale, checked on the host), else the tensor
// scale of *amax when there is one (a whole tensor's, gpu::nvfp4_tensor_scale_source), else of the
// amax whose bits nvfp4_amax_kernel left in *t. A template (F = float), as every kernel in a
// header not compiled into the kernel library: a translation unit that includes it without
// launching it then holds no unused internal function (clang's -Wunneeded-internal-declaration).
template <class F>
MXKIT_GLOBAL void nvfp4_tensor_scale_kernel(F* row_t, F* col_t, F given, const F* amax) {
  static_assert(std::is_same_v<F, float>, "the tensor scale is an fp32 value");
  const F from_amax = amax ? nvfp4_tensor_scale(*amax) : 0.0f;  // read before any write: amax may be one of the outputs
  F* const ts[2] = {row_t, col_t};
  for (F* t : ts)
    if (t) *t = given > 0.0f ? given : amax ? from_amax : nvfp4_tensor_scale(bit_cast<float>(*reinterpret_cast<const std::uint32_t*>(t)));
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
