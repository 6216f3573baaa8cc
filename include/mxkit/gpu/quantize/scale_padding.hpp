// SPDX-License-Identifier: Apache-2.0
#pragma once
// The padding entries of a padded scale layout (tensor/scale_layout.hpp: cuBLAS's 128x4 tiles,
// AITER's shuffle) hold zeros, as the host's to_scale_layout writes them. A quantize kernel calls
// this once per copy with its grid's thread numbering, so every entry is written by one thread.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

// Zeroes the entries of `scales` (layout l of a [lines, blocks] scale grid, null: none) outside the
// grid; this thread takes entries first, first + stride, ... (host and device: the tests run the
// kernels' steps on the host, tests/gpu/nvfp4_tile_host.hpp)
MXKIT_HD inline void zero_scale_padding(std::uint8_t* scales, scale_layout l, std::size_t lines, std::size_t blocks, std::size_t first,
                                        std::size_t stride) noexcept {
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
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
