// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by every mxkit benchmark, host and GPU: median timing of a callable, a printed
// table, and rows appended to bench/RESULTS.md. Plain host C++ (no GPU header), so .cu and HIP
// benchmarks include it too; a GPU caller synchronizes inside the timed callable.
//
// RESULTS.md is one Markdown table, one row per measurement:
//   | date | commit | device | bench | case | value | unit | peer | peer value | ratio |
// date is UTC YYYY-MM-DD; commit is $MXKIT_COMMIT or the `git rev-parse --short HEAD` captured at
// configure time (MXKIT_BENCH_COMMIT); ratio = value / peer value in percent, the peer being
// timed in the same run on the same device.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef MXKIT_BENCH_COMMIT
#define MXKIT_BENCH_COMMIT "unknown"
#endif
#ifndef MXKIT_BENCH_RESULTS
#define MXKIT_BENCH_RESULTS "bench/RESULTS.md"
#endif

namespace mxkit_bench {

// Median wall time of f() in seconds over `repeats` calls after `warmup` untimed calls.
template <class F>
double median_seconds(F&& f, int repeats = 5, int warmup = 1) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

struct result {
  std::string bench;      // program, e.g. "quantize_host"
  std::string case_name;  // what was measured, e.g. "mxfp4 rowwise 4096x4096"
  double value = 0;
  std::string unit;       // "GB/s", "Gelem/s", "TFLOP/s", ...
  std::string peer;       // what value is compared with, e.g. "memcpy"
  double peer_value = 0;  // same unit
  double ratio_percent() const { return peer_value == 0 ? 0.0 : 100.0 * value / peer_value; }
};

struct options {
  bool record = false;                    // append to results_path
  std::string results_path = MXKIT_BENCH_RESULTS;
  int repeats = 5;
};

// --record (append to bench/RESULTS.md), --results PATH (append to PATH), --repeats N.
inline options parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--record") {
      o.record = true;
    } else if (a == "--results" && i + 1 < argc) {
      o.record = true;
      o.results_path = argv[++i];
    } else if (a == "--repeats" && i + 1 < argc) {
      o.repeats = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--record] [--results RESULTS.md] [--repeats N]\n", argv[0]);
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
#ifndef NDEBUG
  std::fprintf(stderr, "warning: assertions are on; benchmark a Release build\n");
#endif
  return o;
}

inline std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

inline std::string commit() {
  const char* env = std::getenv("MXKIT_COMMIT");
  return env && *env ? env : MXKIT_BENCH_COMMIT;
}

// "model name" of the first CPU in /proc/cpuinfo: the device of host benchmarks.
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown CPU";
}

namespace detail {
inline std::string cell(std::string s) {  // a '|' would split the Markdown cell
  std::replace(s.begin(), s.end(), '|', '/');
  return s;
}
inline std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}
inline std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", v);
  return buf;
}
}  // namespace detail

inline void print_table(const std::vector<result>& rows) {
  std::size_t w = 4;
  for (const result& r : rows) w = std::max(w, r.case_name.size());
  std::printf("%-*s %12s %-8s %-10s %12s %8s\n", static_cast<int>(w), "case", "value", "unit", "peer", "peer value",
              "ratio");
  for (const result& r : rows)
    std::printf("%-*s %12s %-8s %-10s %12s %8s\n", static_cast<int>(w), r.case_name.c_str(),
                detail::number(r.value).c_str(), r.unit.c_str(), r.peer.c_str(), detail::number(r.peer_value).c_str(),
                detail::percent(r.ratio_percent()).c_str());
}

// Appends rows to the Markdown table at `path`, writing the header first if the file is new.
inline void append_results(const std::string& path, const std::string& device, const std::vector<result>& rows) {
  const bool is_new = !std::ifstream(path).good();
  std::ofstream out(path, std::ios::app);
  if (!out) throw std::runtime_error("cannot append to " + path);
  if (is_new)
    out << "| date | commit | device | bench | case | value | unit | peer | peer value | ratio |\n"
        << "| --- | --- | --- | --- | --- | ---: | --- | --- | ---: | ---: |\n";
  const std::string date = utc_date(), rev = commit();
  for (const result& r : rows)
    out << "| " << date << " | " << detail::cell(rev) << " | " << detail::cell(device) << " | " << detail::cell(r.bench)
        << " | " << detail::cell(r.case_name) << " | " << detail::number(r.value) << " | " << detail::cell(r.unit)
        << " | " << detail::cell(r.peer) << " | " << detail::number(r.peer_value) << " | "
        << detail::percent(r.ratio_percent()) << " |\n";
  std::printf("appended %zu rows to %s\n", rows.size(), path.c_str());
}

// Records rows when the command line asked for it (--record / --results).
inline void finish(const options& o, const std::string& device, const std::vector<result>& rows) {
  print_table(rows);
  if (o.record) append_results(o.results_path, device, rows);
}

}  // namespace mxkit_bench
