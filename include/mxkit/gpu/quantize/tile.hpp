// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tile collective of the fused quantizer (gpu/quantize/kernel.hpp): the tile geometry, the
// XOR swizzle of the team's shared-memory stages, the copy-in of edge tiles, the transposed reads
// of columnwise blocks, and the cursors that place each block's bytes and scale. Teams of 32
// lanes (a CUDA warp, half an AMD wave64) each own one tile from load to store.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/bf16_values.hpp>
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

// Tile geometry for input type T and output format Fmt. The unit of work is a team of 32 lanes
// (a CUDA warp, half an AMD wave64) that owns Rows x 128-byte tiles (64 bf16/fp16 or 32 float
// columns) from their load to their stores: tiles stream through the team's own two
// shared-memory stages (one quantized while the next is copied in), so teams synchronize only
// within themselves, never across a CTA. Each lane quantizes row_blocks_per_lane rowwise and
// col_blocks_per_lane columnwise blocks of a tile; the blocks of one rowwise line in a tile (2)
// and of one columnwise line (Rows / 32) go to adjacent lanes, so 16-byte stores fill whole
// sectors. Rows: 64 (8 KB tiles, 2 teams and 32 KB per CTA) for FP4 and for rotated blocks,
// whose arithmetic wants more warps per SM; 128 for byte formats without the rotation, which are
// bound by their stores: their columnwise lines then get 128 contiguous bytes a tile (16 KB
// tiles, one warp and 32 KB per CTA on NVIDIA). The measurements behind both choices are in
// docs/perf/quantize.md (v6). MXFP8 copies held as bf16 values keep the byte formats' 128 rows:
// 64 (twice the warps, the same 128 contiguous bytes a columnwise line) measured slower.
template <class Fmt, bool Rotate>
inline constexpr int quantize_tile_rows = Fmt::storage_bits == 4 || Rotate ? 64 : 128;

// The tile's geometry specializes on the MX block, k = 32 (mx_block_size): two or one rowwise
// blocks per 128-byte tile row, whole 32-row columnwise blocks per tile. A format of another block
// size needs its own tile shape (quantize_kernel refuses it at compile time).
template <class T, int Rows>
struct quantize_tile {
  static constexpr int team = 32;
  static constexpr int rows = Rows;
  static constexpr int row_bytes = 128;
  static constexpr int cols = row_bytes / static_cast<int>(sizeof(T));
  static constexpr int elems_per_chunk = 16 / static_cast<int>(sizeof(T));
  static constexpr int chunks_per_row = row_bytes / 16;  // 8: all 32 banks
  static constexpr int chunks = rows * chunks_per_row;
  static constexpr int chunks_per_block = mx_block_size / elems_per_chunk;  // 4 (16-bit) or 8 (float)
  static constexpr int row_blocks = cols / mx_block_size;  // rowwise blocks per tile row: 2 or 1
  static constexpr int col_blocks = rows / mx_block_size;  // columnwise blocks per tile column: 2 or 4
  static constexpr int row_blocks_per_lane = rows * row_blocks / team;
  static constexpr int col_blocks_per_lane = cols * col_blocks / team;
  static constexpr int col_step = team / col_blocks;  // columns between a lane's columnwise blocks
  static constexpr int copies_per_lane = chunks / team;
  static constexpr int stages = 2;
  // 64 rows: two teams (64 threads: two warps, one wave64 on AMD). 128 rows: one warp (a wave64
  // is still two teams, 64 KB of LDS).
  static constexpr int teams_per_cta = rows == 64 ? 2 : warp_size / team;
  static constexpr int threads = team * teams_per_cta;
  // CTAs per SM the NVIDIA build is register-capped for: 6 (12 or 6 warps, 128 registers used),
  // which fill 6 x (32 + 1 reserved) KB of Hopper's 228 KB of shared memory (one-warp CTAs and
  // other caps were measured slower: docs/perf/quantize.md; bench_quantize_gpu times caps of 4
  // and 8).
  static constexpr int min_blocks = MXKIT_GPU_CUDA ? 6 : 1;
  static_assert(rows == 64 || rows == 128);
  static_assert(chunks % team == 0 && row_blocks_per_lane * team == rows * row_blocks &&
                col_blocks_per_lane * team == cols * col_blocks);
};

// Shared-memory position (in 16-byte chunks, 8 per 128-byte row) of chunk `chunk` of tile row
// `row`: XOR-swizzled so that every access pattern of the kernel hits 8 distinct 16-byte bank
// groups per 8 lanes: the copy-in (8 lanes, one row's 8 chunks), the rowwise reads (8 lanes: 4
// rows x 2 blocks, or 8 rows) and each transposed 8x8 matrix read of the columnwise blocks (rows
// 32b + 8j + i + 4s over the receivers' b, h and s: row bit 2 carries s, and the block's row
// bits fold onto bits 0-1 next to h: bit 4 for 64-row tiles, bits 5-6 for 128-row tiles).
template <int Rows>
MXKIT_HD constexpr int swizzle_chunk(int row, int chunk) {
  return chunk ^ ((row ^ (row >> (Rows == 64 ? 4 : 5))) & 7);
}

// Elements of one 16-byte chunk as floats.
template <class T>
__device__ inline void unpack_chunk(uint4 c, float* v) {
  const std::uint32_t w[4] = {c.x, c.y, c.z, c.w};
  if constexpr (sizeof(T) == 4) {
    for (int k = 0; k < 4; ++k) v[k] = mxkit::bit_cast<float>(w[k]);
  } else {  // two 16-bit elements a word, the first in the low half
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = load_float(T::from_bits(static_cast<std::uint16_t>(w[k] & 0xFFFFu)));
      v[2 * k + 1] = load_float(T::from_bits(static_cast<std::uint16_t>(w[k] >> 16)));
    }
  }
}

template <class Fmt>
__device__ inline void store_words(std::uint8_t* dst, const std::uint32_t* w) {
  for (int j = 0; j < block_words<Fmt>; j += 4) reinterpret_cast<uint4*>(dst)[j / 4] = make_uint4(w[j], w[j + 1], w[j + 2], w[j + 3]);
}

// An edge tile (or rows that are not 16-byte aligned): this lane's chunks element by element,
// zero outside the matrix (block padding). Out of line: its index arithmetic stays off the
// interior tiles' path.
template <class T, int Rows>
__device__ __attribute__((noinline)) void copy_edge_tile(const T* in, std::size_t rows, std::size_t cols, std::size_t ld, uint4* dst,
                                                         std::size_t r0, std::size_t c0, int lane) {
  using tile = quantize_tile<T, Rows>;
  constexpr int epc = tile::elems_per_chunk, cpr = tile::chunks_per_row, row_step = tile::team / cpr;
  const int row0 = lane / cpr, chunk = lane % cpr;
  for (int j = 0; j < tile::copies_per_lane; ++j) {
    const int row = row0 + j * row_step;
    const T* s = in + (r0 + static_cast<std::size_t>(row)) * ld + c0 + static_cast<std::size_t>(chunk * epc);
    union {
      uint4 v;
      T e[epc];
    } u{};
    for (int k = 0; k < epc; ++k)
      if (r0 + static_cast<std::size_t>(row) < rows && c0 + static_cast<std::size_t>(chunk * epc + k) < cols) u.e[k] = s[k];
    dst[row * cpr + swizzle_chunk<Rows>(row, chunk)] = u.v;
  }
}

// The 32 values of this lane's columnwise block (tile rows 32b ... 32b + 31, b = lane % blocks)
// of its column in column set n, in row order. 16-bit inputs: lane = 4c + q; with 2 blocks per
// tile column q = 2h + b and the lane reads column 16n + 8h + c, with 4 blocks q = b and column
// 8n + c. On NVIDIA four transposed 8x8 matrix loads (ldmatrix .trans) fetch a whole 32-row x
// (8 x 4 / blocks)-column set for the team, each lane receiving its column's rows (i, i + 4) of
// 8-row slice j as one word (every lane points its matrix row at the row that achieves this);
// elsewhere each lane reads the same elements one by one.
template <class T, int Rows>
__device__ inline void read_column_block16(const uint4* stage, int n, int lane, float* v) {
  constexpr int blocks = Rows / mx_block_size, halves = 4 / blocks;
  const unsigned char* base = reinterpret_cast<const unsigned char*>(stage);
#if MXKIT_HAS_LDMATRIX
  // This lane supplies row (lane % 8) of matrix lane / 8: receiver q takes matrix rows 2q and
  // 2q + 1, which hold rows i and i + 4 (s = 0, 1) of slice j in its block and column half.
  const int i = lane / 8, r = lane % 8, q = r / 2, s = r % 2, h = q / blocks, b = q % blocks;
  const int chunk = halves * n + h;
  for (int j = 0; j < 4; ++j) {
    const int row = 32 * b + 8 * j + i + 4 * s;
    std::uint32_t m[4];
    ldmatrix_x4_trans(base + (row * 8 + swizzle_chunk<Rows>(row, chunk)) * 16, m);
    for (int k = 0; k < 4; ++k) {
      v[8 * j + k] = load_float(T::from_bits(static_cast<std::uint16_t>(m[k] & 0xFFFFu)));
      v[8 * j + k + 4] = load_float(T::from_bits(static_cast<std::uint16_t>(m[k] >> 16)));
    }
  }
#else
  const int c = lane / 4, q = lane % 4, h = q / blocks, b = q % blocks;
  const int col = 8 * (halves * n + h) + c;
  for (int k = 0; k < mx_block_size; ++k) {
    const int row = 32 * b + k;
    v[k] = load_float(*reinterpret_cast<const T*>(base + (row * 8 + swizzle_chunk<Rows>(row, col / 8)) * 16 + (col % 8) * 2));
  }
#endif
}

// Where a lane's successive blocks of one copy go: the data pointer and the line, advanced by
// one step of the lane's blocks at a time, and the block's place in the line (the scale's place
// follows from line and block).
struct block_cursor {
  std::uint8_t* data;  // null: that copy is not written
  std::size_t data_step;
  std::size_t line;
  std::size_t line_step;
  std::size_t blk;
  __device__ void advance(int n) {
    if (data) data += static_cast<std::size_t>(n) * data_step;
    line += static_cast<std::size_t>(n) * line_step;
  }
  // The number of the block's first element in its copy (stochastic rounding's counter).
  __device__ std::size_t first_index(std::size_t blocks) const { return (line * blocks + blk) * mx_block_size; }
};

// The scale byte of block `blk` of line `line` in a copy's scales.
__device__ inline void store_scale(std::uint8_t* scales, scale_layout l, std::size_t lines, std::size_t blocks, std::size_t line,
                                   std::size_t blk, e8m0 scale) {
  scales[l == scale_layout::row_major ? line * blocks + blk : scale_offset(l, lines, blocks, line, blk)] = scale.bits();
}

// Stores a block's words and scale where the cursor points, then steps the cursor.
template <class Fmt>
__device__ inline void store_block(block_cursor& c, const std::uint32_t* w, e8m0 scale, std::uint8_t* scales, scale_layout l,
                                   std::size_t lines, std::size_t blocks) {
  store_words<Fmt>(c.data, w);
  store_scale(scales, l, lines, blocks, c.line, c.blk, scale);
  c.advance(1);
}

// The formats whose copies may hold bf16 values (quantize_outputs::values_as_bf16): MXFP8.
template <class Fmt>
inline constexpr bool takes_bf16_values = Fmt::type == mx_type::mxfp8_e4m3 || Fmt::type == mx_type::mxfp8_e5m2;

// A block of MXFP8 codes as their bf16 values (block/bf16_values.hpp), four 16-byte chunks;
// raises `beyond` for a block the bf16 product cannot take exactly.
template <class Fmt>
__device__ inline void block_values(const std::uint32_t* w, e8m0 scale, uint4* v, int* beyond) {
  static_assert(takes_bf16_values<Fmt>, "bf16 values are for MXFP8");
  constexpr bool e4m3_codes = Fmt::type == mx_type::mxfp8_e4m3;
  const float s = scale.to_float();  // NaN for 0xFF
  std::uint32_t codes_or = 0;
  for (int j = 0; j < 8; ++j) codes_or |= w[j];
  if (bf16_values::beyond_exact_range(scale.bits(), codes_or)) atomicOr(beyond, 1);
  for (int j = 0; j < 4; ++j) {
    bf16_values::four_bf16<e4m3_codes>(w[2 * j], s, v[j].x, v[j].y);
    bf16_values::four_bf16<e4m3_codes>(w[2 * j + 1], s, v[j].z, v[j].w);
  }
}

// Stores a block of MXFP8 codes as their bf16 values (64 bytes) and its scale where the cursor
// points, raises `beyond` for a block the bf16 product cannot take exactly, then steps the cursor.
template <class Fmt>
__device__ inline void store_block_values(block_cursor& c, const std::uint32_t* w, e8m0 scale, std::uint8_t* scales, scale_layout l,
                                          std::size_t lines, std::size_t blocks, int* beyond) {
  uint4 v[4];
  block_values<Fmt>(w, scale, v, beyond);
  uint4* dst = reinterpret_cast<uint4*>(c.data);
  for (int j = 0; j < 4; ++j) dst[j] = v[j];
  store_scale(scales, l, lines, blocks, c.line, c.blk, scale);
  c.advance(1);
}

// A block off the float path, or next to one: quantize_block_packed's second half from the
// transformed values and their amax. Out of line, so that the hot loop stays small; values in
// and words out by value, so that the caller's arrays can stay in registers.
template <class Fmt>
struct packed_block {
  std::uint32_t words[block_words<Fmt>];
  e8m0 scale;
};
template <class Fmt>
__device__ __attribute__((noinline)) packed_block<Fmt> encode_block_out_of_line(mxkit::detail::block_values<Fmt::block_size> x,
                                                                                 std::uint32_t amax,
                                                                                 const quantize_options& o, std::uint64_t first_index) {
  packed_block<Fmt> b;
  b.scale = mxkit::detail::encode_block_packed<Fmt>(mxkit::detail::make_front<Fmt>(x.v, amax, o), o,
                                                    first_index, b.words);
  return b;
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
