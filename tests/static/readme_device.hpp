// SPDX-License-Identifier: Apache-2.0
// docs/gpu.md "Device functions for your own kernel", verbatim: a kernel's code for one 32-element
// block held in registers, host and device alike (MXKIT_HD). ctest static.readme_device runs it on
// the host against the reference; catch2_test_readme_device (cuda stage; hip: device compile) runs
// it in a kernel.
#include <mxkit/block/pack.hpp>
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/tensor/scale_layout.hpp>

using fp4 = mxkit::mx_format<mxkit::mx_type::mxfp4>;  // the format descriptor: E2M1 elements, two per byte

// One call: the rotation (o.hadamard), the scale, the elements, packed. Block (row, block) of a
// [rows, blocks] grid of 32-blocks; data: block_words<fp4> = 4 words (16 bytes) per block.
MXKIT_HD inline void quantize_fp4_block(const float* v, const mxkit::quantize_options& o, mxkit::hadamard_signs signs,
                                        std::size_t rows, std::size_t blocks, std::size_t row, std::size_t block,
                                        std::uint32_t* data, std::uint8_t* scales) {
  const std::size_t b = row * blocks + block;
  const std::uint64_t first_index = b * mxkit::mx_block_size;  // stochastic rounding's element counter
  const mxkit::e8m0 s = mxkit::quantize_block_packed<fp4>(v, o, signs, first_index, data + b * mxkit::block_words<fp4>);
  scales[mxkit::scale_offset(mxkit::scale_layout::cublas_128x4, rows, blocks, row, block)] = s.bits();
}

// The same bytes from the pieces (no rotation, nearest even): amax, scale, elements, packing.
MXKIT_HD inline std::uint8_t quantize_fp4_block_by_hand(const float* v, mxkit::scale_rule rule, std::uint8_t* bytes) {
  std::uint32_t amax = 0;  // max |v| as float bits (a NaN wins)
  for (int i = 0; i < mxkit::mx_block_size; ++i) amax = mxkit::amax_bits(amax, v[i]);
  const mxkit::e8m0 s = mxkit::shared_scale<mxkit::e2m1>(mxkit::float_bits{amax}, rule);  // or shared_scale<fp4>
  for (int i = 0; i < mxkit::mx_block_size; i += 2)
    bytes[i / 2] = mxkit::pack_fp4x2(mxkit::quantize_element<mxkit::e2m1>(v[i], s, mxkit::rounding::nearest_even).bits(),
                                     mxkit::quantize_element<mxkit::e2m1>(v[i + 1], s, mxkit::rounding::nearest_even).bits());
  return s.bits();
}
