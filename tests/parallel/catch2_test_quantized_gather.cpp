// SPDX-License-Identifier: Apache-2.0
// Sharded weights gathered as their quantized bytes (parallel/quantized_gather.hpp) against
// quantizing the gathered weight: byte for byte, for MXFP4 (Hadamard with random signs, and
// stochastic rounding), MXFP8, NVFP4 (1 x 16 and 16 x 16 blocks, rotated or not) and FP8 (E4M3,
// E5M2), rowwise and columnwise copies, on 2 to 4 rank threads, with an uneven last shard and an
// empty one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <mxkit/random/philox.hpp>
#include <mxkit/parallel/quantized_gather.hpp>
#include <mxkit/parallel/thread_communicator.hpp>

#include "../catch.hpp"

using namespace mxkit;

namespace {

std::vector<float> weight(std::size_t rows, std::size_t cols) {
  std::vector<float> w(rows * cols);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double u = (random_bits(7, 3, i) + 0.5) * 0x1p-32;
    w[i] = static_cast<float>((u - 0.5) * std::exp2(static_cast<double>(i % 13) - 6.0));  // blocks of varied magnitude
  }
  return w;
}

}  // namespace

TEST_CASE("quantized gather: MX copies gathered from the shards are the bytes of quantizing the whole weight", "[ref][communicator]") {
  quantize_options amd;  // AMD's MLPerf MXFP4: Hadamard, even rule; with random signs here
  amd.rule = scale_rule::even;
  amd.hadamard = true;
  amd.random_signs = true;
  amd.seed = 0x4D58;
  quantize_options sr;  // stochastic rounding: the element index must be the whole tensor's
  sr.round = rounding::stochastic;
  sr.seed = 99;
  sr.stream = 5;
  quantize_options up;
  up.rule = scale_rule::round_up;
  struct format_case {
    mx_type type;
    quantize_options options;
  };
  for (const format_case& f : {format_case{mx_type::mxfp4, amd}, format_case{mx_type::mxfp4, sr}, format_case{mx_type::mxfp8_e4m3, up}}) {
    for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{96, 64}, {160, 40}}) {
      const std::vector<float> w = weight(rows, cols);
      for (block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
        const mx_tensor want = ref::quantize(matrix_view<const float>{w.data(), rows, cols}, f.type, axis, f.options, 1);
        for (int n : {2, 3, 4}) {
          INFO(name_of(f.type) << " " << rows << "x" << cols << " " << name_of(axis) << ", " << n << " ranks, SR "
                               << (f.options.round == rounding::stochastic));
          std::vector<mx_tensor> got(static_cast<std::size_t>(n));
          ref::run_ranks(n, [&](nn::communicator& c) {
            got[static_cast<std::size_t>(c.rank())] = ref::gather_quantized_mx(c, w, rows, cols, f.type, axis, f.options);
          });
          for (const mx_tensor& g : got) {
            CHECK(std::vector<std::uint8_t>(g.data().begin(), g.data().end()) ==
                  std::vector<std::uint8_t>(want.data().begin(), want.data().end()));
            CHECK(std::vector<std::uint8_t>(g.scales().begin(), g.scales().end()) ==
                  std::vector<std::uint8_t>(want.scales().begin(), want.scales().end()));
          }
        }
      }
    }
  }
}

TEST_CASE("quantized gather: NVFP4 copies gathered from the shards, each with the whole weight's amax, are the whole weight's bytes",
          "[ref][communicator]") {
  nvfp4_options rotated;  // the paper's random Hadamard transform (here on any copy)
  rotated.hadamard = true;
  rotated.hadamard_signs = hadamard_sign_mask(0x4E56);
  for (const block_format& f : {formats::nvfp4, formats::nvfp4_2d})
    for (const nvfp4_options& o : {nvfp4_options{}, rotated})
      for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{96, 64}, {160, 40}, {200, 48}}) {
        std::vector<float> w = weight(rows, cols);
        w[7 * cols + 3] = std::numeric_limits<float>::infinity();  // non-finite values are no part of the amax
        w[cols + 1] = std::nanf("");
        for (block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
          if (axis == block_axis::columnwise && rows % 16 != 0) continue;
          const nvfp4_tensor want = ref::quantize(matrix_view<const float>{w.data(), rows, cols}, f, axis, o);
          for (int n : {2, 3, 4}) {
            INFO(nvfp4_format_name(f) << (o.hadamard ? " rotated " : " ") << rows << "x" << cols << " " << name_of(axis) << ", " << n << " ranks");
            std::vector<nvfp4_tensor> got(static_cast<std::size_t>(n));
            ref::run_ranks(n, [&](nn::communicator& c) {
              got[static_cast<std::size_t>(c.rank())] = ref::gather_quantized_nvfp4(c, w, rows, cols, f, axis, o);
            });
            for (const nvfp4_tensor& g : got) {
              CHECK(std::ranges::equal(g.data(), want.data()));
              CHECK(std::ranges::equal(g.scales(), want.scales()));
              CHECK(g.tensor_scale() == want.tensor_scale());
              CHECK(g.tensor_scale_from_amax());
            }
          }
        }
      }
  // One rank is the whole quantizer; refusals: stochastic rounding, a ragged columnwise height, MX.
  ref::thread_world world(1);
  ref::thread_communicator c(world, 0);
  const std::vector<float> v(40 * 32, 1.0f);
  nvfp4_options sr;
  sr.round = rounding::stochastic;
  CHECK_THROWS_WITH(ref::gather_quantized_nvfp4(c, v, 40, 32, formats::nvfp4, block_axis::rowwise, sr),
                    mxkit_test::contains("gather_quantized_nvfp4: stochastic rounding draws by the element's index"));
  CHECK_THROWS_WITH(ref::gather_quantized_nvfp4(c, v, 40, 32, formats::nvfp4, block_axis::columnwise, {}),
                    mxkit_test::contains("a columnwise copy needs rows (40) a multiple of 16"));
  CHECK_THROWS_AS(ref::gather_quantized_nvfp4(c, v, 40, 32, formats::mxfp4, block_axis::rowwise, {}), std::invalid_argument);
  CHECK_THROWS_AS(ref::gather_quantized_nvfp4(c, v, 40, 31, formats::nvfp4, block_axis::rowwise, {}), std::invalid_argument);
  const nvfp4_tensor one = ref::gather_quantized_nvfp4(c, v, 40, 32, formats::nvfp4_2d, block_axis::rowwise, {});
  CHECK(std::ranges::equal(one.data(), ref::quantize(matrix_view<const float>{v.data(), 40, 32}, formats::nvfp4_2d, block_axis::rowwise).data()));
}

TEST_CASE("quantized gather: FP8 codes with the global scale, and the amax, match the whole weight's", "[ref][communicator]") {
  const std::size_t rows = 160, cols = 48;
  const std::vector<float> w = weight(rows, cols);
  for (fp8_type t : {fp8_type::e4m3, fp8_type::e5m2}) {
    const float scale = t == fp8_type::e4m3 ? 37.5f : 1024.0f;
    const fp8_tensor want = quantize_fp8(matrix_view<const float>{w.data(), rows, cols}, t, scale);
    for (int n : {2, 3, 4}) {
      INFO(name_of(t) << ", " << n << " ranks");
      std::vector<fp8_tensor> got(static_cast<std::size_t>(n));
      ref::run_ranks(n, [&](nn::communicator& c) { got[static_cast<std::size_t>(c.rank())] = ref::gather_quantized_fp8(c, w, rows, cols, t, scale); });
      for (const fp8_tensor& g : got) {
        CHECK(g.data == want.data);
        CHECK(g.amax == want.amax);
        CHECK(g.scale == want.scale);
        CHECK(transpose(g).data == transpose(want).data);  // the columnwise copy
      }
    }
  }
}

TEST_CASE("quantized gather: shard rows are multiples of 32; a columnwise copy of a ragged height is refused", "[ref][communicator]") {
  CHECK(ref::shard_rows(96, 4) == 32);
  CHECK(ref::shard_rows(160, 3) == 64);
  CHECK(ref::shard_rows(33, 2) == 32);
  CHECK(ref::shard_rows(100, 1) == 128);
  ref::thread_world w(1);
  ref::thread_communicator c(w, 0);
  const std::vector<float> v(40 * 32, 1.0f);
  CHECK_THROWS_AS(ref::gather_quantized_mx(c, v, 40, 32, mx_type::mxfp8_e4m3, block_axis::columnwise, {}), std::invalid_argument);
}
