// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checks an NVFP4 copy that another implementation produced (a kernel, TransformerEngine,
// torchao) against the host reference, byte for byte, as validate (validation/validate.hpp) does
// for MX copies: the high-precision input is quantized again block by block with the copy's
// format (1 x 16 or 16 x 16 blocks), axis and options (rounding, rotation, seed), under the
// formula of the options' quirks (validation/nvfp4_quirks.hpp: mxkit's, TransformerEngine's or
// torchao's order of operations), read through the copy's storage description
// (tensor/nvfp4_foreign_layout.hpp), and every byte that differs is reported, by kind:
//   tensor scale  the copy's stored tensor scale, where it was computed from the amax (the
//                 expected one is the formula's of the copy's finite amax; a given one is taken);
//   scales        a block's E4M3 byte;
//   elements      an E2M1 code;
//   padding       a stored position past the matrix edge, or a padded scale entry.
// The reference bytes use the expected tensor scale, so a wrong amax shows in the blocks too.
// Codes under a NaN scale (0x7F: a NaN or Inf in the block) carry nothing and are not compared
// unless strict_nan_blocks. Stochastic rounding is checked with mxkit's Philox bits.
//
//   const mxkit::ref::nvfp4_validation_report r = mxkit::ref::validate(x, copy_view, preset.validation());
//   if (!r.ok()) std::cerr << r;    // header, counts, the first mismatches with decoded values
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>
#include <mxkit/ref/parallel.hpp>
#include <mxkit/tensor/nvfp4_foreign_layout.hpp>
#include <mxkit/validation/nvfp4_quirks.hpp>
#include <mxkit/validation/partial_report.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

struct nvfp4_validate_options {
  std::size_t max_reported = 16;   // mismatches listed (all are counted)
  bool strict_nan_blocks = false;  // compare the codes of NaN-scale blocks too (the reference's are zeros)
  bool check_padding = true;       // stored padding positions and padded scale entries (mx_storage::padding_scale)
  nvfp4_quirks quirks{};           // whose formula (validation/nvfp4_quirks.hpp; the presets set it)
  unsigned threads = 0;            // host threads (ref/parallel.hpp); the report does not depend on them
};

enum class nvfp4_mismatch_kind : std::uint8_t { tensor_scale, scale, element, padding };

}  // namespace ref
template <>
struct enum_names<ref::nvfp4_mismatch_kind> {
  static constexpr const char* names[] = {"tensor scale", "scale", "element", "padding"};
  static constexpr ref::nvfp4_mismatch_kind last = ref::nvfp4_mismatch_kind::padding;
};
namespace ref {

// One byte (or the tensor scale) that differs from the reference.
struct nvfp4_mismatch {
  nvfp4_mismatch_kind kind = nvfp4_mismatch_kind::element;
  bool scale_entry = false;  // padding: a padded scale entry (else a padding element)
  std::size_t line = 0, block = 0, index = 0;  // storage coordinates (index: element within its block)
  std::size_t row = 0, col = 0;               // logical coordinates (a scale: its block's first element)
  float input = 0.0f;  // element: its input; scale: the block's input amax (before any rotation)
  float value = 0.0f;  // element: the value quantized (rotated); scale: the amax it was scaled from (the tile's for 16 x 16)
  bool rotated = false;
  std::uint8_t scale = 0, actual_scale = 0;  // the block's expected and actual E4M3 bytes
  std::uint8_t expected = 0, actual = 0;     // scale byte or element code (FP4: the nibble)
  float decode_scale = 1.0f;                 // the formula's decode tensor scale, for printing values
  float expected_tensor_scale = 0.0f, actual_tensor_scale = 0.0f;  // kind tensor_scale
};

struct nvfp4_validation_report {
  block_layout layout{formats::nvfp4};
  nvfp4_options options;
  mx_storage storage;
  nvfp4_quirks quirks;
  bool tensor_scale_checked = false;
  float expected_tensor_scale = 0.0f, actual_tensor_scale = 0.0f;
  std::size_t tensor_scale_mismatches = 0;
  std::size_t scales_checked = 0, elements_checked = 0, padding_checked = 0;
  std::size_t scale_mismatches = 0, element_mismatches = 0, padding_mismatches = 0, nan_blocks_skipped = 0, nan_elements_skipped = 0;
  std::vector<nvfp4_mismatch> mismatches;  // the tensor scale first, then line order; padded scale entries last

  bool ok() const noexcept { return mismatch_count() == 0; }
  std::size_t mismatch_count() const noexcept { return tensor_scale_mismatches + scale_mismatches + element_mismatches + padding_mismatches; }
  std::string summary() const;
};

}  // namespace ref

// What validate accepts: anything foreign_view() turns into an NVFP4 view.
template <class C>
concept nvfp4_viewable = requires(const C& c) {
  { foreign_view(c) } -> std::convertible_to<nvfp4_foreign_view>;
};

namespace detail {
struct nvfp4_partial_report {
  std::size_t scales_checked = 0, elements_checked = 0, padding_checked = 0;
  std::size_t scale_mismatches = 0, element_mismatches = 0, padding_mismatches = 0, nan_blocks_skipped = 0, nan_elements_skipped = 0;
  std::vector<ref::nvfp4_mismatch> mismatches;
};

// Validation of the line groups starting at lines [first, last) (multiples of 16) with `scaler`.
template <class T, class Scaler>
nvfp4_partial_report validate_nvfp4_groups(const matrix_view<T>& input, const nvfp4_foreign_view& actual,
                                           const ref::nvfp4_validate_options& opt, const nvfp4_options& o, const Scaler& scaler,
                                           std::size_t first, std::size_t count) {
  const block_layout& l = actual.layout;
  const bool rowwise = l.axis == block_axis::rowwise;
  const std::size_t stored = actual.stored_length();
  nvfp4_partial_report p;
  std::vector<ref::nvfp4_mismatch> listed[16];  // per line of the group: the report lists line by line
  nvfp4_group g;
  for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk) {
    gather_nvfp4_group(input, l, o, opt.quirks.rotated_bf16, first, count, blk, g);
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t line = first + i, first_pos = blk * nvfp4_block_size;
      const nvfp4_block want = quantize_nvfp4_block(g.v[i], g.amax[i], scaler, o, line * l.padded_length() + first_pos);
      const std::uint8_t have_scale = actual.scale(line, blk);
      std::vector<ref::nvfp4_mismatch>& list = listed[i];
      const auto record = [&](ref::nvfp4_mismatch_kind kind, int j, std::uint8_t expected, std::uint8_t got) {
        if (list.size() >= opt.max_reported) return;
        float in[nvfp4_block_size];
        gather_block<nvfp4_block_size>(input, l.axis, line, blk, in);
        ref::nvfp4_mismatch m;
        m.kind = kind;
        m.line = line;
        m.block = blk;
        m.index = static_cast<std::size_t>(j);
        const std::size_t pos = first_pos + m.index;
        m.row = rowwise ? line : pos;
        m.col = rowwise ? pos : line;
        if (kind == ref::nvfp4_mismatch_kind::scale) {
          m.input = 0.0f;
          for (const float x : in) m.input = std::max(m.input, x < 0 ? -x : x);
          m.value = bit_cast<float>(g.amax[i]);
        } else {
          m.input = in[j];
          m.value = g.v[i][j];
        }
        m.rotated = o.hadamard;
        m.scale = want.scale.bits();
        m.actual_scale = have_scale;
        m.expected = expected;
        m.actual = got;
        m.decode_scale = scaler.decode_tensor_scale();
        list.push_back(m);
      };
      ++p.scales_checked;
      if (want.scale.bits() != have_scale) {
        ++p.scale_mismatches;
        record(ref::nvfp4_mismatch_kind::scale, 0, want.scale.bits(), have_scale);
      }
      if (want.scale.is_nan() && !opt.strict_nan_blocks) {
        ++p.nan_blocks_skipped;
        p.nan_elements_skipped += std::min<std::size_t>(nvfp4_block_size, l.line_length() - first_pos);
        continue;
      }
      for (int j = 0; j < nvfp4_block_size; ++j) {
        const std::size_t pos = first_pos + static_cast<std::size_t>(j);
        if (pos >= stored) break;
        const bool padding = pos >= l.line_length();
        if (padding && !opt.check_padding) break;
        ++(padding ? p.padding_checked : p.elements_checked);
        const std::uint8_t got = actual.code(line, pos);
        if (got == want.elements[j].bits()) continue;
        ++(padding ? p.padding_mismatches : p.element_mismatches);
        record(padding ? ref::nvfp4_mismatch_kind::padding : ref::nvfp4_mismatch_kind::element, j, want.elements[j].bits(), got);
      }
    }
  }
  for (std::size_t i = 0; i < count; ++i)
    for (const ref::nvfp4_mismatch& m : listed[i])
      if (p.mismatches.size() < opt.max_reported) p.mismatches.push_back(m);
  return p;
}
}  // namespace detail
namespace ref {

// Compares `copy` (an nvfp4_foreign_view, nvfp4_foreign_buffers, or mxkit's nvfp4_tensor and its
// views) with the reference quantization of `input`. Throws std::invalid_argument when the shapes
// differ, the description or a buffer is invalid or short, or the stored tensor scale is one the
// formula cannot read (detail::check_nvfp4_stored).
template <class T, nvfp4_viewable Copy>
  requires quantizer_input<T>
nvfp4_validation_report validate(matrix_view<T> input, const Copy& copy, const nvfp4_validate_options& opt = {}) {
  const nvfp4_foreign_view& actual = foreign_view(copy);
  const block_layout& l = actual.layout;
  detail::check_nvfp4_foreign_view(actual, "validate");
  detail::require(l.rows == input.rows && l.cols == input.cols, "validate: the ", name_of(l.axis), " layout is ", l.rows, "x", l.cols,
                  " but the input is ", input.rows, "x", input.cols);
  detail::check_matrix(input, "validate: input");
  detail::check_enum(opt.quirks.formula, nvfp4_formula::torchao, "nvfp4_formula", "validate");
  nvfp4_options o = actual.options;
  o.stream = stochastic_stream(actual.options.stream, l.axis);

  nvfp4_validation_report r;
  r.layout = l;
  r.options = actual.options;
  r.storage = actual.storage;
  r.quirks = opt.quirks;
  r.actual_tensor_scale = actual.tensor_scale;
  r.expected_tensor_scale = actual.tensor_scale;
  if (actual.tensor_scale_from_amax) {
    r.tensor_scale_checked = true;
    const float amax = detail::nvfp4_copy_amax(input, l, o, opt.quirks.rotated_bf16, opt.threads);
    r.expected_tensor_scale = detail::nvfp4_expected_stored(opt.quirks.formula, amax);
    if (bit_cast<std::uint32_t>(r.expected_tensor_scale) != bit_cast<std::uint32_t>(actual.tensor_scale)) {
      r.tensor_scale_mismatches = 1;
      if (opt.max_reported > 0) {
        nvfp4_mismatch m;
        m.kind = nvfp4_mismatch_kind::tensor_scale;
        m.value = amax;
        m.expected_tensor_scale = r.expected_tensor_scale;
        m.actual_tensor_scale = actual.tensor_scale;
        r.mismatches.push_back(m);
      }
    }
  }
  detail::check_nvfp4_stored(opt.quirks.formula, r.expected_tensor_scale, "validate");
  const unsigned threads = detail::nvfp4_threads(l, opt.threads);
  std::vector<detail::nvfp4_partial_report> parts(detail::parallel_chunk_count(detail::nvfp4_group_count(l), threads));
  if (l.blocks_per_line() > 0)
    detail::with_nvfp4_scaler(opt.quirks.formula, r.expected_tensor_scale, [&](const auto& scaler) {
      detail::for_nvfp4_groups(l, threads, [&](std::size_t first, std::size_t count, std::size_t chunk) {
        detail::add_partial_report(parts[chunk], detail::validate_nvfp4_groups(input, actual, opt, o, scaler, first, count),
                                   opt.max_reported);
      });
    });
  for (const detail::nvfp4_partial_report& p : parts) detail::add_partial_report(r, p, opt.max_reported);  // chunks in line order
  if (opt.check_padding)
    detail::check_scale_padding(r, actual, l.lines(), l.blocks_per_line(), opt.max_reported,
                                [](std::size_t line, std::size_t blk, std::uint8_t want, std::uint8_t got) {
                                  nvfp4_mismatch m;
                                  m.kind = nvfp4_mismatch_kind::padding;
                                  m.scale_entry = true;
                                  m.line = line;
                                  m.block = blk;
                                  m.expected = want;
                                  m.actual = got;
                                  return m;
                                });
  return r;
}

}  // namespace ref
namespace detail {
// "0x3e (1.75)": an E4M3 scale byte and its value.
inline void print_e4m3(std::ostream& s, std::uint8_t b) {
  s << "0x" << std::hex << int{b} << std::dec << " (" << e4m3::from_bits(b).to_float() << ")";
}
// "0xe (-4 x 1.75 x 0.5 = -3.5)": a code, its element value, the block and tensor scales, the product.
inline void print_e2m1(std::ostream& s, std::uint8_t code, std::uint8_t scale, float decode) {
  const e2m1 q = e2m1::from_bits(code);
  const e4m3 sc = e4m3::from_bits(scale);
  s << "0x" << std::hex << int{code} << std::dec << " (" << q.to_float() << " x " << sc.to_float() << " x " << decode << " = "
    << nvfp4_decode(q, sc, decode) << ")";
}
// "nvfp4 rowwise 64x64 (nearest_even, hadamard signs 0xd7e8; te formula; not transposed, cublas_128x4 scales)"
inline void print_nvfp4_copy(std::ostream& s, const ref::nvfp4_validation_report& r) {
  const block_layout& l = r.layout;
  s << nvfp4_format_name(l.format) << ' ' << name_of(l.axis) << ' ' << l.rows << 'x' << l.cols << " (" << name_of(r.options.round);
  if (r.options.hadamard) s << ", hadamard" << (r.options.hadamard_signs ? " with signs" : "");
  s << "; " << name_of(r.quirks.formula) << " formula" << (r.quirks.rotated_bf16 && r.options.hadamard ? ", bf16 rotation" : "");
  if (l.axis == block_axis::columnwise && r.storage.columnwise == columnwise_storage::not_transposed) s << "; not transposed";
  if (r.storage.scales != scale_layout::row_major) s << "; " << name_of(r.storage.scales) << " scales";
  if (r.storage.nibbles != nibble_order::low_first) s << "; " << name_of(r.storage.nibbles) << " nibbles";
  s << ")";
}
inline void print_nvfp4_skipped(std::ostream& s, const ref::nvfp4_validation_report& r) {
  if (r.nan_blocks_skipped == 0) return;
  s << "; " << r.nan_elements_skipped << " element" << (r.nan_elements_skipped == 1 ? "" : "s") << " of " << r.nan_blocks_skipped
    << " NaN-scale block" << (r.nan_blocks_skipped == 1 ? "" : "s") << " not compared (a NaN scale decodes its whole block to NaN)";
}
}  // namespace detail
namespace ref {

inline std::ostream& operator<<(std::ostream& s, const nvfp4_mismatch& m) {
  const auto flags = s.flags();
  s << std::dec;
  switch (m.kind) {
    case nvfp4_mismatch_kind::tensor_scale:
      s << "tensor scale: copy amax " << m.value << "; expected " << m.expected_tensor_scale << ", actual " << m.actual_tensor_scale;
      break;
    case nvfp4_mismatch_kind::scale:
      s << "scale (row " << m.row << ", col " << m.col << "; line " << m.line << ", block " << m.block << "): amax " << m.value;
      if (m.rotated) s << " after the rotation (input amax " << m.input << ")";
      s << "; expected ";
      detail::print_e4m3(s, m.expected);
      s << ", actual ";
      detail::print_e4m3(s, m.actual);
      break;
    case nvfp4_mismatch_kind::padding:
      if (m.scale_entry) {
        s << "padding scale (line " << m.line << ", block " << m.block << "): expected 0x" << std::hex << int{m.expected} << ", actual 0x"
          << int{m.actual};
        break;
      }
      [[fallthrough]];
    case nvfp4_mismatch_kind::element:
      s << name_of(m.kind) << " (row " << m.row << ", col " << m.col << "; line " << m.line << ", block " << m.block << ", index " << m.index
        << "): quantized " << m.value;
      if (m.rotated) s << " (input " << m.input << " before the rotation)";
      s << ", block scale ";
      detail::print_e4m3(s, m.scale);
      s << "; expected ";
      detail::print_e2m1(s, m.expected, m.scale, m.decode_scale);
      s << ", actual ";
      detail::print_e2m1(s, m.actual, m.actual_scale, m.decode_scale);
      break;
  }
  s.flags(flags);
  return s;
}

inline std::ostream& operator<<(std::ostream& s, const nvfp4_validation_report& r) {
  detail::print_nvfp4_copy(s, r);
  s << ": ";
  if (r.ok()) {
    s << "tensor scale " << (r.tensor_scale_checked ? "and " : "given; ") << "all " << r.scales_checked << " scales, "
      << r.elements_checked << " elements and " << r.padding_checked << " padding entries match";
  } else {
    s << (r.tensor_scale_mismatches ? "the tensor scale, " : "") << r.scale_mismatches << " of " << r.scales_checked << " scales, "
      << r.element_mismatches << " of " << r.elements_checked << " elements, " << r.padding_mismatches << " of " << r.padding_checked
      << " padding entries differ";
  }
  detail::print_nvfp4_skipped(s, r);
  for (const nvfp4_mismatch& m : r.mismatches) s << "\n  " << m;
  const std::size_t rest = r.mismatch_count() - r.mismatches.size();
  if (rest > 0) s << "\n  ... and " << rest << " more";
  return s;
}

inline std::string to_string(const nvfp4_validation_report& r) {
  std::ostringstream s;
  s << r;
  return s.str();
}

// "PASS nvfp4 rowwise 64x64 (...): tensor scale, 256 scales, 4096 elements, 0 padding entries match" or
// "FAIL ...: 0 tensor scale, 1 scale, 2 element, 0 padding mismatches; first: element (row 3, col 7) expected 0xe actual 0x6"
inline std::string nvfp4_validation_report::summary() const {
  std::ostringstream s;
  s << (ok() ? "PASS " : "FAIL ");
  detail::print_nvfp4_copy(s, *this);
  if (ok()) {
    s << ": " << (tensor_scale_checked ? "tensor scale, " : "") << scales_checked << " scales, " << elements_checked << " elements, "
      << padding_checked << " padding entries match";
    detail::print_nvfp4_skipped(s, *this);
    return s.str();
  }
  s << ": " << tensor_scale_mismatches << " tensor scale, " << scale_mismatches << " scale, " << element_mismatches << " element, "
    << padding_mismatches << " padding mismatches";
  detail::print_nvfp4_skipped(s, *this);
  if (!mismatches.empty()) {
    const nvfp4_mismatch& m = mismatches.front();
    s << "; first: " << name_of(m.kind);
    if (m.kind == nvfp4_mismatch_kind::tensor_scale) s << " expected " << m.expected_tensor_scale << " actual " << m.actual_tensor_scale;
    else {
      if (m.scale_entry) s << " (line " << m.line << ", block " << m.block << ")";
      else s << " (row " << m.row << ", col " << m.col << ")";
      s << " expected 0x" << std::hex << int{m.expected} << " actual 0x" << int{m.actual};
    }
  }
  return s.str();
}

}  // namespace ref
MXKIT_END_NAMESPACE
