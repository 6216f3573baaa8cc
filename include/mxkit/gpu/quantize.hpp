#pragma once
// Fused MX quantization on the GPU, one launch: a row-major [rows, cols] float, bfloat16 or
// float16 matrix (with a leading dimension) is read once and written as the rowwise copy (blocks
// along cols), the columnwise copy (blocks along rows, stored transposed), or both, each with its
// scales in any scale_layout, plus the per-tensor amax. Every block goes through the host's
// quantize_block (optional 16-point Hadamard, amax, scale rule, RNE or stochastic rounding), so
// each byte equals the host reference (ref/quantize.hpp); this file only moves data.
//
// Kernel shape: teams of 32 lanes (a warp; half a wave64), each owning 64- or 128-row x 128-byte
// tiles of the input from load to store (quantize_tile). Tiles stream through the team's two
// shared-memory stages with 16-byte coalesced copies (cp.async on sm_80+: the next tile lands
// while this one is quantized); then each lane quantizes its rowwise blocks (32 columns of a row)
// and columnwise blocks (32 rows of a column) from shared memory, one of each side by side when
// both copies are written (quantize_block_packed's steps), and stores 16 or 32 bytes each.
// Columnwise 16-bit reads are transposed 8x8 matrix loads on NVIDIA. Persistent grid: teams loop
// over tiles (the last, partial round split into parts of tiles) and synchronize only within
// themselves. 16-byte chunks are XOR-swizzled so that every shared-memory access is
// conflict-free.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <mxkit/block/quantize_block.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// One stored MX copy in device memory (non-owning, read-only). data: [lines, line_bytes] as in
// mx_layout; scales: scale_storage_size(scales_layout, lines, blocks_per_line) bytes.
struct mx_device_view {
  mx_layout layout;
  quantize_options options;  // how it was quantized (dequantize undoes the rotation)
  scale_layout scales_layout = scale_layout::row_major;
  const std::uint8_t* data = nullptr;
  const std::uint8_t* scales = nullptr;
};

// What one quantize call writes; a null data pointer skips that copy, a null amax skips it.
struct quantize_outputs {
  std::uint8_t* rowwise_data = nullptr;
  std::uint8_t* rowwise_scales = nullptr;
  scale_layout rowwise_scales_layout = scale_layout::row_major;
  std::uint8_t* columnwise_data = nullptr;
  std::uint8_t* columnwise_scales = nullptr;
  scale_layout columnwise_scales_layout = scale_layout::row_major;
  float* amax = nullptr;  // max |x| over the input (bits of the integer max, as the host's)
};

namespace detail {

// Tile geometry for input type T and output format Fmt. The unit of work is a team of 32 lanes
// (a CUDA warp, half an AMD wave64) that owns Rows x 128-byte tiles (64 bf16/fp16 or 32 float
// columns) from their load to their stores: tiles stream through the team's own two
// shared-memory stages (one quantized while the next is copied in), so teams synchronize only
// within themselves, never across a CTA. Each lane quantizes row_blocks_per_lane rowwise and
// col_blocks_per_lane columnwise blocks of a tile; the blocks of one rowwise line in a tile (2)
// and of one columnwise line (Rows / 32) go to adjacent lanes, so 16-byte stores fill whole
// sectors. Rows: 64 (8 KB tiles, 2 teams and 32 KB per CTA, 12 warps per H200 SM) for FP4 and
// for rotated blocks, whose arithmetic wants the warps; 128 for byte formats without the rotation,
// which are bound by their stores: their columnwise lines then get 128 contiguous bytes a tile
// (16 KB tiles, one warp and 32 KB per CTA on NVIDIA). On the H200 the 128-row tiles took MXFP8
// columnwise from 63 to 69-72 % of copy, but rotated MXFP8 from 55 to 41 % (fp16 input).
template <class Fmt, bool Rotate>
inline constexpr int quantize_tile_rows = Fmt::storage_bits == 4 || Rotate ? 64 : 128;

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
  // which fill 6 x (32 + 1 reserved) KB of the H200's 228 KB of shared memory. For FP4, one-warp
  // CTAs (13 warps/SM) measured 10 % slower; bench_quantize_gpu also times caps of 4 and 8
  // (registers only: shared memory still allows 6).
  static constexpr int min_blocks = MXKIT_GPU_CUDA ? 6 : 1;
  static_assert(rows == 64 || rows == 128);
  static_assert(chunks % team == 0 && row_blocks_per_lane * team == rows * row_blocks &&
                col_blocks_per_lane * team == cols * col_blocks);
};

template <class T>
struct quantize_params {
  const T* in;  // [rows, ld]
  std::size_t rows, cols, ld;
  bool vector_loads;  // in and every row start are 16-byte aligned
  quantize_options row_options, col_options;  // stream already set per copy (stochastic_stream)
  std::uint32_t sign_mask;
  std::uint8_t *row_data, *row_scales, *col_data, *col_scales;
  scale_layout row_layout, col_layout;
  unsigned* amax;  // float bits, atomicMax
  // Set by launch_quantize_kernel: the format picks the tile height and the float-path bounds.
  std::size_t tiles_m, tiles_k;
  mxkit::detail::float_path_bounds bounds;  // of row_options (the copies differ only in their stochastic stream)
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
#if MXKIT_GPU_CUDA && MXKIT_DEVICE_PASS && __CUDA_ARCH__ >= 750
  // This lane supplies row (lane % 8) of matrix lane / 8: receiver q takes matrix rows 2q and
  // 2q + 1, which hold rows i and i + 4 (s = 0, 1) of slice j in its block and column half.
  const int i = lane / 8, r = lane % 8, q = r / 2, s = r % 2, h = q / blocks, b = q % blocks;
  const int chunk = halves * n + h;
  for (int j = 0; j < 4; ++j) {
    const int row = 32 * b + 8 * j + i + 4 * s;
    const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(base + (row * 8 + swizzle_chunk<Rows>(row, chunk)) * 16));
    std::uint32_t m[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(m[0]), "=r"(m[1]), "=r"(m[2]), "=r"(m[3])
                 : "r"(addr));
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

// Stores a block's words and scale where the cursor points, then steps the cursor.
template <class Fmt>
__device__ inline void store_block(block_cursor& c, const std::uint32_t* w, e8m0 scale, std::uint8_t* scales, scale_layout l,
                                   std::size_t lines, std::size_t blocks) {
  store_words<Fmt>(c.data, w);
  scales[l == scale_layout::row_major ? c.line * blocks + c.blk : scale_offset(l, lines, blocks, c.line, c.blk)] = scale.bits();
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
__device__ __attribute__((noinline)) packed_block<Fmt> encode_block_out_of_line(mxkit::detail::block_values x, std::uint32_t amax,
                                                                                 const quantize_options& o, std::uint64_t first_index) {
  packed_block<Fmt> b;
  b.scale = mxkit::detail::encode_block_packed<Fmt>(mxkit::detail::make_front<typename Fmt::element_type>(x.v, amax, o), o,
                                                    first_index, b.words);
  return b;
}

// Rotate = p's options' hadamard and RandomSigns = a nonzero sign mask, as template arguments:
// each variant's block path is straight code, without another variant's values to merge.
template <class Fmt, class T, bool Rotate, bool RandomSigns, int MinBlocks>
__global__ void __launch_bounds__((quantize_tile<T, quantize_tile_rows<Fmt, Rotate>>::threads), MinBlocks)
    quantize_kernel(const quantize_params<T> p) {
  constexpr int Rows = quantize_tile_rows<Fmt, Rotate>;
  using tile = quantize_tile<T, Rows>;
  constexpr int tr = tile::rows, tc = tile::cols, epc = tile::elems_per_chunk, cpr = tile::chunks_per_row;
  constexpr int cpb = tile::chunks_per_block, stages = tile::stages, stage_chunks = tile::chunks;
  constexpr int block_bytes = mx_block_size * Fmt::storage_bits / 8;
  __shared__ uint4 smem[tile::teams_per_cta * stages * stage_chunks];

  const int team = static_cast<int>(threadIdx.x) / tile::team, lane = static_cast<int>(threadIdx.x) % tile::team;
  uint4* const ring = smem + team * stages * stage_chunks;
  const std::size_t row_blocks = (p.cols + mx_block_size - 1) / mx_block_size;  // rowwise blocks per line
  const std::size_t col_blocks = (p.rows + mx_block_size - 1) / mx_block_size;  // columnwise blocks per line
  const std::size_t row_line_bytes = packed_bytes(row_blocks * mx_block_size, Fmt::storage_bits);
  const std::size_t col_line_bytes = packed_bytes(col_blocks * mx_block_size, Fmt::storage_bits);
  std::uint32_t amax = 0;
  quantize_options row_options = p.row_options, col_options = p.col_options;
  row_options.hadamard = col_options.hadamard = Rotate;
  const hadamard_signs signs{RandomSigns ? p.sign_mask : 0u};
  constexpr int value_exp = Rotate ? 2 : 0;
  constexpr int steps = tile::row_blocks_per_lane;  // block steps n of a tile (one rowwise and one columnwise block each)
  static_assert(tile::row_blocks_per_lane == tile::col_blocks_per_lane);

  // Work items: tiles in row-major order over [tiles_m, tiles_k], item i of team t of CTA c
  // being c * teams + t + i * (teams in the grid). The tiles of the last, partial round are split
  // into up to `steps` items each (a range of the block steps n; each part copies in the whole
  // tile, the others' copies come from L2), so that round keeps more teams busy: at 8192x4096
  // bf16 on an H200, 272 leftover tiles over 1584 teams. The loop runs the same number of times
  // for both teams of a CTA (a team past the end idles), so synchronization stays uniform.
  const std::size_t tiles = p.tiles_m * p.tiles_k;
  const std::size_t grid_teams = static_cast<std::size_t>(gridDim.x) * tile::teams_per_cta;
  const std::size_t whole = tiles / grid_teams * grid_teams;  // tiles of the whole rounds
  const unsigned left = static_cast<unsigned>(tiles - whole);
  const unsigned split = left == 0 ? 1u : static_cast<unsigned>(grid_teams / left) < steps ? static_cast<unsigned>(grid_teams / left) : steps;
  const std::size_t items = whole + static_cast<std::size_t>(left) * split;
  auto tile_of = [&](std::size_t i) { return i < whole ? i : whole + static_cast<unsigned>(i - whole) / split; };
  const std::size_t first_item = static_cast<std::size_t>(blockIdx.x) * tile::teams_per_cta;

  // Copy-in: this lane moves chunk lane % 8 of tile rows lane / 8 + 4j.
  const unsigned tiles_k = static_cast<unsigned>(p.tiles_k);  // tiles < 2^32 (make_quantize_params)
  auto origin = [&](std::size_t t, std::size_t& r0, std::size_t& c0) {
    const unsigned m = static_cast<unsigned>(t) / tiles_k;
    r0 = static_cast<std::size_t>(m) * tr;
    c0 = static_cast<std::size_t>(static_cast<unsigned>(t) - m * tiles_k) * tc;
  };
  // Starts copying item i's tile into `stage`; r0 and c0 get its origin, which the item's
  // quantization then reuses (one division per tile, not two).
  auto issue = [&](std::size_t i, int stage, std::size_t& r0, std::size_t& c0) {
    if (i >= items) return;
    uint4* dst = ring + stage * stage_chunks;
    origin(tile_of(i), r0, c0);
    if (p.vector_loads && r0 + tr <= p.rows && c0 + tc <= p.cols) {
      constexpr int row_step = tile::team / cpr;
      const int row0 = lane / cpr, chunk = lane % cpr;
      const T* src = p.in + (r0 + static_cast<std::size_t>(row0)) * p.ld + c0 + static_cast<std::size_t>(chunk * epc);
      // Row row0 + 4j's swizzled chunk is the lane's key XOR a constant: row0 < 4 shares no bit
      // with 4j or with the row's shifted copy in swizzle_chunk, whose key is an XOR of row bits.
      // So the 16 copies cost a pointer step and one XOR each, not the whole swizzle.
      static_assert(row_step == 4);
      const int key = swizzle_chunk<Rows>(row0, chunk);
      uint4* const first = dst + row0 * cpr;
      const std::size_t src_step = static_cast<std::size_t>(row_step) * p.ld;
      for (int j = 0; j < tile::copies_per_lane; ++j, src += src_step)
        async_copy16(first + j * row_step * cpr + (key ^ swizzle_chunk<Rows>(j * row_step, 0)), src);
    } else {
      copy_edge_tile<T, Rows>(p.in, p.rows, p.cols, p.ld, dst, r0, c0, lane);
    }
  };

  std::size_t r0 = 0, c0 = 0, next_r0 = 0, next_c0 = 0;  // origins of the tile quantized now and of the next
  issue(first_item + static_cast<std::size_t>(team), 0, r0, c0);
  async_commit();
  float v[mx_block_size];
  std::uint32_t words[block_words<Fmt>];
  for (std::size_t base = first_item, k = 0; base < items; base += grid_teams, ++k) {
    const std::size_t item = base + static_cast<std::size_t>(team);
    issue(item + grid_teams, static_cast<int>((k + 1) % stages), next_r0, next_c0);
    async_commit();
    async_wait<stages - 1>();  // this lane's copies of the item's tile have landed
    team_sync();               // and the whole team's
    if (item < items) {
      const uint4* stage = ring + (k % stages) * stage_chunks;
      // This item's block steps: all, or part (item - whole) % split of the last round's tiles
      // (the divisions only there).
      int n_begin = 0, n_end = steps;
      if (item >= whole) {
        const unsigned part = static_cast<unsigned>(item - whole) % split;
        n_begin = static_cast<int>(part * steps / split);
        n_end = static_cast<int>((part + 1) * steps / split);
      }
      // Rows and columns of this tile inside the matrix (all of them but at the bottom and
      // right edges); blocks outside are padding and not stored.
      const int tile_rows = p.rows - r0 < static_cast<std::size_t>(tr) ? static_cast<int>(p.rows - r0) : tr;
      const int tile_cols = p.cols - c0 < static_cast<std::size_t>(tc) ? static_cast<int>(p.cols - c0) : tc;

      // Rowwise: this lane's block n is block rblk of tile row row0 + n * row_step.
      constexpr int row_step = tile::team / tile::row_blocks;
      const int rblk = lane % tile::row_blocks, row0 = lane / tile::row_blocks;
      const std::size_t row_blk = c0 / mx_block_size + static_cast<std::size_t>(rblk);
      const std::size_t row_line0 = r0 + static_cast<std::size_t>(row0);
      auto load_row = [&](int n, float* v) {
        const int row = row0 + n * row_step;
        const int key = swizzle_chunk<Rows>(row, rblk * cpb);  // swizzle_chunk(row, rblk * cpb + j) = key ^ j
        for (int j = 0; j < cpb; ++j) unpack_chunk<T>(stage[row * cpr + (key ^ j)], v + j * epc);
      };
      block_cursor rc{p.row_data ? p.row_data + row_line0 * row_line_bytes + row_blk * block_bytes : nullptr,
                      row_step * row_line_bytes, row_line0, static_cast<std::size_t>(row_step), row_blk};
      if (n_begin) rc.advance(n_begin);  // only in a split tile
      auto store_row = [&](const std::uint32_t* w, e8m0 scale) {
        store_block<Fmt>(rc, w, scale, p.row_scales, p.row_layout, p.rows, row_blocks);
      };

      // Columnwise: block cb of columns col0 + n * col_step (read_column_block16; float: lane =
      // col_blocks * c + b takes column c, single-word reads).
      constexpr int cbs = tile::col_blocks;
      const int cb = lane % cbs;
      const int col0 = sizeof(T) == 2 ? 8 * ((lane % 4) / cbs) + lane / 4 : lane / cbs;
      const std::size_t col_blk = r0 / mx_block_size + static_cast<std::size_t>(cb);
      const std::size_t col_line0 = c0 + static_cast<std::size_t>(col0);
      auto load_col = [&](int n, float* v) {  // 16-bit: the whole team, before any lane leaves
        if constexpr (sizeof(T) == 2) {
          read_column_block16<T, Rows>(stage, n, lane, v);
        } else {
          const int col = col0 + tile::col_step * n;
          const unsigned char* b = reinterpret_cast<const unsigned char*>(stage) + (col % epc) * static_cast<int>(sizeof(T));
          for (int i = 0; i < mx_block_size; ++i) {
            const int row = mx_block_size * cb + i;
            v[i] = load_float(*reinterpret_cast<const T*>(b + (row * cpr + swizzle_chunk<Rows>(row, col / epc)) * 16));
          }
        }
      };
      block_cursor cc{p.col_data ? p.col_data + col_line0 * col_line_bytes + col_blk * block_bytes : nullptr,
                      tile::col_step * col_line_bytes, col_line0, static_cast<std::size_t>(tile::col_step), col_blk};
      if (n_begin) cc.advance(n_begin);
      auto store_col = [&](const std::uint32_t* w, e8m0 scale) {
        store_block<Fmt>(cc, w, scale, p.col_scales, p.col_layout, p.cols, col_blocks);
      };

      if (p.row_data && p.col_data && tile_rows == tr && tile_cols == tc) {
        // Both copies of an interior tile: rowwise block n and columnwise block n side by side,
        // two independent chains of arithmetic for the scheduler, with one float-path test for
        // both (quantize_block_packed's steps, in the same order for each block).
        float w[mx_block_size];
        std::uint32_t col_words[block_words<Fmt>];
        for (int n = n_begin; n < n_end; ++n) {
          load_row(n, v);
          load_col(n, w);
          if (p.amax)
            for (int i = 0; i < mx_block_size; ++i) amax = amax_bits(amax, v[i]);
          const std::uint32_t row_amax = mxkit::detail::transform_block(v, row_options, signs);
          const std::uint32_t col_amax = mxkit::detail::transform_block(w, col_options, signs);
          e8m0 row_scale, col_scale;
          // Both tests evaluated (no short-circuit branch): one predicate.
          const unsigned fast = static_cast<unsigned>(mxkit::detail::on_float_path(row_amax, p.bounds)) &
                                static_cast<unsigned>(mxkit::detail::on_float_path(col_amax, p.bounds));
          if (fast) {
            const int row_exp = mxkit::detail::float_path_element_exponent(row_amax, row_options, p.bounds);
            const int col_exp = mxkit::detail::float_path_element_exponent(col_amax, col_options, p.bounds);
            mxkit::detail::encode_float_path_packed<Fmt>(v, row_exp, words);
            mxkit::detail::encode_float_path_packed<Fmt>(w, col_exp, col_words);
            row_scale = e8m0::from_exponent(row_exp - value_exp);
            col_scale = e8m0::from_exponent(col_exp - value_exp);
          } else {
            auto general = [&](const float* x, std::uint32_t a, const quantize_options& o, std::uint64_t index, std::uint32_t* out) {
              mxkit::detail::block_values values;
              for (int i = 0; i < mx_block_size; ++i) values.v[i] = x[i];
              const packed_block<Fmt> b = encode_block_out_of_line<Fmt>(values, a, o, index);
              for (int j = 0; j < block_words<Fmt>; ++j) out[j] = b.words[j];
              return b.scale;
            };
            row_scale = general(v, row_amax, row_options, rc.first_index(row_blocks), words);
            col_scale = general(w, col_amax, col_options, cc.first_index(col_blocks), col_words);
          }
          store_row(words, row_scale);
          store_col(col_words, col_scale);
        }
      } else {
        if (p.row_data) {
          for (int n = n_begin; n < n_end; ++n) {
            if (rblk * mx_block_size < tile_cols && row0 + n * row_step < tile_rows) {
              load_row(n, v);
              if (p.amax)
                for (int i = 0; i < mx_block_size; ++i) amax = amax_bits(amax, v[i]);
              store_row(words, quantize_block_packed<Fmt>(v, row_options, signs, rc.first_index(row_blocks), words));
            } else {
              rc.advance(1);
            }
          }
        }
        if (p.col_data) {
          for (int n = n_begin; n < n_end; ++n) {
            load_col(n, v);
            if (cb * mx_block_size < tile_rows && col0 + tile::col_step * n < tile_cols) {
              if (p.amax && !p.row_data)
                for (int i = 0; i < mx_block_size; ++i) amax = amax_bits(amax, v[i]);
              store_col(words, quantize_block_packed<Fmt>(v, col_options, signs, cc.first_index(col_blocks), words));
            } else {
              cc.advance(1);
            }
          }
        }
      }
    }
    team_sync();  // everyone is done with this stage before the next iteration copies into it
    r0 = next_r0;
    c0 = next_c0;
  }
  async_wait<0>();  // no copy may outlive the kernel (the last issues were for tiles past the end: none)

  if (p.amax) {
    amax = warp_max(amax);
    if (lane_id() == 0) atomic_max(p.amax, amax);
  }
  // Padding entries of padded scale layouts: zero, written once by the grid.
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * tile::threads;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * tile::threads + threadIdx.x;
  auto zero_padding = [&](std::uint8_t* scales, scale_layout l, std::size_t lines, std::size_t blocks) {
    if (!scales || l == scale_layout::row_major) return;
    const scale_extent e = padded_scale_extent(l, lines, blocks);
    const std::size_t extra = e.blocks - blocks;
    const std::size_t right = lines * extra;  // lines x [blocks, padded blocks)
    const std::size_t total = right + (e.lines - lines) * e.blocks;
    for (std::size_t i = first; i < total; i += stride) {
      const std::size_t line = i < right ? i / extra : lines + (i - right) / e.blocks;
      const std::size_t blk = i < right ? blocks + i % extra : (i - right) % e.blocks;
      scales[scale_offset(l, lines, blocks, line, blk)] = 0;
    }
  };
  zero_padding(p.row_data ? p.row_scales : nullptr, p.row_layout, p.rows, row_blocks);
  zero_padding(p.col_data ? p.col_scales : nullptr, p.col_layout, p.cols, col_blocks);
}

// Persistent grid: as many CTAs of `threads` threads (the kernel's one block size) as fit on the
// device at once, or fewer if there are fewer tiles. The occupancy query runs once per kernel
// and device: a quantize call is a few microseconds of GPU time, and the query took about as
// long on the host.
template <auto Kernel>
inline int persistent_grid(int threads, std::size_t tiles) {
  constexpr int max_devices = 64;
  static std::atomic<int> known[max_devices] = {};  // resident CTAs per device, 0 until queried
  int dev = 0;
  MXKIT_GPU_CHECK(get_device(&dev));
  int resident = dev >= 0 && dev < max_devices ? known[dev].load(std::memory_order_relaxed) : 0;
  if (resident == 0) {
    int sms = 0, per_sm = 0;
    MXKIT_GPU_CHECK(get_multiprocessor_count(&sms, dev));
    MXKIT_GPU_CHECK(max_active_blocks_per_multiprocessor(&per_sm, Kernel, threads, 0));
    resident = (per_sm < 1 ? 1 : per_sm) * sms;
    if (dev >= 0 && dev < max_devices) known[dev].store(resident, std::memory_order_relaxed);
  }
  return static_cast<int>(tiles < static_cast<std::size_t>(resident) ? tiles : static_cast<std::size_t>(resident));
}

inline void check_output_pointer(const std::uint8_t* p, const char* what) {
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(p) % 16 == 0, "gpu::quantize: ", what,
                         " must be 16-byte aligned (element rows are written 16 bytes at a time)");
}

}  // namespace detail

namespace detail {
// Checks the arguments and fills the kernel parameters; false: nothing to launch.
template <class U>
bool make_quantize_params(matrix_view<const U> in, const quantize_options& options, const quantize_outputs& out,
                          stream_t stream, quantize_params<U>& p) {
  mxkit::detail::check_matrix(in, "gpu::quantize:");
  if (out.amax) MXKIT_GPU_CHECK(memset_async(out.amax, 0, sizeof(float), stream));
  if (in.rows == 0 || in.cols == 0) return false;  // nothing to write, padding included
  mxkit::detail::require(out.rowwise_data || out.columnwise_data, "gpu::quantize: no output copy requested");
  mxkit::detail::require(!out.rowwise_data || out.rowwise_scales, "gpu::quantize: rowwise data without rowwise scales");
  mxkit::detail::require(!out.columnwise_data || out.columnwise_scales, "gpu::quantize: columnwise data without columnwise scales");
  if (out.rowwise_data) check_output_pointer(out.rowwise_data, "rowwise data");
  if (out.columnwise_data) check_output_pointer(out.columnwise_data, "columnwise data");
  // Tiles of the smallest height: at most 2^32 of any height (the kernel numbers them in 32 bits).
  using tile = quantize_tile<U, 64>;
  mxkit::detail::require((in.rows + tile::rows - 1) / tile::rows * ((in.cols + tile::cols - 1) / tile::cols) < (std::size_t{1} << 32),
                         "gpu::quantize: ", in.rows, " x ", in.cols, " needs 2^32 tiles or more (64 x ", tile::cols, " each)");
  p = {};
  p.in = in.data;
  p.rows = in.rows;
  p.cols = in.cols;
  p.ld = in.stride();
  p.vector_loads = reinterpret_cast<std::uintptr_t>(in.data) % 16 == 0 && (p.ld * sizeof(U)) % 16 == 0;
  p.row_options = options;
  p.row_options.stream = stochastic_stream(options, block_axis::rowwise);
  p.col_options = options;
  p.col_options.stream = stochastic_stream(options, block_axis::columnwise);
  p.sign_mask = options.sign_mask();
  p.row_data = out.rowwise_data;
  p.row_scales = out.rowwise_scales;
  p.row_layout = out.rowwise_scales_layout;
  p.col_data = out.columnwise_data;
  p.col_scales = out.columnwise_scales;
  p.col_layout = out.columnwise_scales_layout;
  p.amax = reinterpret_cast<unsigned*>(out.amax);
  return true;
}

// The tile grid is the variant's (quantize_tile_rows).
template <class Fmt, class U, bool Rotate, bool RandomSigns, int MinBlocks>
void launch_quantize_kernel(quantize_params<U> p, stream_t stream) {
  using tile = quantize_tile<U, quantize_tile_rows<Fmt, Rotate>>;
  p.tiles_m = (p.rows + tile::rows - 1) / tile::rows;
  p.tiles_k = (p.cols + tile::cols - 1) / tile::cols;
  quantize_options o = p.row_options;
  o.hadamard = Rotate;
  p.bounds = mxkit::detail::float_path_bounds_for<typename Fmt::element_type>(o);
  constexpr auto kernel = quantize_kernel<Fmt, U, Rotate, RandomSigns, MinBlocks>;
  const int grid = persistent_grid<kernel>(tile::threads, p.tiles_m * p.tiles_k);
  kernel<<<grid, tile::threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}
template <class Fmt, class U, int MinBlocks = quantize_tile<U, 64>::min_blocks>
void launch_quantize(const quantize_params<U>& p, stream_t stream) {
  if (!p.row_options.hadamard) launch_quantize_kernel<Fmt, U, false, false, MinBlocks>(p, stream);
  else if (p.sign_mask) launch_quantize_kernel<Fmt, U, true, true, MinBlocks>(p, stream);
  else launch_quantize_kernel<Fmt, U, true, false, MinBlocks>(p, stream);
}
}  // namespace detail

// Quantizes `in` (device memory) to MX format `type` as `options` say, into the copies named in
// `out` (device memory, sizes as mx_layout and scale_storage_size give). Asynchronous on `stream`;
// out.amax, when given, is zeroed on the stream first. Throws std::invalid_argument on bad
// arguments and gpu::error on a runtime failure.
template <class T>
  requires quantizer_input<T>
void quantize(matrix_view<const T> in, mx_type type, const quantize_options& options, const quantize_outputs& out,
              stream_t stream = nullptr) {
  using U = std::remove_const_t<T>;
  mxkit::detail::check_layout({type, block_axis::rowwise, in.rows, in.cols}, "gpu::quantize");  // known type, sizes that fit
  mxkit::detail::check_layout({type, block_axis::columnwise, in.rows, in.cols}, "gpu::quantize");
  mxkit::detail::check_options(options, "gpu::quantize");
  detail::quantize_params<U> p;
  if (!detail::make_quantize_params<U>({in.data, in.rows, in.cols, in.ld}, options, out, stream, p)) return;
  visit_mx_type(type, [&](auto fmt) { detail::launch_quantize<decltype(fmt), U>(p, stream); });
}

// Owning device copy: data, scales (in any layout) and how it was quantized.
class device_mx_tensor {
 public:
  device_mx_tensor() = default;
  device_mx_tensor(mx_layout layout, const quantize_options& options, scale_layout scales_layout = scale_layout::row_major)
      : layout_(layout),
        options_(options),
        scales_layout_(scales_layout),
        data_(layout.data_bytes()),
        scales_(scale_storage_size(scales_layout, layout.lines(), layout.blocks_per_line())) {}

  const mx_layout& layout() const noexcept { return layout_; }
  const quantize_options& options() const noexcept { return options_; }
  scale_layout scales_layout() const noexcept { return scales_layout_; }
  device_buffer<std::uint8_t>& data() noexcept { return data_; }
  device_buffer<std::uint8_t>& scales() noexcept { return scales_; }
  const device_buffer<std::uint8_t>& data() const noexcept { return data_; }
  const device_buffer<std::uint8_t>& scales() const noexcept { return scales_; }
  mx_device_view view() const noexcept { return {layout_, options_, scales_layout_, data_.data(), scales_.data()}; }
  // The copy as mxkit's GEMMs take it (gpu/gemm: row-major scales); device pointers.
  mx_const_view gemm_view() const {
    mxkit::detail::require(scales_layout_ == scale_layout::row_major, "device_mx_tensor::gemm_view: scales are stored ",
                           name_of(scales_layout_), "; mxkit's GEMMs read row_major scales");
    return {layout_, options_, data_.data(), scales_.data()};
  }

  // Host copy with row-major scales (converted from the stored layout). Synchronous.
  mx_tensor to_host(stream_t s = nullptr) const {
    mx_tensor h(layout_, options_);
    h.set_data(data_.to_host(s));
    const std::vector<std::uint8_t> stored = scales_.to_host(s);
    h.set_scales(to_row_major_scales(stored.data(), layout_.lines(), layout_.blocks_per_line(), scales_layout_));
    return h;
  }

 private:
  mx_layout layout_;
  quantize_options options_;
  scale_layout scales_layout_ = scale_layout::row_major;
  device_buffer<std::uint8_t> data_;
  device_buffer<std::uint8_t> scales_;
};

// The pair the training recipes consume, allocated for `in`'s shape and quantized in one launch.
struct device_mx_pair {
  device_mx_tensor rowwise, columnwise;
};

template <class T>
  requires quantizer_input<T>
device_mx_pair quantize_both(matrix_view<const T> in, mx_type type, const quantize_options& options = {},
                             scale_layout scales_layout = scale_layout::row_major, float* amax = nullptr,
                             stream_t stream = nullptr) {
  device_mx_pair r{device_mx_tensor({type, block_axis::rowwise, in.rows, in.cols}, options, scales_layout),
                   device_mx_tensor({type, block_axis::columnwise, in.rows, in.cols}, options, scales_layout)};
  quantize(in, type, options,
           {r.rowwise.data().data(), r.rowwise.scales().data(), scales_layout, r.columnwise.data().data(),
            r.columnwise.scales().data(), scales_layout, amax},
           stream);
  return r;
}

}  // namespace gpu
MXKIT_END_NAMESPACE
