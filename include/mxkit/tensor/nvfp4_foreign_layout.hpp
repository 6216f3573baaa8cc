// SPDX-License-Identifier: Apache-2.0
#pragma once
// How another library stores an NVFP4 copy: the description validate (validation/nvfp4_validate.hpp)
// reads a foreign copy through. The storage fields are the MX ones (tensor/foreign_layout.hpp's
// mx_storage: transposed or not, leading dimension, nibble order, stored padding, row-major scales
// with strides and padded extents, cuBLAS's 128x4 tiles, padding bytes), addressed the same way
// with 16-element blocks, and their checks are the same functions. Beyond them a copy carries its
// tensor scale as the library stores it: mxkit and torchao keep the decode scale (mxkit's t,
// torchao's per_tensor_scale), TransformerEngine the copy's amax; the validation options say which
// formula reads it (validation/nvfp4_quirks.hpp). TE and torchao both store E2M1 codes low nibble
// first (TE's reference cast_to_fp4x2, torchao's pack_uint4) and hand cuBLAS the scales in its
// 128x4 tiles (scale_layout::cublas_128x4).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <mxkit/block/pack.hpp>
#include <mxkit/error.hpp>
#include <mxkit/tensor/foreign_layout.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE

// The format's name in the storage checks' messages (detail::check_foreign_storage_fields).
inline const char* copy_format_name(const nvfp4_layout& l) noexcept { return nvfp4_format_name(l.format); }

// A stored NVFP4 copy in any of the layouts mx_storage describes, with the caller's buffers and
// their sizes (validate refuses buffers shorter than data_span() or scale_span()).
struct nvfp4_foreign_view {
  nvfp4_layout layout;
  nvfp4_options options;
  mx_storage storage;
  std::span<const std::uint8_t> data{};
  std::span<const std::uint8_t> scales{};
  float tensor_scale = 1.0f;           // as the copy stores it (the formula of the validation reads it)
  bool tensor_scale_from_amax = true;  // false: given (calibrated), taken as it is

  // The accessors of mx_foreign_view, for 4-bit codes and 16-element blocks.
  constexpr bool line_major() const noexcept {
    return layout.axis == block_axis::rowwise || storage.columnwise == columnwise_storage::transposed;
  }
  constexpr std::size_t stored_length() const noexcept { return storage.padding_stored ? layout.padded_length() : layout.line_length(); }
  constexpr std::size_t stored_rows() const noexcept { return line_major() ? layout.lines() : stored_length(); }
  constexpr std::size_t min_data_ld() const noexcept { return packed_bytes(line_major() ? stored_length() : layout.lines(), 4); }
  constexpr std::size_t data_ld() const noexcept { return storage.data_ld ? storage.data_ld : min_data_ld(); }
  constexpr std::size_t data_span() const noexcept {
    return stored_rows() == 0 || min_data_ld() == 0 ? 0 : (stored_rows() - 1) * data_ld() + min_data_ld();
  }
  // Code of block-axis position `pos` (< stored_length()) of line `line`.
  constexpr std::uint8_t code(std::size_t line, std::size_t pos) const noexcept {
    const std::size_t row = line_major() ? line : pos, index = line_major() ? pos : line;
    const std::uint8_t byte = data.data()[row * data_ld() + index / 2];
    const bool high = (index & 1) != (storage.nibbles == nibble_order::high_first);
    return static_cast<std::uint8_t>(high ? byte >> 4 : byte & 0xF);
  }
  constexpr scale_extent stored_scale_extent() const noexcept {
    const std::size_t lines = layout.lines(), blocks = layout.blocks_per_line();
    if (storage.scales != scale_layout::row_major) return padded_scale_extent(storage.scales, lines, blocks);
    return {storage.scale_padded.lines ? storage.scale_padded.lines : lines, storage.scale_padded.blocks ? storage.scale_padded.blocks : blocks};
  }
  constexpr std::size_t scale_offset_of(std::size_t line, std::size_t block) const noexcept {
    if (storage.scales != scale_layout::row_major) return scale_offset(storage.scales, layout.lines(), layout.blocks_per_line(), line, block);
    if (storage.scale_line_stride || storage.scale_block_stride) return line * storage.scale_line_stride + block * storage.scale_block_stride;
    return line * stored_scale_extent().blocks + block;
  }
  constexpr std::uint8_t scale(std::size_t line, std::size_t block) const noexcept { return scales.data()[scale_offset_of(line, block)]; }
  constexpr std::size_t scale_span() const noexcept {
    const scale_extent e = stored_scale_extent();
    if (e.size() == 0) return 0;
    if (storage.scales != scale_layout::row_major) return e.size();
    return scale_offset_of(e.lines - 1, e.blocks - 1) + 1;
  }
};

// mxkit's own copies as foreign views (every mx_storage field at its default but the scale layout).
template <class Byte>
nvfp4_foreign_view foreign_view(const nvfp4_basic_view<Byte>& v) noexcept {
  const nvfp4_layout& l = v.layout;
  return {l,
          v.options,
          own_storage(v.scales_layout),
          {v.data, v.data ? l.data_bytes() : 0},
          {v.scales, v.scales ? scale_storage_size(v.scales_layout, l.lines(), l.blocks_per_line()) : 0},
          v.tensor_scale,
          v.tensor_scale_from_amax};
}
inline nvfp4_foreign_view foreign_view(const nvfp4_tensor& t) noexcept { return foreign_view(t.view()); }
inline const nvfp4_foreign_view& foreign_view(const nvfp4_foreign_view& v) noexcept { return v; }

namespace detail {
// The description (layout, options and storage; pointers aside) and, with the buffers, the whole
// view: the checks of MX foreign views (tensor/foreign_layout.hpp) on an NVFP4 layout.
inline void check_nvfp4_foreign_storage(const nvfp4_foreign_view& v, const char* what) {
  check_nvfp4_layout(v.layout, what);
  check_nvfp4_options(v.options, what);
  check_foreign_storage_fields(v, what);
}
inline void check_nvfp4_foreign_view(const nvfp4_foreign_view& v, const char* what) {
  check_nvfp4_foreign_storage(v, what);
  check_foreign_buffers(v, what);
}
}  // namespace detail

// A copy's bytes in a foreign layout (what a peer's kernel would have written): padded scale
// entries hold storage.padding_scale (0 when unchecked), bytes between rows of a larger data_ld 0.
struct nvfp4_foreign_buffers {
  nvfp4_layout layout;
  nvfp4_options options;
  mx_storage storage;
  std::vector<std::uint8_t> data, scales;
  float tensor_scale = 1.0f;
  bool tensor_scale_from_amax = true;

  nvfp4_foreign_view view() const noexcept { return {layout, options, storage, data, scales, tensor_scale, tensor_scale_from_amax}; }
};
inline nvfp4_foreign_view foreign_view(const nvfp4_foreign_buffers& b) noexcept { return b.view(); }

// `copy` (mxkit's storage) rewritten as `storage` describes; the tensor scale is copied as it is.
template <class Byte>
nvfp4_foreign_buffers store_foreign(const nvfp4_basic_view<Byte>& copy, const mx_storage& storage) {
  nvfp4_foreign_buffers out{copy.layout, copy.options, storage, {}, {}, copy.tensor_scale, copy.tensor_scale_from_amax};
  const nvfp4_foreign_view shape = out.view();  // addressing only, before the buffers exist
  detail::check_nvfp4_foreign_storage(shape, "store_foreign");
  const nvfp4_layout& l = copy.layout;
  detail::check_enum(copy.scales_layout, scale_layout::aiter_shuffle, "scale_layout", "store_foreign");
  detail::require(l.data_bytes() == 0 || (copy.data && copy.scales), "store_foreign: null data or scales for a ", l.rows, "x", l.cols,
                  " ", nvfp4_format_name(l.format), " copy");
  out.data.assign(shape.data_span(), 0);
  out.scales.assign(shape.scale_span(), storage.padding_scale.value_or(0));
  if (l.blocks_per_line() == 0) return out;
  const bool line_major = shape.line_major();
  const std::size_t ld = shape.data_ld(), stored = shape.stored_length();
  for (std::size_t line = 0; line < l.lines(); ++line) {
    for (std::size_t p = 0; p < stored; ++p) {
      const std::size_t row = line_major ? line : p, index = line_major ? p : line;
      const std::uint8_t c = copy.code(line, p);
      std::uint8_t& byte = out.data[row * ld + index / 2];
      const bool high = (index & 1) != (storage.nibbles == nibble_order::high_first);
      byte = high ? static_cast<std::uint8_t>((byte & 0x0F) | (c << 4)) : static_cast<std::uint8_t>((byte & 0xF0) | c);
    }
    for (std::size_t b = 0; b < l.blocks_per_line(); ++b) out.scales[shape.scale_offset_of(line, b)] = copy.scale(line, b);
  }
  return out;
}
inline nvfp4_foreign_buffers store_foreign(const nvfp4_tensor& t, const mx_storage& storage) { return store_foreign(t.view(), storage); }

MXKIT_END_NAMESPACE
