// SPDX-License-Identifier: Apache-2.0
#pragma once
// Layout diagnosis: when a foreign MX copy fails validation (validation/validate.hpp), which common
// mistake in its description would make it pass. A swapped-nibble FP4 copy otherwise reports
// thousands of element mismatches without naming the cause. The mistakes tried, one at a time
// and then in pairs, each as a changed description of the same bytes:
//   nibbles      FP4 only: the other nibble order (high_first vs low_first);
//   scales       the scales in another layout (row_major, cublas_128x4, aiter_shuffle), where the
//                scale buffer holds enough bytes for it;
//   columnwise   columnwise copies: stored transposed vs not transposed (where the data fits);
//   scale rule   the block scales computed by another rule (floor, even, round_up, ceil).
//
//   mxkit::ref::layout_diagnosis d = mxkit::ref::diagnose_layout(input, view);
//   if (d.found()) std::puts(d.explanation.c_str());  // "passes with high_first nibbles"
//
// NVFP4 copies (validation/nvfp4_validate.hpp; the TE and torchao presets, validation/
// nvfp4_presets.hpp) have their own diagnose_layout, which tries the nibble order, the scale
// layout (an unswizzled copy described as cuBLAS's 128x4 tiles, or the other way), the columnwise
// storage, and the mistakes of their own:
//   tensor scale  not applied (quantized as if it were 1: torchao's one-level path, TE without an
//                 amax); its reciprocal applied (an encode scale passed for a decode scale); the
//                 copy's amax applied as the scale (torchao's to_nvfp4 describes its
//                 per_tensor_scale argument as an amax, and divides by it: amax / 2688 is meant);
//   blocks        1 x 16 vs 16 x 16 (2-D weight scaling on one side only);
//   rotation      a rotated copy that was not rotated (the RHT forgotten).
//
// The sizes are those of the caller's buffers: a candidate layout that would read past them is
// not tried (a row-major description of a 128x4-tiled buffer is smaller, the other way larger).
// Each candidate is one full validation with no mismatch listed, so a diagnosis costs up to
// about 20 validations of the copy (NVFP4: about 40); it is meant for the failure path.
#include <cstddef>
#include <string>
#include <vector>

#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/validation/nvfp4_validate.hpp>
#include <mxkit/validation/validate.hpp>
#include <mxkit/tensor/foreign_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// One description tried: what it changes and how many bytes then differ.
struct layout_candidate {
  std::string change;  // e.g. "high_first nibbles", "cublas_128x4 scales", "scale rule round_up"
  mx_storage storage;
  quantize_options options;
  std::size_t mismatches = 0;
  bool ok() const noexcept { return mismatches == 0; }
};

struct layout_diagnosis {
  std::size_t original_mismatches = 0;
  std::vector<layout_candidate> tried;  // in the order tried
  std::string explanation;              // names the first passing change, or says none passed
  bool found() const noexcept {
    for (const layout_candidate& c : tried)
      if (c.ok()) return true;
    return false;
  }
  const layout_candidate* passing() const noexcept {
    for (const layout_candidate& c : tried)
      if (c.ok()) return &c;
    return nullptr;
  }
};

}  // namespace ref
namespace detail {
// Whether view v's description fits buffers of these sizes (the check every binding makes).
inline bool fits_buffers(const mx_foreign_view& v, std::size_t data_bytes, std::size_t scale_bytes) noexcept {
  return v.data_span() <= data_bytes && v.scale_span() <= scale_bytes;
}

// The single changes of a description (before any pairing), each with its name.
inline std::vector<layout_candidate> single_layout_changes(const mx_foreign_view& v) {
  std::vector<layout_candidate> out;
  const auto add = [&](std::string change, const mx_storage& s, const quantize_options& o) {
    out.push_back({std::move(change), s, o, 0});
  };
  if (v.layout.format == formats::mxfp4) {
    mx_storage s = v.storage;
    s.nibbles = s.nibbles == nibble_order::low_first ? nibble_order::high_first : nibble_order::low_first;
    add(std::string(name_of(s.nibbles)) + " nibbles", s, v.options);
  }
  for (scale_layout l : all_scale_layouts) {
    if (l == v.storage.scales) continue;
    mx_storage s = v.storage;
    s.scales = l;
    s.scale_line_stride = s.scale_block_stride = 0;
    s.scale_padded = {};
    add(std::string(name_of(l)) + " scales", s, v.options);
  }
  if (v.layout.axis == block_axis::columnwise) {
    mx_storage s = v.storage;
    s.columnwise = s.columnwise == columnwise_storage::transposed ? columnwise_storage::not_transposed : columnwise_storage::transposed;
    s.data_ld = 0;
    add(std::string("columnwise copy stored ") + name_of(s.columnwise), s, v.options);
  }
  for (scale_rule r : {scale_rule::floor, scale_rule::even, scale_rule::round_up, scale_rule::ceil}) {
    if (r == v.options.rule) continue;
    quantize_options o = v.options;
    o.rule = r;
    add(std::string("scale rule ") + name_of(r), v.storage, o);
  }
  return out;
}
}  // namespace detail
namespace ref {

// Tries the common mistakes on a copy whose description fails validation; see the file comment.
// The buffers are actual.data and actual.scales: a candidate that would read past them is skipped.
template <class T>
  requires quantizer_input<T>
layout_diagnosis diagnose_layout(matrix_view<T> input, const mx_foreign_view& actual, validate_options opt = {}) {
  const std::size_t data_bytes = actual.data.size(), scale_bytes = actual.scales.size();
  detail::require(detail::fits_buffers(actual, data_bytes, scale_bytes), "diagnose_layout: the description reads ",
                  actual.data_span(), " data bytes and ", actual.scale_span(), " scale bytes, but the buffers hold ", data_bytes,
                  " and ", scale_bytes);
  opt.max_reported = 0;
  layout_diagnosis d;
  const auto count = [&](const mx_storage& s, const quantize_options& o) {
    mx_foreign_view v = actual;
    v.storage = s;
    v.options = o;
    return validate(input, v, opt).mismatch_count();
  };
  d.original_mismatches = count(actual.storage, actual.options);
  if (d.original_mismatches == 0) {
    d.explanation = "the copy passes as described";
    return d;
  }
  const std::vector<layout_candidate> singles = detail::single_layout_changes(actual);
  // Validates candidate c where its description fits the buffers; true when it passes.
  const auto passes = [&](layout_candidate c) {
    mx_foreign_view v = actual;
    v.storage = c.storage;
    detail::check_foreign_storage(v, "diagnose_layout");
    if (!detail::fits_buffers(v, data_bytes, scale_bytes)) return false;
    c.mismatches = count(c.storage, c.options);
    d.tried.push_back(c);
    if (c.ok()) d.explanation = "passes with " + c.change + " (" + std::to_string(d.original_mismatches) + " mismatches as described)";
    return c.ok();
  };
  for (const layout_candidate& c : singles)
    if (passes(c)) return d;
  // Two mistakes at once (FP4 nibbles and a tiled scale layout often come together): each pair
  // of changes to different fields.
  for (std::size_t i = 0; i < singles.size(); ++i)
    for (std::size_t j = i + 1; j < singles.size(); ++j) {
      const layout_candidate& a = singles[i];
      const layout_candidate& b = singles[j];
      layout_candidate c{a.change + " and " + b.change, a.storage, a.options, 0};
      const bool a_scales = a.storage.scales != actual.storage.scales, b_scales = b.storage.scales != actual.storage.scales;
      const bool a_rule = a.options.rule != actual.options.rule, b_rule = b.options.rule != actual.options.rule;
      if ((a_scales && b_scales) || (a_rule && b_rule)) continue;  // two values of one field
      if (b.storage.nibbles != actual.storage.nibbles) c.storage.nibbles = b.storage.nibbles;
      if (b_scales) {
        c.storage.scales = b.storage.scales;
        c.storage.scale_line_stride = c.storage.scale_block_stride = 0;
        c.storage.scale_padded = {};
      }
      if (b.storage.columnwise != actual.storage.columnwise) {
        c.storage.columnwise = b.storage.columnwise;
        c.storage.data_ld = 0;
      }
      if (b_rule) c.options.rule = b.options.rule;
      if (passes(c)) return d;
    }
  d.explanation = "no single or paired change of nibble order, scale layout, columnwise storage or scale rule makes it pass (" +
                  std::to_string(d.tried.size()) + " tried)";
  return d;
}

// One description of an NVFP4 copy tried: what it changes and how many bytes then differ.
struct nvfp4_layout_candidate {
  std::string change;
  int field = 0;  // what it changes (candidates changing one field are not paired)
  nvfp4_foreign_view view;  // the changed description, over the caller's buffers
  std::size_t mismatches = 0;
  bool ok() const noexcept { return mismatches == 0; }
};

struct nvfp4_layout_diagnosis {
  std::size_t original_mismatches = 0;
  std::vector<nvfp4_layout_candidate> tried;  // in the order tried
  std::string explanation;
  bool found() const noexcept { return passing() != nullptr; }
  const nvfp4_layout_candidate* passing() const noexcept {
    for (const nvfp4_layout_candidate& c : tried)
      if (c.ok()) return &c;
    return nullptr;
  }
};

}  // namespace ref
namespace detail {
// The fields a candidate changes (nvfp4_layout_candidate::field).
enum nvfp4_change_field : int { nibbles = 1, scales, columnwise, blocks, tensor, rotation };

// The single changes of an NVFP4 description; `amax` is the copy's finite amax (for "the amax
// applied as the tensor scale").
inline std::vector<nvfp4_layout_candidate> single_nvfp4_changes(const nvfp4_foreign_view& v, nvfp4_formula formula, float amax) {
  using enum nvfp4_change_field;
  std::vector<nvfp4_layout_candidate> out;
  const auto add = [&](std::string change, int f, const nvfp4_foreign_view& w) { out.push_back({std::move(change), f, w, 0}); };
  nvfp4_foreign_view w = v;
  w.storage.nibbles = v.storage.nibbles == nibble_order::low_first ? nibble_order::high_first : nibble_order::low_first;
  add(std::string(name_of(w.storage.nibbles)) + " nibbles", nibbles, w);
  for (scale_layout l : all_scale_layouts) {
    if (l == v.storage.scales) continue;
    w = v;
    w.storage.scales = l;
    w.storage.scale_line_stride = w.storage.scale_block_stride = 0;
    w.storage.scale_padded = {};
    add(std::string(name_of(l)) + " scales", scales, w);
  }
  if (v.layout.axis == block_axis::columnwise) {
    w = v;
    w.storage.columnwise =
        v.storage.columnwise == columnwise_storage::transposed ? columnwise_storage::not_transposed : columnwise_storage::transposed;
    w.storage.data_ld = 0;
    add(std::string("columnwise copy stored ") + name_of(w.storage.columnwise), columnwise, w);
  }
  w = v;
  w.layout.format = v.layout.format.block.rows == 1 ? formats::nvfp4_2d : formats::nvfp4;
  add(std::string(nvfp4_format_name(w.layout.format)) + " blocks (" + (w.layout.format.block.rows == 1 ? "1 x 16" : "16 x 16") + ")", blocks, w);
  w = v;
  w.tensor_scale = nvfp4_neutral_stored(formula);
  w.tensor_scale_from_amax = false;
  add("tensor scale not applied (quantized as if it were 1)", tensor, w);
  if (formula != nvfp4_formula::te) {
    const float stored = v.tensor_scale_from_amax ? nvfp4_expected_stored(formula, amax) : v.tensor_scale;
    if (nvfp4_valid_tensor_scale(stored) && nvfp4_valid_tensor_scale(fp32_div(1.0f, stored))) {
      w.tensor_scale = fp32_div(1.0f, stored);
      add("the tensor scale's reciprocal applied (an encode scale for the decode scale)", tensor, w);
    }
    if (nvfp4_valid_tensor_scale(amax)) {
      w.tensor_scale = amax;
      add("the copy's amax applied as the tensor scale (not amax / 2688)", tensor, w);
    }
  }
  if (v.options.hadamard) {
    w = v;
    w.options.hadamard = false;
    add("not rotated (no Hadamard transform)", rotation, w);
  }
  return out;
}
}  // namespace detail
namespace ref {

// Tries the common mistakes on an NVFP4 copy that fails validation (the file comment): single
// changes first, then pairs of changes to different fields. The buffers are actual's.
template <class T>
  requires quantizer_input<T>
nvfp4_layout_diagnosis diagnose_layout(matrix_view<T> input, const nvfp4_foreign_view& actual, nvfp4_validate_options opt = {}) {
  detail::check_nvfp4_foreign_view(actual, "diagnose_layout");
  const std::size_t data_bytes = actual.data.size(), scale_bytes = actual.scales.size();
  opt.max_reported = 0;
  nvfp4_layout_diagnosis d;
  d.original_mismatches = validate(input, actual, opt).mismatch_count();
  if (d.original_mismatches == 0) {
    d.explanation = "the copy passes as described";
    return d;
  }
  nvfp4_options o = actual.options;
  o.stream = stochastic_stream(actual.options.stream, actual.layout.axis);
  const float amax = detail::nvfp4_copy_amax(input, actual.layout, o, opt.quirks.rotated_bf16, opt.threads);
  const std::vector<nvfp4_layout_candidate> singles = detail::single_nvfp4_changes(actual, opt.quirks.formula, amax);
  const auto passes = [&](nvfp4_layout_candidate c) {
    detail::check_nvfp4_foreign_storage(c.view, "diagnose_layout");
    if (c.view.data_span() > data_bytes || c.view.scale_span() > scale_bytes) return false;
    c.mismatches = validate(input, c.view, opt).mismatch_count();
    d.tried.push_back(c);
    if (c.ok()) d.explanation = "passes with " + c.change + " (" + std::to_string(d.original_mismatches) + " mismatches as described)";
    return c.ok();
  };
  for (const nvfp4_layout_candidate& c : singles)
    if (passes(c)) return d;
  for (std::size_t i = 0; i < singles.size(); ++i)
    for (std::size_t j = i + 1; j < singles.size(); ++j) {
      const nvfp4_layout_candidate& a = singles[i];
      const nvfp4_layout_candidate& b = singles[j];
      if (a.field == b.field) continue;
      // b's field onto a's description (each changes one field of `actual`)
      nvfp4_layout_candidate c{a.change + " and " + b.change, a.field, a.view, 0};
      if (b.view.storage.nibbles != actual.storage.nibbles) c.view.storage.nibbles = b.view.storage.nibbles;
      if (b.view.storage.scales != actual.storage.scales) {
        c.view.storage.scales = b.view.storage.scales;
        c.view.storage.scale_line_stride = c.view.storage.scale_block_stride = 0;
        c.view.storage.scale_padded = {};
      }
      if (b.view.storage.columnwise != actual.storage.columnwise) {
        c.view.storage.columnwise = b.view.storage.columnwise;
        c.view.storage.data_ld = 0;
      }
      if (!(b.view.layout.format == actual.layout.format)) c.view.layout.format = b.view.layout.format;
      if (b.field == detail::nvfp4_change_field::tensor) {
        c.view.tensor_scale = b.view.tensor_scale;
        c.view.tensor_scale_from_amax = b.view.tensor_scale_from_amax;
      }
      if (b.view.options.hadamard != actual.options.hadamard) c.view.options.hadamard = b.view.options.hadamard;
      if (passes(c)) return d;
    }
  d.explanation = "no single or paired change of nibble order, scale layout, columnwise storage, block shape, tensor scale or rotation "
                  "makes it pass (" +
                  std::to_string(d.tried.size()) + " tried)";
  return d;
}

}  // namespace ref
MXKIT_END_NAMESPACE
