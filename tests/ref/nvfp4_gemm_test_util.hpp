// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by the host NVFP4 GEMM test (tests/ref) and the device one (tests/gpu): NVFP4
// copies of "exact" data (every block's dot product exact in fp32, so only the adds of blocks
// round), sign-stripped copies (the reference GEMM on them is S = sum |a b|, the magnitude error
// bounds scale with), and the dequantized lines in the TN orientation the double oracle takes.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <mxkit/block/pack.hpp>
#include <mxkit/ref/nvfp4_gemm.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>

#include "gemm_test_util.hpp"

namespace nvfp4_gemm_test {

// An NVFP4 copy [lines, k] (stored layout) of random codes (all 16) and random normal E4M3 scales
// with exponents in [-spread, spread] (any mantissa), under tensor scale t. A block's dot product
// with another such block is a multiple of 1/4 below 2^10 times two 4-bit significands: exact in
// fp32 on any path, so only the adds of blocks round.
inline mxkit::nvfp4_tensor exact_nvfp4(std::size_t lines, std::size_t k, float t, std::mt19937_64& rng,
                                       int spread = 6, mxkit::block_axis axis = mxkit::block_axis::rowwise,
                                       const mxkit::block_format& format = mxkit::formats::nvfp4) {
  const bool rowwise = axis == mxkit::block_axis::rowwise;
  mxkit::nvfp4_tensor m({format, axis, rowwise ? lines : k, rowwise ? k : lines}, {}, t, false);
  std::uniform_int_distribution<int> code(0, 15), exponent(7 - spread, 7 + spread), mantissa(0, 7);
  const mxkit::block_layout& l = m.layout();
  for (std::size_t line = 0; line < l.lines(); ++line)
    for (std::size_t p = 0; p < l.padded_length(); ++p)
      mxkit::store_code(m.data().data() + line * l.line_bytes(), p, static_cast<std::uint8_t>(code(rng)), 4);
  for (auto& s : m.scales()) s = static_cast<std::uint8_t>((exponent(rng) << 3) | mantissa(rng));
  return m;
}

// Every code's magnitude (the sign bit of each nibble cleared), scales and tensor scale kept.
inline mxkit::nvfp4_tensor abs_copy(const mxkit::nvfp4_tensor& t) {
  mxkit::nvfp4_tensor a = t;
  for (auto& byte : a.data()) byte = static_cast<std::uint8_t>(byte & 0x77u);
  return a;
}

// S[i, j] = sum_k |a_k b_k| t_a t_b, by the reference on sign-stripped copies (fp32, ample for a bound).
inline std::vector<double> magnitude(const mxkit::nvfp4_tensor& a, const mxkit::nvfp4_tensor& b) {
  return gemm_test::as_double(mxkit::ref::gemm(abs_copy(a), abs_copy(b)));
}

// The dequantized copy as [lines, line_length] (the stored orientation: the TN oracle's operand).
inline std::vector<float> dequantized_lines(const mxkit::nvfp4_tensor& t) {
  const std::vector<float> d = mxkit::ref::dequantize(t);  // logical [rows, cols]
  return t.axis() == mxkit::block_axis::rowwise ? d : gemm_test::transposed(d, t.rows(), t.cols());
}

}  // namespace nvfp4_gemm_test
