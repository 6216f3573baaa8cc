// SPDX-License-Identifier: Apache-2.0
// Host validation time at LLM sizes: validate() of an 8192x8192 copy in a peer's storage, and
// validate_gemm() of sampled rows of an 8192^3 MXFP8 product. Peer: the same call on one thread
// (ratio = with every hardware thread / on one; the outputs are bit-identical, as
// tests/ref/catch2_test_parallel.cpp checks).
//   s      wall seconds per call (median)
//   CPU s  process CPU seconds per call, all threads together (mean): the work itself, which a
//          machine shared with other jobs cannot inflate the way it inflates wall time
// The device column ends with the 1-minute load average at the start of the run.
// Each case is validated first: the copy is a peer preset's bytes (quantize_like) and must pass;
// the GEMM output's sampled rows are the reference's and must pass, and a planted error must not.
// Usage: bench_validate_host [--record] [--results PATH] [--repeats N]   (default 3 repeats)
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <mxkit/mxkit.hpp>

#include "bench_common.hpp"

namespace {

constexpr std::size_t n = 8192;

// Median wall seconds and mean process CPU seconds of f() over `repeats` calls.
struct timing {
  double wall = 0, cpu = 0;
};
template <class F>
timing time_call(F&& f, int repeats) {
  const std::clock_t c0 = std::clock();
  const double wall = mxkit_bench::median_seconds(f, repeats, 0);
  return {wall, static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC / std::max(repeats, 1)};
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  return in >> one ? one : "unknown";
}

std::vector<float> random_matrix(std::uint64_t seed) {
  std::vector<float> x(n * n);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(g);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  mxkit_bench::options opt = mxkit_bench::parse_args(argc, argv);
  bool repeats_given = false;
  for (int i = 1; i < argc; ++i) repeats_given = repeats_given || std::string(argv[i]) == "--repeats";
  if (!repeats_given) opt.repeats = 3;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const std::string shape = std::to_string(n) + "x" + std::to_string(n);
  const std::string all = std::to_string(hw) + (hw == 1 ? " thread" : " threads");
  std::vector<mxkit_bench::result> results;
  const std::string device = mxkit_bench::cpu_model() + ", " + all + ", load " + load_average();
  const auto add = [&](const std::string& name, const timing& every, const timing& one) {
    results.push_back({"validate_host", name + ", " + all, every.wall, "s", "1 thread", one.wall});
    results.push_back({"validate_host", name + ", " + all, every.cpu, "CPU s", "1 thread", one.cpu});
  };
  int failures = 0;
  const auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "FAILED validation: %s\n", what.c_str());
    ++failures;
  };

  const std::vector<float> x = random_matrix(1);
  const mxkit::matrix_view<const float> in{x.data(), n, n};

  // ---- validate(): two peers' copies --------------------------------------------------------------
  struct copy_case {
    std::string name;
    mxkit::ref::peer_preset preset;
    mxkit::block_axis axis;
  };
  const copy_case copies[] = {
      {"validate mxfp8_e4m3 columnwise " + shape + " (TE storage, cuBLAS scales)",
       mxkit::ref::peers::te_mxfp8(mxkit::mx_type::mxfp8_e4m3, mxkit::scale_layout::cublas_128x4), mxkit::block_axis::columnwise},
      {"validate mxfp4 rowwise hadamard " + shape + " (ROCm TE storage, AITER scales)",
       mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::hardware, mxkit::scale_layout::aiter_shuffle), mxkit::block_axis::rowwise},
  };
  for (const copy_case& c : copies) {
    const mxkit::mx_foreign_buffers b = mxkit::ref::quantize_like(c.preset, in, c.axis);
    mxkit::ref::validate_options vo = c.preset.validation();
    const mxkit::ref::mx_validation_report r = mxkit::ref::validate(in, b.view(), vo);
    if (!r.ok()) {
      fail(c.name + ": " + r.summary());
      continue;
    }
    std::printf("%s\n", r.summary().c_str());
    const auto time = [&](unsigned threads) {
      vo.threads = threads;
      return time_call([&] { (void)mxkit::ref::validate(in, b.view(), vo); }, opt.repeats);
    };
    const timing t_all = time(0), t_one = time(1);
    add(c.name, t_all, t_one);
  }

  // ---- validate_gemm(): 16 sampled rows of an 8192^3 MXFP8 product -----------------------------------
  {
    const mxkit::mx_tensor a = mxkit::ref::quantize_rowwise(in, mxkit::mx_type::mxfp8_e4m3);
    const std::vector<float> w = random_matrix(2);
    const mxkit::mx_tensor b = mxkit::ref::quantize_rowwise(mxkit::matrix_view<const float>{w.data(), n, n}, mxkit::mx_type::mxfp8_e4m3);
    mxkit::ref::gemm_validate_options go;
    go.sample_rows = 16;
    const std::vector<std::size_t> rows = mxkit::detail::gemm_rows_to_check(n, go);
    // The "kernel output": the reference on the sampled rows (the rest of D is never read).
    std::vector<float> d(n * n, 0.0f), part(rows.size() * n);
    const mxkit::mx_tensor ga = mxkit::gather_lines(a.view(), rows);
    mxkit::ref::gemm(ga.view(), b.view(), mxkit::matrix_view<float>{part.data(), rows.size(), n});
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (std::size_t j = 0; j < n; ++j) d[rows[i] * n + j] = part[i * n + j];
    const mxkit::matrix_view<const float> dv{d.data(), n, n};
    const std::string name = "validate_gemm mxfp8_e4m3 " + shape + "x" + std::to_string(n) + ", 16 sampled rows";
    const mxkit::ref::gemm_validation_report r = mxkit::ref::validate_gemm(a.view(), b.view(), dv, go);
    const float kept = d[rows[3] * n + 4321];
    d[rows[3] * n + 4321] += 1000.0f;  // S is about 5000 on these rows: the bound about 10
    const mxkit::ref::gemm_validation_report planted = mxkit::ref::validate_gemm(a.view(), b.view(), dv, go);
    d[rows[3] * n + 4321] = kept;
    if (!r.ok() || planted.over_bound != 1) {
      fail(name + ": " + r.summary() + " / planted: " + planted.summary());
    } else {
      std::printf("%s\n", r.summary().c_str());
      const auto time = [&](unsigned threads) {
        go.threads = threads;
        return time_call([&] { (void)mxkit::ref::validate_gemm(a.view(), b.view(), dv, go); }, opt.repeats);
      };
      const timing t_all = time(0), t_one = time(1);
      add(name, t_all, t_one);
    }
  }
  mxkit_bench::finish(opt, device, results);
  return failures == 0 ? 0 : 1;
}
