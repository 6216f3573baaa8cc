// SPDX-License-Identifier: Apache-2.0
#pragma once
// NVFP4 copies (formats::nvfp4, formats::nvfp4_2d: block/block_format.hpp): the owning host
// tensor and its views. Their layout is every block-scaled copy's (tensor/block_layout.hpp) with
// the format's 16-element blocks; E2M1 codes two per byte, element 2i in the low nibble
// (block/pack.hpp); one E4M3 scale byte per (line, block), [lines, blocks] row-major; and the fp32
// tensor scale t (block/nvfp4_scale.hpp), with whether it was computed from the copy's amax or
// given. A 16 x 16 copy stores the same way: the 16 lines of a tile each hold the tile's scale
// (the last tile of a copy whose lines are no multiple of 16 spans the lines there are).
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <mxkit/block/block_format.hpp>
#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/block/pack.hpp>
#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/config.hpp>
#include <mxkit/error.hpp>
#include <mxkit/tensor/block_layout.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE

namespace detail {
// The host checks of an NVFP4 copy's layout, options and tensor scale from a caller (as
// check_mx_layout and check_options for MX): an NVFP4 format, then the axis and the sizes
// (check_layout_extents); a known rounding and a 16-bit sign mask; a tensor scale that is a
// positive normal float.
template <class... Where>
void check_nvfp4_layout(const block_layout& l, const Where&... where) {
  require(is_nvfp4(l.format), where..., ": the format, ", format_fields{l.format},
          ", is not NVFP4 (formats::nvfp4 or formats::nvfp4_2d); MX copies are mx_tensor's");
  check_layout_extents(l, where...);
}
template <class... Where>
void check_nvfp4_options(const nvfp4_options& o, const Where&... where) {
  check_enum(o.round, rounding::stochastic, "rounding", where...);
  require(o.hadamard_signs <= 0xFFFFu, where..., ": hadamard_signs 0x", std::hex, o.hadamard_signs, std::dec,
          " has bits above the 16 elements of a block");
}
template <class... Where>
void check_tensor_scale(float t, const Where&... where) {
  require(nvfp4_valid_tensor_scale(t), where..., ": tensor scale ", t, " (bits 0x", std::hex, bit_cast<std::uint32_t>(t), std::dec,
          ") is not a positive, finite, normal float");
}
}  // namespace detail

// A stored NVFP4 copy, host or device pointers: the layout, how it was quantized, the bytes, the
// scales' placement and the tensor scale.
template <class Byte>
struct nvfp4_basic_view {
  block_layout layout{formats::nvfp4};  // formats::nvfp4 (1 x 16 blocks) or formats::nvfp4_2d (16 x 16)
  nvfp4_options options;
  Byte* data = nullptr;    // [lines, line_bytes]
  Byte* scales = nullptr;  // scale_storage_size(scales_layout, lines, blocks_per_line) E4M3 bytes
  scale_layout scales_layout = scale_layout::row_major;
  float tensor_scale = 1.0f;          // t: dequantizing multiplies by it
  bool tensor_scale_from_amax = true;  // false: it was given (validate then takes it as it is)

  MXKIT_HD constexpr std::uint8_t code(std::size_t line, std::size_t pos) const noexcept {
    return load_code(data + line * layout.line_bytes(), pos, layout.storage_bits());
  }
  MXKIT_HD constexpr std::size_t scale_index(std::size_t line, std::size_t block) const noexcept {
    return scales_layout == scale_layout::row_major ? line * layout.blocks_per_line() + block
                                                    : scale_offset(scales_layout, layout.lines(), layout.blocks_per_line(), line, block);
  }
  MXKIT_HD constexpr std::uint8_t scale(std::size_t line, std::size_t block) const noexcept { return scales[scale_index(line, block)]; }
};
using nvfp4_view = nvfp4_basic_view<std::uint8_t>;
using nvfp4_const_view = nvfp4_basic_view<const std::uint8_t>;

// Owning host NVFP4 copy: buffers of exactly layout().data_bytes() and scale_count() bytes for
// its whole life (as mx_tensor), and its tensor scale.
class nvfp4_tensor {
 public:
  nvfp4_tensor() = default;
  // Refuses a format that is not NVFP4, an unknown axis or rounding, and sizes that wrap.
  nvfp4_tensor(block_layout layout, const nvfp4_options& options, float tensor_scale = 1.0f, bool tensor_scale_from_amax = true)
      : layout_(checked(layout, options, tensor_scale)),
        options_(options),
        data_(layout_.data_bytes()),
        scales_(layout_.scale_count()),
        tensor_scale_(tensor_scale),
        from_amax_(tensor_scale_from_amax) {}

  const block_layout& layout() const noexcept { return layout_; }
  const nvfp4_options& options() const noexcept { return options_; }
  block_axis axis() const noexcept { return layout_.axis; }
  std::size_t rows() const noexcept { return layout_.rows; }
  std::size_t cols() const noexcept { return layout_.cols; }
  bool empty() const noexcept { return layout_.rows == 0 || layout_.cols == 0; }

  const std::span<std::uint8_t> data() noexcept { return data_; }
  const std::span<const std::uint8_t> data() const noexcept { return data_; }
  const std::span<std::uint8_t> scales() noexcept { return scales_; }
  const std::span<const std::uint8_t> scales() const noexcept { return scales_; }
  float tensor_scale() const noexcept { return tensor_scale_; }
  bool tensor_scale_from_amax() const noexcept { return from_amax_; }
  std::size_t bytes() const noexcept { return data_.size() + scales_.size() + sizeof(float); }

  nvfp4_view view() noexcept { return {layout_, options_, data_.data(), scales_.data(), scale_layout::row_major, tensor_scale_, from_amax_}; }
  nvfp4_const_view view() const noexcept {
    return {layout_, options_, data_.data(), scales_.data(), scale_layout::row_major, tensor_scale_, from_amax_};
  }

 private:
  static const block_layout& checked(const block_layout& l, const nvfp4_options& o, float t) {
    detail::check_nvfp4_layout(l, "nvfp4_tensor");
    detail::check_nvfp4_options(o, "nvfp4_tensor");
    detail::check_tensor_scale(t, "nvfp4_tensor");
    return l;
  }

  block_layout layout_{formats::nvfp4};
  nvfp4_options options_;
  std::vector<std::uint8_t> data_;
  std::vector<std::uint8_t> scales_;
  float tensor_scale_ = 1.0f;
  bool from_amax_ = true;
};

MXKIT_END_NAMESPACE
