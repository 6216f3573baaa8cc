// SPDX-License-Identifier: Apache-2.0
// The documented device-side code (tests/static/readme_device.hpp, verbatim in docs/gpu.md) in a
// kernel: compiled by nvcc (cuda stage) and for gfx942/gfx950 (hip stage), so a documented spelling
// that does not compile for the device fails the build; on a GPU each block's bytes must equal
// what the same functions write on the host (static.readme_device checks those against the
// reference).
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "../static/readme_device.hpp"
#include "../catch.hpp"

namespace {

constexpr std::size_t rows = 4, blocks = 3;

// One thread per block: the one-call path (block values v[b * 32 ...]) and, into `by_hand`, the
// pieces' path with `rule`.
__global__ void readme_blocks(const float* v, mxkit::quantize_options o, std::uint32_t* data, std::uint8_t* scales,
                              std::uint8_t* by_hand, std::uint8_t* by_hand_scales) {
  const std::size_t b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= rows * blocks) return;
  const mxkit::hadamard_signs signs{o.sign_mask()};
  quantize_fp4_block(v + b * mxkit::mx_block_size, o, signs, rows, blocks, b / blocks, b % blocks, data, scales);
  by_hand_scales[b] = quantize_fp4_block_by_hand(v + b * mxkit::mx_block_size, o.rule, by_hand + b * 16);
}

}  // namespace

TEST_CASE("README device code: a kernel writes what the host writes", "[gpu]") {
  namespace gpu = mxkit::gpu;
  std::vector<float> v(rows * blocks * mxkit::mx_block_size);
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = (i / 32) % 5 == 1 ? 0.0f : std::sin(0.41f * static_cast<float>(i)) * static_cast<float>(1 + i % 9) * (i % 64 < 32 ? 1.0f : 1e-3f);
  v[70] = std::nanf("");
  const gpu::device_buffer<float> dv{std::span<const float>(v)};
  const std::size_t scale_bytes = mxkit::scale_storage_size(mxkit::scale_layout::cublas_128x4, rows, blocks);
  for (const mxkit::scale_rule rule : {mxkit::scale_rule::floor, mxkit::scale_rule::even, mxkit::scale_rule::round_up})
    for (int rotation = 0; rotation < 3; ++rotation) {
      mxkit::quantize_options o;
      o.rule = rule;
      o.hadamard = rotation > 0;
      o.random_signs = rotation == 2;
      o.seed = 5;
      gpu::device_buffer<std::uint32_t> data(rows * blocks * mxkit::block_words<fp4>);
      gpu::device_buffer<std::uint8_t> scales(scale_bytes), by_hand(rows * blocks * 16), by_hand_scales(rows * blocks);
      scales.fill_bytes(0);
      readme_blocks<<<1, 64>>>(dv.data(), o, data.data(), scales.data(), by_hand.data(), by_hand_scales.data());
      MXKIT_GPU_CHECK_LAUNCH();

      std::vector<std::uint32_t> want_data(rows * blocks * mxkit::block_words<fp4>);
      std::vector<std::uint8_t> want_scales(scale_bytes, 0), want_by_hand(rows * blocks * 16), want_by_hand_scales(rows * blocks);
      for (std::size_t b = 0; b < rows * blocks; ++b) {
        quantize_fp4_block(v.data() + b * 32, o, mxkit::hadamard_signs{o.sign_mask()}, rows, blocks, b / blocks, b % blocks,
                           want_data.data(), want_scales.data());
        want_by_hand_scales[b] = quantize_fp4_block_by_hand(v.data() + b * 32, rule, want_by_hand.data() + b * 16);
      }
      INFO("rule " << static_cast<int>(rule) << ", rotation " << rotation);
      CHECK(data.to_host() == want_data);
      CHECK(scales.to_host() == want_scales);
      CHECK(by_hand.to_host() == want_by_hand);
      CHECK(by_hand_scales.to_host() == want_by_hand_scales);
    }
}
