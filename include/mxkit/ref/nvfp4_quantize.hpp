// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host NVFP4 quantizer and dequantizer (formats::nvfp4, formats::nvfp4_2d): a float, bf16 or
// fp16 matrix to an nvfp4_tensor, rowwise or columnwise (or both copies from one call), with the
// tensor scale computed from the copy's amax or given (block/nvfp4_scale.hpp: mxkit's rule),
// elements rounded by the options' mode (nearest even, stochastic with Philox bits), the 16-point
// Hadamard rotation of each block, and 16 x 16 blocks for weights. It is quantize_nvfp4_block on
// every block, nothing else; validation and the peer presets run the same loop with the peers'
// scalers (validation/nvfp4_quirks.hpp).
//
//   const mxkit::nvfp4_tensor q = mxkit::ref::quantize(x, mxkit::formats::nvfp4, mxkit::block_axis::rowwise);
//   const std::vector<float> y = mxkit::ref::dequantize(q);   // e2m1 x e4m3 x q.tensor_scale()
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/ref/parallel.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {

// The blocks of lines [first, first + count) (count <= 16: one tile of 16 x 16 blocks, or 16
// lines of 1 x 16 ones) at block index blk: the values quantized (rotated when the options
// rotate) and the amax each block is scaled from (its own, or its tile's). rotated_bf16: the
// rotated values are rounded to bf16 first (TransformerEngine's RHT writes them as bf16:
// validation/nvfp4_quirks.hpp); mxkit keeps them in float.
struct nvfp4_group {
  std::size_t count = 0;
  float v[16][nvfp4_block_size] = {};
  std::uint32_t amax[16] = {};
};
template <class T>
void gather_nvfp4_group(const matrix_view<T>& in, const block_layout& l, const nvfp4_options& o, bool rotated_bf16, std::size_t first,
                        std::size_t count, std::size_t blk, nvfp4_group& g) {
  g.count = count;
  std::uint32_t tile = 0;
  for (std::size_t i = 0; i < count; ++i) {
    float* v = g.v[i];
    gather_block<nvfp4_block_size>(in, l.axis, first + i, blk, v);
    nvfp4_rotate_block(v, o);
    if (rotated_bf16 && o.hadamard)
      for (int j = 0; j < nvfp4_block_size; ++j) v[j] = bfloat16::from_float(v[j], rounding::nearest_even, overflow::propagate).to_float();
    g.amax[i] = nvfp4_block_amax_bits(v);
    tile = tile > g.amax[i] ? tile : g.amax[i];
  }
  if (l.tile_lines() > 1)
    for (std::size_t i = 0; i < count; ++i) g.amax[i] = tile;
}

// Lines go in groups of 16: a 16 x 16 copy's tiles, and, for 1 x 16 blocks, 16 neighbouring lines
// whose columnwise blocks read the same input rows. Every block is computed on its own, so the
// bytes do not depend on the threads (ref/parallel.hpp).
inline std::size_t nvfp4_group_count(const block_layout& l) noexcept { return (l.lines() + 15) / 16; }
inline unsigned nvfp4_threads(const block_layout& l, unsigned requested) noexcept {
  return host_thread_count(requested, nvfp4_group_count(l), 16.0 * static_cast<double>(l.lines()) * static_cast<double>(l.padded_length()));
}
// Calls f(first line, line count, chunk) per group on `threads` threads (nvfp4_threads).
template <class F>
void for_nvfp4_groups(const block_layout& l, unsigned threads, F&& f) {
  parallel_chunks(nvfp4_group_count(l), threads, [&](std::size_t first, std::size_t last, std::size_t chunk) {
    for (std::size_t g = first; g < last; ++g) f(g * 16, std::min<std::size_t>(16, l.lines() - g * 16), chunk);
  });
}

// The largest finite magnitude among the values a copy quantizes (rotated ones when the options
// rotate): what the tensor scale is computed from (block/nvfp4_scale.hpp).
template <class T>
float nvfp4_copy_amax(const matrix_view<T>& in, const block_layout& l, const nvfp4_options& o, bool rotated_bf16, unsigned threads) {
  if (l.blocks_per_line() == 0) return 0.0f;
  const unsigned n = nvfp4_threads(l, threads);
  std::vector<std::uint32_t> part(parallel_chunk_count(nvfp4_group_count(l), n), 0u);
  for_nvfp4_groups(l, n, [&](std::size_t first, std::size_t count, std::size_t chunk) {
    nvfp4_group g;
    for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk) {
      gather_nvfp4_group(in, l, o, rotated_bf16, first, count, blk, g);
      for (std::size_t i = 0; i < count; ++i)
        for (const float x : g.v[i]) {
          const std::uint32_t b = abs_bits(x);
          if (b < 0x7F800000u && b > part[chunk]) part[chunk] = b;
        }
    }
  });
  std::uint32_t a = 0;
  for (const std::uint32_t p : part) a = a > p ? a : p;
  return bit_cast<float>(a);
}

// Quantizes a copy into `out` (sized for its layout) with `scaler`; o's stream is the copy's
// (stochastic_stream). Stochastic rounding numbers element (line, pos) line * padded_length + pos.
template <class T, class Scaler>
void quantize_nvfp4_copy(const matrix_view<T>& in, const nvfp4_options& o, bool rotated_bf16, const Scaler& scaler, unsigned threads,
                         nvfp4_tensor& out) {
  const block_layout& l = out.layout();
  if (l.blocks_per_line() == 0) return;
  for_nvfp4_groups(l, nvfp4_threads(l, threads), [&](std::size_t first, std::size_t count, std::size_t) {
    nvfp4_group g;
    for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk) {
      gather_nvfp4_group(in, l, o, rotated_bf16, first, count, blk, g);
      for (std::size_t i = 0; i < count; ++i) {
        const std::size_t line = first + i;
        const nvfp4_block b = quantize_nvfp4_block(g.v[i], g.amax[i], scaler, o, line * l.padded_length() + blk * nvfp4_block_size);
        out.scales()[line * l.blocks_per_line() + blk] = b.scale.bits();
        std::uint8_t* row = out.data().data() + line * l.line_bytes();
        for (int j = 0; j < nvfp4_block_size; ++j)
          store_code(row, blk * nvfp4_block_size + static_cast<std::size_t>(j), b.elements[j].bits(), 4);
      }
    }
  });
}

}  // namespace detail
namespace ref {

// The largest finite magnitude of the values the `axis` copy of `in` quantizes (rotated when
// o.hadamard): the amax the tensor scale comes from. 0 for an empty or all-non-finite matrix.
template <class T>
  requires quantizer_input<T>
float nvfp4_amax(matrix_view<T> in, block_axis axis, const nvfp4_options& o = {}, unsigned threads = 0) {
  detail::check_matrix(in, "nvfp4_amax:");
  const block_layout l{formats::nvfp4, axis, in.rows, in.cols};
  detail::check_nvfp4_layout(l, "nvfp4_amax");
  detail::check_nvfp4_options(o, "nvfp4_amax");
  return detail::nvfp4_copy_amax(in, l, o, false, threads);
}

// One NVFP4 copy of `in`: `format` is formats::nvfp4 or formats::nvfp4_2d; the tensor scale is
// nvfp4_tensor_scale(nvfp4_amax(...)) unless given (a positive normal float: a calibrated or
// another copy's scale). Refuses another format, an unknown axis or rounding, a bad tensor scale
// and sizes that wrap, with std::invalid_argument naming the value.
template <class T>
  requires quantizer_input<T>
nvfp4_tensor quantize(matrix_view<T> in, const block_format& format, block_axis axis, const nvfp4_options& options = {},
                      std::optional<float> tensor_scale = std::nullopt, unsigned threads = 0) {
  detail::check_matrix(in, "quantize:");
  const block_layout layout{format, axis, in.rows, in.cols};
  detail::check_nvfp4_layout(layout, "quantize");
  detail::check_nvfp4_options(options, "quantize");
  if (tensor_scale) detail::check_tensor_scale(*tensor_scale, "quantize");
  nvfp4_options o = options;
  o.stream = stochastic_stream(options.stream, axis);
  const float t = tensor_scale ? *tensor_scale : nvfp4_tensor_scale(detail::nvfp4_copy_amax(in, layout, o, false, threads));
  nvfp4_tensor out(layout, options, t, !tensor_scale);
  detail::quantize_nvfp4_copy(in, o, false, nvfp4_scaler{t}, threads, out);
  return out;
}

struct nvfp4_tensor_pair {
  nvfp4_tensor rowwise;
  nvfp4_tensor columnwise;
};
// Both copies, each with its own tensor scale (from its own amax: with the rotation the two copies'
// rotated values differ) unless one is given for both.
template <class T>
  requires quantizer_input<T>
nvfp4_tensor_pair quantize_both(matrix_view<T> in, const block_format& format, const nvfp4_options& options = {},
                                std::optional<float> tensor_scale = std::nullopt, unsigned threads = 0) {
  return {quantize(in, format, block_axis::rowwise, options, tensor_scale, threads),
          quantize(in, format, block_axis::columnwise, options, tensor_scale, threads)};
}

// Logical [rows, cols] floats: code x scale x tensor scale (block/nvfp4_scale.hpp), the rotation
// undone; a NaN-scale block decodes to NaN. Storage padding is dropped.
template <class Byte>
std::vector<float> dequantize(const nvfp4_basic_view<Byte>& t) {
  const block_layout& l = t.layout;
  detail::check_nvfp4_layout(l, "dequantize");
  detail::check_nvfp4_options(t.options, "dequantize");
  detail::check_tensor_scale(t.tensor_scale, "dequantize");
  detail::check_enum(t.scales_layout, scale_layout::aiter_shuffle, "scale_layout", "dequantize");
  detail::require(l.data_bytes() == 0 || (t.data && t.scales), "dequantize: null data or scales for a ", l.rows, "x", l.cols, " ",
                  nvfp4_format_name(l.format), " copy");
  std::vector<float> out(l.rows * l.cols);
  nvfp4_block b{};
  float v[nvfp4_block_size];
  for (std::size_t line = 0; line < l.lines(); ++line)
    for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk) {
      b.scale = e4m3::from_bits(t.scale(line, blk));
      for (int i = 0; i < nvfp4_block_size; ++i) b.elements[i] = e2m1::from_bits(t.code(line, blk * nvfp4_block_size + static_cast<std::size_t>(i)));
      dequantize_nvfp4_block(b, t.tensor_scale, v, t.options);
      for (int i = 0; i < nvfp4_block_size; ++i) {
        const std::size_t p = blk * nvfp4_block_size + static_cast<std::size_t>(i);
        if (p >= l.line_length()) break;
        out[l.axis == block_axis::rowwise ? line * l.cols + p : p * l.cols + line] = v[i];
      }
    }
  return out;
}
inline std::vector<float> dequantize(const nvfp4_tensor& t) { return dequantize(t.view()); }

}  // namespace ref
MXKIT_END_NAMESPACE
