// SPDX-License-Identifier: Apache-2.0
#pragma once
// The NVFP4 quantize pass in the MX quantizer's shape (gpu/quantize/kernel.hpp): teams of 32 lanes
// each own 64-row x 128-byte tiles of the input from load to store, streamed through the team's
// two shared-memory stages with 16-byte asynchronous copies of the raw input (cp.async on sm_80+:
// the next tile lands while this one is quantized), and synchronize only within themselves.
// Columnwise blocks of 16-bit inputs are read as transposed 8 x 8 matrices (ldmatrix .trans on
// NVIDIA: two loads a block, where a float-staged tile costs sixteen reads). Every block still
// goes through nvfp4_quantize / nvfp4_store_block (gpu/quantize/nvfp4_kernel.hpp), so the bytes
// are the host reference's; this file only moves values.
//
// It is the candidate that docs/perf/quantize.md names for the quantize pass, beside the tiled
// kernel of nvfp4_kernel.hpp (CTAs of 256 threads, a float-staged 64 x 64 tile, three CTA
// barriers a tile) until one device call has timed both: the launcher takes either
// (detail::nvfp4_quantize_pass), the public entry points the tiled one, and
// catch2_test_quantize_nvfp4 checks both against the reference.
//
// Lanes and blocks (tile rows 0-63; 16-bit inputs: 64 columns, 8 a 16-byte chunk; float: 32, 4):
//   rowwise     lane = row_blocks x r + b (b < row_blocks = 4 or 2): block b of tile rows
//               r + row_step x n (row_step 8 or 16), steps n < 8 or 4; its 2 or 4 chunks;
//   columnwise  lane = 4 c + q: block q (tile rows 16 q ... 16 q + 15) of tile column 8 n + c,
//               steps n < 8 or 4;
// so the 4 or 2 rowwise blocks of a line, and the 4 columnwise ones, go to adjacent lanes, whose
// 8-byte code stores fill 32 contiguous bytes of the line. 16 x 16 blocks (TwoD) take their
// tile's amax across the 16 lines' lanes with shuffles: a 16-line group is 2 steps (16-bit
// rowwise, and columnwise for every input) or 1 (float rowwise). Steps go in pairs; the last,
// partial round of tiles is split into parts of pairs, as the MX kernel splits it.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/gpu/quantize/nvfp4_kernel.hpp>
#include <mxkit/gpu/quantize/scale_padding.hpp>
#include <mxkit/gpu/quantize/tile.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

// The team tile's geometry: the MX quantizer's 64-row staging (quantize_tile<T, 64>: 128-byte
// rows of 8 swizzled chunks, two stages a team, two teams a CTA) with NVFP4's 16-element blocks.
template <class T>
struct nvfp4_team_tile {
  using staging = quantize_tile<T, 64>;
  static constexpr int team = staging::team, rows = staging::rows, cols = staging::cols;
  static constexpr int elems_per_chunk = staging::elems_per_chunk, chunks_per_row = staging::chunks_per_row;
  static constexpr int chunks = staging::chunks, stages = staging::stages;
  static constexpr int teams_per_cta = staging::teams_per_cta, threads = staging::threads;
  static constexpr int chunks_per_block = nvfp4_block_size / elems_per_chunk;  // 2 or 4
  static constexpr int row_blocks = cols / nvfp4_block_size;                   // rowwise blocks of a tile row: 4 or 2
  static constexpr int row_step = team / row_blocks;                           // tile rows between a lane's rowwise blocks
  static constexpr int col_step = 8;                                           // tile columns between a lane's columnwise blocks
  static constexpr int steps = rows / row_step;                                // 8 or 4
  static constexpr int row_group = nvfp4_block_size / row_step;               // steps of a 16-line rowwise group: 2 or 1
  static constexpr int col_group = nvfp4_block_size / col_step;               // 2
  static_assert(team == 32 && rows == 64 && steps == cols / col_step && steps % 2 == 0);
  static_assert(team == 4 * col_step, "lane = 4 c + q: the four columnwise blocks of a tile column");
};

// CTAs per SM the NVIDIA build is register-capped for, as the MX kernel's: 6 CTAs of 32 KB fill
// Hopper's 228 KB of shared memory.
inline constexpr int nvfp4_team_min_blocks = MXKIT_GPU_CUDA ? 6 : 1;

// The team kernel's parameters: the input with its tile grid, and the copies as the tiled
// kernel's (nvfp4_quantize_params).
template <class T>
struct nvfp4_team_params {
  const T* in;  // [rows, ld]
  std::size_t rows, cols, ld;
  bool vector_loads;  // in and every row start are 16-byte aligned
  std::size_t tiles_m, tiles_k;
  nvfp4_view row, col;
  const float *row_t, *col_t;  // device: each copy's t; null with its copy
  unsigned* amax;              // the input's amax_bits (null: not wanted), zeroed by the launcher
  nvfp4_copy_geometry row_geometry, col_geometry;
};

template <class T>
nvfp4_team_params<T> make_nvfp4_team_params(const nvfp4_quantize_params<T>& q) noexcept {
  using tile = nvfp4_team_tile<T>;
  const nvfp4_tile_input<T>& in = q.in;
  return {in.in,
          in.rows,
          in.cols,
          in.ld,
          in.vector_loads,
          (in.rows + tile::rows - 1) / tile::rows,
          (in.cols + tile::cols - 1) / tile::cols,
          q.row,
          q.col,
          q.row_t,
          q.col_t,
          q.amax,
          q.row_geometry,
          q.col_geometry};
}

// The largest amax_bits over the lanes whose numbers differ only in the bits of First ... Last - 1
// (masks First, 2 First, ... below Last): the lanes of one 16 x 16 tile.
template <int First, int Last>
__device__ inline std::uint32_t team_group_max(std::uint32_t a) noexcept {
  for (int m = First; m < Last; m *= 2) {
    const std::uint32_t o = shfl_xor(a, m);
    a = a > o ? a : o;
  }
  return a;
}

// One lane's work on a staged tile (the stage: 64 rows x 8 chunks, swizzle_chunk<64>'s places),
// as MXKIT_HD steps over an explicit stage and lane number, so that a host loop over the 32 lanes
// runs the kernel's code (tests/gpu/nvfp4_team_host.hpp). The 16 x 16 tiles' amax is the one
// cross-lane step: the kernel passes shuffles (team_group_max) as row_max and col_max, the host
// loop the maxima it gathered.
template <class T, bool Rotate, bool TwoD>
struct nvfp4_team_lane {
  using tile = nvfp4_team_tile<T>;
  static constexpr int tr = tile::rows, epc = tile::elems_per_chunk, cpr = tile::chunks_per_row, cpb = tile::chunks_per_block;
  // The lanes of a 16 x 16 tile differ only in the bits from these masks up (rowwise: the lanes
  // at the same block of their lines, rblk; columnwise: the 8 columns c of a step).
  static constexpr int row_first_mask = tile::row_blocks, col_first_mask = 4;

  nvfp4_team_params<T> p;  // by value: a reference to a kernel parameter would copy it to local memory
  nvfp4_options ro, co;  // the copies' options, the rotation a constant
  nvfp4_scaler row_scaler, col_scaler;
  int lane;

  // Rowwise: block rblk() of tile rows row0() + row_step n. Columnwise: block q() (tile rows
  // 16 q ... 16 q + 15) of tile column 8 n + c().
  MXKIT_HD constexpr int rblk() const noexcept { return lane % tile::row_blocks; }
  MXKIT_HD constexpr int row0() const noexcept { return lane / tile::row_blocks; }
  MXKIT_HD constexpr int q() const noexcept { return lane % 4; }
  MXKIT_HD constexpr int c() const noexcept { return lane / 4; }

  MXKIT_HD void load_row(const uint4* stage, int n, float* x) const noexcept {
    const int row = row0() + n * tile::row_step;
    const int key = swizzle_chunk<tr>(row, rblk() * cpb);  // swizzle_chunk(row, rblk * cpb + j) = key ^ j
    for (int j = 0; j < cpb; ++j) nvfp4_unpack_chunk<T>(stage[row * cpr + (key ^ j)], x + j * epc);
  }

  // On NVIDIA, for 16-bit inputs, a collective of the whole team (ldmatrix): no lane may leave
  // before it.
  MXKIT_HD void load_col(const uint4* stage, int n, float* x) const noexcept {
#if MXKIT_HAS_LDMATRIX
    if constexpr (sizeof(T) == 2) {
      // Lane 8 i + m supplies row m of matrix i: tile row 16 (m / 2) + 8 j + i + 4 (m % 2) of
      // chunk n. Receiver 4 c + q takes rows 2 q and 2 q + 1 of each matrix at column c: rows
      // 8 j + i and 8 j + i + 4 of its block. The rows of a matrix fall on 8 distinct chunk
      // places ((i + 4 s) ^ q), so the loads are free of bank conflicts.
      const int i = lane / 8, m = lane % 8;
      for (int j = 0; j < 2; ++j) {
        const int row = nvfp4_block_size * (m / 2) + 8 * j + i + 4 * (m % 2);
        std::uint32_t mat[4];
        ldmatrix_x4_trans(stage + row * cpr + swizzle_chunk<tr>(row, n), mat);
        for (int s = 0; s < 4; ++s) {
          x[8 * j + s] = load_float(T::from_bits(static_cast<std::uint16_t>(mat[s] & 0xFFFFu)));
          x[8 * j + s + 4] = load_float(T::from_bits(static_cast<std::uint16_t>(mat[s] >> 16)));
        }
      }
      return;
    }
#endif
    // Element by element: the 32-bit word holding it (the chunks' own type, so the host may run
    // this too), then its half for 16-bit inputs.
    const std::uint32_t* words = reinterpret_cast<const std::uint32_t*>(stage);
    const int col = tile::col_step * n + c(), word = (col % epc) * static_cast<int>(sizeof(T)) / 4;
    for (int i = 0; i < nvfp4_block_size; ++i) {
      const int row = nvfp4_block_size * q() + i;
      const std::uint32_t bits = words[(row * cpr + swizzle_chunk<tr>(row, col / epc)) * 4 + word];
      if constexpr (sizeof(T) == 4) {
        x[i] = bit_cast<float>(bits);
      } else {
        x[i] = load_float(T::from_bits(static_cast<std::uint16_t>(bits >> (16 * (col % 2)))));
      }
    }
  }

  MXKIT_HD void fold(const float* x, std::uint32_t& amax) const noexcept {
    if (p.amax)
      for (int i = 0; i < nvfp4_block_size; ++i) amax = amax_bits(amax, x[i]);
  }

  // Step n's block of each copy, stored where it lies in the matrix (a line past it, or a block
  // past the padded line, is not) from the tile at (r0, c0).
  MXKIT_HD void store_row(std::size_t r0, std::size_t c0, int n, const float* x, std::uint32_t a) const noexcept {
    const std::size_t line = r0 + static_cast<std::size_t>(row0() + n * tile::row_step);
    const std::size_t blk = c0 / nvfp4_block_size + static_cast<std::size_t>(rblk());
    if (line < p.rows && blk < p.row_geometry.blocks_per_line) nvfp4_store_block(p.row, p.row_geometry, ro, row_scaler, line, blk, x, a);
  }
  MXKIT_HD void store_col(std::size_t r0, std::size_t c0, int n, const float* x, std::uint32_t a) const noexcept {
    const std::size_t line = c0 + static_cast<std::size_t>(tile::col_step * n + c());
    const std::size_t blk = r0 / nvfp4_block_size + static_cast<std::size_t>(q());
    if (line < p.cols && blk < p.col_geometry.blocks_per_line) nvfp4_store_block(p.col, p.col_geometry, co, col_scaler, line, blk, x, a);
  }

  // Steps 2 u and 2 u + 1 of the tile at (r0, c0) staged in `stage`: both copies' blocks read,
  // rotated, quantized and stored; the input's amax_bits folded into `amax` (rowwise values, or
  // columnwise ones when only that copy is written). row_max and col_max: a 16 x 16 tile's amax
  // from one lane's (TwoD; every lane calls them the same number of times). Inlined into the
  // kernel: as a call, its blocks' arrays would live in local memory.
  template <class RowMax, class ColMax>
  MXKIT_HD __attribute__((always_inline)) void quantize_pair(const uint4* stage, std::size_t r0, std::size_t c0, unsigned u,
                                                             std::uint32_t& amax, RowMax&& row_max, ColMax&& col_max) const {
    const int n = static_cast<int>(2 * u);
    float v[nvfp4_block_size], w[nvfp4_block_size];
    if constexpr (!TwoD) {
      // One block at a time: the rowwise block of each step, then its columnwise block.
      for (int h = 0; h < 2; ++h) {
        if (p.row.data) {
          load_row(stage, n + h, v);
          fold(v, amax);
          nvfp4_rotate_block(v, ro);
          store_row(r0, c0, n + h, v, nvfp4_block_amax_bits(v));
        }
        if (p.col.data) {
          load_col(stage, n + h, v);
          if (!p.row.data) fold(v, amax);
          nvfp4_rotate_block(v, co);
          store_col(r0, c0, n + h, v, nvfp4_block_amax_bits(v));
        }
      }
    } else {
      // Both steps of one copy, then the other's.
      if (p.row.data) {
        load_row(stage, n, v);
        load_row(stage, n + 1, w);
        fold(v, amax);
        fold(w, amax);
        nvfp4_rotate_block(v, ro);
        nvfp4_rotate_block(w, ro);
        std::uint32_t a = nvfp4_block_amax_bits(v), b = nvfp4_block_amax_bits(w);
        if constexpr (tile::row_group == 2) {  // the two steps are one 16-line group
          a = b = row_max(a > b ? a : b);
        } else {  // a group each
          a = row_max(a);
          b = row_max(b);
        }
        store_row(r0, c0, n, v, a);
        store_row(r0, c0, n + 1, w, b);
      }
      if (p.col.data) {
        load_col(stage, n, v);
        load_col(stage, n + 1, w);
        if (!p.row.data) {
          fold(v, amax);
          fold(w, amax);
        }
        nvfp4_rotate_block(v, co);
        nvfp4_rotate_block(w, co);
        static_assert(tile::col_group == 2, "the two steps are one 16-column group");
        const std::uint32_t a = nvfp4_block_amax_bits(v), b = nvfp4_block_amax_bits(w);
        const std::uint32_t t = col_max(a > b ? a : b);
        store_col(r0, c0, n, v, t);
        store_col(r0, c0, n + 1, w, t);
      }
    }
  }
};

template <class T, bool Rotate, bool TwoD>
MXKIT_GLOBAL void __launch_bounds__(nvfp4_team_tile<T>::threads, nvfp4_team_min_blocks)
    nvfp4_team_quantize_kernel(const nvfp4_team_params<T> p) {
  using tile = nvfp4_team_tile<T>;
  using lane_work = nvfp4_team_lane<T, Rotate, TwoD>;
  constexpr int tr = tile::rows, tc = tile::cols, stage_chunks = tile::chunks, stages = tile::stages;
  constexpr unsigned pairs = tile::steps / 2;
  __shared__ uint4 smem[tile::teams_per_cta * stages * stage_chunks];

  const int team = static_cast<int>(threadIdx.x) / tile::team, lane = static_cast<int>(threadIdx.x) % tile::team;
  uint4* const ring = smem + team * stages * stage_chunks;
  const lane_work work{p,
                       nvfp4_kernel_options<Rotate>(p.row.options),
                       nvfp4_kernel_options<Rotate>(p.col.options),
                       nvfp4_scaler{p.row.data ? *p.row_t : 1.0f},
                       nvfp4_scaler{p.col.data ? *p.col_t : 1.0f},
                       lane};
  std::uint32_t amax = 0;

  // Work items (tile_schedule): the last round's tiles split into up to `pairs` items each (a
  // range of step pairs). Both teams of a CTA run the loop the same number of times (on AMD they
  // share a wave64, whose barrier team_sync is).
  const auto sched = tile_schedule<tr, tc, pairs>::make(p.tiles_m, p.tiles_k, tile::teams_per_cta);
  const std::size_t items = sched.items, grid_teams = sched.grid_teams;
  const std::size_t first_item = static_cast<std::size_t>(blockIdx.x) * tile::teams_per_cta;
  auto issue = [&](std::size_t i, int stage, std::size_t& r0, std::size_t& c0) {
    if (i >= items) return;
    sched.origin(sched.tile_of(i), r0, c0);
    copy_tile_in<T, tr>(p.in, p.rows, p.cols, p.ld, p.vector_loads, ring + stage * stage_chunks, r0, c0, lane);
  };
  auto row_max = [](std::uint32_t a) { return team_group_max<lane_work::row_first_mask, tile::team>(a); };
  auto col_max = [](std::uint32_t a) { return team_group_max<lane_work::col_first_mask, tile::team>(a); };

  std::size_t r0 = 0, c0 = 0, next_r0 = 0, next_c0 = 0;
  issue(first_item + static_cast<std::size_t>(team), 0, r0, c0);
  async_commit();
  for (std::size_t base = first_item, k = 0; base < items; base += grid_teams, ++k) {
    const std::size_t item = base + static_cast<std::size_t>(team);
    issue(item + grid_teams, static_cast<int>((k + 1) % stages), next_r0, next_c0);
    async_commit();
    async_wait<stages - 1>();  // this lane's copies of the item's tile have landed
    team_sync();               // and the whole team's
    if (item < items) {
      int pair_begin = 0, pair_end = 0;
      sched.range(item, pair_begin, pair_end);
      const uint4* stage = ring + (k % stages) * stage_chunks;
      for (int u = pair_begin; u < pair_end; ++u) work.quantize_pair(stage, r0, c0, static_cast<unsigned>(u), amax, row_max, col_max);
    }
    team_sync();  // everyone is done with this stage before the next iteration copies into it
    r0 = next_r0;
    c0 = next_c0;
  }
  async_wait<0>();  // no copy may outlive the kernel

  if (p.amax) {
    amax = warp_max(amax);
    if (lane_id() == 0) atomic_max(p.amax, amax);
  }
  // Padding entries of padded scale layouts: zero, written once by the grid.
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * tile::threads;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * tile::threads + threadIdx.x;
  zero_scale_padding(p.row.data ? p.row.scales : nullptr, p.row.scales_layout, p.row_geometry.lines, p.row_geometry.blocks_per_line, first,
                     stride);
  zero_scale_padding(p.col.data ? p.col.scales : nullptr, p.col.scales_layout, p.col_geometry.lines, p.col_geometry.blocks_per_line, first,
                     stride);
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
