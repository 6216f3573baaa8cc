// SPDX-License-Identifier: Apache-2.0
#pragma once
// The layout of a stored block-scaled copy, keyed by its format value (block/block_format.hpp):
// the MX formats and NVFP4 alike. A logical [rows, cols] matrix is quantized in one of two
// layouts, with k the format's block size (32 for MX, 16 for NVFP4):
//   rowwise     blocks of k along cols; stored [rows, cols padded to k]          (X for fprop)
//   columnwise  blocks of k along rows; stored transposed [cols, rows padded to k] (X^T for wgrad)
// so every stored copy is "block axis contiguous": line l, position p. The block axis is
// zero-padded to a multiple of k (zeros change no amax, so no scale); padded positions hold the
// quantized padding and are part of the storage. Elements take the format's storage bits (FP4
// packed two per byte, low nibble first: block/pack.hpp). Scales are one byte per (line, block),
// [lines, padded / k]; a format whose blocks span several lines (NVFP4's 16 x 16) repeats a
// tile's scale on each of its lines. The owning tensors and views of each family add the scales'
// placement, the quantize options and the tensor scale (tensor/mx_tensor.hpp,
// tensor/nvfp4_tensor.hpp).
//
// Block sizes are powers of two (OCP MX v1.0 section 5: k = 32; NVFP4: 16), so the accessors
// shift by the block's log2 instead of dividing: the format is a run-time value, and a 64-bit
// division by it would cost a device kernel tens of instructions on every block it addresses.
// A format the checks refuse (not MX, not NVFP4) gets no meaning here beyond defined arithmetic.
#include <cstddef>
#include <cstdint>
#include <ostream>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/block/block_format.hpp>
#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/pack.hpp>
#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>

MXKIT_BEGIN_NAMESPACE

enum class block_axis : std::uint8_t { rowwise, columnwise };

template <>
struct enum_names<block_axis> {
  static constexpr const char* names[] = {"rowwise", "columnwise"};
  static constexpr block_axis last = block_axis::columnwise;
};

// n rounded up to whole blocks of `block` elements (the MX block unless told otherwise).
MXKIT_HD constexpr std::size_t round_up_to_block(std::size_t n, std::size_t block = mx_block_size) noexcept {
  return (n + block - 1) / block * block;
}

namespace detail {
// A format value's fields, for a message that refuses the value (one the code does not know
// prints "unknown" fields).
struct format_fields {
  block_format f;
  friend std::ostream& operator<<(std::ostream& s, const format_fields& x) {
    return s << format_name(x.f) << " (" << name_of(x.f.element) << " elements, " << x.f.block.rows << " x " << x.f.block.cols << " blocks, "
             << name_of(x.f.scale) << " scales, tensor scale " << name_of(x.f.tensor_scale) << ")";
  }
};
}  // namespace detail

// The mx_type of an MX format (the name the MX kernels, the host reference and the Python module
// dispatch on). NVFP4 and any other value have none and are refused by name, never quantized or
// read as another format.
template <class... Where>
mx_type to_mx_type(const block_format& f, const Where&... where) {
  mx_type t{};
  detail::require(mx_type_of(f, &t), where..., ": ", detail::format_fields{f}, " is not an MX format");
  return t;
}

// The format value of an mx_type from a caller. A value past the enum (a bad cast, a corrupt
// file) is refused by name: format_of, which device code calls too, would take it for MXFP4.
template <class... Where>
block_format checked_format_of(mx_type t, const Where&... where) {
  detail::check_enum(t, enum_names<mx_type>::last, "mx_type", where...);
  return format_of(t);
}

// Shape and addressing of a stored copy, on host and device (the pointers are the views').
struct block_layout {
  block_format format = formats::mxfp4;
  block_axis axis = block_axis::rowwise;
  std::size_t rows = 0, cols = 0;  // logical matrix

  MXKIT_HD constexpr std::size_t lines() const noexcept { return axis == block_axis::rowwise ? rows : cols; }
  MXKIT_HD constexpr std::size_t line_length() const noexcept { return axis == block_axis::rowwise ? cols : rows; }
  // log2 of the block size along the block axis: 5 for MX, 4 for NVFP4 (0 for a block of no
  // elements, which no check lets through).
  MXKIT_HD constexpr int block_shift() const noexcept {
    const auto k = static_cast<std::uint32_t>(format.block.cols);
    return k == 0 ? 0 : hw::bit_width(k) - 1;
  }
  // Elements per block along the block axis: the format's (block_format::block_size()).
  MXKIT_HD constexpr std::size_t block_size() const noexcept { return std::size_t{1} << block_shift(); }
  // Lines that share a scale: 1, or 16 for NVFP4's 16 x 16 blocks.
  MXKIT_HD constexpr std::size_t tile_lines() const noexcept { return static_cast<std::size_t>(format.block.rows); }
  MXKIT_HD constexpr std::size_t blocks_per_line() const noexcept { return (line_length() + block_size() - 1) >> block_shift(); }
  MXKIT_HD constexpr std::size_t padded_length() const noexcept { return blocks_per_line() << block_shift(); }
  MXKIT_HD constexpr int storage_bits() const noexcept { return format.storage_bits(); }
  MXKIT_HD constexpr std::size_t line_bytes() const noexcept { return packed_bytes(padded_length(), storage_bits()); }
  MXKIT_HD constexpr std::size_t data_bytes() const noexcept { return lines() * line_bytes(); }
  MXKIT_HD constexpr std::size_t scale_count() const noexcept { return lines() * blocks_per_line(); }
  // Storage coordinates of logical element (r, c).
  MXKIT_HD constexpr std::size_t line_of(std::size_t r, std::size_t c) const noexcept { return axis == block_axis::rowwise ? r : c; }
  MXKIT_HD constexpr std::size_t position_of(std::size_t r, std::size_t c) const noexcept { return axis == block_axis::rowwise ? c : r; }

  // The MX copy's mx_type; a layout of another format is refused (to_mx_type).
  mx_type mx() const { return to_mx_type(format, "block_layout"); }
};

namespace detail {
// The checks every family's layout takes from a caller once its format is known (check_mx_layout,
// check_nvfp4_layout): a known axis, and sizes that do not wrap. lines x padded_length() bounds
// every size the MXKIT_HD accessors compute (data_bytes, scale_count, rows x cols, the stochastic
// element index line * padded_length + pos), so once it fits they are all exact.
template <class... Where>
void check_layout_extents(const block_layout& l, const Where&... where) {
  check_enum(l.axis, block_axis::columnwise, "block_axis", where...);
  const bool rowwise = l.axis == block_axis::rowwise;
  const std::size_t padded = checked_round_up({rowwise ? "cols" : "rows", l.line_length()}, l.block_size(), where...);
  checked_mul({rowwise ? "rows" : "cols", l.lines()}, {rowwise ? "padded cols" : "padded rows", padded}, where...);
}
}  // namespace detail

MXKIT_END_NAMESPACE
