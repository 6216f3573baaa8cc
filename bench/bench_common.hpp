// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by every mxkit benchmark, host and GPU: median timing of a callable, a printed
// table, and rows recorded as data. Plain host C++ (no GPU header), so .cu and HIP benchmarks
// include it too; a GPU caller synchronizes inside the timed callable.
//
// --record appends each row as one JSON object a line to bench/results/<bench>.jsonl (the keys,
// in this order, and their meaning: bench/render_results.py, which renders bench/RESULTS.md and
// bench/SUMMARY.md from those files; run it after recording):
//   {"date":"2026-11-22","commit":"443c6e5","wip":false,"device":"NVIDIA H200","bench":"gemm",
//    "case":"mxfp4 8B qkv fprop 8192x6144x4096","recipe":"mxfp4","shape":"8192x6144x4096",
//    "value":346.1,"unit":"TFLOP/s","peer":"cuBLAS bf16","peer_settings":"cublasGemmEx, ...",
//    "peer_value":772.4,"ratio":44.8}
// date is UTC YYYY-MM-DD; commit is $MXKIT_COMMIT or the `git rev-parse --short HEAD` captured at
// configure time (MXKIT_BENCH_COMMIT); wip says the code measured had uncommitted changes
// ($MXKIT_COMMIT ending in "+wip", $MXKIT_WIP=1, or a dirty tree at configure time:
// MXKIT_BENCH_WIP); ratio = value / peer value in percent, the peer being timed in the same run on
// the same device. A row without a peer (or whose peer gave no figure) writes null for the peer
// value and ratio. recipe and shape left empty are derived from the case label as
// render_results.py derives them (its first recipe word; its last NxM.., "B.. T..", "T.." or
// "N MiB"). Each file's rows go out in one write() to a file opened for appending, so rows of
// benchmarks run at the same time do not interleave within a line.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef MXKIT_BENCH_COMMIT
#define MXKIT_BENCH_COMMIT "unknown"
#endif
#ifndef MXKIT_BENCH_WIP
#define MXKIT_BENCH_WIP 0
#endif
#ifndef MXKIT_BENCH_RESULTS
#define MXKIT_BENCH_RESULTS "bench/results"
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
  std::string bench;          // benchmark family, e.g. "quantize_host": the rows go to bench/results/<bench>.jsonl
  std::string case_name;      // what was measured, the full label, e.g. "mxfp4 rowwise 4096x4096"
  double value = 0;
  std::string unit;           // "GB/s", "Gelem/s", "TFLOP/s", ...
  std::string peer;           // what value is compared with, e.g. "memcpy" ("": none)
  double peer_value = 0;      // same unit (0: no peer figure)
  std::string peer_settings{};  // how the peer ran: library call, versions, flags ("": not recorded)
  std::string recipe{};       // number format or training recipe ("": derived from case_name)
  std::string shape{};        // problem size ("": derived from case_name)
  double ratio_percent() const { return peer_value == 0 ? 0.0 : 100.0 * value / peer_value; }
};

struct options {
  bool record = false;                    // append rows to results_path
  std::string results_path = MXKIT_BENCH_RESULTS;  // a folder (<bench>.jsonl inside) or one .jsonl file
  int repeats = 5;
};

// --record (append to bench/results/<bench>.jsonl), --results PATH (a folder: PATH/<bench>.jsonl;
// a file ending in .jsonl: every row there), --repeats N.
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
      std::fprintf(stderr, "usage: %s [--record] [--results DIR|FILE.jsonl] [--repeats N]\n", argv[0]);
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

// The commit measured, without "+wip" (see wip()).
inline std::string commit() {
  const char* env = std::getenv("MXKIT_COMMIT");
  std::string c = env && *env ? env : MXKIT_BENCH_COMMIT;
  if (c.size() > 4 && c.compare(c.size() - 4, 4, "+wip") == 0) c.resize(c.size() - 4);
  return c;
}

// Whether the code measured had uncommitted changes: $MXKIT_COMMIT ends in "+wip" or $MXKIT_WIP is
// set (not 0); without $MXKIT_COMMIT, whether the tree was dirty at configure time.
inline bool wip() {
  const char* env = std::getenv("MXKIT_COMMIT");
  const char* flag = std::getenv("MXKIT_WIP");
  if (flag && *flag) return std::strcmp(flag, "0") != 0;
  if (env && *env) {
    const std::string c = env;
    return c.size() > 4 && c.compare(c.size() - 4, 4, "+wip") == 0;
  }
  return MXKIT_BENCH_WIP != 0;
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

// A JSON string: quotes, backslashes and control characters escaped (render_results.py refuses
// line breaks and tabs in a field, so those become spaces), surrounding blanks trimmed.
inline std::string json_string(const std::string& in) {
  std::string s = in;
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  const std::size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  s = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  std::string out = "\"";
  for (const char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + '"';
}
inline std::string json_string_or_null(const std::string& s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos ? "null" : json_string(s);
}

// render_results.py's derive_recipe and derive_shape, for rows that name neither.
inline bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
inline std::string derive_recipe(const std::string& bench, const std::string& case_name) {
  if (bench == "allreduce" || bench == "layer_kernels") return "";  // bf16 there is the data type
  static const char* const recipes[] = {"bf16", "fp8", "mxfp4", "mxfp8", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3",
                                        "mxfp6_e3m2", "mxint8", "hybrid", "nvfp4"};
  std::string word;
  for (std::size_t i = 0; i <= case_name.size(); ++i) {
    const char c = i < case_name.size() ? case_name[i] : ' ';
    if (std::strchr(" \t,()/+:", c) == nullptr) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      continue;
    }
    for (const char* r : recipes)
      if (word == r) return word;
    word.clear();
  }
  return "";
}
// The length of a match of `pattern` at s[i] (0: none): 'N' one or more digits, "(xN)+" one or
// more "x<digits>", "[ H.. Hkv.. D..]" that group optional; other characters match themselves.
inline std::size_t digits(const std::string& s, std::size_t i) {
  std::size_t n = 0;
  while (i + n < s.size() && std::isdigit(static_cast<unsigned char>(s[i + n]))) ++n;
  return n;
}
inline std::size_t match_literal_digits(const std::string& s, std::size_t i, const char* lit) {  // lit then digits
  const std::size_t l = std::strlen(lit);
  if (s.compare(i, l, lit) != 0) return 0;
  const std::size_t d = digits(s, i + l);
  return d ? l + d : 0;
}
inline std::string derive_shape(const std::string& c) {
  const auto bounded = [&](std::size_t i, std::size_t n) {
    return n > 0 && (i == 0 || !word_char(c[i - 1])) && (i + n == c.size() || !word_char(c[i + n]));
  };
  // In render_results.py's order: the last match of the first pattern that matches at all.
  for (int pattern = 0; pattern < 4; ++pattern) {
    std::string last;
    for (std::size_t i = 0; i < c.size();) {
      std::size_t n = 0;
      if (pattern == 0) {  // \d+(?:x\d+)+
        std::size_t k = digits(c, i), groups = 0;
        while (k && i + k < c.size() && c[i + k] == 'x' && digits(c, i + k + 1)) {
          k += 1 + digits(c, i + k + 1);
          ++groups;
        }
        n = groups ? k : 0;
      } else if (pattern == 1) {  // B\d+ T\d+(?: H\d+ Hkv\d+ D\d+)?
        const std::size_t b = match_literal_digits(c, i, "B");
        const std::size_t t = b ? match_literal_digits(c, i + b, " T") : 0;
        if (t) {
          n = b + t;
          const std::size_t h = match_literal_digits(c, i + n, " H");
          const std::size_t kv = h ? match_literal_digits(c, i + n + h, " Hkv") : 0;
          const std::size_t d = kv ? match_literal_digits(c, i + n + h + kv, " D") : 0;
          if (d && bounded(i, n + h + kv + d)) n += h + kv + d;
        }
      } else if (pattern == 2) {  // T\d+
        n = match_literal_digits(c, i, "T");
      } else {  // \d+ MiB
        const std::size_t d = digits(c, i);
        n = d && c.compare(i + d, 4, " MiB") == 0 ? d + 4 : 0;
      }
      if (bounded(i, n)) {
        last = c.substr(i, n);
        i += n;
      } else {
        ++i;
      }
    }
    if (!last.empty()) return last;
  }
  return "";
}

// One row as a JSONL line (render_results.py's make_line: the same keys, order and number formats).
inline std::string json_line(const std::string& date, const std::string& rev, bool wip, const std::string& device,
                             const result& r) {
  const bool has_peer = !r.peer.empty() && r.peer_value != 0 && std::isfinite(r.peer_value);
  char ratio[32] = "null";
  if (has_peer) std::snprintf(ratio, sizeof ratio, "%.1f", r.ratio_percent());
  const std::string recipe = r.recipe.empty() ? derive_recipe(r.bench, r.case_name) : r.recipe;
  const std::string shape = r.shape.empty() ? derive_shape(r.case_name) : r.shape;
  return "{\"date\":" + json_string(date) + ",\"commit\":" + json_string(rev.empty() ? "unknown" : rev) +
         ",\"wip\":" + (wip ? "true" : "false") + ",\"device\":" + json_string(device.empty() ? "unknown" : device) +
         ",\"bench\":" + json_string(r.bench) + ",\"case\":" + json_string(r.case_name) +
         ",\"recipe\":" + json_string_or_null(recipe) + ",\"shape\":" + json_string_or_null(shape) +
         ",\"value\":" + number(r.value) + ",\"unit\":" + json_string(r.unit) + ",\"peer\":" + json_string_or_null(r.peer) +
         ",\"peer_settings\":" + (r.peer.empty() ? "null" : json_string_or_null(r.peer_settings)) +
         ",\"peer_value\":" + (has_peer ? number(r.peer_value) : "null") + ",\"ratio\":" + ratio + "}\n";
}

// Appends `text` to `path` with one write() on a descriptor opened for appending (a partial write,
// which a regular file does not do short of a full disk, is continued).
inline void append_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot append to " + path + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error("cannot append to " + path + ": " + std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) throw std::runtime_error("cannot append to " + path + ": " + std::strerror(errno));
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

// Appends rows as JSONL lines: to `path` itself if it ends in ".jsonl", else to path/<bench>.jsonl
// (the folder made if missing). A row whose value is not finite is left out, with a warning.
inline void append_results(const std::string& path, const std::string& device, const std::vector<result>& rows) {
  const bool one_file = path.size() > 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
  const std::string date = utc_date(), rev = commit();
  const bool dirty = wip();
  std::map<std::string, std::string> files;  // path -> lines
  std::map<std::string, std::size_t> counts;
  for (const result& r : rows) {
    if (!std::isfinite(r.value)) {
      std::fprintf(stderr, "warning: not recorded (value %g): %s\n", r.value, r.case_name.c_str());
      continue;
    }
    const std::string file = one_file ? path : (std::filesystem::path(path) / (r.bench + ".jsonl")).string();
    files[file] += detail::json_line(date, rev, dirty, device, r);
    ++counts[file];
  }
  for (const auto& [file, text] : files) {
    const std::filesystem::path parent = std::filesystem::path(file).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    detail::append_file(file, text);
    std::printf("appended %zu rows to %s\n", counts[file], file.c_str());
  }
  if (files.empty()) return;
  if (path == MXKIT_BENCH_RESULTS)
    std::printf("bench/RESULTS.md and bench/SUMMARY.md are generated from these files: python3 bench/render_results.py\n");
  else
    std::printf("to add these rows to bench/results and render: python3 bench/render_results.py add %s\n", path.c_str());
}

// Records rows when the command line asked for it (--record / --results).
inline void finish(const options& o, const std::string& device, const std::vector<result>& rows) {
  print_table(rows);
  if (o.record) append_results(o.results_path, device, rows);
}

}  // namespace mxkit_bench
