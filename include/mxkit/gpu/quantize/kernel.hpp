// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fused MX quantization kernel (launched by gpu/quantize.hpp; a call for the rowwise copy alone
// takes gpu/quantize/rowwise_kernel.hpp instead), one launch: a row-major [rows, cols] float,
// bfloat16 or float16 matrix (with a leading dimension) is read once and written as the rowwise
// copy (blocks along cols), the columnwise copy (blocks along rows, stored transposed), or both, each with its
// scales in any scale_layout, plus the per-tensor amax; MXFP8 copies may hold the elements' bf16
// values instead of their codes (quantize_outputs::values_as_bf16). Every block goes through the host's
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
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/gpu/quantize/params.hpp>
#include <mxkit/gpu/quantize/scale_padding.hpp>
#include <mxkit/gpu/quantize/tile.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

// Rotate = p's options' hadamard and RandomSigns = a nonzero sign mask, as template arguments:
// each variant's block path is straight code, without another variant's values to merge.
// Values: MXFP8 stored as bf16 values (p.values_bf16), a variant of its own, so that the codes'
// kernels carry no branch for it.
template <class Fmt, class T, bool Rotate, bool RandomSigns, int MinBlocks, bool Values = false>
MXKIT_GLOBAL void __launch_bounds__((quantize_tile<T, quantize_tile_rows<Fmt, Rotate>>::threads), MinBlocks)
    quantize_kernel(const quantize_params<T> p) {
  static_assert(Fmt::block_size == mx_block_size, "the quantizer's tiles specialize on 32-element MX blocks (quantize_tile)");
  static_assert(!Values || (takes_bf16_values<Fmt> && !Rotate), "bf16 values are for MXFP8 without the rotation");
  constexpr int Rows = quantize_tile_rows<Fmt, Rotate>;
  using tile = quantize_tile<T, Rows>;
  constexpr int tr = tile::rows, tc = tile::cols, epc = tile::elems_per_chunk, cpr = tile::chunks_per_row;
  constexpr int cpb = tile::chunks_per_block, stages = tile::stages, stage_chunks = tile::chunks;
  // Bytes of a block and of a line in each copy: the packed codes, or (Values) two bytes an element.
  constexpr int block_bytes = Values ? 2 * mx_block_size : mx_block_size * Fmt::storage_bits / 8;
  __shared__ uint4 smem[tile::teams_per_cta * stages * stage_chunks];

  const int team = static_cast<int>(threadIdx.x) / tile::team, lane = static_cast<int>(threadIdx.x) % tile::team;
  uint4* const ring = smem + team * stages * stage_chunks;
  const std::size_t row_blocks = (p.cols + mx_block_size - 1) / mx_block_size;  // rowwise blocks per line
  const std::size_t col_blocks = (p.rows + mx_block_size - 1) / mx_block_size;  // columnwise blocks per line
  const std::size_t row_line_bytes = row_blocks * static_cast<std::size_t>(block_bytes);
  const std::size_t col_line_bytes = col_blocks * static_cast<std::size_t>(block_bytes);
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
  // tile, the others' copies come from L2), so that round keeps more teams busy (a few hundred
  // leftover tiles can otherwise meet well over a thousand teams). The loop runs the same number of times
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
        if constexpr (Values) store_block_values<Fmt>(rc, w, scale, p.row_scales, p.row_layout, p.rows, row_blocks, p.beyond_exact_range);
        else store_block<Fmt>(rc, w, scale, p.row_scales, p.row_layout, p.rows, row_blocks);
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
        if constexpr (Values) store_block_values<Fmt>(cc, w, scale, p.col_scales, p.col_layout, p.cols, col_blocks, p.beyond_exact_range);
        else store_block<Fmt>(cc, w, scale, p.col_scales, p.col_layout, p.cols, col_blocks);
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
          const std::uint32_t row_amax = mxkit::detail::transform_block<mx_block_size>(v, row_options, signs);
          const std::uint32_t col_amax = mxkit::detail::transform_block<mx_block_size>(w, col_options, signs);
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
              mxkit::detail::block_values<mx_block_size> values;
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
  zero_scale_padding(p.row_data ? p.row_scales : nullptr, p.row_layout, p.rows, row_blocks, first, stride);
  zero_scale_padding(p.col_data ? p.col_scales : nullptr, p.col_layout, p.cols, col_blocks, first, stride);
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
