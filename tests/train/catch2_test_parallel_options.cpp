// SPDX-License-Identifier: Apache-2.0
// The training program's communication flags (mxkit/train_program/options.hpp): --reduce-dtype
// (the gradient reduction's element type, parallel_config::reduce_dtype) and --comm-sms (NCCL's
// CTAs, and the SMs every GEMM leaves it: gpu::persistent_grid_sms, a plain constexpr function the
// host compiler checks here; the GPU programs use it); and --weight-copies, the layers' memory trade.
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/gpu/gemm/options.hpp>  // (no vendor header: host-safe)
#include <mxkit/train_program/options.hpp>

#include "../catch.hpp"
#include "parse_options.hpp"

namespace parallel_options_test {
using namespace mxkit;
using train_program::options;

std::optional<options> parse(std::vector<std::string> args) { return train_program_test::parse(std::move(args), "06_train_gpu"); }

// The usage error's text, or "" when the arguments parse.
std::string refusal(std::vector<std::string> args) {
  try {
    (void)parse(std::move(args));
  } catch (const train_program::usage_error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("--reduce-dtype: f32 by default, bf16 as asked, anything else refused naming the flag and the value", "[train][options]") {
  CHECK(parse({})->reduce_dtype == nn::dtype::f32);
  CHECK(parse({"--reduce-dtype", "bf16"})->reduce_dtype == nn::dtype::bf16);
  CHECK(parse({"--reduce-dtype=bf16", "--reduce-dtype", "f32"})->reduce_dtype == nn::dtype::f32);  // the last wins
  for (const char* bad : {"f16", "fp32", "BF16", "f64", ""}) {
    INFO(bad);
    CHECK(refusal({"--reduce-dtype", bad}) == std::string("--reduce-dtype: expected f32 or bf16, got '") + bad + "'");
  }
  CHECK(refusal({"--reduce-dtype"}) == "--reduce-dtype: missing value f32|bf16");
}

TEST_CASE("--comm-sms: off by default, 1 to 32 (ncclConfig_t's CTA bounds), anything else refused naming the flag and the value",
          "[train][options]") {
  CHECK(parse({})->comm_sms == 0);
  CHECK(parse({"--comm-sms", "16"})->comm_sms == 16);
  CHECK(parse({"--comm-sms=1"})->comm_sms == 1);
  CHECK(parse({"--comm-sms", "32"})->comm_sms == train_program::max_comm_sms);
  for (const char* bad : {"0", "33", "-1", "x", "8 "}) {
    INFO(bad);
    CHECK(refusal({"--comm-sms", bad}) == std::string("--comm-sms: expected an integer from 1 to 32, got '") + bad + "'");
  }
}

TEST_CASE("--weight-copies: cached by default, per-gemm as asked, anything else refused naming the flag and the value", "[train][options]") {
  CHECK_FALSE(parse({})->weight_copies_per_gemm);
  CHECK(parse({"--weight-copies", "per-gemm"})->weight_copies_per_gemm);
  CHECK_FALSE(parse({"--weight-copies=per-gemm", "--weight-copies", "cached"})->weight_copies_per_gemm);  // the last wins
  for (const char* bad : {"per_gemm", "lean", "Cached", ""}) {
    INFO(bad);
    CHECK(refusal({"--weight-copies", bad}) == std::string("--weight-copies: expected cached or per-gemm, got '") + bad + "'");
  }
}

TEST_CASE("--gemm: mxkit's kernels by default, the vendor path as asked, anything else refused naming the flag and the value", "[train][options]") {
  CHECK_FALSE(parse({})->vendor_gemm);
  CHECK(parse({"--gemm", "vendor"})->vendor_gemm);
  CHECK_FALSE(parse({"--gemm=vendor", "--gemm", "mxkit"})->vendor_gemm);  // the last wins
  for (const char* bad : {"cublas", "Vendor", "auto", ""}) {
    INFO(bad);
    CHECK(refusal({"--gemm", bad}) == std::string("--gemm: expected mxkit or vendor, got '") + bad + "'");
  }
}

TEST_CASE("persistent GEMM grid: the device's SMs less those left to NCCL, at least one", "[train][options]") {
  static_assert(gpu::persistent_grid_sms(132, 0) == 132);  // (off: every SM, as before; constexpr)
  CHECK(gpu::persistent_grid_sms(132, 0) == 132);
  CHECK(gpu::persistent_grid_sms(132, 16) == 116);
  CHECK(gpu::persistent_grid_sms(132, 32) == 100);  // H200 (132 SMs) with --comm-sms 32
  CHECK(gpu::persistent_grid_sms(78, 8) == 70);
  CHECK(gpu::persistent_grid_sms(16, 16) == 1);  // never an empty grid (06_train_gpu refuses it first)
  CHECK(gpu::persistent_grid_sms(16, 40) == 1);
  CHECK(gpu::persistent_grid_sms(1, 0) == 1);
  CHECK(gpu::gemm_options{}.reserved_sms == 0);
}

}  // namespace parallel_options_test
