// SPDX-License-Identifier: Apache-2.0
// NVFP4 validation reports (validation/nvfp4_validate.hpp) and the layout diagnosis of NVFP4
// copies (validation/diagnose.hpp): a planted byte is reported where it is, with decoded values;
// and each typical mistake in a TE or torchao copy (nibbles swapped, scales not swizzled or
// swizzled where they should not be, the columnwise copy not transposed, the tensor scale not
// applied, its reciprocal applied, the amax applied as the scale, 1 x 16 against 16 x 16 blocks,
// the RHT forgotten, and two at once) is named by the diagnosis, while the copy as described fails.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <mxkit/validation/diagnose.hpp>
#include <mxkit/validation/nvfp4_presets.hpp>

#include "../catch.hpp"

namespace nvfp4_diagnose_test {
using mxkit::block_axis;
using mxkit::matrix_view;
namespace ref = mxkit::ref;

constexpr std::size_t rows = 48, cols = 64;

std::vector<float> input() {
  std::mt19937 g(21);
  std::normal_distribution<float> d;
  std::vector<float> x(rows * cols);
  for (float& v : x) v = d(g);
  return x;
}

// Diagnoses `bad` (the bytes of one mistake, described as the preset describes a correct copy)
// and checks that validation fails as described and that the diagnosis names `change`.
void check_named(const matrix_view<const float>& in, const ref::nvfp4_preset& p, const mxkit::nvfp4_foreign_view& described,
                 const std::string& change) {
  INFO(p.name << ": expecting \"" << change << "\"");
  CHECK_FALSE(ref::validate(in, described, p.validation()).ok());
  const ref::nvfp4_layout_diagnosis d = ref::diagnose_layout(in, described, p.validation());
  INFO(d.explanation);
  REQUIRE(d.found());
  CHECK(d.passing()->change == change);
  CHECK(d.explanation.find("passes with " + change) == 0);
}

}  // namespace nvfp4_diagnose_test

TEST_CASE("nvfp4 validate: a planted element, scale and tensor scale are reported where they are", "[nvfp4_diagnose]") {
  using namespace nvfp4_diagnose_test;
  const std::vector<float> x = input();
  const matrix_view<const float> in{x.data(), rows, cols};
  const ref::nvfp4_preset p = ref::peers::torchao_nvfp4(mxkit::scale_layout::cublas_128x4);
  mxkit::nvfp4_foreign_buffers b = ref::quantize_like(p, in, block_axis::rowwise);
  REQUIRE(ref::validate(in, b.view(), p.validation()).ok());
  b.data[5 * cols / 2 + 9] ^= 0x10;  // row 5, element 19 (the high nibble of byte 9)
  const ref::nvfp4_validation_report r = ref::validate(in, b.view(), p.validation());
  CHECK(r.element_mismatches == 1);
  CHECK(r.scale_mismatches == 0);
  REQUIRE(r.mismatches.size() == 1);
  CHECK(r.mismatches[0].row == 5);
  CHECK(r.mismatches[0].col == 19);
  CHECK(r.mismatches[0].expected == (r.mismatches[0].actual ^ 0x1));
  const std::string text = ref::to_string(r);
  CHECK(text.find("element (row 5, col 19; line 5, block 1, index 3)") != std::string::npos);
  CHECK(r.summary().find("FAIL nvfp4 rowwise 48x64") == 0);
  b.data[5 * cols / 2 + 9] ^= 0x10;
  // A scale byte: the offset of (row 7, block 2) in cuBLAS's tiles.
  b.scales[mxkit::scale_offset(mxkit::scale_layout::cublas_128x4, rows, 4, 7, 2)] ^= 0x01;
  const ref::nvfp4_validation_report s = ref::validate(in, b.view(), p.validation());
  CHECK(s.scale_mismatches == 1);
  REQUIRE_FALSE(s.mismatches.empty());
  CHECK(s.mismatches[0].kind == ref::nvfp4_mismatch_kind::scale);
  CHECK(s.mismatches[0].line == 7);
  CHECK(s.mismatches[0].block == 2);
  b.scales[mxkit::scale_offset(mxkit::scale_layout::cublas_128x4, rows, 4, 7, 2)] ^= 0x01;
  // A padded scale entry (torchao's to_blocked writes zeros there).
  b.scales.back() = 0x33;
  CHECK(ref::validate(in, b.view(), p.validation()).padding_mismatches == 1);
  b.scales.back() = 0;
  // The stored tensor scale.
  b.tensor_scale *= 2;
  const ref::nvfp4_validation_report t = ref::validate(in, b.view(), p.validation());
  CHECK(t.tensor_scale_mismatches == 1);
  CHECK(t.mismatches[0].kind == ref::nvfp4_mismatch_kind::tensor_scale);
  CHECK(ref::to_string(t).find("tensor scale: copy amax") != std::string::npos);
  // Given (calibrated) tensor scales are not compared, only used.
  b.tensor_scale_from_amax = false;
  CHECK(ref::validate(in, b.view(), p.validation()).tensor_scale_mismatches == 0);
}

TEST_CASE("nvfp4 diagnose: each typical mistake is named", "[nvfp4_diagnose]") {
  using namespace nvfp4_diagnose_test;
  const std::vector<float> x = input();
  const matrix_view<const float> in{x.data(), rows, cols};
  const ref::nvfp4_preset te = ref::peers::te_nvfp4(false, false, mxkit::scale_layout::cublas_128x4);
  const ref::nvfp4_preset ao = ref::peers::torchao_nvfp4(mxkit::scale_layout::cublas_128x4);
  const ref::nvfp4_preset ao_rows = ref::peers::torchao_nvfp4(mxkit::scale_layout::row_major);

  // Nibbles swapped: the bytes high nibble first, described as the peer stores them.
  {
    mxkit::nvfp4_foreign_buffers good = ref::quantize_like(te, in, block_axis::rowwise);
    mxkit::nvfp4_foreign_view v = good.view();
    mxkit::block_layout l = v.layout;
    mxkit::nvfp4_tensor own(l, v.options);  // mxkit's storage of the same codes, re-stored high nibble first
    for (std::size_t i = 0; i < good.data.size(); ++i) own.data()[i] = good.data[i];
    for (std::size_t line = 0; line < l.lines(); ++line)
      for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk) own.scales()[line * l.blocks_per_line() + blk] = v.scale(line, blk);
    mxkit::mx_storage swapped = v.storage;
    swapped.nibbles = mxkit::nibble_order::high_first;
    const mxkit::nvfp4_foreign_buffers bad = mxkit::store_foreign(std::as_const(own).view(), swapped);
    mxkit::nvfp4_foreign_view described = bad.view();
    described.storage.nibbles = mxkit::nibble_order::low_first;
    described.tensor_scale = good.tensor_scale;
    check_named(in, te, described, "high_first nibbles");
  }
  // Scales not swizzled: torchao's row-major scales described as to_blocked's tiles (the buffer is
  // too short for tiles, so pad it as a caller's allocation would be) ...
  {
    mxkit::nvfp4_foreign_buffers bad = ref::quantize_like(ao_rows, in, block_axis::rowwise);
    bad.scales.resize(mxkit::scale_storage_size(mxkit::scale_layout::cublas_128x4, rows, 4), 0);
    check_named(in, ao, ao.view(block_axis::rowwise, rows, cols, bad.data, bad.scales, bad.tensor_scale), "row_major scales");
  }
  // ... and swizzled scales described as row-major.
  {
    const mxkit::nvfp4_foreign_buffers bad = ref::quantize_like(ao, in, block_axis::rowwise);
    check_named(in, ao_rows, ao_rows.view(block_axis::rowwise, rows, cols, bad.data, bad.scales, bad.tensor_scale), "cublas_128x4 scales");
  }
  // The columnwise copy stored like the input ([M, K], not transposed).
  {
    mxkit::nvfp4_foreign_buffers good = ref::quantize_like(ao_rows, in, block_axis::columnwise);
    const mxkit::nvfp4_foreign_view v = good.view();
    mxkit::nvfp4_tensor own(v.layout, v.options);
    for (std::size_t line = 0; line < v.layout.lines(); ++line) {
      for (std::size_t pos = 0; pos < v.layout.line_length(); ++pos) mxkit::store_code(own.data().data() + line * v.layout.line_bytes(), pos, v.code(line, pos), 4);
      for (std::size_t blk = 0; blk < v.layout.blocks_per_line(); ++blk) own.scales()[line * v.layout.blocks_per_line() + blk] = v.scale(line, blk);
    }
    mxkit::mx_storage flat = v.storage;
    flat.columnwise = mxkit::columnwise_storage::not_transposed;
    const mxkit::nvfp4_foreign_buffers bad = mxkit::store_foreign(std::as_const(own).view(), flat);
    check_named(in, ao_rows, ao_rows.view(block_axis::columnwise, rows, cols, bad.data, bad.scales, good.tensor_scale),
                "columnwise copy stored not_transposed");
  }
  // The tensor scale not applied: torchao's one-level bytes with a two-level description.
  {
    const mxkit::nvfp4_foreign_buffers one = ref::quantize_like(ref::peers::torchao_nvfp4(mxkit::scale_layout::cublas_128x4, false), in, block_axis::rowwise);
    const float p = ref::quantize_like(ao, in, block_axis::rowwise).tensor_scale;
    check_named(in, ao, ao.view(block_axis::rowwise, rows, cols, one.data, one.scales, p), "tensor scale not applied (quantized as if it were 1)");
  }
  // Its reciprocal applied (an encode scale passed for the decode scale), and the amax applied as
  // torchao's per_tensor_scale (its docstring calls the argument a pre-computed amax).
  {
    const float p = ref::quantize_like(ao, in, block_axis::rowwise).tensor_scale;
    const mxkit::nvfp4_foreign_buffers recip = ref::quantize_like(ao, in, block_axis::rowwise, mxkit::fp32_div(1.0f, p));
    check_named(in, ao, ao.view(block_axis::rowwise, rows, cols, recip.data, recip.scales, p),
                "the tensor scale's reciprocal applied (an encode scale for the decode scale)");
    const float amax = ref::nvfp4_amax(in, block_axis::rowwise);
    const mxkit::nvfp4_foreign_buffers as_amax = ref::quantize_like(ao, in, block_axis::rowwise, amax);
    check_named(in, ao, ao.view(block_axis::rowwise, rows, cols, as_amax.data, as_amax.scales, p),
                "the copy's amax applied as the tensor scale (not amax / 2688)");
  }
  // TE's 2-D weight copy described as 1 x 16, and a forgotten RHT.
  {
    const ref::nvfp4_preset te2d = ref::peers::te_nvfp4(false, true, mxkit::scale_layout::cublas_128x4);
    const mxkit::nvfp4_foreign_buffers w = ref::quantize_like(te2d, in, block_axis::rowwise);
    check_named(in, te, te.view(block_axis::rowwise, rows, cols, w.data, w.scales, w.tensor_scale), "nvfp4_2d blocks (16 x 16)");
    const ref::nvfp4_preset rht = ref::peers::te_nvfp4(true, false, mxkit::scale_layout::cublas_128x4);
    const mxkit::nvfp4_foreign_buffers plain = ref::quantize_like(te, in, block_axis::columnwise);
    check_named(in, rht, rht.view(block_axis::columnwise, rows, cols, plain.data, plain.scales, plain.tensor_scale), "not rotated (no Hadamard transform)");
  }
  // Two mistakes at once: nibbles swapped in a copy whose scales were not swizzled.
  {
    mxkit::nvfp4_foreign_buffers good = ref::quantize_like(ao_rows, in, block_axis::rowwise);
    for (std::uint8_t& byte : good.data) byte = static_cast<std::uint8_t>((byte >> 4) | (byte << 4));
    good.scales.resize(mxkit::scale_storage_size(mxkit::scale_layout::cublas_128x4, rows, 4), 0);
    check_named(in, ao, ao.view(block_axis::rowwise, rows, cols, good.data, good.scales, good.tensor_scale),
                "high_first nibbles and row_major scales");
  }
}

TEST_CASE("nvfp4 diagnose: a correct copy passes as described, and bytes no change explains are said so", "[nvfp4_diagnose]") {
  using namespace nvfp4_diagnose_test;
  const std::vector<float> x = input();
  const matrix_view<const float> in{x.data(), rows, cols};
  const ref::nvfp4_preset te = ref::peers::te_nvfp4();
  mxkit::nvfp4_foreign_buffers b = ref::quantize_like(te, in, block_axis::rowwise);
  CHECK(ref::diagnose_layout(in, b.view(), te.validation()).explanation == "the copy passes as described");
  for (std::size_t i = 0; i < b.data.size(); i += 7) b.data[i] ^= 0x21;  // noise
  const ref::nvfp4_layout_diagnosis d = ref::diagnose_layout(in, b.view(), te.validation());
  CHECK_FALSE(d.found());
  CHECK(d.explanation.find("no single or paired change") == 0);
  CHECK(d.tried.size() >= 5);  // the candidates whose descriptions fit the buffers, alone and in pairs
}
