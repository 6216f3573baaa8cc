// SPDX-License-Identifier: Apache-2.0
// Sharded weights gathered as their quantized bytes (parallel/quantized_gather.hpp) against
// quantizing the gathered weight: byte for byte, for MXFP4 (Hadamard with random signs, and
// stochastic rounding), MXFP8 and FP8 (E4M3, E5M2), rowwise and columnwise copies, on 2 to 4 rank
// threads, with an uneven last shard and an empty one.
#include <cmath>
#include <cstdint>
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
