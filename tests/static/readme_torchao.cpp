// SPDX-License-Identifier: Apache-2.0
// docs/validation.md "Validating a torchao copy", verbatim: torchao's to_mx output, MXFP8 (RCEIL)
// and MXFP4 (FLOOR) with to_blocked scales, checked byte for byte. Exits 1 if anything is off
// (ctest static.readme_torchao). With torchao, the spans are the host bytes of its tensors:
//   scale, data = to_mx(x, torch.float8_e4m3fn, 32, ScaleCalculationMode.RCEIL)  # rowwise copy
//   data_bytes  = data.view(torch.uint8)          # [M, K]; MXFP4 (torch.float4_e2m1fn_x2): [M, K/2]
//   scale_bytes = to_blocked(scale.view(M, K // 32)).view(torch.uint8)  # cuBLAS's 128x4 tiles
// (the columnwise copy is to_mx of x.t(): stored transposed). Here quantize_like writes the bytes
// that torchao writes, standing in for them.
#include <mxkit/mxkit.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  namespace mx = mxkit;
  const std::size_t M = 200, K = 96;  // K: whole blocks, as torchao needs; M = 200: the columnwise copy is ragged
  std::vector<float> x(M * K, 0.0f);  // row 0 stays zero: three all-zero rowwise blocks
  for (std::size_t i = K; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(1 + i % 7);
  const mx::matrix_view<const float> in{x.data(), M, K};

  bool ok = true;
  for (const mx::ref::peer_preset& ao : {mx::ref::peers::torchao_to_mx(mx::mx_type::mxfp8_e4m3, mx::ref::torchao_scale_mode::rceil, mx::scale_layout::cublas_128x4),
                                    mx::ref::peers::torchao_to_mx(mx::mx_type::mxfp4, mx::ref::torchao_scale_mode::floor, mx::scale_layout::cublas_128x4)})
    for (const mx::block_axis axis : {mx::block_axis::rowwise, mx::block_axis::columnwise}) {
      const mx::mx_foreign_buffers theirs = mx::ref::quantize_like(ao, in, axis);  // torchao's data and scale bytes
      const mx::ref::mx_validation_report r =
          mx::ref::validate(in, ao.view(axis, M, K, theirs.data, theirs.scales), ao.validation());
      std::printf("%s\n", r.summary().c_str());
      ok = ok && r.ok();
    }

  // The same preset spelled out, for a torchao-like kernel of your own (MXFP4 FLOOR, columnwise):
  const mx::ref::peer_preset ao = mx::ref::peers::torchao_to_mx(mx::mx_type::mxfp4, mx::ref::torchao_scale_mode::floor, mx::scale_layout::cublas_128x4);
  const mx::mx_foreign_buffers theirs = mx::ref::quantize_like(ao, in, mx::block_axis::columnwise);
  mx::mx_storage s;                               // columnwise stored transposed: [K, M] (mxkit's default)
  s.scales = mx::scale_layout::cublas_128x4;      // to_blocked; its padding entries hold 0 (the default)
  s.padding_stored = false;                       // 200 rows: the last block's 24 padding positions are not stored
  mx::quantize_options q;                         // scale_rule::floor, nearest even: mxkit's defaults
  mx::ref::validate_options v;
  v.quirks.zero_block_scale = 0x00;               // torchao writes scale 0x00 for an all-zero block (mxkit: 0x7F)
  const mx::mx_foreign_view view{{mx::formats::mxfp4, mx::block_axis::columnwise, M, K}, q, s, theirs.data, theirs.scales};
  const mx::ref::mx_validation_report spelled = mx::ref::validate(in, view, v);

  // Without the quirk, torchao's rowwise zero blocks are reported as scale mismatches (3 here).
  const mx::mx_foreign_buffers rows = mx::ref::quantize_like(ao, in, mx::block_axis::rowwise);
  const mx::ref::mx_validation_report strict = mx::ref::validate(in, ao.view(mx::block_axis::rowwise, M, K, rows.data, rows.scales));
  std::printf("%s\n%s\n", spelled.summary().c_str(), strict.summary().c_str());
  return ok && spelled.ok() && strict.scale_mismatches == 3 && strict.element_mismatches == 0 ? 0 : 1;
}
