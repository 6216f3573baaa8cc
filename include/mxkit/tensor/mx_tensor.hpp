// SPDX-License-Identifier: Apache-2.0
#pragma once
// MX copies: the owning host tensor and its views. Their layout is every block-scaled copy's
// (tensor/block_layout.hpp: rowwise or columnwise, the block axis contiguous and padded to the
// format's k = 32). Scales are one E8M0 byte per block, [lines, padded/k] row-major in mxkit's own
// storage. A format with a tensor scale (block_format::tensor_scale) keeps one fp32 value beside
// the block scales; the MX formats have none, and their views leave its pointer null.
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/pack.hpp>
#include <mxkit/block/quantize_options.hpp>
#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/config.hpp>
#include <mxkit/error.hpp>
#include <mxkit/tensor/block_layout.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE

// Philox stream for stochastic rounding of one copy: the two copies of a tensor draw apart (the
// options' stream with its top bit flipped for the columnwise copy; NVFP4's copies likewise).
MXKIT_HD constexpr std::uint32_t stochastic_stream(std::uint32_t stream, block_axis a) noexcept {
  return stream ^ (a == block_axis::columnwise ? 0x80000000u : 0u);
}
MXKIT_HD constexpr std::uint32_t stochastic_stream(const quantize_options& o, block_axis a) noexcept {
  return stochastic_stream(o.stream, a);
}

namespace detail {
// The options' enums are ones the block functions know: a scale rule or rounding mode cast from
// an out-of-range integer would fall to a switch's default and quantize by another rule.
template <class... Where>
void check_options(const quantize_options& o, const Where&... where) {
  check_enum(o.rule, scale_rule::ceil, "scale_rule", where...);
  check_enum(o.round, rounding::stochastic, "rounding", where...);
}

// The host check of an MX copy's layout from a caller, before anything is allocated or
// addressed: an MX format (NVFP4's copies are nvfp4_tensor's; an unknown value would decode as
// another format), then the axis and the sizes.
template <class... Where>
void check_mx_layout(const block_layout& l, const Where&... where) {
  to_mx_type(l.format, where...);
  check_layout_extents(l, where...);
}
}  // namespace detail

// The one view of a stored MX copy, for host and device pointers alike (mdspan's shape: the
// pointers, the extents and layout of the elements (block_layout), and a layout policy for the
// scales). The host reference, validate, the GPU quantizer's outputs, dequantize and the GEMMs all
// take it. Scales are [lines, blocks_per_line] in `scales_layout`: row-major (mxkit's own), or a
// vendor's tiled order (tensor/scale_layout.hpp), which the GEMMs refuse and dequantize reads.
template <class Byte>
struct mx_basic_view {
  using tensor_scale_pointer = std::conditional_t<std::is_const_v<Byte>, const float*, float*>;

  block_layout layout;
  quantize_options options;  // how it was quantized: dequantize needs the rotation
  Byte* data = nullptr;      // [lines, line_bytes]
  Byte* scales = nullptr;    // scale_storage_size(scales_layout, lines, blocks_per_line) bytes
  scale_layout scales_layout = scale_layout::row_major;
  // The format's tensor scale (block_format::tensor_scale is fp32): one float in the memory of
  // data and scales. Null for a format without one (every MX format): nothing reads it then.
  tensor_scale_pointer tensor_scale = nullptr;

  MXKIT_HD constexpr std::uint8_t code(std::size_t line, std::size_t pos) const noexcept {
    return load_code(data + line * layout.line_bytes(), pos, layout.storage_bits());
  }
  MXKIT_HD constexpr std::size_t scale_index(std::size_t line, std::size_t block) const noexcept {
    return scales_layout == scale_layout::row_major ? line * layout.blocks_per_line() + block
                                                    : scale_offset(scales_layout, layout.lines(), layout.blocks_per_line(), line, block);
  }
  MXKIT_HD constexpr std::uint8_t scale(std::size_t line, std::size_t block) const noexcept { return scales[scale_index(line, block)]; }
};
using mx_view = mx_basic_view<std::uint8_t>;
using mx_const_view = mx_basic_view<const std::uint8_t>;

// Owning host tensor. Its buffers hold exactly layout().data_bytes() and scale_count() bytes for
// its whole life, so every consumer (dequantize, the GEMMs, views) may read what the layout
// says: elements are reached through fixed-size spans, and a whole buffer is replaced only by
// set_data/set_scales with one of the same size. (A std::vector& accessor let a caller resize a
// buffer behind the layout, which every reader then overran.)
class mx_tensor {
 public:
  mx_tensor() = default;
  // Refuses an unknown format, axis, scale rule or rounding, and a shape whose sizes wrap
  // (detail::check_mx_layout) before allocating.
  mx_tensor(block_layout layout, const quantize_options& options)
      : layout_(checked(layout, options)),
        options_(options),
        data_(layout_.data_bytes()),
        scales_(layout_.scale_count()),
        tensor_scale_(layout_.format.has_tensor_scale() ? 1 : 0, 1.0f) {}

  const block_layout& layout() const noexcept { return layout_; }
  const quantize_options& options() const noexcept { return options_; }
  mx_type type() const { return layout_.mx(); }
  block_axis axis() const noexcept { return layout_.axis; }
  std::size_t rows() const noexcept { return layout_.rows; }
  std::size_t cols() const noexcept { return layout_.cols; }
  bool empty() const noexcept { return layout_.rows == 0 || layout_.cols == 0; }

  // [lines, line_bytes] element bytes and [lines, blocks_per_line] scales. The spans are const so
  // that `t.data() = bytes` does not compile: on a span it would rebind a temporary and change
  // nothing; set_data is the way to replace the bytes.
  const std::span<std::uint8_t> data() noexcept { return data_; }
  const std::span<const std::uint8_t> data() const noexcept { return data_; }
  const std::span<std::uint8_t> scales() noexcept { return scales_; }
  const std::span<const std::uint8_t> scales() const noexcept { return scales_; }
  std::size_t bytes() const noexcept { return data_.size() + scales_.size(); }
  // The tensor scale of a format that has one (block_format::has_tensor_scale); empty for MX.
  const std::span<float> tensor_scale() noexcept { return tensor_scale_; }
  const std::span<const float> tensor_scale() const noexcept { return tensor_scale_; }

  // Replace the element bytes or the scales (a device copy brought back, bytes read from a file)
  // with a buffer of exactly the layout's size.
  void set_data(std::vector<std::uint8_t> bytes) {
    detail::require(bytes.size() == data_.size(), "mx_tensor::set_data: ", bytes.size(), " bytes for a ", name_of(layout_.axis), " ",
                    rows(), "x", cols(), " ", format_name(layout_.format), " tensor, expected ", data_.size());
    data_ = std::move(bytes);
  }
  void set_scales(std::vector<std::uint8_t> scales) {
    detail::require(scales.size() == scales_.size(), "mx_tensor::set_scales: ", scales.size(), " scales for a ", name_of(layout_.axis),
                    " ", rows(), "x", cols(), " ", format_name(layout_.format), " tensor, expected ", scales_.size());
    scales_ = std::move(scales);
  }

  mx_view view() noexcept { return {layout_, options_, data_.data(), scales_.data(), scale_layout::row_major, tensor_scale_pointer()}; }
  mx_const_view view() const noexcept {
    return {layout_, options_, data_.data(), scales_.data(), scale_layout::row_major, tensor_scale_pointer()};
  }

 private:
  static const block_layout& checked(const block_layout& l, const quantize_options& o) {
    detail::check_mx_layout(l, "mx_tensor");
    detail::check_options(o, "mx_tensor");
    return l;
  }

  // Null where the format has no tensor scale, so a view says "none" the same way everywhere.
  float* tensor_scale_pointer() noexcept { return tensor_scale_.empty() ? nullptr : tensor_scale_.data(); }
  const float* tensor_scale_pointer() const noexcept { return tensor_scale_.empty() ? nullptr : tensor_scale_.data(); }

  block_layout layout_;
  quantize_options options_;
  std::vector<std::uint8_t> data_;
  std::vector<std::uint8_t> scales_;
  std::vector<float> tensor_scale_;  // 1 value with a tensor scale, none without
};

MXKIT_END_NAMESPACE
