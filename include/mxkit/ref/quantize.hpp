// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host quantizer: a float/bf16/fp16 matrix to an mx_tensor, rowwise, columnwise, or both copies
// from one call (forward needs rowwise, dgrad/wgrad the columnwise copy). The reference the GPU
// kernels are checked against byte for byte: it is quantize_block on every block, nothing else.
#include <algorithm>
#include <vector>

#include <mxkit/block/quantize_block.hpp>
#include <mxkit/error.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/ref/parallel.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {
// Gathers block `blk` (of BlockSize elements) of storage line `line` (zero beyond the logical edge).
template <int BlockSize, class T>
void gather_block(const matrix_view<T>& in, block_axis axis, std::size_t line, std::size_t blk, float* v) {
  const std::size_t length = axis == block_axis::rowwise ? in.cols : in.rows;
  for (int i = 0; i < BlockSize; ++i) {
    const std::size_t p = blk * BlockSize + static_cast<std::size_t>(i);
    v[i] = p >= length ? 0.0f : load_float(axis == block_axis::rowwise ? in(line, p) : in(p, line));
  }
}
}  // namespace detail
namespace ref {

// `threads`: host threads over the storage lines (ref/parallel.hpp: 0 = as the machine and the
// size allow); every line is quantized by one thread with the same code, so the bytes do not
// depend on it.
template <class T>
  requires quantizer_input<T>
mx_tensor quantize(matrix_view<T> in, mx_type type, block_axis axis, const quantize_options& options = {},
                   unsigned threads = 0) {
  detail::check_matrix(in, "quantize:");
  const block_layout layout{checked_format_of(type, "quantize"), axis, in.rows, in.cols};
  detail::check_mx_layout(layout, "quantize");
  detail::check_options(options, "quantize");
  mx_tensor out(layout, options);
  const block_layout& l = out.layout();
  quantize_options o = options;
  o.stream = stochastic_stream(options, axis);
  visit_mx_type(type, [&](auto fmt) {
    using Fmt = decltype(fmt);
    // Columnwise lines go in groups of 16, block by block: a block gathers one value from each
    // of its rows (32 for MX), and the group's neighbouring columns reuse those rows' cache lines. Every block
    // is quantized on its own, so the order changes no byte.
    const std::size_t group = axis == block_axis::rowwise ? 1 : 16;
    const auto lines = [&](std::size_t first, std::size_t last, std::size_t) {
      constexpr int k = Fmt::block_size;
      float v[k];
      for (std::size_t g0 = first; g0 < last; g0 += group)
        for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk)
          for (std::size_t line = g0; line < std::min(g0 + group, last); ++line) {
            std::uint8_t* row = out.data().data() + line * l.line_bytes();
            detail::gather_block<k>(in, axis, line, blk, v);
            const auto b = quantize_block<Fmt>(v, o, line * l.padded_length() + blk * k);
            out.scales()[line * l.blocks_per_line() + blk] = b.scale.bits();
            for (int i = 0; i < k; ++i) store_code(row, blk * k + static_cast<std::size_t>(i), b.elements[i].bits(), Fmt::storage_bits);
          }
    };
    const double work = static_cast<double>(l.lines()) * static_cast<double>(l.padded_length());
    detail::parallel_chunks(l.lines(), detail::host_thread_count(threads, l.lines(), work), lines);
  });
  return out;
}

template <class T>
mx_tensor quantize_rowwise(matrix_view<T> in, mx_type type, const quantize_options& options = {}, unsigned threads = 0) {
  return quantize(in, type, block_axis::rowwise, options, threads);
}
template <class T>
mx_tensor quantize_columnwise(matrix_view<T> in, mx_type type, const quantize_options& options = {}, unsigned threads = 0) {
  return quantize(in, type, block_axis::columnwise, options, threads);
}

struct mx_tensor_pair {
  mx_tensor rowwise;
  mx_tensor columnwise;
};
template <class T>
mx_tensor_pair quantize_both(matrix_view<T> in, mx_type type, const quantize_options& options = {}, unsigned threads = 0) {
  return {quantize(in, type, block_axis::rowwise, options, threads), quantize(in, type, block_axis::columnwise, options, threads)};
}

// Logical [rows, cols] floats, rotation undone. Storage padding is dropped.
inline std::vector<float> dequantize(mx_const_view t) {
  const block_layout& l = t.layout;
  detail::check_mx_layout(l, "dequantize");  // first: a wrapped data_bytes() of 0 would skip the null check
  detail::require(l.data_bytes() == 0 || (t.data && t.scales), "dequantize: null data or scales for a ", l.rows, "x", l.cols, " ",
                  format_name(l.format), " tensor");
  std::vector<float> out(l.rows * l.cols);
  visit_mx_type(l.mx(), [&](auto fmt) {
    using Fmt = decltype(fmt);
    using E = typename Fmt::element_type;
    constexpr int k = Fmt::block_size;
    mx_block<Fmt> b{};
    float v[k];
    for (std::size_t line = 0; line < l.lines(); ++line)
      for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk) {
        b.scale = e8m0::from_bits(t.scale(line, blk));
        for (int i = 0; i < k; ++i) b.elements[i] = E::from_bits(t.code(line, blk * k + static_cast<std::size_t>(i)));
        dequantize_block<Fmt>(b, v, t.options);
        for (int i = 0; i < k; ++i) {
          const std::size_t p = blk * k + static_cast<std::size_t>(i);
          if (p >= l.line_length()) break;
          const std::size_t r = l.axis == block_axis::rowwise ? line : p, c = l.axis == block_axis::rowwise ? p : line;
          out[r * l.cols + c] = v[i];
        }
      }
  });
  return out;
}
inline std::vector<float> dequantize(const mx_tensor& t) { return dequantize(t.view()); }

}  // namespace ref
// mxkit::dequantize(fp8_tensor) (tensor/fp8_tensor.hpp) would hide the using-directive's MX
// overloads from qualified lookup: the old spelling mxkit::dequantize(mx_tensor) needs them named.
using ref::dequantize;
MXKIT_END_NAMESPACE
