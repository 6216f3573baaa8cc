// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the two training benchmarks (bench_layer.cu, bench_train.cu) share: the recipes they time,
// by name, and the PyTorch peer script they run in the same call, whose "key value" lines they read.
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/train/training.hpp>

namespace mxkit_bench {

// n random bytes (xorshift64): a training benchmark's tokens; its throughput does not depend on the text.
inline std::shared_ptr<std::vector<std::uint8_t>> random_bytes(std::size_t n) {
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(n);
  std::uint64_t x = 88172645463325252ull;
  for (std::uint8_t& b : *bytes) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<std::uint8_t>(x);
  }
  return bytes;
}

// A trainer's configuration for timing steps: it never runs out of steps and reads the loss only
// when asked (warm-up `warmup` steps of the schedule, peak `lr`).
inline mxkit::nn::train_config timing_config(mxkit::nn::batch_shape shape, double lr, std::size_t warmup) {
  mxkit::nn::train_config tc;
  tc.steps = 1000000;
  tc.shape = shape;
  tc.schedule = {lr, lr / 10, warmup, 1000000};
  tc.log_every = 1000000;
  return tc;
}

// bf16, fp8 (delayed scaling, HYBRID), mxfp8, mxfp4 (AMD's recipe: Hadamard on every GEMM),
// nvfp4 (arXiv 2509.25149's recipe, whose bf16 layers depend on the model's `n_layers`), each with
// bf16 activations.
inline mxkit::nn::recipe training_recipe(const std::string& name, std::size_t n_layers = 1) {
  namespace rc = mxkit::nn::recipes;
  mxkit::nn::recipe r = name == "bf16"    ? rc::bf16()
                        : name == "fp8"   ? rc::fp8_delayed()
                        : name == "mxfp8" ? rc::mxfp8()
                        : name == "mxfp4" ? rc::mxfp4_amd()
                        : name == "nvfp4" ? rc::nvfp4(n_layers)
                                          : (mxkit::detail::fail("unknown recipe '", name, "' (bf16, fp8, mxfp8, mxfp4, nvfp4)"), mxkit::nn::recipe{});
  r.activations = mxkit::nn::dtype::bf16;
  return r;
}

// The items of a comma-separated list.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// Runs `command` (empty: nothing), echoes its output as "peer: ..." lines and returns every
// "key number" line as a map (missing keys read as 0 through peer_value); with `text`, every
// "key rest-of-line" line too, as written (versions: "torch_version 2.11.0+cu128").
inline std::map<std::string, double> run_peer(const std::string& command, std::map<std::string, std::string>* text = nullptr) {
  std::map<std::string, double> v;
  if (command.empty()) return v;
  FILE* f = popen((command + " 2>&1").c_str(), "r");
  if (!f) return v;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    std::printf("peer: %s", line);
    char key[128];
    double value = 0;
    if (std::sscanf(line, "%127s %lf", key, &value) == 2) v[key] = value;
    int rest = 0;
    if (text && std::sscanf(line, "%127s %n", key, &rest) == 1 && rest > 0) {
      std::string s = line + rest;
      while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
      if (!s.empty()) (*text)[key] = s;
    }
  }
  pclose(f);
  return v;
}
// The peer's settings recorded beside its rows: the command it ran and the torch version it printed.
inline std::string torch_peer_settings(const std::string& command, const std::map<std::string, std::string>& text) {
  const auto it = text.find("torch_version");
  return command + (it == text.end() ? std::string() : ", torch " + it->second);
}
inline double peer_value(const std::map<std::string, double>& peer, const std::string& key) {
  const auto it = peer.find(key);
  return it == peer.end() ? 0.0 : it->second;
}

}  // namespace mxkit_bench
