// SPDX-License-Identifier: Apache-2.0
// NVFP4's element codes as comparisons (block/nvfp4_thresholds.hpp) against the rule they are
// found with (nvfp4_scaler, e2m1::from_float: tests/block/catch2_test_nvfp4_scale.cpp holds those
// to an independent reading of the rule): for every E4M3 scale code a finite block can have,
// under tensor scales from the least normal float to the largest, each threshold is the least
// float of its code (the float below it has a smaller code), and the codes from the thresholds
// equal the rule's on the floats around every threshold and on random floats of every magnitude;
// then whole blocks against quantize_nvfp4_block, NaN, Inf, zero and subnormal ones included.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/block/nvfp4_thresholds.hpp>

#include "../catch.hpp"

namespace nvfp4_thresholds_test {
using mxkit::e2m1;
using mxkit::e4m3;

float from_bits(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

std::vector<float> tensor_scales() {
  std::vector<float> out = {1.0f, 0x1p-126f, 0x1.000002p-126f, 0x1p-100f, 0x1p-20f, 0.5f, 3.0f, 0x1.fffffep-1f, 0x1p40f, 0x1p100f, 0x1p118f, 0x1.fffffep126f};
  std::mt19937_64 g(5);
  for (int i = 0; i < 8; ++i) out.push_back(mxkit::nvfp4_tensor_scale(from_bits(static_cast<std::uint32_t>(g() % 0x7F000000u) + 0x00800000u)));
  return out;
}

std::uint8_t rule_code(const mxkit::nvfp4_scaler& s, e4m3 scale, float x) {
  return e2m1::from_float(s.scaled(x, scale), mxkit::rounding::nearest_even, mxkit::overflow::saturate).bits();
}

TEST_CASE("each threshold is the least float of its code, and the comparisons give the rule's codes", "[nvfp4][thresholds]") {
  std::mt19937_64 g(17);
  for (const float t : tensor_scales()) {
    const mxkit::nvfp4_scaler s{t};
    for (int code = 0; code < mxkit::nvfp4_threshold_scale_codes; ++code) {
      const e4m3 scale = e4m3::from_bits(static_cast<std::uint8_t>(code));
      const mxkit::nvfp4_block_scaling b = s.for_block(scale);
      std::uint32_t th[mxkit::nvfp4_code_thresholds];
      for (std::uint32_t k = 1; k <= 7; ++k) th[k - 1] = mxkit::nvfp4_code_threshold(b, k);
      std::vector<std::uint32_t> probes;
      for (std::uint32_t k = 1; k <= 7; ++k) {
        const std::uint32_t tk = th[k - 1];
        INFO("tensor scale " << t << ", scale code " << code << ", k " << k << ", threshold bits " << tk);
        if (k > 1) CHECK(tk >= th[k - 2]);
        if (tk < 0x7F800000u) {
          CHECK(mxkit::nvfp4_magnitude_code(b, tk) >= k);
          if (tk > 0) CHECK(mxkit::nvfp4_magnitude_code(b, tk - 1) < k);
          for (std::uint32_t d = 0; d <= 3; ++d) {
            if (tk >= d) probes.push_back(tk - d);
            if (tk + d < 0x7F800000u) probes.push_back(tk + d);
          }
        } else {
          CHECK(mxkit::nvfp4_magnitude_code(b, 0x7F7FFFFFu) < k);
        }
      }
      for (int i = 0; i < 64; ++i) probes.push_back(static_cast<std::uint32_t>(g() % 0x7F800000u));
      probes.push_back(0u);
      probes.push_back(1u);
      probes.push_back(0x7F7FFFFFu);
      for (const std::uint32_t a : probes)
        for (const std::uint32_t sign : {0u, 0x80000000u}) {
          const float x = from_bits(a | sign);
          INFO("tensor scale " << t << ", scale code " << code << ", x bits " << (a | sign));
          REQUIRE(mxkit::nvfp4_code_from_thresholds(th, x) == rule_code(s, scale, x));
        }
    }
  }
}

TEST_CASE("blocks from the thresholds equal quantize_nvfp4_block", "[nvfp4][thresholds]") {
  std::mt19937_64 g(23);
  std::normal_distribution<float> n(0.0f, 1.0f);
  constexpr int stride = 8;
  for (const float t : tensor_scales()) {
    const mxkit::nvfp4_scaler s{t};
    std::vector<std::uint32_t> table(static_cast<std::size_t>(stride) * mxkit::nvfp4_threshold_scale_codes);
    for (int code = 0; code < mxkit::nvfp4_threshold_scale_codes; ++code)
      for (std::uint32_t k = 1; k <= 7; ++k)
        table[static_cast<std::size_t>(stride * code) + k - 1] = mxkit::nvfp4_code_threshold(s.for_block(e4m3::from_bits(static_cast<std::uint8_t>(code))), k);
    for (int trial = 0; trial < 400; ++trial) {
      float v[mxkit::nvfp4_block_size];
      // Magnitudes around the tensor scale's range (t x 2688 is the copy's amax), some far below.
      const float magnitude = t * 2688.0f * std::ldexp(1.0f, -static_cast<int>(g() % 40));
      for (float& x : v) x = n(g) * magnitude;
      switch (trial % 8) {
        case 1: v[g() % 16] = std::numeric_limits<float>::quiet_NaN(); break;
        case 2: v[g() % 16] = -std::numeric_limits<float>::infinity(); break;
        case 3: for (float& x : v) x = 0.0f; v[3] = -0.0f; break;
        case 4: for (float& x : v) x = from_bits(static_cast<std::uint32_t>(g() % 0x00800000u) | (g() % 2 ? 0x80000000u : 0u)); break;
        default: break;
      }
      const std::uint32_t amax = mxkit::nvfp4_block_amax_bits(v);
      const mxkit::nvfp4_block want = mxkit::quantize_nvfp4_block(v, amax, s, mxkit::nvfp4_options{});
      const mxkit::nvfp4_block got = mxkit::quantize_nvfp4_block_by_thresholds(v, amax, s, table.data(), stride);
      INFO("tensor scale " << t << ", trial " << trial);
      REQUIRE(got.scale.bits() == want.scale.bits());
      for (int i = 0; i < mxkit::nvfp4_block_size; ++i) REQUIRE(got.elements[i].bits() == want.elements[i].bits());
    }
  }
}

}  // namespace nvfp4_thresholds_test
