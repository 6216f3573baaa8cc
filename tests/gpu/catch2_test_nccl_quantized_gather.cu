// SPDX-License-Identifier: Apache-2.0
// gpu::gather_quantized_mx through NCCL on every GPU (one thread per rank): each rank quantizes its
// 32-row-aligned shard and the ranks all_gather the bytes; the gathered copy must equal, byte for
// byte, gpu::quantize of the whole weight on the same device (MXFP4 with Hadamard and random
// signs, MXFP8; rowwise and columnwise; a last shard that is partial or empty). Skipped without
// two GPUs or the library.
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "gpu_test_util.hpp"
#include "nccl_ranks.hpp"

#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/parallel/quantized_gather.hpp>
#include <mxkit/gpu/quantize.hpp>

namespace gpu = mxkit::gpu;
namespace nn = mxkit::nn;
using mxkit::block_axis;
using mxkit::mx_type;

namespace {

struct gather_case {
  const char* name;
  mx_type type;
  block_axis axis;
  std::size_t rows, cols;
  mxkit::quantize_options options;
};

std::vector<gather_case> cases() {
  mxkit::quantize_options hadamard;
  hadamard.hadamard = true;
  hadamard.random_signs = true;
  hadamard.seed = 99;
  // Rows: 200 leaves the last shard partial (or empty on 8 ranks: R = 32); 224 is columnwise's
  // multiple of 32.
  return {{"mxfp4 rowwise, Hadamard + random signs", mx_type::mxfp4, block_axis::rowwise, 200, 128, hadamard},
          {"mxfp4 columnwise, Hadamard + random signs", mx_type::mxfp4, block_axis::columnwise, 224, 96, hadamard},
          {"mxfp8 e4m3 rowwise", mx_type::mxfp8_e4m3, block_axis::rowwise, 200, 160, {}},
          {"mxfp8 e4m3 columnwise", mx_type::mxfp8_e4m3, block_axis::columnwise, 224, 64, {}}};
}

}  // namespace

TEST_CASE("gather_quantized_mx through NCCL equals quantizing the whole weight, byte for byte", "[nccl][memcheck]") {
  for (const gather_case& c : cases()) {
    std::vector<float> w = gpu_test::adversarial_matrix(c.rows, c.cols, c.cols, 5);
    std::vector<std::string> differences(nccl_test::ranks);
    gpu::nccl_options o;
    o.timeout = std::chrono::seconds(60);
    const std::vector<std::string> errors = nccl_test::run_ranks(nccl_test::ranks, o, [&](nccl_test::rank_context& ctx) {
      gpu::device_buffer<float> dw(w.size(), ctx.stream);
      dw.copy_from(w, ctx.stream);
      const mxkit::matrix_view<const float> view{dw.data(), c.rows, c.cols};
      const gpu::device_mx_tensor got = gpu::gather_quantized_mx(ctx.comm, view, c.type, c.axis, c.options, ctx.stream);
      gpu::device_mx_tensor want({mxkit::format_of(c.type), c.axis, c.rows, c.cols}, c.options);
      gpu::quantize_outputs q;
      if (c.axis == block_axis::rowwise) {
        q.rowwise_data = want.data().data();
        q.rowwise_scales = want.scales().data();
      } else {
        q.columnwise_data = want.data().data();
        q.columnwise_scales = want.scales().data();
      }
      gpu::quantize(view, c.type, c.options, q, ctx.stream);
      const mxkit::mx_tensor g = got.to_host(ctx.stream), h = want.to_host(ctx.stream);
      std::string d = gpu_test::first_difference(g.data(), h.data(), h.layout().line_bytes());
      if (d.empty()) d = gpu_test::first_difference(g.scales(), h.scales(), h.layout().blocks_per_line());
      if (!d.empty()) differences[ctx.rank] = d;
    });
    nccl_test::require_no_errors(errors);
    for (int r = 0; r < nccl_test::ranks; ++r) {
      INFO(c.name << ", rank " << r);
      CHECK(differences[r] == "");
    }
  }
}

TEST_CASE("gather_quantized_mx refuses stochastic rounding and a columnwise copy of rows not a multiple of 32", "[nccl]") {
  gpu::nccl_options o;
  o.timeout = std::chrono::seconds(30);
  std::vector<std::string> refusals(static_cast<std::size_t>(nccl_test::ranks) * 2);
  // Catch's assertions are not thread-safe: the ranks record what they saw, the test checks it.
  const std::vector<std::string> errors = nccl_test::run_ranks(nccl_test::ranks, o, [&](nccl_test::rank_context& ctx) {
    gpu::device_buffer<float> dw(100 * 64, ctx.stream);
    const mxkit::matrix_view<const float> view{dw.data(), 100, 64};
    mxkit::quantize_options sr;
    sr.round = mxkit::rounding::stochastic;
    const block_axis axes[2] = {block_axis::rowwise, block_axis::columnwise};
    const mxkit::quantize_options options[2] = {sr, {}};
    for (int k = 0; k < 2; ++k) try {
        (void)gpu::gather_quantized_mx(ctx.comm, view, mx_type::mxfp4, axes[k], options[k], ctx.stream);
      } catch (const std::invalid_argument& e) {
        refusals[static_cast<std::size_t>(ctx.rank) * 2 + k] = e.what();
      }
  });
  nccl_test::require_no_errors(errors);
  for (int r = 0; r < nccl_test::ranks; ++r) {
    INFO("rank " << r);
    CHECK_THAT(refusals[r * 2], Catch::Contains("stochastic rounding"));
    CHECK_THAT(refusals[r * 2 + 1], Catch::Contains("multiple of 32"));
  }
}
