// SPDX-License-Identifier: Apache-2.0
// mxkit:sm90a
// One Llama 3.1 8B transformer layer (d_model 4096, 32 query heads, 8 KV heads, head dim 128,
// SwiGLU 14336), batch 1 x sequence 8192, forward + backward + the recipe's end of step, through
// gpu::device_backend, for the recipes bf16, FP8 delayed scaling (HYBRID), MXFP8 and MXFP4 with
// the Hadamard rotation on every GEMM; bf16 activations. Weights and their gradients in fp32 (the
// training program's master weights) and in bf16 (what the peer's layer holds): --params. Each
// step starts from zero_grad's mark (nn/parameter.hpp), so it writes fresh weight gradients as the
// peer's does after zero_grad(set_to_none=True).
// Per recipe: time per step (median of --repeats after 3 warm-up steps, CUDA events), tokens/s,
// model TFLOP/s, the peak of the backend's tracked device memory in a step, and the time split
// from a second, profiled pass in which every backend operation is bracketed by events (the parts
// are listed in profiled_backend.hpp; `gaps` is the step minus every bracketed operation).
// Peer in the same run: bench/layer_peer.py (the same layer in PyTorch: bf16 eager, compiled,
// per-tensor FP8 through torch._scaled_mm compiled, and SDPA alone). Model FLOPs, as the peer:
// 6 * N_linear * tokens + attention 3.5 * 2 * B * H * T^2 * D (causal forward 2 B H T^2 D,
// backward 2.5 times that).
// --memory fast,lean: the linears' default trade, or linear_memory::lean() (each weight copy made
// for its GEMM, dY's two copies one at a time: the lowest peak, one more read of each weight and
// each dY).
// Usage: bench_layer [--record] [--results PATH] [--repeats N] [--seq T] [--recipes a,b]
//                    [--params f32,bf16] [--memory fast,lean]
//   MXKIT_LAYER_PEER: the peer command (default "python3 bench/layer_peer.py"); empty: no peer.
//   Without a GPU it says so and exits 77.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/nn/transformer_layer.hpp>

#include "bench_common.hpp"
#include "gpu_bench.hpp"
#include "profiled_backend.hpp"
#include "training_bench.hpp"

namespace {

namespace gpu = mxkit::gpu;
namespace nn = mxkit::nn;

std::vector<double> normal_values(std::size_t n, std::uint64_t seed, double scale) {
  std::vector<double> v(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (double& e : v) {  // a sum of 4 uniforms: mean 0, unit-ish spread; values only need to be plausible
    double s = 0;
    for (int k = 0; k < 4; ++k) {
      x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
      s += static_cast<double>((x * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0 - 0.5;
    }
    e = scale * s * 1.7;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t seq = 8192;
  std::string recipes = "bf16,fp8,mxfp8,mxfp4", param_types = "f32,bf16", memory_modes = "fast";
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seq") && i + 1 < argc) seq = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--recipes") && i + 1 < argc) recipes = argv[++i];
    else if (!std::strcmp(argv[i], "--params") && i + 1 < argc) param_types = argv[++i];
    else if (!std::strcmp(argv[i], "--memory") && i + 1 < argc) memory_modes = argv[++i];
    else rest.push_back(argv[i]);
  }
  mxkit_bench::options opt = mxkit_bench::parse_args(static_cast<int>(rest.size()), rest.data());
  opt.repeats = std::max(opt.repeats, 10);
  gpu::device_properties props;
  if (!mxkit_bench::first_gpu(props)) return 77;

  nn::layer_config c;
  c.d_model = 4096;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.d_ff = 14336;
  c.rope_theta = 500000.0;
  const nn::batch_shape shape{1, seq};
  const double tokens = static_cast<double>(shape.tokens());
  const double D = static_cast<double>(c.head_dim());
  const double n_linear = double(c.d_model) * double(c.qkv_dim()) + double(c.n_heads) * D * double(c.d_model) +
                          double(c.d_model) * 2.0 * double(c.d_ff) + double(c.d_ff) * double(c.d_model);
  const double flops = 6.0 * n_linear * tokens + 3.5 * 2.0 * double(shape.batch) * double(c.n_heads) * double(seq) * double(seq) * D;

  std::vector<mxkit_bench::result> rows;
  struct measured {
    std::string recipe;
    double ms, peak_gib;
    std::array<double, mxkit_bench::step_part_count> split;
  };
  std::vector<measured> all;
  for (const std::string& memory : mxkit_bench::split_list(memory_modes))
  for (const std::string& params : mxkit_bench::split_list(param_types))
  for (const std::string& recipe_name : mxkit_bench::split_list(recipes)) {
    if (params != "f32" && params != "bf16") {
      std::fprintf(stderr, "bench_layer: --params takes f32 and bf16, got '%s'\n", params.c_str());
      return 2;
    }
    if (memory != "fast" && memory != "lean") {
      std::fprintf(stderr, "bench_layer: --memory takes fast and lean, got '%s'\n", memory.c_str());
      return 2;
    }
    const nn::recipe r = mxkit_bench::training_recipe(recipe_name);
    // fp32 weights and the default trade keep the rows' earlier case names; the others say so.
    std::string name = recipe_name;
    if (params == "bf16") name += memory == "lean" ? " (bf16 weights, lean memory)" : " (bf16 weights)";
    else if (memory == "lean") name += " (lean memory)";
    mxkit_bench::profiled_backend be;
    nn::transformer_layer layer(be, "layer", c, 0, r, params == "f32" ? nn::dtype::f32 : nn::dtype::bf16);
    layer.init(1, 0.02, 32);
    if (memory == "lean") layer.set_memory(nn::linear_memory::lean());
    nn::tensor x = be.alloc(shape.tokens(), c.d_model, nn::dtype::bf16, nn::mem_tag::activation);
    nn::tensor dy = be.alloc(shape.tokens(), c.d_model, nn::dtype::bf16, nn::mem_tag::activation);
    nn::tensor y = be.alloc(shape.tokens(), c.d_model, nn::dtype::bf16, nn::mem_tag::activation);
    nn::tensor dx = be.alloc(shape.tokens(), c.d_model, nn::dtype::bf16, nn::mem_tag::activation);
    be.write(x, normal_values(x.size(), 2, 1.0));
    be.write(dy, normal_values(dy.size(), 3, 1e-3));
    std::vector<nn::parameter*> params;
    layer.collect(params);
    auto step = [&] {
      nn::mark_grads_zero(params);  // fresh gradients each step, as the peer's set_to_none
      layer.forward(x, y, shape, true);
      be.fill(dx, 0.0);
      layer.backward(dy, &dx, shape);
      layer.end_step();
    };
    for (int i = 0; i < 3; ++i) step();
    be.synchronize();
    be.memory().reset_peak();
    std::vector<double> times;
    for (int i = 0; i < opt.repeats; ++i) {
      gpu::event a, b;
      a.record(be.stream());
      step();
      b.record(be.stream());
      times.push_back(b.elapsed_ms_since(a));
    }
    std::sort(times.begin(), times.end());
    const double ms = times[times.size() / 2];
    const double peak_gib = static_cast<double>(be.memory().peak_total()) / (1024.0 * 1024.0 * 1024.0);
    // The profiled pass: one step with every operation bracketed.
    be.set_profiling(true);
    gpu::event a, b;
    a.record(be.stream());
    step();
    b.record(be.stream());
    const double profiled_ms = b.elapsed_ms_since(a);
    const mxkit_bench::profiled_backend::profile ops = be.collect();
    be.set_profiling(false);
    const std::array<double, mxkit_bench::step_part_count> split = mxkit_bench::split_by_part(ops, profiled_ms);
    // Tracked bytes are the tensors and copies a step holds (as torch's max_memory_allocated
    // counts tensors); the pool also keeps GEMM scratch and workspaces, shown beside it.
    const double pool_gib = static_cast<double>(gpu::pool_reserved_bytes()) / (1024.0 * 1024.0 * 1024.0);
    std::printf("%-6s %8.2f ms/step  %9.0f tokens/s  %6.1f TFLOP/s  peak %.2f GiB (pool %.2f GiB)  split (profiled step %.2f ms):",
                name.c_str(), ms, tokens / ms * 1e3, flops / ms / 1e9, peak_gib, pool_gib, profiled_ms);
    for (int p = 0; p < mxkit_bench::step_part_count; ++p) std::printf(" %s %.2f", mxkit_bench::step_part_names[p], split[static_cast<std::size_t>(p)]);
    std::printf("\n       at the peak, GiB:");
    for (std::size_t t = 0; t < nn::mem_tag_count; ++t)
      if (const std::size_t b = be.memory().live_at_peak(static_cast<nn::mem_tag>(t)))
        std::printf(" %s %.3f", mxkit::name_of(static_cast<nn::mem_tag>(t)), static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
    std::printf("\n");
    mxkit_bench::print_op_times(ops);
    std::fflush(stdout);
    all.push_back({name, ms, peak_gib, split});
  }

  const char* env = std::getenv("MXKIT_LAYER_PEER");
  const std::string peer_cmd = env ? env : "python3 bench/layer_peer.py";
  const std::string peer_run = peer_cmd.empty() ? peer_cmd : peer_cmd + " --seq " + std::to_string(seq);
  std::map<std::string, std::string> peer_text;
  const std::map<std::string, double> peer = mxkit_bench::run_peer(peer_run, &peer_text);
  const auto get = [&](const char* key) { return mxkit_bench::peer_value(peer, key); };
  const double peer_tok = get("compiled_tokens_per_s"), peer_gib = get("compiled_peak_gib");
  const std::string shape_name = "Llama-3.1-8B layer B1 T" + std::to_string(seq) + " fwd+bwd";
  for (const measured& m : all) {
    const std::string what = m.recipe + " " + shape_name;
    rows.push_back({"layer", what + " tokens/s", tokens / m.ms * 1e3, "tokens/s", "torch.compile bf16", peer_tok});
    rows.push_back({"layer", what + " model TFLOP/s", flops / m.ms / 1e9, "TFLOP/s", "torch.compile bf16", get("compiled_tflops")});
    rows.push_back({"layer", what + " step", m.ms, "ms", "torch.compile bf16", get("compiled_ms")});
    rows.push_back({"layer", what + " peak memory", m.peak_gib, "GiB", "torch.compile bf16", peer_gib});
    for (int p = 0; p < mxkit_bench::step_part_count; ++p)
      rows.push_back({"layer", what + " time in " + mxkit_bench::step_part_names[p], m.split[static_cast<std::size_t>(p)], "ms", "", 0.0});
  }
  rows.push_back({"layer", "torch eager bf16 " + shape_name + " tokens/s", get("eager_tokens_per_s"), "tokens/s", "torch.compile bf16", peer_tok});
  rows.push_back({"layer", "torch compiled FP8 (_scaled_mm) " + shape_name + " tokens/s", get("fp8_tokens_per_s"), "tokens/s",
                  "torch.compile bf16", peer_tok});
  for (mxkit_bench::result& row : rows)
    if (!row.peer.empty()) row.peer_settings = mxkit_bench::torch_peer_settings(peer_run, peer_text);
  mxkit_bench::finish(opt, props.name, rows);
  return 0;
}
