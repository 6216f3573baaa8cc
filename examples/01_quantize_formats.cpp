// SPDX-License-Identifier: Apache-2.0
// Example 01: how much signal each MX format keeps on realistic tensors, with and without the
// 16-point Hadamard rotation. Three inputs, each (512, 2048) float:
//   gaussian    N(0, 1)
//   student-t   heavy tails, 3 degrees of freedom (weights and gradients look like this)
//   llm-act     LLM-like activations: N(0, 1) per channel scale in [0.5, 2], plus 8 outlier
//               channels at 50-100x (Dettmers et al. 2022, "LLM.int8()"; Sun et al. 2024)
// Every format of all_mx_types, rowwise 32-blocks along the 2048 channels, default options (OCP
// floor scale, round to nearest even). Prints SQNR = 10 log10(sum x^2 / sum (x - q(x))^2) and the
// largest absolute error. The rotation helps where one outlier would otherwise set a block's scale.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string_view>
#include <string>
#include <vector>

#include <mxkit/mxkit.hpp>

#include "example_arguments.hpp"

namespace {

constexpr std::size_t rows = 512, cols = 2048;  // (tokens, channels)

struct dataset {
  std::string name;
  std::vector<float> x;  // (rows, cols) row-major
};

std::vector<dataset> make_datasets() {
  std::mt19937_64 gen(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> student(3.0f);
  std::vector<dataset> d{{"gaussian", std::vector<float>(rows * cols)},
                         {"student-t", std::vector<float>(rows * cols)},
                         {"llm-act", std::vector<float>(rows * cols)}};
  for (float& v : d[0].x) v = normal(gen);
  for (float& v : d[1].x) v = student(gen);
  std::vector<float> channel_scale(cols);
  std::uniform_real_distribution<float> ordinary(0.5f, 2.0f), outlier(50.0f, 100.0f);
  for (float& s : channel_scale) s = ordinary(gen);
  std::uniform_int_distribution<std::size_t> pick(0, cols - 1);
  for (int i = 0; i < 8; ++i) channel_scale[pick(gen)] = outlier(gen);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) d[2].x[r * cols + c] = channel_scale[c] * normal(gen);
  return d;
}

struct error_stats {
  double sqnr_db;
  double max_abs;
};

error_stats measure(const std::vector<float>& x, const std::vector<float>& y) {
  double signal = 0, noise = 0, max_abs = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(x[i]) - static_cast<double>(y[i]);
    signal += static_cast<double>(x[i]) * x[i];
    noise += e * e;
    max_abs = std::max(max_abs, std::fabs(e));
  }
  return {noise == 0 ? INFINITY : 10.0 * std::log10(signal / noise), max_abs};
}

// The usage (example_arguments.hpp: --help, and any other argument refused).
constexpr const char* usage =
    "usage: 01_quantize_formats [--help]\n"
    "Quantizes Gaussian, Student-t and LLM-like (outlier channel) tensors to every MX format, with and\n"
    "without the Hadamard rotation, and prints SQNR and the largest error of each (about a second).\n";

}  // namespace

int main(int argc, char** argv) {
  if (const int stop = example::no_arguments(argc, argv, "01_quantize_formats", usage); stop >= 0) return stop;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<dataset> data = make_datasets();
  std::printf("mxkit example 01: MX formats on (%zu, %zu) tensors, rowwise blocks of %d, OCP floor scale\n\n", rows,
              cols, mxkit::mx_block_size);
  std::printf("| %-10s | %-9s | %-8s | %8s | %13s |\n", "format", "data", "rotation", "SQNR dB", "max abs error");
  std::printf("| ---------- | --------- | -------- | -------: | ------------: |\n");
  for (const dataset& d : data) {
    const mxkit::matrix_view<const float> in{d.x.data(), rows, cols};
    for (const mxkit::mx_type type : mxkit::all_mx_types)
      for (const bool rotate : {false, true}) {
        mxkit::quantize_options options;
        options.hadamard = rotate;
        const mxkit::mx_tensor q = mxkit::ref::quantize_rowwise(in, type, options);
        const error_stats s = measure(d.x, mxkit::ref::dequantize(q));
        std::printf("| %-10s | %-9s | %-8s | %8.2f | %13.4g |\n", std::string(mxkit::name_of(type)).c_str(),
                    d.name.c_str(), rotate ? "hadamard" : "none", s.sqnr_db, s.max_abs);
      }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n%zu quantize + dequantize round trips of %zu values in %.2f s\n",
              data.size() * std::size(mxkit::all_mx_types) * 2, rows * cols, seconds);
}
