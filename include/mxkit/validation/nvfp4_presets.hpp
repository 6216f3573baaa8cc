// SPDX-License-Identifier: Apache-2.0
#pragma once
// Named configurations that reproduce TransformerEngine's and torchao's NVFP4 quantizers byte for
// byte (their rules: validation/nvfp4_quirks.hpp, with the file and function each comes from): the
// format (1 x 16 or 16 x 16 blocks), each copy's options (TE rotates the columnwise copy only),
// the formula, and how each library stores a copy. Use them to validate a peer's output, or to
// produce what the peer would have written (quantize_like), as the MX presets do
// (validation/peer_presets.hpp):
//
//   const mxkit::ref::nvfp4_preset te = mxkit::ref::peers::te_nvfp4(/*rht=*/true);
//   mxkit::ref::validate(x, te.view(block_axis::columnwise, M, K, data, scale_inv, amax_columnwise), te.validation());
//
// Storage (tensor/nvfp4_foreign_layout.hpp). Both store E2M1 codes low nibble first, the
// columnwise copy transposed ([K, M/2] bytes), whole blocks only (K, and M for the columnwise
// copy, multiples of 16), and hand cuBLAS the scales in its 128x4 tiles (cublas_128x4):
//   TransformerEngine  rowwise scale_inv [roundup(M, 128), roundup(K/16, 4)], columnwise
//                      [roundup(K, 128), roundup(M/16, 4)], row-major (pytorch/tensor/nvfp4_tensor.py,
//                      NVFP4Quantizer.get_scale_shape), or swizzled for the GEMM; padded entries
//                      unchecked (cuBLAS reads them only outside the product). Tensor scale: the
//                      copy's amax (amax_rowwise, amax_columnwise).
//   torchao            scale [M, K/16] row-major, or to_blocked's tiles (padding 0;
//                      hp_data_dims_to_swizzled_scale_dims_nvfp4). Tensor scale: per_tensor_scale.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>
#include <mxkit/tensor/nvfp4_foreign_layout.hpp>
#include <mxkit/validation/nvfp4_quirks.hpp>
#include <mxkit/validation/nvfp4_validate.hpp>
#include <mxkit/validation/peer_presets.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

struct nvfp4_preset {
  peer who = peer::torchao;
  std::string name;                       // e.g. "NVIDIA TE NVFP4 (RHT on the columnwise copy)"
  block_format format = formats::nvfp4;   // formats::nvfp4_2d for TE's 2-D weights
  nvfp4_options rowwise_options;          // each copy's rotation and rounding
  nvfp4_options columnwise_options;
  nvfp4_quirks quirks;                    // the formula
  scale_layout scales = scale_layout::row_major;
  bool tensor_scale_from_amax = true;     // torchao one-level: no tensor scale (stored as 1, given)

  const nvfp4_options& options(block_axis axis) const noexcept {
    return axis == block_axis::rowwise ? rowwise_options : columnwise_options;
  }
  // How this peer stores the rowwise or columnwise copy of a [rows, cols] matrix.
  mx_storage storage(block_axis axis, std::size_t rows, std::size_t cols) const {
    detail::check_enum(who, peer::rocm_te, "peer", "nvfp4_preset::storage");
    detail::check_enum(axis, block_axis::columnwise, "block_axis", "nvfp4_preset::storage");
    detail::require(who == peer::nvidia_te || who == peer::torchao, "nvfp4_preset::storage: ", name_of(who), " has no NVFP4 preset");
    mx_storage s;
    s.scales = scales;
    s.padding_stored = false;  // whole blocks only
    if (who == peer::nvidia_te) {
      s.padding_scale = std::nullopt;
      if (scales == scale_layout::row_major) {
        const block_layout l{format, axis, rows, cols};
        s.scale_padded = {detail::round_up_to(l.lines(), 128), detail::round_up_to(l.blocks_per_line(), 4)};
      }
    }
    return s;
  }
  // The peer's copy in the caller's buffers, with its stored tensor scale (TE: the copy's amax;
  // torchao: per_tensor_scale, ignored in one-level mode).
  nvfp4_foreign_view view(block_axis axis, std::size_t rows, std::size_t cols, std::span<const std::uint8_t> data,
                          std::span<const std::uint8_t> scale_bytes, float tensor_scale) const {
    return {{format, axis, rows, cols}, options(axis),   storage(axis, rows, cols), data,
            scale_bytes,                tensor_scale_from_amax ? tensor_scale : 1.0f, tensor_scale_from_amax};
  }
  nvfp4_validate_options validation(nvfp4_validate_options base = {}) const {
    base.quirks = quirks;
    return base;
  }
};

namespace peers {

// NVIDIA TransformerEngine's NVFP4Quantizer (recipe NVFP4BlockScaling): rht rotates the
// columnwise copy (its inputs and gradients), two_d scales 16 x 16 tiles (its weights). Rounding
// to nearest even: TE's stochastic rounding of gradients draws its own bits (not modeled).
// scales: row_major (TE's compact scale_inv) or cublas_128x4 (swizzled for the GEMM).
inline nvfp4_preset te_nvfp4(bool rht = false, bool two_d = false, scale_layout scales = scale_layout::row_major) {
  detail::require(scales == scale_layout::row_major || scales == scale_layout::cublas_128x4,
                  "peers::te_nvfp4: TE writes row_major or cublas_128x4 scales, not ", name_of(scales));
  nvfp4_preset p;
  p.who = peer::nvidia_te;
  p.format = two_d ? formats::nvfp4_2d : formats::nvfp4;
  p.columnwise_options.hadamard = rht;
  p.columnwise_options.hadamard_signs = rht ? te_nvfp4_rht_signs : 0u;
  p.quirks.formula = nvfp4_formula::te;
  p.quirks.rotated_bf16 = true;
  p.scales = scales;
  p.name = std::string("NVIDIA TE NVFP4 (") + (two_d ? "16 x 16 blocks" : "1 x 16 blocks") + (rht ? ", RHT on the columnwise copy" : "") + ")";
  return p;
}

// torchao's NVFP4Tensor.to_nvfp4 (nvfp4_quantize, the PyTorch path): two_level with a
// per_tensor_scale from the amax (per_tensor_amax_to_scale, as its dynamic per-tensor scaling
// computes it), or one-level without one. scales: row_major, or cublas_128x4 (is_swizzled_scales).
inline nvfp4_preset torchao_nvfp4(scale_layout scales = scale_layout::row_major, bool two_level = true) {
  detail::require(scales == scale_layout::row_major || scales == scale_layout::cublas_128x4,
                  "peers::torchao_nvfp4: torchao writes row_major or cublas_128x4 scales, not ", name_of(scales));
  nvfp4_preset p;
  p.who = peer::torchao;
  p.quirks.formula = nvfp4_formula::torchao;
  p.scales = scales;
  p.tensor_scale_from_amax = two_level;
  p.name = std::string("torchao NVFP4 (") + (two_level ? "per-tensor scale from the amax" : "one level") + ")";
  return p;
}

}  // namespace peers

// What `preset`'s quantizer writes for one copy of `input`, stored the peer's way, with the
// tensor scale it stores (from the copy's amax, or `tensor_scale` as given: TE an amax, torchao a
// per_tensor_scale).
template <class T>
  requires quantizer_input<T>
nvfp4_foreign_buffers quantize_like(const nvfp4_preset& preset, matrix_view<T> input, block_axis axis,
                                    std::optional<float> tensor_scale = std::nullopt, unsigned threads = 0) {
  detail::check_matrix(input, "quantize_like:");
  detail::require(preset.tensor_scale_from_amax || !tensor_scale, "quantize_like: ", preset.name, " has no tensor scale, but ",
                  tensor_scale.value_or(0.0f), " was given");
  const nvfp4_options& options = preset.options(axis);
  nvfp4_tensor t({preset.format, axis, input.rows, input.cols}, options);  // its own tensor scale is unused: the stored one goes below
  nvfp4_options o = options;
  o.stream = stochastic_stream(options.stream, axis);
  const bool from_amax = preset.tensor_scale_from_amax && !tensor_scale;
  float stored = 1.0f;
  if (from_amax) stored = detail::nvfp4_expected_stored(preset.quirks.formula, detail::nvfp4_copy_amax(input, t.layout(), o, preset.quirks.rotated_bf16, threads));
  else if (tensor_scale) stored = *tensor_scale;
  detail::check_nvfp4_stored(preset.quirks.formula, stored, "quantize_like");
  detail::with_nvfp4_scaler(preset.quirks.formula, stored, [&](const auto& scaler) {
    detail::quantize_nvfp4_copy(input, o, preset.quirks.rotated_bf16, scaler, threads, t);
  });
  nvfp4_foreign_buffers out = store_foreign(std::as_const(t).view(), preset.storage(axis, input.rows, input.cols));
  out.tensor_scale = stored;
  out.tensor_scale_from_amax = from_amax;
  return out;
}

}  // namespace ref
MXKIT_END_NAMESPACE
