// SPDX-License-Identifier: Apache-2.0
#pragma once
// The NVFP4 quantize pass's team kernel (gpu/quantize/nvfp4_team_kernel.hpp) run on the host: a
// lane's work on a staged tile is nvfp4_team_lane's MXKIT_HD steps, so a loop over the 32 lanes of
// a team, tile by tile and step pair by step pair, computes what the kernel computes. What the
// host cannot run is replaced by its meaning: the staging by the tile's chunks placed where the
// copy-in puts them (swizzle_chunk<64>, zero outside the matrix); the 16 x 16 tiles' shuffles by
// two runs of each pair, the first gathering every lane's amax, the second handing each lane its
// group's maximum (the kernel's xor masks, First ... 16: lanes equal in their low bits); the
// columnwise matrix loads by the element-wise reads the kernel takes without ldmatrix. The
// tensor scales come from ref::quantize (the amax pass is the tiled kernels', nvfp4_tile_host.hpp).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <mxkit/gpu/quantize/nvfp4_team_kernel.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>

#include "nvfp4_tile_host.hpp"

namespace nvfp4_team_host {

namespace d = mxkit::gpu::detail;

// The tile at (r0, c0) of `in` as the kernel's copy-in stages it.
template <class T>
void stage_tile(mxkit::matrix_view<const T> in, std::size_t r0, std::size_t c0, uint4* stage) {
  using tile = d::nvfp4_team_tile<T>;
  for (int row = 0; row < tile::rows; ++row)
    for (int chunk = 0; chunk < tile::chunks_per_row; ++chunk) {
      union {
        uint4 v;
        T e[tile::elems_per_chunk];
      } u{};
      for (int k = 0; k < tile::elems_per_chunk; ++k) {
        const std::size_t r = r0 + static_cast<std::size_t>(row), c = c0 + static_cast<std::size_t>(chunk * tile::elems_per_chunk + k);
        if (r < in.rows && c < in.cols) u.e[k] = in.data[r * in.stride() + c];
      }
      stage[row * tile::chunks_per_row + d::swizzle_chunk<tile::rows>(row, chunk)] = u.v;
    }
}

// max[l] = the maximum of vals over lane l's group of a team: the lanes equal to it in the bits
// below `first` (those the kernel's xor masks first, 2 first, ... 16 reach).
inline void group_max(const std::uint32_t* vals, std::uint32_t* max, int first) {
  for (int l = 0; l < 32; ++l) {
    max[l] = 0;
    for (int k = 0; k < 32; ++k)
      if ((l & (first - 1)) == (k & (first - 1)) && vals[k] > max[l]) max[l] = vals[k];
  }
}

// The callables quantize_pair takes for the shuffles (MXKIT_HD, as the kernel's code calls
// them): keep_amax records the k-th call's amax of lane l in vals[32 k + l] and returns it;
// group_amax returns vals[32 k + l] (the group's maximum, gathered between the runs).
struct keep_amax {
  std::uint32_t* vals;
  int lane;
  int* calls;
  MXKIT_HD std::uint32_t operator()(std::uint32_t a) const {
    vals[32 * (*calls)++ + lane] = a;
    return a;
  }
};
struct group_amax {
  const std::uint32_t* vals;
  int lane;
  int* calls;
  MXKIT_HD std::uint32_t operator()(std::uint32_t) const { return vals[32 * (*calls)++ + lane]; }
};
struct same_amax {
  MXKIT_HD std::uint32_t operator()(std::uint32_t a) const { return a; }
};

template <class T, bool Rotate, bool TwoD>
void run_tiles(const d::nvfp4_team_params<T>& p, mxkit::matrix_view<const T> in, std::uint32_t& amax) {
  using tile = d::nvfp4_team_tile<T>;
  using lane_work = d::nvfp4_team_lane<T, Rotate, TwoD>;
  constexpr int team = tile::team;
  std::vector<lane_work> lanes;
  for (int l = 0; l < team; ++l)
    lanes.push_back(lane_work{p, d::nvfp4_kernel_options<Rotate>(p.row.options), d::nvfp4_kernel_options<Rotate>(p.col.options),
                              mxkit::nvfp4_scaler{p.row.data ? *p.row_t : 1.0f}, mxkit::nvfp4_scaler{p.col.data ? *p.col_t : 1.0f}, l});
  alignas(16) uint4 stage[tile::chunks] = {};  // stage_tile fills every chunk
  for (std::size_t tm = 0; tm < p.tiles_m; ++tm)
    for (std::size_t tk = 0; tk < p.tiles_k; ++tk) {
      const std::size_t r0 = tm * tile::rows, c0 = tk * tile::cols;
      stage_tile(in, r0, c0, stage);
      for (unsigned u = 0; u < tile::steps / 2; ++u) {
        if constexpr (!TwoD) {
          for (const lane_work& w : lanes) w.quantize_pair(stage, r0, c0, u, amax, same_amax{}, same_amax{});
        } else {
          // Run one: each lane's amaxes (rowwise: one or two calls a pair, columnwise: one).
          std::uint32_t row_vals[2 * team] = {}, col_vals[team] = {}, scratch = 0;
          for (int l = 0; l < team; ++l) {
            int row_calls = 0, col_calls = 0;
            lanes[static_cast<std::size_t>(l)].quantize_pair(stage, r0, c0, u, scratch, keep_amax{row_vals, l, &row_calls},
                                                             keep_amax{col_vals, l, &col_calls});
          }
          // Run two: each lane's group maxima, the stores rewritten with them.
          std::uint32_t row_max[2 * team], col_max[team];
          group_max(row_vals, row_max, lane_work::row_first_mask);
          group_max(row_vals + team, row_max + team, lane_work::row_first_mask);
          group_max(col_vals, col_max, lane_work::col_first_mask);
          for (int l = 0; l < team; ++l) {
            int row_calls = 0, col_calls = 0;
            lanes[static_cast<std::size_t>(l)].quantize_pair(stage, r0, c0, u, amax, group_amax{row_max, l, &row_calls},
                                                             group_amax{col_max, l, &col_calls});
          }
        }
      }
    }
}

// Both copies (or one: the other's data stays empty) of `in` as the team kernel writes them, scales
// in the given layouts, poisoned first (0xA5) so an unwritten byte shows.
template <class T>
nvfp4_tile_host::result run(mxkit::matrix_view<const T> in, const mxkit::block_format& format, const mxkit::nvfp4_options& options,
                            bool rowwise, bool columnwise, mxkit::scale_layout row_layout, mxkit::scale_layout col_layout,
                            std::optional<float> given) {
  const mxkit::block_layout rl{format, mxkit::block_axis::rowwise, in.rows, in.cols}, cl{format, mxkit::block_axis::columnwise, in.rows, in.cols};
  nvfp4_tile_host::result r;
  if (rowwise) {
    r.row.data.assign(rl.data_bytes(), 0xA5);
    r.row.scales.assign(mxkit::scale_storage_size(row_layout, rl.lines(), rl.blocks_per_line()), 0xA5);
    r.row.tensor_scale = mxkit::ref::quantize(in, format, mxkit::block_axis::rowwise, options, given).tensor_scale();
  }
  if (columnwise) {
    r.col.data.assign(cl.data_bytes(), 0xA5);
    r.col.scales.assign(mxkit::scale_storage_size(col_layout, cl.lines(), cl.blocks_per_line()), 0xA5);
    r.col.tensor_scale = mxkit::ref::quantize(in, format, mxkit::block_axis::columnwise, options, given).tensor_scale();
  }
  // The launcher's parameters (gpu/quantize_nvfp4.hpp): each copy's stochastic stream.
  mxkit::nvfp4_options ro = options, co = options;
  ro.stream = mxkit::stochastic_stream(options.stream, mxkit::block_axis::rowwise);
  co.stream = mxkit::stochastic_stream(options.stream, mxkit::block_axis::columnwise);
  std::uint32_t unused = 0;
  const d::nvfp4_quantize_params<T> q{d::make_nvfp4_tile_input(in),
                                      mxkit::nvfp4_view{rl, ro, rowwise ? r.row.data.data() : nullptr, r.row.scales.data(), row_layout},
                                      mxkit::nvfp4_view{cl, co, columnwise ? r.col.data.data() : nullptr, r.col.scales.data(), col_layout},
                                      &r.row.tensor_scale,
                                      &r.col.tensor_scale,
                                      &unused};  // non-null: the kernel folds the input's amax
  const d::nvfp4_team_params<T> p = d::make_nvfp4_team_params(q);
  const bool two_d = rl.tile_lines() > 1;
  std::uint32_t amax = 0;
  if (options.hadamard) {
    if (two_d) run_tiles<T, true, true>(p, in, amax);
    else run_tiles<T, true, false>(p, in, amax);
  } else {
    if (two_d) run_tiles<T, false, true>(p, in, amax);
    else run_tiles<T, false, false>(p, in, amax);
  }
  r.amax = amax;
  if (rowwise) d::zero_scale_padding(r.row.scales.data(), row_layout, rl.lines(), rl.blocks_per_line(), 0, 1);
  if (columnwise) d::zero_scale_padding(r.col.scales.data(), col_layout, cl.lines(), cl.blocks_per_line(), 0, 1);
  return r;
}

// "" or the first difference of run()'s outputs from ref::quantize's.
template <class T>
std::string compare(mxkit::matrix_view<const T> in, const mxkit::block_format& format, const mxkit::nvfp4_options& options, bool rowwise,
                    bool columnwise, mxkit::scale_layout row_layout, mxkit::scale_layout col_layout, std::optional<float> given) {
  return nvfp4_tile_host::check(run(in, format, options, rowwise, columnwise, row_layout, col_layout, given), in, format, options, rowwise,
                                columnwise, row_layout, col_layout, given);
}

}  // namespace nvfp4_team_host
