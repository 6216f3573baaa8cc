// SPDX-License-Identifier: Apache-2.0
#pragma once
// Block-scaled matrices. A logical [rows, cols] matrix is quantized in one of two layouts, with
// k the format's block size (block_format::block_size(); 32 for every MX format):
//   rowwise     blocks of k along cols; stored [rows, cols_padded]        (X for fprop)
//   columnwise  blocks of k along rows; stored transposed [cols, rows_padded] (X^T for wgrad)
// so every stored copy is "block axis contiguous": line l, position p. Scales are one byte per
// block (E8M0 for MX), [lines, padded/k] row-major. The block axis is zero-padded to a multiple of
// k (zeros change no amax, so no scale); padded positions hold the quantized padding and are part
// of the storage. Elements use the format's storage bits (FP4 packed two per byte, low nibble
// first). A format with a tensor scale (block_format::tensor_scale) keeps one fp32 value beside
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
#include <mxkit/tensor/scale_layout.hpp>

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

// Philox stream for stochastic rounding of one copy: the two copies of a tensor draw apart (the
// options' stream with its top bit flipped for the columnwise copy; NVFP4's copies likewise).
MXKIT_HD constexpr std::uint32_t stochastic_stream(std::uint32_t stream, block_axis a) noexcept {
  return stream ^ (a == block_axis::columnwise ? 0x80000000u : 0u);
}
MXKIT_HD constexpr std::uint32_t stochastic_stream(const quantize_options& o, block_axis a) noexcept {
  return stochastic_stream(o.stream, a);
}

// Shape and addressing shared by owning tensors and views (host or device pointers).
struct mx_layout {
  mx_type type = mx_type::mxfp4;
  block_axis axis = block_axis::rowwise;
  std::size_t rows = 0, cols = 0;  // logical matrix

  MXKIT_HD constexpr std::size_t lines() const noexcept { return axis == block_axis::rowwise ? rows : cols; }
  MXKIT_HD constexpr std::size_t line_length() const noexcept { return axis == block_axis::rowwise ? cols : rows; }
  // Elements per block along the block axis: the format's (block_size_of).
  MXKIT_HD constexpr std::size_t block_size() const noexcept { return static_cast<std::size_t>(block_size_of(type)); }
  MXKIT_HD constexpr std::size_t padded_length() const noexcept { return round_up_to_block(line_length(), block_size()); }
  MXKIT_HD constexpr std::size_t blocks_per_line() const noexcept { return padded_length() / block_size(); }
  MXKIT_HD constexpr int storage_bits() const noexcept { return storage_bits_of(type); }
  MXKIT_HD constexpr std::size_t line_bytes() const noexcept { return packed_bytes(padded_length(), storage_bits()); }
  MXKIT_HD constexpr std::size_t data_bytes() const noexcept { return lines() * line_bytes(); }
  MXKIT_HD constexpr std::size_t scale_count() const noexcept { return lines() * blocks_per_line(); }
  // Storage coordinates of logical element (r, c).
  MXKIT_HD constexpr std::size_t line_of(std::size_t r, std::size_t c) const noexcept { return axis == block_axis::rowwise ? r : c; }
  MXKIT_HD constexpr std::size_t position_of(std::size_t r, std::size_t c) const noexcept { return axis == block_axis::rowwise ? c : r; }
};

namespace detail {
// The options' enums are ones the block functions know: a scale rule or rounding mode cast from
// an out-of-range integer would fall to a switch's default and quantize by another rule.
template <class... Where>
void check_options(const quantize_options& o, const Where&... where) {
  check_enum(o.rule, scale_rule::ceil, "scale_rule", where...);
  check_enum(o.round, rounding::stochastic, "rounding", where...);
}

// The host check of a layout from a caller, before anything is allocated or addressed: a known
// format and axis (an unknown mx_type would decode as FP4), and sizes that do not wrap. lines x
// padded_length() bounds every size the MXKIT_HD accessors compute (data_bytes, scale_count,
// rows x cols, the stochastic element index line * padded_length + pos), so once it fits they
// are all exact.
template <class... Where>
void check_layout(const mx_layout& l, const Where&... where) {
  check_enum(l.type, mx_type::mxint8, "mx_type", where...);
  check_enum(l.axis, block_axis::columnwise, "block_axis", where...);
  const bool rowwise = l.axis == block_axis::rowwise;
  const std::size_t padded = checked_round_up({rowwise ? "cols" : "rows", l.line_length()}, l.block_size(), where...);
  checked_mul({rowwise ? "rows" : "cols", l.lines()}, {rowwise ? "padded cols" : "padded rows", padded}, where...);
}
}  // namespace detail

// The one view of a stored MX copy, for host and device pointers alike (mdspan's shape: the
// pointers, the extents and layout of the elements (mx_layout), and a layout policy for the
// scales). The host reference, validate, the GPU quantizer's outputs, dequantize and the GEMMs all
// take it. Scales are [lines, blocks_per_line] in `scales_layout`: row-major (mxkit's own), or a
// vendor's tiled order (tensor/scale_layout.hpp), which the GEMMs refuse and dequantize reads.
template <class Byte>
struct mx_basic_view {
  using tensor_scale_pointer = std::conditional_t<std::is_const_v<Byte>, const float*, float*>;

  mx_layout layout;
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
  // (detail::check_layout) before allocating.
  mx_tensor(mx_layout layout, const quantize_options& options)
      : layout_(checked(layout, options)),
        options_(options),
        data_(layout_.data_bytes()),
        scales_(layout_.scale_count()),
        tensor_scale_(format_of(layout_.type).has_tensor_scale() ? 1 : 0, 1.0f) {}

  const mx_layout& layout() const noexcept { return layout_; }
  const quantize_options& options() const noexcept { return options_; }
  mx_type type() const noexcept { return layout_.type; }
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
                    rows(), "x", cols(), " ", name_of(layout_.type), " tensor, expected ", data_.size());
    data_ = std::move(bytes);
  }
  void set_scales(std::vector<std::uint8_t> scales) {
    detail::require(scales.size() == scales_.size(), "mx_tensor::set_scales: ", scales.size(), " scales for a ", name_of(layout_.axis),
                    " ", rows(), "x", cols(), " ", name_of(layout_.type), " tensor, expected ", scales_.size());
    scales_ = std::move(scales);
  }

  mx_view view() noexcept { return {layout_, options_, data_.data(), scales_.data(), scale_layout::row_major, tensor_scale_pointer()}; }
  mx_const_view view() const noexcept {
    return {layout_, options_, data_.data(), scales_.data(), scale_layout::row_major, tensor_scale_pointer()};
  }

 private:
  static const mx_layout& checked(const mx_layout& l, const quantize_options& o) {
    detail::check_layout(l, "mx_tensor");
    detail::check_options(o, "mx_tensor");
    return l;
  }

  // Null where the format has no tensor scale, so a view says "none" the same way everywhere.
  float* tensor_scale_pointer() noexcept { return tensor_scale_.empty() ? nullptr : tensor_scale_.data(); }
  const float* tensor_scale_pointer() const noexcept { return tensor_scale_.empty() ? nullptr : tensor_scale_.data(); }

  mx_layout layout_;
  quantize_options options_;
  std::vector<std::uint8_t> data_;
  std::vector<std::uint8_t> scales_;
  std::vector<float> tensor_scale_;  // 1 value with a tensor scale, none without
};

MXKIT_END_NAMESPACE
