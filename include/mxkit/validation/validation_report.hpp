// SPDX-License-Identifier: Apache-2.0
#pragma once
// What validate (validation/validate.hpp) finds, and how it is printed: one mismatch (a block's scale,
// an element's code, or padding), the report with its counts per kind, the full text
// (operator<<, to_string: a header line, then the first mismatches) and the one-line summary()
// for test harnesses. Both say how many elements were not compared and why (the codes of a block
// whose scale is NaN carry no information: OCP MX v1.0 section 6.3).
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/validation/peer_quirks.hpp>
#include <mxkit/tensor/foreign_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

enum class mismatch_kind : std::uint8_t { scale, element, padding };

}  // namespace ref
template <>
struct enum_names<ref::mismatch_kind> {
  static constexpr const char* names[] = {"scale", "element", "padding"};
  static constexpr ref::mismatch_kind last = ref::mismatch_kind::padding;
};
namespace ref {

// One byte that differs from the reference: a block's scale, an element's code, or padding.
struct mx_mismatch {
  mx_type type = mx_type::mxfp4;
  bool is_scale = false;  // a scale byte (padding too, for a padded scale entry)
  bool padding = false;   // a padding position of the block axis, or a padded scale entry
  std::size_t line = 0;   // storage line: the row (rowwise) or the column (columnwise)
  std::size_t block = 0;  // block within the line
  std::size_t index = 0;  // element within the block (0 for a scale)
  std::size_t row = 0;    // logical coordinates of the element (a scale: its block's first element);
  std::size_t col = 0;    //   beyond rows/cols for padding
  float input = 0.0f;     // element: its input; scale: the block's input amax (both before any rotation)
  float value = 0.0f;     // element: the value quantized (rotated, normalized); scale: the amax the rule saw
  bool rotated = false;   // value was rotated (the options' Hadamard)
  std::uint8_t scale = 0;         // the block's expected scale byte
  std::uint8_t actual_scale = 0;  // the block's scale byte in the copy
  std::uint8_t expected = 0;      // reference byte: scale, or element code (FP4: the nibble)
  std::uint8_t actual = 0;

  mismatch_kind kind() const noexcept {
    return padding ? mismatch_kind::padding : is_scale ? mismatch_kind::scale : mismatch_kind::element;
  }
};

struct mx_validation_report {
  block_layout layout;
  quantize_options options;
  mx_storage storage;
  peer_quirks quirks;
  std::size_t scales_checked = 0, elements_checked = 0, padding_checked = 0;
  std::size_t scale_mismatches = 0, element_mismatches = 0, padding_mismatches = 0;
  std::size_t nan_blocks_skipped = 0;    // NaN-scale blocks whose codes were not compared
  std::size_t nan_elements_skipped = 0;  // their elements (padding positions aside)
  std::vector<mx_mismatch> mismatches;  // the first ones in line order (line, block; scale first), padded scale entries last

  bool ok() const noexcept { return scale_mismatches == 0 && element_mismatches == 0 && padding_mismatches == 0; }
  std::size_t mismatch_count() const noexcept { return scale_mismatches + element_mismatches + padding_mismatches; }
  std::string summary() const;  // one line (below)
};

}  // namespace ref
namespace detail {
inline void print_scale_byte(std::ostream& s, std::uint8_t b) {
  s << "0x" << std::hex << int{b} << std::dec;
  if (b == e8m0::nan_bits) s << " (NaN)";
  else s << " (2^" << int{b} - e8m0::bias << ")";
}
// "0xe (-4 x 2^-2 = -1)": the code, its element value, the scale and the product.
inline void print_code(std::ostream& s, mx_type type, std::uint8_t code, std::uint8_t scale) {
  const float element = visit_mx_type(type, [&](auto fmt) {
    using E = typename decltype(fmt)::element_type;
    return E::from_bits(code).to_float();
  });
  const e8m0 sc = e8m0::from_bits(scale);
  s << "0x" << std::hex << int{code} << std::dec << " (" << element << " x ";
  if (sc.is_nan()) s << "NaN = NaN)";
  else s << "2^" << sc.exponent() << " = " << dequantize_element_value(element, sc) << ")";
}
}  // namespace detail
namespace ref {

inline std::ostream& operator<<(std::ostream& s, const mx_mismatch& m) {
  const auto flags = s.flags();
  s << std::dec;
  if (m.is_scale && m.padding) {  // a padded entry of the scale layout: no element behind it
    s << "padding scale (line " << m.line << ", block " << m.block << "): expected ";
    detail::print_scale_byte(s, m.expected);
    s << ", actual ";
    detail::print_scale_byte(s, m.actual);
    s.flags(flags);
    return s;
  }
  s << name_of(m.kind()) << " (row " << m.row << ", col " << m.col << "; line " << m.line << ", block " << m.block;
  if (!m.is_scale) s << ", index " << m.index;
  s << "): ";
  if (m.is_scale) {
    s << "block amax " << m.value;
    if (m.rotated) s << " after the rotation (input amax " << m.input << ")";
    s << "; expected ";
    detail::print_scale_byte(s, m.expected);
    s << ", actual ";
    detail::print_scale_byte(s, m.actual);
  } else {
    s << "quantized " << m.value;
    if (m.rotated) s << " (input " << m.input << " before the rotation)";
    s << ", block scale ";
    detail::print_scale_byte(s, m.scale);
    s << "; expected ";
    detail::print_code(s, m.type, m.expected, m.scale);
    s << ", actual ";
    detail::print_code(s, m.type, m.actual, m.actual_scale);
  }
  s.flags(flags);
  return s;
}

}  // namespace ref
namespace detail {
// "mxfp8_e4m3 columnwise 256x512 (round_up, nearest_even; not transposed, cublas_128x4 scales)"
inline void print_copy(std::ostream& s, const mx_validation_report& r) {
  const block_layout& l = r.layout;
  const quantize_options& o = r.options;
  s << format_name(l.format) << ' ' << name_of(l.axis) << ' ' << l.rows << 'x' << l.cols << " (" << name_of(o.rule) << ", "
    << name_of(o.round) << (o.hadamard ? (o.random_signs ? ", hadamard with signs" : ", hadamard") : "");
  const mx_storage& st = r.storage;
  const mx_storage plain{};
  if (r.quirks.any()) s << ", peer quirks";
  if (l.axis == block_axis::columnwise && st.columnwise == columnwise_storage::not_transposed) s << "; not transposed";
  if (st.scales != scale_layout::row_major) s << "; " << name_of(st.scales) << " scales";
  if (l.format == formats::mxfp4 && st.nibbles != plain.nibbles) s << "; " << name_of(st.nibbles) << " nibbles";
  s << ")";
}

// "; 40 elements of 2 NaN-scale blocks not compared (...)": what the counts above leave out.
inline void print_skipped(std::ostream& s, const mx_validation_report& r) {
  if (r.nan_blocks_skipped == 0) return;
  s << "; " << r.nan_elements_skipped << " element" << (r.nan_elements_skipped == 1 ? "" : "s") << " of "
    << r.nan_blocks_skipped << " NaN-scale block" << (r.nan_blocks_skipped == 1 ? "" : "s")
    << " not compared (OCP MX 6.3: a NaN scale decodes its whole block to NaN)";
}
}  // namespace detail
namespace ref {

inline std::ostream& operator<<(std::ostream& s, const mx_validation_report& r) {
  detail::print_copy(s, r);
  s << ": ";
  if (r.ok()) {
    s << "all " << r.scales_checked << " scales, " << r.elements_checked << " elements and " << r.padding_checked
      << " padding entries match";
  } else {
    s << r.scale_mismatches << " of " << r.scales_checked << " scales, " << r.element_mismatches << " of " << r.elements_checked
      << " elements, " << r.padding_mismatches << " of " << r.padding_checked << " padding entries differ";
  }
  detail::print_skipped(s, r);
  for (const mx_mismatch& m : r.mismatches) s << "\n  " << m;
  const std::size_t rest = r.mismatch_count() - r.mismatches.size();
  if (rest > 0) s << "\n  ... and " << rest << " more";
  return s;
}

inline std::string to_string(const mx_validation_report& r) {
  std::ostringstream s;
  s << r;
  return s.str();
}

// "PASS mxfp4 rowwise 64x64 (...): 128 scales, 4096 elements, 0 padding entries match" (then
// what was skipped, as the full report says it) or
// "FAIL mxfp4 rowwise 64x64 (...): 1 scale, 2 element, 0 padding mismatches; first: element (row 3, col 37) expected 0xe actual 0x6"
inline std::string mx_validation_report::summary() const {
  std::ostringstream s;
  s << (ok() ? "PASS " : "FAIL ");
  detail::print_copy(s, *this);
  if (ok()) {
    s << ": " << scales_checked << " scales, " << elements_checked << " elements, " << padding_checked << " padding entries match";
    detail::print_skipped(s, *this);
    return s.str();
  }
  s << ": " << scale_mismatches << " scale, " << element_mismatches << " element, " << padding_mismatches << " padding mismatches";
  detail::print_skipped(s, *this);
  if (!mismatches.empty()) {
    const mx_mismatch& m = mismatches.front();
    s << "; first: " << name_of(m.kind());
    if (m.is_scale && m.padding) s << " (line " << m.line << ", block " << m.block << ")";
    else s << " (row " << m.row << ", col " << m.col << ")";
    s << " expected 0x" << std::hex << int{m.expected} << " actual 0x" << int{m.actual};
  }
  return s.str();
}

}  // namespace ref
MXKIT_END_NAMESPACE
