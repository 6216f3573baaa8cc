// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where the E8M0 scale of block (line, block) of a stored MX copy lives in memory. A copy has
// `lines` lines of `blocks` 32-element blocks (block_layout::lines() x block_layout::blocks_per_line());
// the logical scale matrix is [lines, blocks], and each layout below stores it differently:
//
//   row_major     [lines, blocks], no padding: mx_tensor's own layout, and the one mxkit's GEMM
//                 kernels read.
//   cublas_128x4  cuBLASLt's block-scaling layout for MXFP8/MXFP4 operands (cuBLAS documentation,
//                 "1D Block Scaling Factors Layout"; the same mapping as nvmath-python's
//                 get_block_scale_offset): the matrix is padded to [128-multiple, 4-multiple] and
//                 cut into 128x4 tiles of 512 bytes, tiles row-major (all tiles of one 128-line
//                 band first); inside a tile, line l and block b sit at
//                 (l % 32) * 16 + (l / 32) * 4 + b.
//   aiter_shuffle the "e8m0_shuffle" layout that AITER's and hipBLASLt's MXFP4 GEMMs on MI355X
//                 (gfx950) read (aiter/utility/fp4_utils.py, after rocm-libraries'
//                 mxDataGenerator PreSwizzle.hpp): pad to [256-multiple, 8-multiple], view as
//                 (L/32, 2, 16, B/8, 2, 4), permute to (0, 3, 5, 2, 4, 1), flatten.
//
// Padding entries (lines or blocks beyond the logical matrix) hold 0, as both libraries' own
// conversion routines write them. The functions are constexpr and host/device, so the device
// quantizer and the host reference place every byte with the same code.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>

MXKIT_BEGIN_NAMESPACE

enum class scale_layout : std::uint8_t { row_major, cublas_128x4, aiter_shuffle };

template <>
struct enum_names<scale_layout> {
  static constexpr const char* names[] = {"row_major", "cublas_128x4", "aiter_shuffle"};
  static constexpr scale_layout last = scale_layout::aiter_shuffle;
};
inline constexpr scale_layout all_scale_layouts[] = {scale_layout::row_major, scale_layout::cublas_128x4,
                                                     scale_layout::aiter_shuffle};

namespace detail {
MXKIT_HD constexpr std::size_t round_up_to(std::size_t n, std::size_t m) noexcept { return (n + m - 1) / m * m; }
}  // namespace detail

// Stored shape of a [lines, blocks] scale matrix: the padded line and block counts.
struct scale_extent {
  std::size_t lines = 0, blocks = 0;
  MXKIT_HD constexpr std::size_t size() const noexcept { return lines * blocks; }
};

MXKIT_HD constexpr scale_extent padded_scale_extent(scale_layout l, std::size_t lines, std::size_t blocks) noexcept {
  switch (l) {
    case scale_layout::cublas_128x4: return {detail::round_up_to(lines, 128), detail::round_up_to(blocks, 4)};
    case scale_layout::aiter_shuffle: return {detail::round_up_to(lines, 256), detail::round_up_to(blocks, 8)};
    case scale_layout::row_major: break;
  }
  return {lines, blocks};
}

// Bytes a [lines, blocks] scale matrix occupies in layout l (padding included).
MXKIT_HD constexpr std::size_t scale_storage_size(scale_layout l, std::size_t lines, std::size_t blocks) noexcept {
  return padded_scale_extent(l, lines, blocks).size();
}

// Offset of the scale of (line, block) in a [lines, blocks] matrix stored in layout l. Valid for
// every (line, block) of the padded extent, so padding entries can be addressed too.
MXKIT_HD constexpr std::size_t scale_offset(scale_layout l, std::size_t lines, std::size_t blocks, std::size_t line,
                                            std::size_t block) noexcept {
  const scale_extent e = padded_scale_extent(l, lines, blocks);
  switch (l) {
    case scale_layout::cublas_128x4: {
      const std::size_t tile = (line / 128) * (e.blocks / 4) + block / 4;
      return tile * 512 + (line % 32) * 16 + (line / 32 % 4) * 4 + block % 4;
    }
    case scale_layout::aiter_shuffle:
      // source index (a, b, c, d, f, g) of the (L/32, 2, 16, B/8, 2, 4) view; destination order
      // (a, d, g, c, f, b), whose contiguous strides are (32*B, 256, 64, 4, 2, 1).
      return (line / 32) * 32 * e.blocks + (block / 8) * 256 + (block % 4) * 64 + (line % 16) * 4 +
             (block / 4 % 2) * 2 + line / 16 % 2;
    case scale_layout::row_major: break;
  }
  return line * blocks + block;
}

namespace detail {
// The host check of a [lines, blocks] scale matrix in layout l: a known layout (any other value
// would be placed row-major), and a row-major and a padded extent whose sizes do not wrap. Once
// it passes, padded_scale_extent, scale_storage_size and every scale_offset are exact.
template <class... Where>
scale_extent check_scale_extent(scale_layout l, std::size_t lines, std::size_t blocks, const Where&... where) {
  check_enum(l, scale_layout::aiter_shuffle, "scale_layout", where...);
  checked_mul({"lines", lines}, {"blocks", blocks}, where...);
  scale_extent e{lines, blocks};
  switch (l) {
    case scale_layout::cublas_128x4:
      e = {checked_round_up({"lines", lines}, 128, where...), checked_round_up({"blocks", blocks}, 4, where...)};
      break;
    case scale_layout::aiter_shuffle:
      e = {checked_round_up({"lines", lines}, 256, where...), checked_round_up({"blocks", blocks}, 8, where...)};
      break;
    case scale_layout::row_major: return e;
  }
  checked_mul({"padded lines", e.lines}, {"padded blocks", e.blocks}, where...);
  return e;
}
}  // namespace detail

// Host conversions between a row-major [lines, blocks] scale matrix and layout l (padding 0).
inline std::vector<std::uint8_t> to_scale_layout(const std::uint8_t* row_major, std::size_t lines, std::size_t blocks,
                                                 scale_layout l) {
  detail::check_scale_extent(l, lines, blocks, "to_scale_layout");
  detail::require(lines == 0 || blocks == 0 || row_major, "to_scale_layout: null scales for ", lines, "x", blocks, " blocks");
  std::vector<std::uint8_t> out(scale_storage_size(l, lines, blocks), 0);
  for (std::size_t i = 0; i < lines; ++i)
    for (std::size_t b = 0; b < blocks; ++b) out[scale_offset(l, lines, blocks, i, b)] = row_major[i * blocks + b];
  return out;
}
inline std::vector<std::uint8_t> to_row_major_scales(const std::uint8_t* stored, std::size_t lines, std::size_t blocks,
                                                     scale_layout l) {
  detail::check_scale_extent(l, lines, blocks, "to_row_major_scales");
  detail::require(lines == 0 || blocks == 0 || stored, "to_row_major_scales: null scales for ", lines, "x", blocks, " blocks");
  std::vector<std::uint8_t> out(lines * blocks);
  for (std::size_t i = 0; i < lines; ++i)
    for (std::size_t b = 0; b < blocks; ++b) out[i * blocks + b] = stored[scale_offset(l, lines, blocks, i, b)];
  return out;
}

MXKIT_END_NAMESPACE
