// SPDX-License-Identifier: Apache-2.0
#pragma once
// The NVFP4 quantizer's kernels (gpu/quantize/nvfp4_kernel.hpp) run on the host: their per-thread
// steps are MXKIT_HD functions, so a loop over the 256 thread numbers of each tile, one step (the
// code between two barriers) at a time, computes what the kernels compute, in the launcher's order
// (amax pass, tensor scales, quantize pass, scale padding). catch2_test_quantize_nvfp4.cu compares
// it with ref::quantize on machines without a device too; a difference there is in the tile code,
// not in the device or its compiler.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <mxkit/gpu/quantize/nvfp4_kernel.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>
#include <mxkit/tensor/scale_layout.hpp>

#include "../byte_compare.hpp"

namespace nvfp4_tile_host {

namespace d = mxkit::gpu::detail;

struct copy_out {
  std::vector<std::uint8_t> data, scales;
  float tensor_scale = 0;
};

struct result {
  copy_out row, col;
  std::uint32_t amax = 0;
};

// Both copies (or one: the other's data stays empty) of `in` as the kernels write them, scales in
// the given layouts, poisoned first (0xA5) so an unwritten byte shows.
template <class T>
result run(mxkit::matrix_view<const T> in, const mxkit::block_format& format, const mxkit::nvfp4_options& options, bool rowwise,
           bool columnwise, mxkit::scale_layout row_layout, mxkit::scale_layout col_layout, std::optional<float> given) {
  using L = d::nvfp4_tile_loads<T>;
  constexpr int threads = d::nvfp4_threads;
  const d::nvfp4_tile_input<T> tiles = d::make_nvfp4_tile_input(in);
  const mxkit::block_layout rl{format, mxkit::block_axis::rowwise, in.rows, in.cols}, cl{format, mxkit::block_axis::columnwise, in.rows, in.cols};
  result r;
  if (rowwise) {
    r.row.data.assign(rl.data_bytes(), 0xA5);
    r.row.scales.assign(mxkit::scale_storage_size(row_layout, rl.lines(), rl.blocks_per_line()), 0xA5);
  }
  if (columnwise) {
    r.col.data.assign(cl.data_bytes(), 0xA5);
    r.col.scales.assign(mxkit::scale_storage_size(col_layout, cl.lines(), cl.blocks_per_line()), 0xA5);
  }
  alignas(16) float4 smem[d::nvfp4_tile_chunks];
  std::vector<uint4> chunks(static_cast<std::size_t>(threads) * L::count);

  // Amax pass (nvfp4_amax_kernel's steps; the grid's order of tiles does not change a maximum).
  std::uint32_t row_finite = 0, col_finite = 0, all = 0;
  const bool rotate = options.hadamard;
  const mxkit::nvfp4_options ao = d::nvfp4_kernel_options<true>(options);
  for (std::size_t t = 0; t < tiles.tiles; ++t) {
    for (int i = 0; i < threads; ++i) d::nvfp4_load_tile(tiles, t, i, &chunks[static_cast<std::size_t>(i) * L::count]);
    if (rotate) {
      for (int i = 0; i < threads; ++i) d::nvfp4_stage_tile<T>(&chunks[static_cast<std::size_t>(i) * L::count], i, smem, true, all);
      for (int i = 0; i < threads; ++i) d::nvfp4_amax_rotated(smem, i, ao, rowwise, columnwise, row_finite, col_finite);
    } else {
      for (int i = 0; i < threads; ++i) d::nvfp4_fold_chunks<T>(&chunks[static_cast<std::size_t>(i) * L::count], row_finite, true, all);
    }
  }
  if (!rotate) col_finite = row_finite;
  r.amax = all;
  // Tensor scales (nvfp4_tensor_scale_kernel).
  r.row.tensor_scale = given ? *given : mxkit::nvfp4_tensor_scale(mxkit::bit_cast<float>(row_finite));
  r.col.tensor_scale = given ? *given : mxkit::nvfp4_tensor_scale(mxkit::bit_cast<float>(col_finite));

  // Quantize pass (nvfp4_quantize_kernel's steps).
  mxkit::nvfp4_options ro = options, co = options;
  ro.stream = mxkit::stochastic_stream(options.stream, mxkit::block_axis::rowwise);
  co.stream = mxkit::stochastic_stream(options.stream, mxkit::block_axis::columnwise);
  ro.hadamard = co.hadamard = rotate;
  d::nvfp4_quantize_params<T> p{tiles,
                                mxkit::nvfp4_view{rl, ro, rowwise ? r.row.data.data() : nullptr, r.row.scales.data(), row_layout},
                                mxkit::nvfp4_view{cl, co, columnwise ? r.col.data.data() : nullptr, r.col.scales.data(), col_layout},
                                &r.row.tensor_scale,
                                &r.col.tensor_scale,
                                nullptr};
  const mxkit::nvfp4_reciprocal_scaler rs = mxkit::nvfp4_reciprocal_scaler::of({r.row.tensor_scale}),
                                       cs = mxkit::nvfp4_reciprocal_scaler::of({r.col.tensor_scale});
  const bool two_d = rl.tile_lines() > 1;
  std::uint32_t tile_amax[2 * threads];
  std::uint32_t unused = 0;
  for (std::size_t t = 0; t < tiles.tiles; ++t) {
    for (int i = 0; i < threads; ++i) d::nvfp4_load_tile(tiles, t, i, &chunks[static_cast<std::size_t>(i) * L::count]);
    for (int i = 0; i < threads; ++i) d::nvfp4_stage_tile<T>(&chunks[static_cast<std::size_t>(i) * L::count], i, smem, false, unused);
    if (two_d)
      for (int i = 0; i < threads; ++i) d::nvfp4_tile_block_amax(smem, i, p.row.options, rowwise, columnwise, tile_amax);
    for (int i = 0; i < threads; ++i) d::nvfp4_tile_finish(p, p.row.options, p.col.options, rs, cs, t, i, smem, two_d ? tile_amax : nullptr);
  }
  if (rowwise) d::zero_scale_padding(r.row.scales.data(), row_layout, rl.lines(), rl.blocks_per_line(), 0, 1);
  if (columnwise) d::zero_scale_padding(r.col.scales.data(), col_layout, cl.lines(), cl.blocks_per_line(), 0, 1);
  return r;
}

// "" or the first difference of run()'s outputs from ref::quantize's (and of the amax from the
// input's amax_bits).
template <class T>
std::string compare(mxkit::matrix_view<const T> in, const mxkit::block_format& format, const mxkit::nvfp4_options& options, bool rowwise,
                    bool columnwise, mxkit::scale_layout row_layout, mxkit::scale_layout col_layout, std::optional<float> given) {
  const result r = run(in, format, options, rowwise, columnwise, row_layout, col_layout, given);
  auto one = [&](mxkit::block_axis axis, const copy_out& c, mxkit::scale_layout l, const char* name) -> std::string {
    const mxkit::nvfp4_tensor want = mxkit::ref::quantize(in, format, axis, options, given);
    const mxkit::block_layout& ml = want.layout();
    std::string e = mxkit_test::first_difference(c.data, want.data(), ml.line_bytes());
    if (!e.empty()) return std::string(name) + " data: " + e;
    e = mxkit_test::first_difference(c.scales, mxkit::to_scale_layout(want.scales().data(), ml.lines(), ml.blocks_per_line(), l));
    if (!e.empty()) return std::string(name) + " scales: " + e;
    if (mxkit::bit_cast<std::uint32_t>(c.tensor_scale) != mxkit::bit_cast<std::uint32_t>(want.tensor_scale()))
      return std::string(name) + " tensor scale " + std::to_string(c.tensor_scale) + " vs " + std::to_string(want.tensor_scale());
    return "";
  };
  if (rowwise) {
    const std::string e = one(mxkit::block_axis::rowwise, r.row, row_layout, "rowwise");
    if (!e.empty()) return e;
  }
  if (columnwise) {
    const std::string e = one(mxkit::block_axis::columnwise, r.col, col_layout, "columnwise");
    if (!e.empty()) return e;
  }
  std::uint32_t a = 0;
  for (std::size_t i = 0; i < in.rows; ++i)
    for (std::size_t j = 0; j < in.cols; ++j) a = mxkit::amax_bits(a, mxkit::load_float(in.data[i * in.stride() + j]));
  if (a != r.amax) return "amax bits " + std::to_string(r.amax) + " vs " + std::to_string(a);
  return "";
}

}  // namespace nvfp4_tile_host
