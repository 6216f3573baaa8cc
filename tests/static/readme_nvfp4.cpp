// SPDX-License-Identifier: Apache-2.0
// docs/validation.md "NVFP4 copies", verbatim: a TransformerEngine NVFP4 copy (RHT on the
// columnwise copy, cuBLAS-swizzled scales) and a torchao one checked byte for byte, then a copy
// with its nibbles swapped, diagnosed. Exits 1 if anything is off (ctest static.readme_nvfp4).
// With TE the spans are the host bytes of an NVFP4Tensor's _rowwise_data / _columnwise_data, its
// scale_inv and its amax; with torchao, qdata, scale and per_tensor_scale. Here quantize_like
// writes the bytes those libraries write, standing in for them.
#include <mxkit/mxkit.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  namespace mx = mxkit;
  const std::size_t M = 128, K = 96;  // whole 16-element blocks along both axes, as TE needs
  std::vector<mx::bfloat16> x(M * K);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = mx::bfloat16::from_float(std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(1 + i % 7));
  const mx::matrix_view<const mx::bfloat16> in{x.data(), M, K};

  bool ok = true;
  const mx::ref::nvfp4_preset te = mx::ref::peers::te_nvfp4(/*rht=*/true, /*two_d=*/false, mx::scale_layout::cublas_128x4);
  const mx::ref::nvfp4_preset ao = mx::ref::peers::torchao_nvfp4(mx::scale_layout::cublas_128x4);
  for (const mx::ref::nvfp4_preset& p : {te, ao})
    for (const mx::block_axis axis : {mx::block_axis::rowwise, mx::block_axis::columnwise}) {
      const mx::nvfp4_foreign_buffers theirs = mx::ref::quantize_like(p, in, axis);  // data, scales, stored tensor scale
      const mx::ref::nvfp4_validation_report r =
          mx::ref::validate(in, p.view(axis, M, K, theirs.data, theirs.scales, theirs.tensor_scale), p.validation());
      std::printf("%s\n", r.summary().c_str());
      ok = ok && r.ok();
    }

  // A kernel that packs the high nibble first: the report counts the bytes, the diagnosis names why.
  mx::nvfp4_foreign_buffers swapped = mx::ref::quantize_like(ao, in, mx::block_axis::rowwise);
  for (std::uint8_t& b : swapped.data) b = static_cast<std::uint8_t>(b >> 4 | b << 4);
  const mx::nvfp4_foreign_view view = ao.view(mx::block_axis::rowwise, M, K, swapped.data, swapped.scales, swapped.tensor_scale);
  const mx::ref::nvfp4_layout_diagnosis d = mx::ref::diagnose_layout(in, view, ao.validation());
  std::printf("%s\n", d.explanation.c_str());  // passes with high_first nibbles (... mismatches as described)
  return ok && d.found() && d.passing()->change == "high_first nibbles" ? 0 : 1;
}
