// SPDX-License-Identifier: Apache-2.0
// gpu::gather_quantized_mx and gather_quantized_nvfp4 through NCCL on every GPU (one thread per
// rank): each rank quantizes its 32-row-aligned shard and the ranks all_gather the bytes; the
// gathered copy must equal, byte for byte, gpu::quantize (quantize_nvfp4) of the whole weight on
// the same device (MXFP4 with Hadamard and random signs, MXFP8, NVFP4 1 x 16 and 16 x 16; rowwise
// and columnwise; a last shard that is partial or empty). Skipped without two GPUs or the library.
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
#include <mxkit/gpu/quantize_nvfp4.hpp>

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

// Runs `gathered_difference(ctx, view of the weight)` on every rank over the device copy of `w`
// (rows x cols) and checks that each rank found no difference ("").
template <class F>
void check_every_rank(const char* name, const std::vector<float>& w, std::size_t rows, std::size_t cols, F&& gathered_difference) {
  std::vector<std::string> differences(nccl_test::ranks);
  gpu::nccl_options o;
  o.timeout = std::chrono::seconds(60);
  const std::vector<std::string> errors = nccl_test::run_ranks(nccl_test::ranks, o, [&](nccl_test::rank_context& ctx) {
    gpu::device_buffer<float> dw(w.size(), ctx.stream);
    dw.copy_from(w, ctx.stream);
    differences[ctx.rank] = gathered_difference(ctx, mxkit::matrix_view<const float>{dw.data(), rows, cols});
  });
  nccl_test::require_no_errors(errors);
  for (int r = 0; r < nccl_test::ranks; ++r) {
    INFO(name << ", rank " << r);
    CHECK(differences[r] == "");
  }
}

}  // namespace

TEST_CASE("gather_quantized_mx through NCCL equals quantizing the whole weight, byte for byte", "[nccl][memcheck]") {
  for (const gather_case& c : cases()) {
    const std::vector<float> w = gpu_test::adversarial_matrix(c.rows, c.cols, c.cols, 5);
    check_every_rank(c.name, w, c.rows, c.cols, [&](nccl_test::rank_context& ctx, const mxkit::matrix_view<const float>& view) {
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
      return d;
    });
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

// NVFP4: each rank's shard amax, the ranks' MAX, each shard quantized with the whole copy's tensor
// scale; the gathered copy is gpu::quantize_nvfp4 of the whole weight (its own amax), byte for
// byte, tensor scale included.
TEST_CASE("gather_quantized_nvfp4 through NCCL equals quantizing the whole weight, byte for byte", "[nccl][memcheck]") {
  mxkit::nvfp4_options rotated;
  rotated.hadamard = true;
  rotated.hadamard_signs = mxkit::hadamard_sign_mask(7);
  struct nvfp4_case {
    const char* name;
    mxkit::block_format format;
    block_axis axis;
    std::size_t rows, cols;
    mxkit::nvfp4_options options;
  };
  const nvfp4_case nvfp4_cases[] = {{"nvfp4 rowwise, rotated", mxkit::formats::nvfp4, block_axis::rowwise, 200, 128, rotated},
                                    {"nvfp4 columnwise", mxkit::formats::nvfp4, block_axis::columnwise, 224, 96, {}},
                                    {"nvfp4 16 x 16 rowwise", mxkit::formats::nvfp4_2d, block_axis::rowwise, 200, 64, {}},
                                    {"nvfp4 16 x 16 columnwise", mxkit::formats::nvfp4_2d, block_axis::columnwise, 224, 80, {}}};
  for (const nvfp4_case& c : nvfp4_cases) {
    const std::vector<float> w = gpu_test::adversarial_matrix(c.rows, c.cols, c.cols, 6);
    check_every_rank(c.name, w, c.rows, c.cols, [&](nccl_test::rank_context& ctx, const mxkit::matrix_view<const float>& view) {
      const gpu::device_nvfp4_tensor got = gpu::gather_quantized_nvfp4(ctx.comm, view, c.format, c.axis, c.options, ctx.stream);
      gpu::device_nvfp4_tensor want({c.format, c.axis, c.rows, c.cols}, c.options, mxkit::scale_layout::row_major, true);
      gpu::nvfp4_outputs q;
      (c.axis == block_axis::rowwise ? q.rowwise_data : q.columnwise_data) = want.data().data();
      (c.axis == block_axis::rowwise ? q.rowwise_scales : q.columnwise_scales) = want.scales().data();
      (c.axis == block_axis::rowwise ? q.rowwise_tensor_scale : q.columnwise_tensor_scale) = want.tensor_scale().data();
      gpu::quantize_nvfp4(view, c.format, c.options, q, {}, ctx.stream);
      const mxkit::nvfp4_tensor g = got.to_host(ctx.stream), h = want.to_host(ctx.stream);
      std::string d = gpu_test::first_difference(g.data(), h.data(), h.layout().line_bytes());
      if (d.empty()) d = gpu_test::first_difference(g.scales(), h.scales(), h.layout().blocks_per_line());
      if (d.empty() && mxkit::bit_cast<std::uint32_t>(g.tensor_scale()) != mxkit::bit_cast<std::uint32_t>(h.tensor_scale()))
        d = "tensor scale " + std::to_string(g.tensor_scale()) + " vs " + std::to_string(h.tensor_scale());
      return d;
    });
  }
}
