// SPDX-License-Identifier: Apache-2.0
#pragma once
// How another library stores an MX copy: the description that validate (validation/validate.hpp) and
// validate_gemm (validation/validate_gemm.hpp) read foreign output through, given as raw host pointers.
// mxkit's own storage (tensor/mx_tensor.hpp) is the default of every field: lines of
// line_bytes() with the block-axis padding stored, FP4 low nibble first, scales [lines, blocks]
// row-major. The peers differ from it in these ways, one field each:
//
//  - Columnwise copies (blocks of 32 along the rows). `transposed`: stored [cols, rows] with the
//    block axis contiguous, as mxkit, torchao (to_mx of x.t()) and ROCm TransformerEngine's MXFP4
//    columnwise copy ([N, M/2] bytes) store them. `not_transposed`: stored like the input, [rows,
//    cols] row-major, as NVIDIA TransformerEngine's MXFP8 columnwise copy: data [M, K] with scales
//    [M/32, K] (TE's compact scale_inv puts the block index on the slow axis; see the strides below).
//  - Leading dimensions: `data_ld` bytes between consecutive stored rows (padded allocations,
//    views into larger buffers); scale strides for row-major scales.
//  - Scale placement (tensor/scale_layout.hpp): row_major with any two strides, cuBLAS's 128x4
//    tiles, or the AITER/hipBLASLt e8m0 shuffle. Every layout is addressed by (line, block), line
//    being the non-block axis: a columnwise copy's lines are the matrix's columns, also when its
//    data is not transposed (cuBLAS's layout for TE's columnwise operand is keyed the same way).
//  - FP4 nibble order. Default low_first: element 2i in the low nibble, as
//    torch.float4_e2m1fn_x2, CUDA's __nv_fp4x2_e2m1, torchao's current pack_uint4, aiter and ROCm
//    TE (`evens | odds << 4`) store it; high_first is the other order (torchao's pack_uint4 before
//    it switched, some hand-written kernels). Packing runs along the stored rows, so a
//    not-transposed FP4 copy packs two neighbouring columns per byte.
//  - Padding. A ragged last block (matrix edge not a multiple of 32) is padded to 32 with zeros;
//    `padding_stored` says whether those positions exist in storage (mxkit: yes; TE and torchao
//    require whole blocks). Tiled scale layouts and padded row-major scale allocations have
//    entries beyond the logical [lines, blocks]: `padding_scale` is the byte they must hold (0 in
//    mxkit's, cuBLAS's and torchao's to_blocked layouts; ROCm TE writes 127 into its shuffled
//    padding), or std::nullopt when they are not checked.
#include <cstddef>
#include <cstdint>
#include <concepts>
#include <optional>
#include <ostream>
#include <span>
#include <vector>

#include <mxkit/enum_names.hpp>
#include <mxkit/block/pack.hpp>
#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/error.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE

enum class nibble_order : std::uint8_t { low_first, high_first };
enum class columnwise_storage : std::uint8_t { transposed, not_transposed };

template <>
struct enum_names<nibble_order> {
  static constexpr const char* names[] = {"low_first", "high_first"};
  static constexpr nibble_order last = nibble_order::high_first;
};
template <>
struct enum_names<columnwise_storage> {
  static constexpr const char* names[] = {"transposed", "not_transposed"};
  static constexpr columnwise_storage last = columnwise_storage::not_transposed;
};

// Where the bytes of one stored MX copy live (all sizes in bytes; 0 means "packed", see below).
struct mx_storage {
  columnwise_storage columnwise = columnwise_storage::transposed;  // columnwise copies only
  nibble_order nibbles = nibble_order::low_first;                 // mxfp4 only
  // Bytes between consecutive stored rows: lines for rowwise and transposed copies, matrix rows
  // for not-transposed ones. 0: the packed row (mx_foreign_view::min_data_ld).
  std::size_t data_ld = 0;
  bool padding_stored = true;  // block-axis positions past the matrix edge (up to a multiple of 32) are stored

  scale_layout scales = scale_layout::row_major;
  // row_major only: the scale of (line, block) is at line * scale_line_stride + block *
  // scale_block_stride. Both 0: [lines, blocks] packed (with scale_padded's block count, if set).
  std::size_t scale_line_stride = 0, scale_block_stride = 0;
  // row_major only: the allocated [lines, blocks] extent when it is larger than the logical one
  // (TE allocates [roundup(M, 128), roundup(K/32, 4)]); {0, 0}: no padding. Tiled layouts pad
  // by their own rule (padded_scale_extent).
  scale_extent scale_padded{};
  std::optional<std::uint8_t> padding_scale = std::uint8_t{0};  // what padded scale entries hold; nullopt: unchecked
};

// A stored block-scaled copy in any of the layouts above: logical [rows, cols], its axis and
// format (layout), how it was quantized (options: quantize_options for MX, nvfp4_options for
// NVFP4), where its bytes are (storage), the caller's host buffers with their sizes, and the
// tensor scale of a format that has one (block_format::tensor_scale), as the copy stores it. The
// entry points that read a view refuse one whose buffers are shorter than data_span() or
// scale_span() (detail::check_foreign_view), naming both sizes. The accessors are the storage's
// arithmetic for every format: the layout gives the block size and the element bits.
// The format a default-constructed view or buffer of each family holds: MX's first (the options of
// every MX format are quantize_options); nvfp4_foreign_layout.hpp gives NVFP4's options theirs.
template <class Options>
inline constexpr block_format foreign_copy_default_format = formats::mxfp4;

template <class Options>
struct foreign_copy_view {
  block_layout layout{foreign_copy_default_format<Options>};
  Options options;
  mx_storage storage;
  std::span<const std::uint8_t> data{};
  std::span<const std::uint8_t> scales{};
  // NVFP4's fp32 tensor scale as the library stores it (mxkit's and torchao's decode scale, TE's
  // amax: the validation's formula reads it, validation/nvfp4_quirks.hpp), and whether it came
  // from the copy's amax or was given. The MX formats have none: the MX checks refuse any value
  // but these defaults rather than ignore it.
  float tensor_scale = 1.0f;
  bool tensor_scale_from_amax = true;

  // Stored rows run along the block axis (rowwise copies and transposed columnwise ones).
  constexpr bool line_major() const noexcept {
    return layout.axis == block_axis::rowwise || storage.columnwise == columnwise_storage::transposed;
  }
  // Block-axis positions present in storage.
  constexpr std::size_t stored_length() const noexcept {
    return storage.padding_stored ? layout.padded_length() : layout.line_length();
  }
  constexpr std::size_t stored_rows() const noexcept { return line_major() ? layout.lines() : stored_length(); }
  constexpr std::size_t min_data_ld() const noexcept {
    return packed_bytes(line_major() ? stored_length() : layout.lines(), layout.storage_bits());
  }
  constexpr std::size_t data_ld() const noexcept { return storage.data_ld ? storage.data_ld : min_data_ld(); }
  // Bytes from data to one past the last stored byte. Like every accessor here it does not check
  // its arithmetic: detail::check_foreign_storage has made sure it cannot wrap.
  constexpr std::size_t data_span() const noexcept {
    return stored_rows() == 0 || min_data_ld() == 0 ? 0 : (stored_rows() - 1) * data_ld() + min_data_ld();
  }

  // Code of block-axis position `pos` of line `line` (pos < stored_length()).
  constexpr std::uint8_t code(std::size_t line, std::size_t pos) const noexcept {
    const std::size_t row = line_major() ? line : pos, index = line_major() ? pos : line;
    const std::uint8_t* r = data.data() + row * data_ld();
    if (layout.storage_bits() == 8) return r[index];
    const std::uint8_t byte = r[index / 2];
    const bool high = (index & 1) != (storage.nibbles == nibble_order::high_first);
    return static_cast<std::uint8_t>(high ? byte >> 4 : byte & 0xF);
  }

  // The stored [lines, blocks] extent of the scales, padding included.
  constexpr scale_extent stored_scale_extent() const noexcept {
    const std::size_t lines = layout.lines(), blocks = layout.blocks_per_line();
    if (storage.scales != scale_layout::row_major) return padded_scale_extent(storage.scales, lines, blocks);
    return {storage.scale_padded.lines ? storage.scale_padded.lines : lines,
            storage.scale_padded.blocks ? storage.scale_padded.blocks : blocks};
  }
  // Offset of the scale of (line, block), for every entry of stored_scale_extent().
  constexpr std::size_t scale_offset_of(std::size_t line, std::size_t block) const noexcept {
    const std::size_t lines = layout.lines(), blocks = layout.blocks_per_line();
    if (storage.scales != scale_layout::row_major) return scale_offset(storage.scales, lines, blocks, line, block);
    if (storage.scale_line_stride || storage.scale_block_stride)
      return line * storage.scale_line_stride + block * storage.scale_block_stride;
    return line * stored_scale_extent().blocks + block;
  }
  constexpr std::uint8_t scale(std::size_t line, std::size_t block) const noexcept { return scales.data()[scale_offset_of(line, block)]; }
  // Bytes from scales to one past the last stored scale.
  constexpr std::size_t scale_span() const noexcept {
    const scale_extent e = stored_scale_extent();
    if (e.size() == 0) return 0;
    if (storage.scales != scale_layout::row_major) return e.size();
    return scale_offset_of(e.lines - 1, e.blocks - 1) + 1;
  }
};
using mx_foreign_view = foreign_copy_view<quantize_options>;

// mxkit's own storage, with the view's scale layout (row-major, or a tiled vendor layout).
inline mx_storage own_storage(scale_layout scales) noexcept {
  mx_storage s{};
  s.scales = scales;
  return s;
}
// mxkit's own copies as foreign views (every mx_storage field at its default). A view's buffer
// sizes are the ones its layout implies (mx_basic_view's contract); a tensor's are its vectors'.
// Unchecked (noexcept): a layout whose sizes wrap is refused by check_foreign_view.
template <class Byte>
mx_foreign_view foreign_view(mx_basic_view<Byte> v) noexcept {
  const block_layout& l = v.layout;
  const std::size_t data_bytes = v.data ? l.data_bytes() : 0;
  const std::size_t scale_bytes = v.scales ? scale_storage_size(v.scales_layout, l.lines(), l.blocks_per_line()) : 0;
  return {l, v.options, own_storage(v.scales_layout), {v.data, data_bytes}, {v.scales, scale_bytes}};
}
inline mx_foreign_view foreign_view(const mx_tensor& t) noexcept {
  return {t.layout(), t.options(), own_storage(scale_layout::row_major), t.data(), t.scales()};
}
inline const mx_foreign_view& foreign_view(const mx_foreign_view& v) noexcept { return v; }

// What the entry points that read a stored copy accept: anything foreign_view() turns into a
// view (a foreign view, mxkit's views and tensors, mx_foreign_buffers).
template <class C>
concept foreign_viewable = requires(const C& c) {
  { foreign_view(c) } -> std::convertible_to<mx_foreign_view>;
};

namespace detail {
// The storage fields of a foreign view whose layout has been checked (pointers aside); `what`
// names the caller. View: mx_foreign_view, or any view with its accessors (an NVFP4 copy's,
// tensor/nvfp4_foreign_layout.hpp). Once it passes, data_span(), scale_span() and every offset the
// accessors compute are exact and no larger than one object (checked_arithmetic.hpp).
template <class View>
void check_foreign_storage_fields(const View& v, const char* what) {
  const auto& l = v.layout;
  const mx_storage& s = v.storage;
  check_enum(s.columnwise, columnwise_storage::not_transposed, "columnwise_storage", what);
  check_enum(s.nibbles, nibble_order::high_first, "nibble_order", what);
  check_enum(s.scales, scale_layout::aiter_shuffle, "scale_layout", what);
  require(s.data_ld == 0 || s.data_ld >= v.min_data_ld(), what, ": data_ld ", s.data_ld, " bytes is smaller than a stored row of ",
          v.min_data_ld(), " bytes (", format_name(l.format), " ", name_of(l.axis), " ", l.rows, "x", l.cols,
          v.line_major() ? "" : ", not transposed", ")");
  if (v.stored_rows() > 0 && v.min_data_ld() > 0) {  // data_span(), computed without wrapping
    const std::size_t last_row = checked_mul({"last stored row", v.stored_rows() - 1}, {"data_ld", v.data_ld()}, what);
    const std::size_t span = checked_add({"last stored row x data_ld", last_row}, {"stored row bytes", v.min_data_ld()}, what);
    checked_bytes({"data span", span}, 1, what, " (data_ld ", v.data_ld(), ")");
  }
  if (s.scales != scale_layout::row_major) {
    require(s.scale_padded.lines == 0 && s.scale_padded.blocks == 0 && s.scale_line_stride == 0 && s.scale_block_stride == 0,
            what, ": scale strides and scale_padded apply to row_major scales only, not ", name_of(s.scales));
    const scale_extent e = check_scale_extent(s.scales, l.lines(), l.blocks_per_line(), what);
    checked_bytes({"padded scale entries", e.size()}, 1, what);
    return;
  }
  require(s.scale_padded.lines == 0 || s.scale_padded.lines >= l.lines(), what, ": scale_padded.lines ", s.scale_padded.lines,
          " is smaller than the ", l.lines(), " lines of the copy");
  require(s.scale_padded.blocks == 0 || s.scale_padded.blocks >= l.blocks_per_line(), what, ": scale_padded.blocks ",
          s.scale_padded.blocks, " is smaller than the ", l.blocks_per_line(), " blocks per line");
  const scale_extent e = v.stored_scale_extent();
  const std::size_t entries = checked_mul({s.scale_padded.lines ? "scale_padded.lines" : "lines", e.lines},
                                          {s.scale_padded.blocks ? "scale_padded.blocks" : "blocks per line", e.blocks}, what);
  // Where there is no entry a stride places nothing, and a peer's stride may be 0 there: TE's
  // columnwise scales of a copy with no lines are [blocks, 0], block stride 0 (peer_presets.hpp).
  require(entries == 0 || (s.scale_line_stride == 0) == (s.scale_block_stride == 0), what,
          ": scale strides must both be set or both 0, got line ", s.scale_line_stride, " and block ", s.scale_block_stride);
  if (!s.scale_line_stride) {
    checked_bytes({"scale entries", entries}, 1, what);
    return;
  }
  if (entries == 0) return;
  // scale_span(): the offset of the last entry plus one, computed without wrapping.
  const std::size_t last_line = checked_mul({"last scale line", e.lines - 1}, {"scale_line_stride", s.scale_line_stride}, what);
  const std::size_t last_block = checked_mul({"last scale block", e.blocks - 1}, {"scale_block_stride", s.scale_block_stride}, what);
  const std::size_t last = checked_add({"last line offset", last_line}, {"last block offset", last_block}, what);
  checked_bytes({"scale span", checked_add({"last scale offset", last}, {"one", 1}, what)}, 1, what, " (scale_line_stride ",
                s.scale_line_stride, ", scale_block_stride ", s.scale_block_stride, ")");
  // One of the two nestings must keep every (line, block) of the stored extent apart (the
  // products are below the span just checked).
  const bool lines_outer = s.scale_line_stride >= last_block + 1;
  const bool blocks_outer = s.scale_block_stride >= last_line + 1;
  require(entries <= 1 || lines_outer || blocks_outer, what, ": scale strides (line ", s.scale_line_stride, ", block ",
          s.scale_block_stride, ") make the scales of a ", e.lines, "x", e.blocks, " extent overlap");
}
// The layout and storage fields of a foreign view (pointers aside), as check_mx_layout makes
// block_layout's sizes exact.
inline void check_foreign_storage(const mx_foreign_view& v, const char* what) {
  check_mx_layout(v.layout, what);
  require(v.tensor_scale == 1.0f && v.tensor_scale_from_amax, what, ": an MX copy has no tensor scale, got ", v.tensor_scale,
          v.tensor_scale_from_amax ? "" : " (given)", "; leave tensor_scale at 1 and tensor_scale_from_amax true");
  check_foreign_storage_fields(v, what);
}

// "1 byte", "304 bytes".
struct byte_count {
  std::size_t n;
  friend std::ostream& operator<<(std::ostream& s, byte_count b) { return s << b.n << (b.n == 1 ? " byte" : " bytes"); }
};

// The buffers of a foreign view whose description passed: they exist and hold every byte the
// description addresses.
template <class View>
void check_foreign_buffers(const View& v, const char* what) {
  const auto& l = v.layout;
  const std::size_t data_span = v.data_span(), scale_span = v.scale_span();
  require(data_span == 0 || v.data.data() != nullptr, what, ": null element data for a ", l.rows, "x", l.cols, " ",
          format_name(l.format), " copy");
  require(scale_span == 0 || v.scales.data() != nullptr, what, ": null scales for a ", l.rows, "x", l.cols, " ", format_name(l.format),
          " copy");
  require(v.data.size() >= data_span, what, ": data buffer of ", byte_count{v.data.size()}, " for a ", l.rows, "x", l.cols, " ",
          format_name(l.format), " ", name_of(l.axis), " copy whose storage spans ", byte_count{data_span}, " (data_ld ", v.data_ld(), ")");
  require(v.scales.size() >= scale_span, what, ": scale buffer of ", byte_count{v.scales.size()}, " for a ", l.rows, "x", l.cols,
          " ", format_name(l.format), " ", name_of(l.axis), " copy whose ", name_of(v.storage.scales), " scales span ",
          byte_count{scale_span});
}
// The argument check of every entry point that reads a foreign view: the description, then
// buffers that exist and hold every byte the description addresses.
inline void check_foreign_view(const mx_foreign_view& v, const char* what) {
  check_foreign_storage(v, what);
  check_foreign_buffers(v, what);
}
}  // namespace detail

// The chosen lines of a foreign copy, in that order, as an mx_tensor in mxkit's own storage
// (positions that are not stored read as code 0). `lines` empty: every line.
inline mx_tensor to_mx_tensor(const mx_foreign_view& v, const std::vector<std::size_t>& lines = {}) {
  detail::check_foreign_view(v, "to_mx_tensor");
  block_layout l = v.layout;
  const std::size_t n = lines.empty() ? l.lines() : lines.size();
  (l.axis == block_axis::rowwise ? l.rows : l.cols) = n;
  mx_tensor out(l, v.options);
  if (lines.empty() && l.blocks_per_line() == 0) return out;  // nothing stored: skip the empty lines of a 0 x 2^63 copy
  const int bits = l.storage_bits();
  const std::size_t stored = v.stored_length();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t line = lines.empty() ? i : lines[i];
    detail::require(line < v.layout.lines(), "to_mx_tensor: line ", line, " of a copy with ", v.layout.lines(), " lines");
    std::uint8_t* row = out.data().data() + i * l.line_bytes();
    for (std::size_t p = 0; p < stored; ++p) store_code(row, p, v.code(line, p), bits);
    for (std::size_t b = 0; b < l.blocks_per_line(); ++b) out.scales()[i * l.blocks_per_line() + b] = v.scale(line, b);
  }
  return out;
}

// A copy's bytes in a foreign layout: what a peer's kernel would have written (tests, examples,
// and converting mxkit's output for a peer's GEMM). Padded scale entries hold
// storage.padding_scale (0 when unchecked); bytes between rows of a larger data_ld hold 0.
template <class Options>
struct foreign_copy_buffers {
  block_layout layout{foreign_copy_default_format<Options>};
  Options options;
  mx_storage storage;
  std::vector<std::uint8_t> data, scales;
  float tensor_scale = 1.0f;  // as foreign_copy_view's
  bool tensor_scale_from_amax = true;

  // The buffers with their sizes.
  foreign_copy_view<Options> view() const noexcept { return {layout, options, storage, data, scales, tensor_scale, tensor_scale_from_amax}; }
};
using mx_foreign_buffers = foreign_copy_buffers<quantize_options>;
inline mx_foreign_view foreign_view(const mx_foreign_buffers& b) noexcept { return b.view(); }

namespace detail {
// `copy` (mxkit's storage, any format: MX's views and NVFP4's) rewritten as `storage` describes;
// the tensor scale, where the format has one, is copied as it is. `check` is the family's check of
// a foreign description (check_foreign_storage, check_nvfp4_foreign_storage).
template <class Options, class Copy, class Check>
foreign_copy_buffers<Options> store_foreign_copy(const Copy& copy, const mx_storage& storage, float tensor_scale, bool from_amax,
                                                 Check check) {
  foreign_copy_buffers<Options> out{copy.layout, copy.options, storage, {}, {}, tensor_scale, from_amax};
  const foreign_copy_view<Options> shape = out.view();  // addressing only, before the buffers exist
  check(shape, "store_foreign");
  const block_layout& l = copy.layout;
  check_enum(copy.scales_layout, scale_layout::aiter_shuffle, "scale_layout", "store_foreign");
  require(l.data_bytes() == 0 || (copy.data && copy.scales), "store_foreign: null data or scales for a ", l.rows, "x", l.cols, " ",
          format_name(l.format), " copy");
  out.data.assign(shape.data_span(), 0);
  out.scales.assign(shape.scale_span(), storage.padding_scale.value_or(0));
  if (l.blocks_per_line() == 0) return out;  // no element and no logical scale
  const int bits = l.storage_bits();
  const bool line_major = shape.line_major();
  const std::size_t ld = shape.data_ld(), stored = shape.stored_length();
  for (std::size_t line = 0; line < l.lines(); ++line) {
    for (std::size_t p = 0; p < stored; ++p) {
      const std::size_t row = line_major ? line : p, index = line_major ? p : line;
      const std::uint8_t c = copy.code(line, p);
      if (bits == 4) {
        std::uint8_t& byte = out.data[row * ld + index / 2];
        const bool high = (index & 1) != (storage.nibbles == nibble_order::high_first);
        byte = high ? static_cast<std::uint8_t>((byte & 0x0F) | (c << 4)) : static_cast<std::uint8_t>((byte & 0xF0) | c);
      } else {
        out.data[row * ld + index] = c;
      }
    }
    for (std::size_t b = 0; b < l.blocks_per_line(); ++b) out.scales[shape.scale_offset_of(line, b)] = copy.scale(line, b);
  }
  return out;
}
}  // namespace detail

inline mx_foreign_buffers store_foreign(mx_const_view copy, const mx_storage& storage) {
  return detail::store_foreign_copy<quantize_options>(copy, storage, 1.0f, true,
                                                      [](const mx_foreign_view& v, const char* what) { detail::check_foreign_storage(v, what); });
}
MXKIT_END_NAMESPACE
