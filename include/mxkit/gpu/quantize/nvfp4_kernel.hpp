// SPDX-License-Identifier: Apache-2.0
#pragma once
// The NVFP4 quantizer's kernels (launched by gpu/quantize_nvfp4.hpp), one copy (rowwise or
// columnwise) per launch:
//   nvfp4_amax_kernel          the largest finite |x| of the values the copy quantizes (rotated
//                              ones when the options rotate: block/nvfp4_scale.hpp's rule for the
//                              tensor scale), and optionally the input's amax as gpu::quantize
//                              writes it (amax_bits: NaN above Inf above every finite value);
//                              float bits, warp maximum then one atomicMax per warp;
//   nvfp4_tensor_scale_kernel  one thread: those bits to the tensor scale (nvfp4_tensor_scale),
//                              or the caller's given one, in the same device float;
//   nvfp4_quantize_kernel      every block through quantize_nvfp4_block with nvfp4_scaler{t}, t
//                              read from device memory (no host synchronization between passes).
// So each byte is the host reference's (ref/nvfp4_quantize.hpp): the rounding rules live in
// block/nvfp4_block.hpp and block/nvfp4_scale.hpp only; this file moves values.
//
// Deliberately straightforward (issue #46 asks for >= 80 % of copy bandwidth later): one thread per
// 16-element block (per 16 x 16 tile, its 16 blocks, for formats::nvfp4_2d, whose blocks share the
// tile's amax: the thread reads its tile twice, once for the amax and once to quantize), values
// loaded element by element from global memory without shared-memory staging. Consecutive threads
// take consecutive blocks of a row for the rowwise copy and consecutive input columns for the
// columnwise copy, so the loads of a warp are contiguous either way; the columnwise stores are not.
// A work item of each pass is an MXKIT_HD function (nvfp4_amax_item, nvfp4_quantize_item) and the
// kernels are grid-stride loops over them, so a host loop over the same items runs the same code.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/block/pack.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/gpu/quantize/scale_padding.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int nvfp4_threads = 256;  // threads per CTA of every NVFP4 kernel

// Work item w of a copy with `groups` groups of lines (lines, or 16-line tiles) and `blocks`
// blocks per line: rowwise, the blocks of a line are consecutive items; columnwise, the lines
// (input columns) are, so that a warp reads neighbouring input columns of the same rows.
MXKIT_HD constexpr void nvfp4_item(block_axis axis, std::size_t groups, std::size_t blocks, std::size_t w, std::size_t& group,
                                   std::size_t& blk) noexcept {
  if (axis == block_axis::rowwise) {
    group = w / blocks;
    blk = w % blocks;
  } else {
    blk = w / groups;
    group = w % groups;
  }
}

// Block `blk` of line `line` of the `axis` copy of `in`, zero past the logical edge (the padding
// the layout quantizes as zeros, as the host's gather_block).
template <class T>
MXKIT_HD constexpr void nvfp4_load_block(const matrix_view<const T>& in, block_axis axis, std::size_t line, std::size_t blk,
                                         float* v) noexcept {
  const bool rowwise = axis == block_axis::rowwise;
  const std::size_t length = rowwise ? in.cols : in.rows;
  for (int i = 0; i < nvfp4_block_size; ++i) {
    const std::size_t p = blk * nvfp4_block_size + static_cast<std::size_t>(i);
    v[i] = p >= length ? 0.0f : load_float(rowwise ? in(line, p) : in(p, line));
  }
}

// Work item w of the amax pass (one block of the copy): folds the largest finite |x| of its
// values after the rotation into `finite` (finite values only: block/nvfp4_scale.hpp) and, when
// `all`, the amax_bits of its values before the rotation into *all.
template <class T>
MXKIT_HD constexpr void nvfp4_amax_item(const matrix_view<const T>& in, const nvfp4_layout& l, const nvfp4_options& o, std::size_t w,
                                        std::uint32_t& finite, std::uint32_t* all) noexcept {
  std::size_t line = 0, blk = 0;
  nvfp4_item(l.axis, l.lines(), l.blocks_per_line(), w, line, blk);
  float v[nvfp4_block_size];
  nvfp4_load_block(in, l.axis, line, blk, v);
  if (all)
    for (int i = 0; i < nvfp4_block_size; ++i) *all = amax_bits(*all, v[i]);
  nvfp4_rotate_block(v, o);
  for (int i = 0; i < nvfp4_block_size; ++i) {
    const std::uint32_t b = abs_bits(v[i]);
    if (b < 0x7F800000u && b > finite) finite = b;
  }
}

// copy_amax: the copy's largest finite rotated |x| (null: not wanted); input_amax: the input's
// amax_bits (null: not wanted). Both float bits, zeroed by the launcher.
template <class T>
MXKIT_GLOBAL void __launch_bounds__(nvfp4_threads)
    nvfp4_amax_kernel(const matrix_view<const T> in, const nvfp4_layout l, const nvfp4_options o, unsigned* copy_amax,
                      unsigned* input_amax) {
  const std::size_t items = l.lines() * l.blocks_per_line();
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::uint32_t finite = 0, all = 0;
  for (std::size_t w = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < items; w += stride)
    nvfp4_amax_item(in, l, o, w, finite, input_amax ? &all : nullptr);
  // Every thread of the CTA reaches the reductions (no early exit above).
  finite = warp_max(finite);
  all = warp_max(all);
  if (lane_id() == 0) {
    if (copy_amax) atomic_max(copy_amax, finite);
    if (input_amax) atomic_max(input_amax, all);
  }
}

// *t = given when given (a valid tensor scale, checked on the host), else the tensor scale of the
// amax whose bits nvfp4_amax_kernel left in *t. A template (F = float), as every kernel in a header
// not compiled into the kernel library: a translation unit that includes it without launching it
// then holds no unused internal function (clang's -Wunneeded-internal-declaration).
template <class F>
MXKIT_GLOBAL void nvfp4_tensor_scale_kernel(F* t, F given) {
  static_assert(std::is_same_v<F, float>, "the tensor scale is an fp32 value");
  *t = given > 0.0f ? given : nvfp4_tensor_scale(bit_cast<float>(*reinterpret_cast<const std::uint32_t*>(t)));
}

template <class T>
struct nvfp4_quantize_params {
  matrix_view<const T> in;     // [rows, ld] on the device
  nvfp4_view out;              // the copy: layout, options (stream already the copy's), data, scales in their layout
  const float* tensor_scale;  // device: t of this copy (nvfp4_tensor_scale_kernel's)
};

// Work items of the quantize pass: a line's block, or for 16 x 16 blocks a tile's (its up to 16
// lines' blocks at one block index).
MXKIT_HD constexpr std::size_t nvfp4_quantize_items(const nvfp4_layout& l) noexcept {
  return (l.lines() + l.tile_lines() - 1) / l.tile_lines() * l.blocks_per_line();
}

// Work item w of the quantize pass: its block (blocks) quantized under `scaler` and stored.
template <class T>
MXKIT_HD void nvfp4_quantize_item(const nvfp4_quantize_params<T>& p, const nvfp4_scaler& scaler, std::size_t w) noexcept {
  const nvfp4_layout& l = p.out.layout;
  const nvfp4_options& o = p.out.options;
  const std::size_t tl = l.tile_lines(), lines = l.lines(), blocks = l.blocks_per_line();
  std::size_t group = 0, blk = 0;
  nvfp4_item(l.axis, (lines + tl - 1) / tl, blocks, w, group, blk);
  const std::size_t first = group * tl, count = lines - first < tl ? lines - first : tl;
  float v[nvfp4_block_size];
  // 16 x 16 blocks: the tile's amax, the largest of its blocks' (rotated) amaxes, as the host's
  // gather_nvfp4_group takes it (the last tile spans the lines there are).
  std::uint32_t tile = 0;
  if (tl > 1)
    for (std::size_t i = 0; i < count; ++i) {
      nvfp4_load_block(p.in, l.axis, first + i, blk, v);
      nvfp4_rotate_block(v, o);
      const std::uint32_t a = nvfp4_block_amax_bits(v);
      tile = tile > a ? tile : a;
    }
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t line = first + i;
    nvfp4_load_block(p.in, l.axis, line, blk, v);
    nvfp4_rotate_block(v, o);
    const std::uint32_t amax = tl > 1 ? tile : nvfp4_block_amax_bits(v);
    // Stochastic rounding numbers element (line, pos) line * padded_length + pos, as the host.
    const nvfp4_block b = quantize_nvfp4_block(v, amax, scaler, o, line * l.padded_length() + blk * nvfp4_block_size);
    p.out.scales[p.out.scale_index(line, blk)] = b.scale.bits();
    // The block's 16 codes are 8 whole bytes of its line (block/pack.hpp's nibble order), stored
    // at once: line_bytes is a multiple of 8 and the launcher checks the data's alignment.
    std::uint8_t bytes[nvfp4_block_size / 2] = {};
    for (int j = 0; j < nvfp4_block_size; ++j) store_code(bytes, static_cast<std::size_t>(j), b.elements[j].bits(), 4);
    uint2 word;
    word.x = static_cast<unsigned>(bytes[0]) | static_cast<unsigned>(bytes[1]) << 8 | static_cast<unsigned>(bytes[2]) << 16 |
             static_cast<unsigned>(bytes[3]) << 24;
    word.y = static_cast<unsigned>(bytes[4]) | static_cast<unsigned>(bytes[5]) << 8 | static_cast<unsigned>(bytes[6]) << 16 |
             static_cast<unsigned>(bytes[7]) << 24;
    *reinterpret_cast<uint2*>(p.out.data + line * l.line_bytes() + blk * (nvfp4_block_size / 2)) = word;
  }
}

template <class T>
MXKIT_GLOBAL void __launch_bounds__(nvfp4_threads) nvfp4_quantize_kernel(const nvfp4_quantize_params<T> p) {
  const nvfp4_scaler scaler{*p.tensor_scale};
  const std::size_t items = nvfp4_quantize_items(p.out.layout);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::size_t w = first; w < items; w += stride) nvfp4_quantize_item(p, scaler, w);
  zero_scale_padding(p.out.scales, p.out.scales_layout, p.out.layout.lines(), p.out.layout.blocks_per_line(), first, stride);
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
