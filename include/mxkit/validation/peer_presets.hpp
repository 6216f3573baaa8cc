// SPDX-License-Identifier: Apache-2.0
#pragma once
// Named configurations that reproduce the peers' MX quantizers byte for byte: the options
// (scale rule, rounding, rotation), the departures from their own documented rule
// (validation/peer_quirks.hpp) and how they store each copy (tensor/foreign_layout.hpp). Use them to
// validate a peer's output, or to produce what the peer would have written (their NVFP4
// quantizers: validation/nvfp4_presets.hpp):
//
//   const mxkit::peer_preset te = mxkit::peers::te_mxfp8();
//   mxkit::validate(x, te.view(block_axis::columnwise, M, K, data, scale_inv), te.validation());
//
// Peers, with the rule each one publishes and what its code does (tests/ref/catch2_test_peer_presets.cpp
// pins blocks of each to bytes worked out from these rules):
//
// torchao `to_mx` (torchao/prototype/mx_formats/mx_tensor.py), ScaleCalculationMode:
//   FLOOR  floor(log2 amax) - emax_elem (emax: E2M1 2, E2M3 2, E3M2 4, E4M3 8, E5M2 15), from the
//          float's exponent field; OCP MX v1.0 section 6.3.              -> scale_rule::floor
//   CEIL   that exponent plus one when amax's mantissa is non-zero.     -> scale_rule::ceil
//   EVEN   amax's float bits plus half an element ulp (1 << (22 - mbits)), mantissa masked off,
//          then FLOOR.                                                   -> scale_rule::even
//   RCEIL  the smallest power of two s with amax / s <= max_elem (cuBLAS's rule), computed as the
//          E8M0 round-up of fl(amax * fl(1 / max_elem)).                -> scale_rule::round_up
//          The float product loses bits where it is a float subnormal: peer_quirks'
//          rceil_float_formula (peer_formula::peer_code, the default) reproduces that;
//          peer_formula::documented_rule applies the rule exactly.
//   Elements: x times the exact reciprocal of the scale, cast with round-to-nearest-even and
//   saturation (FP8 casts; _f32_to_floatx_unpacked for FP4/FP6). FP4 packed low nibble first
//   (pack_uint4: `data[::2] | data[1::2] << 4`, as torch.float4_e2m1fn_x2). Whole blocks only
//   (the last dimension must be a multiple of 32). The columnwise copy is to_mx of x.t(): stored
//   transposed. Scales row-major, or to_blocked's 128x4 tiles (cuBLAS's layout, padding 0).
//   Zero block: 0x00 in every mode (mxkit: 0x7F). NaN or Inf amax: 0xFF (as mxkit).
// NVIDIA TransformerEngine MXFP8 (transformer_engine/common: quantize kernels, utils.cuh):
//   RCEIL: float_to_e8m0(amax * max_norm_rcp) with max_norm_rcp = fl(1 / 448) (E4M3) or
//   fl(1 / 57344) (E5M2); elements x * exp2f_rcp(scale), cast RNE with saturation. Quirks with
//   peer_formula::peer_code: the subnormal descale above, and exp2f_rcp(0x00) = 1 (the elements
//   of a 0x00-scale block are scaled by 1, not 2^127). Zero block: 0x00. Rowwise data [M, K],
//   scale_inv [roundup(M, 128), roundup(K/32, 4)] row-major; the columnwise copy is NOT
//   transposed: data [M, K] with scale_inv [roundup(M/32, 4), roundup(K, 128)] (block index the
//   slow axis). After TE's swizzle (or with GEMM-ready scales) both are in cuBLAS's 128x4 layout.
//   The padded scale entries are not checked: cuBLAS reads them only for rows and blocks outside
//   the product. NaN/Inf: TE's amax reductions use fmaxf, which drops NaN (and recent kernels
//   skip Inf), so a block with a NaN input gets a finite scale and NaN codes, where mxkit writes
//   0xFF; not modeled (the presets reproduce TE for finite inputs).
// ROCm TransformerEngine MXFP4 (transformer_engine/pytorch/triton_kernels/cast_transpose.py,
// the MXFP4 recipe): the 16-point Hadamard rotation on every operand (no random signs); scale by
//   EVEN (amax bits + 0x200000, masked; floor(log2) - 2); zero block 0x7F (an explicit
//   `where(amax == 0, 127)`, as mxkit). Elements: the software (Triton) path rounds ties away
//   from zero (thresholds 0.25, 0.75, ... 5.0 take the larger code): rocm_fp4_path::software;
//   the gfx950 conversion instruction rounds to nearest even: rocm_fp4_path::hardware. FP4 low
//   nibble first (`evens | odds << 4`); the columnwise copy stored transposed ([N, M/2]); scales
//   row-major or in the AITER e8m0 shuffle, whose padding entries ROCm TE fills with 127. Its
//   sign test `qx < 0` writes +0 (code 0x0) for an input of -0.0, where mxkit keeps -0 (0x8): not
//   modeled. A NaN or Inf amax becomes Inf after the EVEN masking and clamps to scale 0xFE; not
//   modeled either.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/validation/peer_quirks.hpp>
#include <mxkit/validation/validate.hpp>
#include <mxkit/tensor/foreign_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// Which formula a preset reproduces where a peer's code departs from its documented rule.
enum class peer_formula : std::uint8_t {
  peer_code,        // the peer's float formula: its bytes exactly (default)
  documented_rule,  // the rule the peer documents (OCP / cuBLAS RCEIL), computed exactly
};
enum class torchao_scale_mode : std::uint8_t { floor, rceil, ceil, even };
enum class rocm_fp4_path : std::uint8_t { hardware, software };
enum class peer : std::uint8_t { torchao, nvidia_te, rocm_te };

}  // namespace ref
template <>
struct enum_names<ref::torchao_scale_mode> {  // torchao's ScaleCalculationMode spellings
  static constexpr const char* names[] = {"FLOOR", "RCEIL", "CEIL", "EVEN"};
  static constexpr ref::torchao_scale_mode last = ref::torchao_scale_mode::even;
};
template <>
struct enum_names<ref::peer_formula> {
  static constexpr const char* names[] = {"peer_code", "documented_rule"};
  static constexpr ref::peer_formula last = ref::peer_formula::documented_rule;
};
template <>
struct enum_names<ref::rocm_fp4_path> {
  static constexpr const char* names[] = {"hardware", "software"};
  static constexpr ref::rocm_fp4_path last = ref::rocm_fp4_path::software;
};
template <>
struct enum_names<ref::peer> {
  static constexpr const char* names[] = {"torchao", "nvidia_te", "rocm_te"};
  static constexpr ref::peer last = ref::peer::rocm_te;
};
namespace ref {

struct peer_preset {
  peer who = peer::torchao;
  std::string name;  // e.g. "torchao to_mx RCEIL (mxfp8_e4m3)"
  mx_type type = mx_type::mxfp4;
  quantize_options options;
  peer_quirks quirks;
  scale_layout scales = scale_layout::row_major;

  // How this peer stores the rowwise or columnwise copy of a [rows, cols] matrix.
  mx_storage storage(block_axis axis, std::size_t rows, std::size_t cols) const {
    detail::check_enum(who, peer::rocm_te, "peer", "peer_preset::storage");
    detail::check_enum(axis, block_axis::columnwise, "block_axis", "peer_preset::storage");
    mx_storage s;
    s.scales = scales;
    s.padding_stored = false;  // every peer here quantizes whole blocks only
    const block_layout l{checked_format_of(type, "peer_preset::storage"), axis, rows, cols};
    switch (who) {
      case peer::torchao: break;  // row-major data and scales, transposed columnwise copy, to_blocked pads with 0
      case peer::nvidia_te:
        s.padding_scale = std::nullopt;  // see the file comment
        if (axis == block_axis::columnwise) s.columnwise = columnwise_storage::not_transposed;
        if (scales == scale_layout::row_major) {
          s.scale_padded = {detail::round_up_to(l.lines(), 128), detail::round_up_to(l.blocks_per_line(), 4)};
          if (axis == block_axis::columnwise) {  // [roundup(M/32, 4), roundup(K, 128)]: block index slow
            s.scale_line_stride = 1;
            s.scale_block_stride = s.scale_padded.lines;
          }
        }
        break;
      case peer::rocm_te:
        s.padding_scale = scales == scale_layout::row_major ? std::optional<std::uint8_t>{} : std::optional<std::uint8_t>{127};
        break;
    }
    return s;
  }
  // The peer's copy in the caller's buffers, with their sizes (validate refuses a short one).
  mx_foreign_view view(block_axis axis, std::size_t rows, std::size_t cols, std::span<const std::uint8_t> data,
                       std::span<const std::uint8_t> scale_bytes) const {
    return {{format_of(type), axis, rows, cols}, options, storage(axis, rows, cols), data, scale_bytes};
  }
  // `base` with this peer's quirks.
  validate_options validation(validate_options base = {}) const {
    base.quirks = quirks;
    return base;
  }
};

namespace peers {

// torchao to_mx with ScaleCalculationMode `mode`; element: any MX float type (not mxint8).
// scales: row_major, or cublas_128x4 (to_blocked / swizzled scales).
inline peer_preset torchao_to_mx(mx_type element, torchao_scale_mode mode, scale_layout scales = scale_layout::row_major,
                                 peer_formula formula = peer_formula::peer_code) {
  detail::check_enum(mode, torchao_scale_mode::even, "torchao_scale_mode", "peers::torchao_to_mx");
  detail::check_enum(formula, peer_formula::documented_rule, "peer_formula", "peers::torchao_to_mx");
  detail::require(element != mx_type::mxint8 && static_cast<unsigned>(element) <= static_cast<unsigned>(mx_type::mxint8),
                  "peers::torchao_to_mx: element type ", static_cast<unsigned>(element),
                  " is not one of torchao's MX float types (mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2)");
  detail::require(scales == scale_layout::row_major || scales == scale_layout::cublas_128x4,
                  "peers::torchao_to_mx: torchao writes row_major or cublas_128x4 scales, not ", name_of(scales));
  peer_preset p;
  p.who = peer::torchao;
  p.type = element;
  p.scales = scales;
  p.options.rule = mode == torchao_scale_mode::floor  ? scale_rule::floor
                   : mode == torchao_scale_mode::ceil ? scale_rule::ceil
                   : mode == torchao_scale_mode::even ? scale_rule::even
                                                      : scale_rule::round_up;
  p.options.round = rounding::nearest_even;
  p.quirks.zero_block_scale = 0x00;
  p.quirks.rceil_float_formula = mode == torchao_scale_mode::rceil && formula == peer_formula::peer_code;
  p.name = std::string("torchao to_mx ") + name_of(mode) + " (" + std::string(name_of(element)) + ")";
  return p;
}

// NVIDIA TransformerEngine MXFP8: E4M3 (or E5M2), RCEIL. scales: row_major (TE's compact
// scale_inv) or cublas_128x4 (swizzled for the GEMM).
inline peer_preset te_mxfp8(mx_type element = mx_type::mxfp8_e4m3, scale_layout scales = scale_layout::row_major,
                            peer_formula formula = peer_formula::peer_code) {
  detail::check_enum(formula, peer_formula::documented_rule, "peer_formula", "peers::te_mxfp8");
  detail::require(element == mx_type::mxfp8_e4m3 || element == mx_type::mxfp8_e5m2, "peers::te_mxfp8: element type ",
                  static_cast<unsigned>(element), " is not mxfp8_e4m3 or mxfp8_e5m2");
  detail::require(scales == scale_layout::row_major || scales == scale_layout::cublas_128x4,
                  "peers::te_mxfp8: TE writes row_major or cublas_128x4 scales, not ", name_of(scales));
  peer_preset p;
  p.who = peer::nvidia_te;
  p.type = element;
  p.scales = scales;
  p.options.rule = scale_rule::round_up;
  p.options.round = rounding::nearest_even;
  p.quirks.zero_block_scale = 0x00;
  p.quirks.rceil_float_formula = formula == peer_formula::peer_code;
  p.quirks.unit_element_scale_at_0x00 = formula == peer_formula::peer_code;
  p.name = std::string("NVIDIA TE MXFP8 (") + std::string(name_of(element)) + ")";
  return p;
}

// ROCm TransformerEngine MXFP4: Hadamard on every operand, EVEN. path: how elements round.
// scales: row_major or aiter_shuffle.
inline peer_preset rocm_te_mxfp4(rocm_fp4_path path = rocm_fp4_path::hardware, scale_layout scales = scale_layout::row_major) {
  detail::check_enum(path, rocm_fp4_path::software, "rocm_fp4_path", "peers::rocm_te_mxfp4");
  detail::require(scales == scale_layout::row_major || scales == scale_layout::aiter_shuffle,
                  "peers::rocm_te_mxfp4: ROCm TE writes row_major or aiter_shuffle scales, not ", name_of(scales));
  peer_preset p;
  p.who = peer::rocm_te;
  p.type = mx_type::mxfp4;
  p.scales = scales;
  p.options.rule = scale_rule::even;
  p.options.round = path == rocm_fp4_path::software ? rounding::nearest_away : rounding::nearest_even;
  p.options.hadamard = true;
  p.name = std::string("ROCm TE MXFP4 (") + name_of(path) + " path)";
  return p;
}

}  // namespace peers

// What `preset`'s quantizer writes for one copy of `input`: the reference with the peer's
// options and quirks, stored the peer's way. (Whole blocks: a ragged edge is quantized as
// mxkit pads it, and its padding is not stored.)
template <class T>
  requires quantizer_input<T>
mx_foreign_buffers quantize_like(const peer_preset& preset, matrix_view<T> input, block_axis axis, unsigned threads = 0) {
  detail::check_matrix(input, "quantize_like:");
  mx_tensor t({checked_format_of(preset.type, "quantize_like"), axis, input.rows, input.cols}, preset.options);
  const block_layout& l = t.layout();
  quantize_options o = preset.options;
  o.stream = stochastic_stream(preset.options, axis);
  visit_mx_type(preset.type, [&](auto fmt) {
    using Fmt = decltype(fmt);
    const double work = 8.0 * static_cast<double>(l.lines()) * static_cast<double>(l.padded_length());
    const std::size_t group = axis == block_axis::rowwise ? 1 : 16;  // as quantize() groups columns
    detail::parallel_chunks(l.lines(), detail::host_thread_count(threads, l.lines(), work),
                            [&](std::size_t first, std::size_t last, std::size_t) {
                              constexpr int k = Fmt::block_size;
                              float v[k];
                              for (std::size_t g0 = first; g0 < last; g0 += group)
                                for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk)
                                  for (std::size_t line = g0; line < std::min(g0 + group, last); ++line) {
                                    std::uint8_t* row = t.data().data() + line * l.line_bytes();
                                    detail::gather_block<k>(input, axis, line, blk, v);
                                    const detail::reference_block_bytes<k> b = detail::reference_block<Fmt>(
                                        v, o, line * l.padded_length() + blk * k, preset.quirks, nullptr);
                                    t.scales()[line * l.blocks_per_line() + blk] = b.scale;
                                    for (int i = 0; i < k; ++i)
                                      store_code(row, blk * k + static_cast<std::size_t>(i), b.codes[i], Fmt::storage_bits);
                                  }
                            });
  });
  return store_foreign(std::as_const(t).view(), preset.storage(axis, input.rows, input.cols));
}

}  // namespace ref
MXKIT_END_NAMESPACE
