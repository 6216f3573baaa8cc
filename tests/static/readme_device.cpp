// SPDX-License-Identifier: Apache-2.0
// ctest static.readme_device: the documented device-side code (readme_device.hpp, verbatim in
// docs/gpu.md) compiles with the plain host compiler and writes what the reference writes:
// quantize_fp4_block = pack_block(quantize_block) with its scale at its cuBLAS 128x4 offset, for
// every scale rule and rounding, with and without the rotation and its random signs;
// quantize_fp4_block_by_hand = the same bytes without the rotation under nearest even. Blocks:
// ordinary, all zero, tiny (subnormal scale), huge, with a NaN and with an Inf.
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "readme_device.hpp"

namespace {

std::vector<float> block_values(std::size_t b) {
  std::vector<float> v(mxkit::mx_block_size);
  for (int i = 0; i < mxkit::mx_block_size; ++i) {
    const float x = std::sin(0.7f * static_cast<float>(b * 32 + static_cast<std::size_t>(i)) + 0.3f) * static_cast<float>(1 + i % 5);
    switch (b % 6) {
      case 0: v[i] = x; break;
      case 1: v[i] = 0.0f; break;
      case 2: v[i] = x * 1e-39f; break;
      case 3: v[i] = x * 1e30f; break;
      case 4: v[i] = i == 7 ? std::numeric_limits<float>::quiet_NaN() : x; break;
      default: v[i] = i == 3 ? -std::numeric_limits<float>::infinity() : x; break;
    }
  }
  return v;
}

}  // namespace

int main() {
  constexpr std::size_t rows = 3, blocks = 4;
  std::size_t checked = 0, wrong = 0;
  for (const mxkit::scale_rule rule : {mxkit::scale_rule::floor, mxkit::scale_rule::even, mxkit::scale_rule::round_up, mxkit::scale_rule::ceil})
    for (const mxkit::rounding r : {mxkit::rounding::nearest_even, mxkit::rounding::nearest_away, mxkit::rounding::stochastic})
      for (int rotation = 0; rotation < 3; ++rotation) {
        mxkit::quantize_options o;
        o.rule = rule;
        o.round = r;
        o.hadamard = rotation > 0;
        o.random_signs = rotation == 2;
        o.seed = 77;
        std::vector<std::uint32_t> data(rows * blocks * mxkit::block_words<fp4>);
        std::vector<std::uint8_t> scales(mxkit::scale_storage_size(mxkit::scale_layout::cublas_128x4, rows, blocks));
        for (std::size_t row = 0; row < rows; ++row)
          for (std::size_t blk = 0; blk < blocks; ++blk) {
            const std::size_t b = row * blocks + blk;
            const std::vector<float> v = block_values(b);
            quantize_fp4_block(v.data(), o, mxkit::hadamard_signs{o.sign_mask()}, rows, blocks, row, blk, data.data(), scales.data());
            const mxkit::mx_block<fp4> want = mxkit::quantize_block<fp4>(v.data(), o, b * mxkit::mx_block_size);
            std::uint32_t words[mxkit::block_words<fp4>];
            mxkit::pack_block<fp4>(want, words);
            bool same = scales[mxkit::scale_offset(mxkit::scale_layout::cublas_128x4, rows, blocks, row, blk)] == want.scale.bits();
            for (int j = 0; j < mxkit::block_words<fp4>; ++j) same = same && data[b * mxkit::block_words<fp4> + j] == words[j];
            if (!o.hadamard && r == mxkit::rounding::nearest_even) {
              std::uint8_t bytes[16];
              same = same && quantize_fp4_block_by_hand(v.data(), rule, bytes) == want.scale.bits();
              for (int j = 0; j < 16; ++j) same = same && bytes[j] == static_cast<std::uint8_t>(words[j / 4] >> (8 * (j % 4)));
            }
            ++checked;
            if (!same) {
              ++wrong;
              std::printf("block %zu (rule %d, rounding %d, rotation %d) differs from the reference\n", b, static_cast<int>(rule),
                          static_cast<int>(r), rotation);
            }
          }
      }
  std::printf("README device code: %zu of %zu blocks as the reference writes them\n", checked - wrong, checked);
  return wrong == 0 ? 0 : 1;
}
