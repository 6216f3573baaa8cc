#pragma once
// Checks an MX tensor that another implementation produced (a GPU kernel, another library)
// against mxkit's host reference, byte for byte: one call re-quantizes the high-precision input
// with the view's own format, axis and options (scale rule, rounding, Hadamard, seed) and reports
// how many scales and element codes differ, with the coordinates of the first few. Padded
// positions of the block axis are storage too (a GEMM reads them), so they are checked as well.
//
//   mxkit::mx_validation_report r = mxkit::validate(input, kernel_output_view);
//   if (!r.ok()) std::cerr << r;  // "mxfp4 rowwise 64x45 ...: 1 of 128 scales, 3 of 4096 elements differ" + list
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/ref/quantize.hpp>

MXKIT_BEGIN_NAMESPACE

// One byte that differs from the reference: a block's scale or one element's code.
struct mx_mismatch {
  bool is_scale = false;
  std::size_t line = 0;   // storage line: the row (rowwise) or the column (columnwise)
  std::size_t block = 0;  // block within the line
  std::size_t index = 0;  // element within the block (0 for a scale)
  std::size_t row = 0;    // logical coordinates of the element (a scale: its block's first element);
  std::size_t col = 0;    //   beyond rows/cols for padding
  bool padding = false;   // the element is zero padding of the block axis
  float input = 0.0f;     // the input value (before any rotation); for a scale, the block's input amax
  std::uint8_t expected = 0;  // reference scale byte or element code (FP4: the nibble)
  std::uint8_t actual = 0;
};

struct mx_validation_report {
  mx_layout layout;
  quantize_options options;
  std::size_t scales_checked = 0, elements_checked = 0;
  std::size_t scale_mismatches = 0, element_mismatches = 0;
  std::vector<mx_mismatch> mismatches;  // the first ones in storage order (line, block, scale first)

  bool ok() const noexcept { return scale_mismatches == 0 && element_mismatches == 0; }
};

inline std::ostream& operator<<(std::ostream& s, const mx_mismatch& m) {
  const auto flags = s.flags();
  s << (m.is_scale ? "scale   line " : "element line ") << m.line << " block " << m.block;
  if (!m.is_scale) s << " index " << m.index;
  s << " (row " << m.row << ", col " << m.col << (m.padding ? ", padding" : "") << "): "
    << (m.is_scale ? "input amax " : "input ") << m.input << std::hex << ", expected 0x" << int{m.expected} << " actual 0x"
    << int{m.actual};
  s.flags(flags);
  return s;
}

inline std::ostream& operator<<(std::ostream& s, const mx_validation_report& r) {
  const mx_layout& l = r.layout;
  const quantize_options& o = r.options;
  s << name_of(l.type) << ' ' << name_of(l.axis) << ' ' << l.rows << 'x' << l.cols << " (" << name_of(o.rule) << ", "
    << name_of(o.round) << (o.hadamard ? (o.random_signs ? ", hadamard with signs" : ", hadamard") : "") << "): ";
  if (r.ok()) return s << "all " << r.scales_checked << " scales and " << r.elements_checked << " elements match";
  s << r.scale_mismatches << " of " << r.scales_checked << " scales, " << r.element_mismatches << " of "
    << r.elements_checked << " elements differ";
  for (const mx_mismatch& m : r.mismatches) s << "\n  " << m;
  const std::size_t rest = r.scale_mismatches + r.element_mismatches - r.mismatches.size();
  if (rest > 0) s << "\n  ... and " << rest << " more";
  return s;
}

inline std::string to_string(const mx_validation_report& r) {
  std::ostringstream s;
  s << r;
  return s.str();
}

// Compares `actual` (row-major scales, mx_tensor's layout) with quantize(input, actual.layout.type,
// actual.layout.axis, actual.options). Throws std::invalid_argument when the layout's shape is not
// the input's, its format, axis, scale rule or rounding is not a known value, its sizes do not
// fit in std::size_t, or a non-empty layout has null data or scales.
template <class T>
  requires quantizer_input<T>
mx_validation_report validate(matrix_view<T> input, mx_const_view actual, std::size_t max_reported = 16) {
  const mx_layout& l = actual.layout;
  // Known enums and sizes that fit first: a wrapped data_bytes() of 0 would skip the null checks.
  detail::check_layout(l, "validate");
  detail::check_options(actual.options, "validate");
  detail::check_matrix(input, "validate: input");
  detail::require(l.rows == input.rows && l.cols == input.cols, "validate: the ", name_of(l.axis), " layout is ", l.rows, "x",
                  l.cols, " but the input is ", input.rows, "x", input.cols);
  detail::require(l.data_bytes() == 0 || actual.data != nullptr, "validate: null element data for a ", l.rows, "x", l.cols,
                  " ", name_of(l.type), " tensor");
  detail::require(l.scale_count() == 0 || actual.scales != nullptr, "validate: null scales for a ", l.rows, "x", l.cols, " ",
                  name_of(l.type), " tensor");
  const mx_tensor reference = quantize(input, l.type, l.axis, actual.options);
  const mx_const_view want = reference.view();

  mx_validation_report r{l, actual.options, 0, 0, 0, 0, {}};
  const auto logical = [&](mx_mismatch& m, std::size_t pos) {
    m.row = l.axis == block_axis::rowwise ? m.line : pos;
    m.col = l.axis == block_axis::rowwise ? pos : m.line;
    m.padding = pos >= l.line_length();
  };
  float v[mx_block_size];
  for (std::size_t line = 0; line < l.lines(); ++line)
    for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk) {
      const std::size_t first = blk * mx_block_size;
      bool gathered = false;  // the block's inputs, read only when something differs
      const auto inputs = [&]() -> const float* {
        if (!gathered) detail::gather_block(input, l.axis, line, blk, v);
        gathered = true;
        return v;
      };
      ++r.scales_checked;
      if (want.scale(line, blk) != actual.scale(line, blk)) {
        ++r.scale_mismatches;
        if (r.mismatches.size() < max_reported) {
          mx_mismatch m;
          m.is_scale = true;
          m.line = line;
          m.block = blk;
          logical(m, first);
          std::uint32_t amax = 0;
          for (int i = 0; i < mx_block_size; ++i) amax = amax_bits(amax, inputs()[i]);
          m.input = bit_cast<float>(amax);
          m.expected = want.scale(line, blk);
          m.actual = actual.scale(line, blk);
          r.mismatches.push_back(m);
        }
      }
      for (int i = 0; i < mx_block_size; ++i) {
        const std::size_t pos = first + static_cast<std::size_t>(i);
        ++r.elements_checked;
        if (want.code(line, pos) == actual.code(line, pos)) continue;
        ++r.element_mismatches;
        if (r.mismatches.size() >= max_reported) continue;
        mx_mismatch m;
        m.line = line;
        m.block = blk;
        m.index = static_cast<std::size_t>(i);
        logical(m, pos);
        m.input = inputs()[i];
        m.expected = want.code(line, pos);
        m.actual = actual.code(line, pos);
        r.mismatches.push_back(m);
      }
    }
  return r;
}

template <class T>
  requires quantizer_input<T>
mx_validation_report validate(matrix_view<T> input, mx_view actual, std::size_t max_reported = 16) {
  return validate(input, mx_const_view{actual.layout, actual.options, actual.data, actual.scales}, max_reported);
}

template <class T>
  requires quantizer_input<T>
mx_validation_report validate(matrix_view<T> input, const mx_tensor& actual, std::size_t max_reported = 16) {
  return validate(input, actual.view(), max_reported);
}

MXKIT_END_NAMESPACE
