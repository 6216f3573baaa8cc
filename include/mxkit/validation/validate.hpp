// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checks an MX copy that another implementation produced (a GPU kernel, another library)
// against mxkit's host reference, byte for byte. One call re-quantizes the high-precision input
// block by block with the copy's own format, axis and options (scale rule, rounding, Hadamard,
// seed), reads the copy through its storage description (tensor/foreign_layout.hpp: transposed
// or not, leading dimensions, row-major / cuBLAS 128x4 / AITER-shuffled scales, FP4 nibble
// order), and reports every byte that differs, by kind:
//   scales    a block's E8M0 byte;
//   elements  an element code of the matrix;
//   padding   a stored position of a ragged last block (zeros padded to 32, as the reference
//             quantizes them: a GEMM reads them) or a padded scale entry of the layout.
//
//   mxkit::mx_validation_report r = mxkit::validate(input, kernel_output_view);
//   if (!r.ok()) std::cerr << r;        // header, counts per kind, the first mismatches
//   std::puts(r.summary().c_str());     // one line: "FAIL mxfp8_e4m3 columnwise 256x512: ..."
//
// Verdicts:
//  - A block whose expected scale is NaN (0xFF: a NaN or Inf input) decodes to NaN whatever its
//    element codes hold (OCP MX v1.0 section 6.3), so its codes are not compared by default
//    (`validate_options::strict_nan_blocks` compares them with the reference's zero codes).
//    The scale byte itself is always compared.
//  - Peers that depart from their own documented rule are reproduced through peer_quirks
//    (validation/peer_quirks.hpp) and the named configurations of validation/peer_presets.hpp.
//  - Stochastic rounding: by default the reference draws mxkit's Philox bits (options.seed,
//    options.stream, as mxkit's quantizers do); a foreign kernel's own bits are passed through
//    `validate_options::random_bits`, so its SR output is checked exactly, not statistically.
// Reports: each listed mismatch gives the element's position (row, column, and line, block,
// index in storage terms), the value that was actually quantized (after the Hadamard rotation,
// when the options rotate; the input before it is shown too), the block's scale, and the
// expected and actual bytes with their decoded values (`expected 0xe (-4 x 2^-2 = -1)`); a scale
// mismatch gives the block amax the rule saw. summary() is one line for test harnesses. The
// report and its printing are validation/validation_report.hpp.
// Speed: lines are validated on host threads (validate_options::threads); the report is the
// single-threaded one, bit for bit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/ref/parallel.hpp>
#include <mxkit/validation/peer_quirks.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/validation/partial_report.hpp>
#include <mxkit/validation/validation_report.hpp>
#include <mxkit/tensor/foreign_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// How a foreign kernel's stochastic rounding uses its 32 random bits r, with f the discarded
// fraction of the element's last place scaled to 32 bits (f = fraction * 2^32):
//   round_up_below  rounds up when r < f: mxkit's rule (format/bits.hpp round_shifted).
//   add_and_carry   adds r to the discarded bits and rounds up on the carry out, r + f >= 2^32:
//                   the rule of hardware SR conversions (PTX cvt.rs, AMD's v_cvt_sr_*) and of
//                   most software SR kernels. Equivalent to round_up_below with bits ~r.
enum class random_bits_rule : std::uint8_t { round_up_below, add_and_carry };

struct validate_options {
  std::size_t max_reported = 16;  // mismatches listed (all are counted)
  bool strict_nan_blocks = false;  // compare the codes of NaN-scale blocks too (OCP MX 6.3: they carry no information)
  bool check_padding = true;       // stored padding positions and padded scale entries (mx_storage::padding_scale)
  peer_quirks quirks{};            // a peer's departures from its documented rule (validation/peer_quirks.hpp)
  // Stochastic rounding only: the random bits the foreign kernel used for logical element
  // (row, col); padding positions pass a row or column past the matrix edge. Called from the
  // validation threads concurrently: it must be a pure function. Empty: mxkit's Philox bits.
  std::function<std::uint32_t(std::size_t row, std::size_t col)> random_bits{};
  random_bits_rule random_rule = random_bits_rule::round_up_below;
  unsigned threads = 0;  // host threads (ref/parallel.hpp); 0: as the machine and the size allow
};

}  // namespace ref
namespace detail {
// The reference bytes of one block of BlockSize elements.
template <int BlockSize>
struct reference_block_bytes {
  std::uint8_t scale = 0;
  std::uint8_t codes[BlockSize] = {};
};

// The reference for block values `in` (the input, before any rotation), numbered from
// first_index for Philox. With no quirks and no foreign random bits this is quantize_block
// itself (what quantize() stores). Otherwise the same steps, spelled out: rotate, amax, the
// peer's scale, then every element through quantize_element (the integer path, which the block
// tests hold to the float path's codes) with the foreign bits when given.
template <mx_format_descriptor Fmt>
reference_block_bytes<Fmt::block_size> reference_block(const float* in, const quantize_options& o, std::uint64_t first_index,
                                                       const peer_quirks& q, const std::uint32_t* foreign_bits) {
  using E = typename Fmt::element_type;
  constexpr int k = Fmt::block_size;
  reference_block_bytes<k> r;
  if (!q.any() && foreign_bits == nullptr) {
    const mx_block<Fmt> b = quantize_block<Fmt>(in, o, first_index);
    r.scale = b.scale.bits();
    for (int i = 0; i < k; ++i) r.codes[i] = static_cast<std::uint8_t>(b.elements[i].bits());
    return r;
  }
  float x[k];
  for (int i = 0; i < k; ++i) x[i] = in[i];
  const std::uint32_t amax = block_amax(transform_block<k>(x, o, hadamard_signs{o.sign_mask()}), o);
  if (o.hadamard)
    for (float& v : x) v *= 0.25f;  // rotate_block's normalization, as the reference's integer path applies it
  const e8m0 scale = peer_scale<E>(amax, o.rule, q);
  const e8m0 element_scale = peer_element_scale(scale, q);
  r.scale = scale.bits();
  for (int i = 0; i < k; ++i) {
    std::uint32_t bits = 0;
    if (o.round == rounding::stochastic)
      bits = foreign_bits ? foreign_bits[i] : random_bits(o.seed, o.stream, first_index + static_cast<std::uint64_t>(i));
    r.codes[i] = static_cast<std::uint8_t>(quantize_element<E>(x[i], element_scale, o.round, bits).bits());
  }
  return r;
}

// What a report says about a block beyond its bytes: inputs, rotated values, both amaxes.
template <int BlockSize>
struct block_story {
  float input[BlockSize];
  float value[BlockSize];
  float input_amax = 0, amax = 0;
};
template <int BlockSize>
block_story<BlockSize> tell_block(const float* in, const quantize_options& o) {
  block_story<BlockSize> b;
  std::uint32_t in_amax = 0;
  for (int i = 0; i < BlockSize; ++i) {
    b.input[i] = b.value[i] = in[i];
    in_amax = amax_bits(in_amax, in[i]);
  }
  const std::uint32_t amax = block_amax(transform_block<BlockSize>(b.value, o, hadamard_signs{o.sign_mask()}), o);
  if (o.hadamard)
    for (float& v : b.value) v *= 0.25f;
  b.input_amax = bit_cast<float>(in_amax);
  b.amax = bit_cast<float>(amax);
  return b;
}

// Validation of lines [first, last): counts, and the first max_reported mismatches.
struct partial_report {
  std::size_t scales_checked = 0, elements_checked = 0, padding_checked = 0;
  std::size_t scale_mismatches = 0, element_mismatches = 0, padding_mismatches = 0, nan_blocks_skipped = 0;
  std::size_t nan_elements_skipped = 0;
  std::vector<mx_mismatch> mismatches;
};

// Lines are visited in groups, block by block within a group: a columnwise block gathers one
// value from each of its input rows (32 for MX), and the neighbouring lines (columns) of the group read the
// same cache lines of those rows (and of a not-transposed copy). Each line's mismatches are kept
// apart and appended in line order, so the report is the line-by-line one.
inline constexpr std::size_t validate_line_group = 16;

template <mx_format_descriptor Fmt, class T>
partial_report validate_lines(const matrix_view<T>& input, const mx_foreign_view& actual, const validate_options& opt,
                              const quantize_options& o, std::size_t first, std::size_t last) {
  const block_layout& l = actual.layout;
  const bool rowwise = l.axis == block_axis::rowwise;
  const std::size_t stored = actual.stored_length();
  const std::size_t group = rowwise ? 1 : validate_line_group;
  partial_report p;
  constexpr int k = Fmt::block_size;
  float v[k];
  std::uint32_t bits[k];
  const bool foreign_bits = o.round == rounding::stochastic && static_cast<bool>(opt.random_bits);
  std::vector<mx_mismatch> listed[validate_line_group];  // per line of the group
  for (std::size_t g0 = first; g0 < last; g0 += group) {
    const std::size_t g1 = std::min(g0 + group, last);
    for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk)
      for (std::size_t line = g0; line < g1; ++line) {
        std::vector<mx_mismatch>& list = listed[line - g0];
        const std::size_t first_pos = blk * k;
        gather_block<k>(input, l.axis, line, blk, v);
        if (foreign_bits)
          for (int i = 0; i < k; ++i) {
            const std::size_t pos = first_pos + static_cast<std::size_t>(i);
            const std::uint32_t r = opt.random_bits(rowwise ? line : pos, rowwise ? pos : line);
            bits[i] = opt.random_rule == random_bits_rule::add_and_carry ? ~r : r;
          }
        const reference_block_bytes<k> want =
            reference_block<Fmt>(v, o, line * l.padded_length() + first_pos, opt.quirks, foreign_bits ? bits : nullptr);
        const std::uint8_t have_scale = actual.scale(line, blk);
        bool told = false;
        block_story<k> story{};
        const auto record = [&](bool is_scale, bool padding, int i, std::uint8_t expected, std::uint8_t got) {
          if (list.size() >= opt.max_reported) return;
          if (!told) story = tell_block<k>(v, o);
          told = true;
          mx_mismatch m;
          m.type = Fmt::type;
          m.is_scale = is_scale;
          m.padding = padding;
          m.line = line;
          m.block = blk;
          m.index = static_cast<std::size_t>(i);
          const std::size_t pos = first_pos + m.index;
          m.row = rowwise ? line : pos;
          m.col = rowwise ? pos : line;
          m.input = is_scale ? story.input_amax : story.input[i];
          m.value = is_scale ? story.amax : story.value[i];
          m.rotated = o.hadamard;
          m.scale = want.scale;
          m.actual_scale = have_scale;
          m.expected = expected;
          m.actual = got;
          list.push_back(m);
        };
        ++p.scales_checked;
        if (want.scale != have_scale) {
          ++p.scale_mismatches;
          record(true, false, 0, want.scale, have_scale);
        }
        if (want.scale == e8m0::nan_bits && !opt.strict_nan_blocks) {
          ++p.nan_blocks_skipped;
          p.nan_elements_skipped += std::min<std::size_t>(k, l.line_length() - first_pos);
          continue;
        }
        for (int i = 0; i < k; ++i) {
          const std::size_t pos = first_pos + static_cast<std::size_t>(i);
          if (pos >= stored) break;
          const bool padding = pos >= l.line_length();
          if (padding && !opt.check_padding) break;
          ++(padding ? p.padding_checked : p.elements_checked);
          const std::uint8_t got = actual.code(line, pos);
          if (got == want.codes[i]) continue;
          ++(padding ? p.padding_mismatches : p.element_mismatches);
          record(false, padding, i, want.codes[i], got);
        }
      }
    for (std::size_t line = g0; line < g1; ++line) {
      for (const mx_mismatch& m : listed[line - g0])
        if (p.mismatches.size() < opt.max_reported) p.mismatches.push_back(m);
      listed[line - g0].clear();
    }
  }
  return p;
}
}  // namespace detail
namespace ref {

// Compares `actual` with the reference quantization of `input` under its layout (type, axis)
// and options. `actual` is anything foreign_view() accepts (tensor/foreign_layout.hpp): an
// mx_foreign_view (the caller's buffers with their sizes, stored as its storage describes), the
// mx_foreign_buffers of store_foreign or quantize_like, or mxkit's own mx_tensor / mx_view /
// mx_const_view (their sizes follow from the layout). Throws std::invalid_argument when the
// layout's shape is not the input's, the storage description is invalid, or a buffer is null or
// shorter than the bytes the description addresses (naming both sizes).
template <class T, foreign_viewable Copy>
  requires quantizer_input<T>
mx_validation_report validate(matrix_view<T> input, const Copy& copy, const validate_options& opt = {}) {
  const mx_foreign_view& actual = foreign_view(copy);
  const block_layout& l = actual.layout;
  // Known enums and sizes that fit first: a wrapped size would skip the null and size checks.
  detail::check_mx_layout(l, "validate");
  detail::check_options(actual.options, "validate");
  detail::check_foreign_view(actual, "validate");
  detail::require(l.rows == input.rows && l.cols == input.cols, "validate: the ", name_of(l.axis), " layout is ", l.rows, "x",
                  l.cols, " but the input is ", input.rows, "x", input.cols);
  detail::check_matrix(input, "validate: input");
  quantize_options o = actual.options;
  o.stream = stochastic_stream(actual.options, l.axis);  // as quantize() draws for this copy

  mx_validation_report r;
  r.layout = l;
  r.options = actual.options;
  r.storage = actual.storage;
  r.quirks = opt.quirks;
  const double work = 8.0 * static_cast<double>(l.lines()) * static_cast<double>(l.padded_length());
  const unsigned threads = detail::host_thread_count(opt.threads, l.lines(), work);
  std::vector<detail::partial_report> parts(detail::parallel_chunk_count(l.lines(), threads));
  if (l.blocks_per_line() > 0)  // else nothing to compare: do not visit 2^63 empty lines of a 0 x 2^63 copy
    visit_mx_type(l.mx(), [&](auto fmt) {
      using Fmt = decltype(fmt);
      detail::parallel_chunks(l.lines(), threads, [&](std::size_t first, std::size_t last, std::size_t chunk) {
        parts[chunk] = detail::validate_lines<Fmt>(input, actual, opt, o, first, last);
      });
    });
  for (const detail::partial_report& p : parts) detail::add_partial_report(r, p, opt.max_reported);  // chunks in line order
  if (opt.check_padding)
    detail::check_scale_padding(r, actual, l.lines(), l.blocks_per_line(), opt.max_reported,
                                [&](std::size_t line, std::size_t blk, std::uint8_t want, std::uint8_t got) {
                                  mx_mismatch m;
                                  m.type = l.mx();
                                  m.is_scale = true;
                                  m.padding = true;
                                  m.line = line;
                                  m.block = blk;
                                  m.row = l.axis == block_axis::rowwise ? line : blk * l.block_size();
                                  m.col = l.axis == block_axis::rowwise ? blk * l.block_size() : line;
                                  m.expected = want;
                                  m.actual = got;
                                  return m;
                                });
  return r;
}

// The older spelling: at most max_reported mismatches listed, every other option at its default.
template <class T, foreign_viewable Copy>
  requires quantizer_input<T>
mx_validation_report validate(matrix_view<T> input, const Copy& copy, std::size_t max_reported) {
  validate_options opt;
  opt.max_reported = max_reported;
  return validate(input, copy, opt);
}

}  // namespace ref
MXKIT_END_NAMESPACE
