// SPDX-License-Identifier: Apache-2.0
// Host quantization throughput: quantize_rowwise of a (4096, 4096) float matrix to every MX
// format, without and with the Hadamard rotation, single thread. Peer: std::memcpy of the same
// input in the same run, the floor any pass over the data pays.
//   Gelem/s  input elements per second
//   GB/s     bytes read + written per second (quantize: 4 B/element in, packed elements and
//            scales out; memcpy: 4 B in + 4 B out)
// Each result is validated (dequantized SQNR above a per-format floor) before it is timed.
// Usage: bench_quantize_host [--record] [--results PATH] [--repeats N]
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <mxkit/mxkit.hpp>

#include "bench_common.hpp"

namespace {

volatile std::uint8_t sink;
constexpr std::size_t rows = 4096, cols = 4096, n = rows * cols;

// Lowest acceptable SQNR (dB) for N(0, 1) input: a few dB under what each format reaches, so
// only a broken quantizer trips it.
double sqnr_floor(mxkit::mx_type t) {
  switch (t) {
    case mxkit::mx_type::mxfp4: return 12;
    case mxkit::mx_type::mxfp6_e2m3: return 22;
    case mxkit::mx_type::mxfp6_e3m2: return 16;
    case mxkit::mx_type::mxfp8_e4m3: return 26;
    case mxkit::mx_type::mxfp8_e5m2: return 20;
    case mxkit::mx_type::mxint8: return 30;
  }
  return 0;
}

double sqnr_db(const std::vector<float>& x, const std::vector<float>& y) {
  double s = 0, e = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    s += static_cast<double>(x[i]) * x[i];
    e += d * d;
  }
  return 10.0 * std::log10(s / e);
}

}  // namespace

int main(int argc, char** argv) {
  const mxkit_bench::options opt = mxkit_bench::parse_args(argc, argv);
  std::vector<float> x(n), copy(n);
  std::mt19937_64 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(gen);
  const mxkit::matrix_view<const float> in{x.data(), rows, cols};
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);

  const double t_copy = mxkit_bench::median_seconds([&] { std::memcpy(copy.data(), x.data(), n * sizeof(float)); },
                                                    opt.repeats);
  const double copy_elems = static_cast<double>(n) / t_copy / 1e9;
  const double copy_gbs = 2.0 * n * sizeof(float) / t_copy / 1e9;

  std::vector<mxkit_bench::result> results;
  int failures = 0;
  for (const mxkit::mx_type type : mxkit::all_mx_types)
    for (const bool rotate : {false, true}) {
      mxkit::quantize_options o;
      o.hadamard = rotate;
      const mxkit::mx_tensor q = mxkit::ref::quantize_rowwise(in, type, o);
      const double sqnr = sqnr_db(x, mxkit::ref::dequantize(q));
      const std::string name = std::string(mxkit::name_of(type)) + " rowwise " + shape + (rotate ? " hadamard" : "");
      if (!(sqnr >= sqnr_floor(type))) {
        std::fprintf(stderr, "FAILED validation: %s SQNR %.2f dB < %.0f dB\n", name.c_str(), sqnr, sqnr_floor(type));
        ++failures;
        continue;
      }
      const double t = mxkit_bench::median_seconds(
          [&] {
            const mxkit::mx_tensor r = mxkit::ref::quantize_rowwise(in, type, o, 1);  // one thread
            sink = r.data()[r.data().size() / 2];  // keeps the work observable
          },
          opt.repeats);
      const double bytes = static_cast<double>(n * sizeof(float) + q.bytes());
      results.push_back({"quantize_host", name, static_cast<double>(n) / t / 1e9, "Gelem/s", "memcpy", copy_elems});
      results.push_back({"quantize_host", name, bytes / t / 1e9, "GB/s", "memcpy", copy_gbs});
    }
  mxkit_bench::finish(opt, mxkit_bench::cpu_model(), results);
  return failures == 0 ? 0 : 1;
}
