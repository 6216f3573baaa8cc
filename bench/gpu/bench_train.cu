// SPDX-License-Identifier: Apache-2.0
// mxkit:sm90a
// Training throughput of a byte-level Llama through gpu::device_backend: the GPU training
// program's default model (mxkit/train_program/program.hpp: 16 layers, d_model 768, 12 heads / 4 KV
// heads, SwiGLU 2048, sequence 1024, batch 16) and, for scale, a 76 M-parameter model (the same
// with 12 layers), for the recipes bf16, FP8 delayed scaling, MXFP8 and MXFP4 with
// the Hadamard rotation; bf16 activations, fp32 master weights, AdamW, clipping at 1.0.
// Per run: 3 warm-up steps, then --repeats steps timed with CUDA events around each (the loss is
// read once at the end: nn::trainer reads nothing back between logging steps), the median step
// time, tokens/s and model TFLOP/s. Then where the time goes: the host time to enqueue one step
// (the device idle at its start), and one profiled step with every backend operation bracketed
// by events, split into parts (profiled_backend.hpp; `gaps`: time between operations). Model FLOPs, as the peer: 6 * N_linear * tokens + attention
// 3.5 * 2 * B * H * T^2 * D per layer (the embedding table and LM head: 6 * 2 * V * C * tokens
// excluded from N_linear, included here as the LM head GEMM 6 * V * C * tokens).
// Peer in the same run: bench/train_peer.py (the same model in PyTorch, bf16 autocast, fused
// AdamW; eager and torch.compile).
// As in the training program, the trainer's step graph (train/step_replay.hpp) is recorded where it
// applies unless --cuda-graph off launches every step (the run's line says whether; MXFP4 with
// random Hadamard signs is launched); --cuda-graph on,off times both, one recipe after the other,
// against one peer run. Rows of launched steps say "graph off" (since 8bd9fa4; every row before
// it was launched, without the words); the profiled step is always launched (an observer watches).
// Usage: bench_train [--record] [--results PATH] [--repeats N] [--recipes a,b] [--models default,76m,8b16] [--cuda-graph on|off|on,off]
//   MXKIT_TRAIN_PEER: the peer command (default "python3 bench/train_peer.py"); empty: no peer.
//   Without a GPU it says so and exits 77.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/train/training.hpp>

#include "bench_common.hpp"
#include "gpu_bench.hpp"
#include "profiled_backend.hpp"
#include "training_bench.hpp"

namespace {

namespace gpu = mxkit::gpu;
namespace nn = mxkit::nn;

struct model_shape {
  std::string name;
  std::size_t layers, d_model, heads, kv_heads, ffn, seq, batch;
  std::size_t vocab = 256;
  bool recompute = false;  // and no peer here: bench/llama8b_one_gpu.py times the 8B's
};

// The peer command for model m ($MXKIT_TRAIN_PEER or bench/train_peer.py; empty: no peer).
std::string peer_command(const model_shape& m) {
  const char* env = std::getenv("MXKIT_TRAIN_PEER");
  const std::string cmd = env ? env : "python3 bench/train_peer.py";
  if (cmd.empty()) return cmd;
  return cmd + " --layers " + std::to_string(m.layers) + " --d-model " + std::to_string(m.d_model) + " --heads " + std::to_string(m.heads) +
         " --kv-heads " + std::to_string(m.kv_heads) + " --ffn " + std::to_string(m.ffn) + " --seq " + std::to_string(m.seq) +
         " --batch " + std::to_string(m.batch);
}

}  // namespace

int main(int argc, char** argv) {
  std::string recipes = "bf16,fp8,mxfp8,mxfp4", models = "default,76m";
  std::vector<bool> step_graph_modes{true};  // --cuda-graph on,off times both against one peer run
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--recipes") && i + 1 < argc) recipes = argv[++i];
    else if (!std::strcmp(argv[i], "--models") && i + 1 < argc) models = argv[++i];
    else if (!std::strcmp(argv[i], "--cuda-graph") && i + 1 < argc) {
      step_graph_modes.clear();
      for (const std::string& v : mxkit_bench::split_list(argv[++i])) {
        mxkit::detail::require(v == "on" || v == "off", "bench_train: --cuda-graph takes on, off or both as on,off; got '", v, "'");
        step_graph_modes.push_back(v == "on");
      }
      mxkit::detail::require(!step_graph_modes.empty(), "bench_train: --cuda-graph takes on, off or on,off");
    }
    else rest.push_back(argv[i]);
  }
  mxkit_bench::options opt = mxkit_bench::parse_args(static_cast<int>(rest.size()), rest.data());
  opt.repeats = std::max(opt.repeats, 20);
  gpu::device_properties props;
  if (!mxkit_bench::first_gpu(props)) return 77;
  const std::map<std::string, model_shape> shapes{
      {"default", {"training program default (16L d768)", 16, 768, 12, 4, 2048, 1024, 16}},
      {"76m", {"76M byte Llama (12L d768)", 12, 768, 12, 4, 2048, 1024, 16}},
      // The real 8B's split (bytes as token ids: the vocabulary sets the head's cost, not the data).
      {"8b16", {"Llama 3.1 8B, 16 of 32 layers, V128256", 16, 4096, 32, 8, 14336, 8192, 1, 128256, true}},
  };
  const auto bytes = mxkit_bench::random_bytes(std::size_t{1} << 24);
  std::vector<mxkit_bench::result> rows;
  for (const std::string& key : mxkit_bench::split_list(models)) {
    const auto it = shapes.find(key);
    mxkit::detail::require(it != shapes.end(), "bench_train: unknown model '", key, "' (default, 76m, 8b16)");
    const model_shape& m = it->second;
    nn::model_config mc;
    mc.vocab = m.vocab;
    mc.n_layers = m.layers;
    mc.layer.d_model = m.d_model;
    mc.layer.n_heads = m.heads;
    mc.layer.n_kv_heads = m.kv_heads;
    mc.layer.d_ff = m.ffn;
    const nn::layer_config& c = mc.layer;
    const double tokens = double(m.batch) * double(m.seq), D = double(c.head_dim());
    const double n_linear = double(m.layers) * (double(c.d_model) * double(c.qkv_dim()) + double(c.n_heads) * D * double(c.d_model) +
                                                 3.0 * double(c.d_model) * double(c.d_ff)) +
                            double(mc.vocab) * double(c.d_model);
    const double flops = 6.0 * n_linear * tokens + double(m.layers) * 3.5 * 2.0 * double(m.batch) * double(c.n_heads) * double(m.seq) * double(m.seq) * D;
    for (const std::string& rname : mxkit_bench::split_list(recipes))
    for (const bool step_graph : step_graph_modes) {
      const nn::recipe r = mxkit_bench::training_recipe(rname, mc.n_layers);
      mxkit_bench::profiled_backend be;
      nn::model model(be, mc, r, 1);
      model.set_recompute(m.recompute);
      nn::train_config tc = mxkit_bench::timing_config({m.batch, m.seq}, 3e-4, 10);
      tc.step_graph = step_graph;
      nn::trainer t(model, bytes, tc);
      std::printf("%s %s: step graph %s\n", m.name.c_str(), rname.c_str(),
                  t.steps().applies() ? "on (recorded at the third step, replayed after)" : ("off: " + t.steps().refusal()).c_str());
      for (int i = 0; i < 3; ++i) t.step();
      be.synchronize();
      std::vector<double> times;
      for (int i = 0; i < opt.repeats; ++i) {
        gpu::event a, b;
        a.record(be.stream());
        t.step();
        b.record(be.stream());
        times.push_back(b.elapsed_ms_since(a));
      }
      std::sort(times.begin(), times.end());
      const double ms = times[times.size() / 2];
      const double loss = be.read_scalar(model.loss());
      // Host time to enqueue a step, from an idle device (median of 5).
      std::vector<double> host;
      for (int i = 0; i < 5; ++i) {
        be.synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        t.step();
        host.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(host.begin(), host.end());
      const double host_ms = host[host.size() / 2];
      be.synchronize();
      be.set_profiling(true);
      gpu::event pa, pb;
      pa.record(be.stream());
      t.step();
      pb.record(be.stream());
      const double profiled_ms = pb.elapsed_ms_since(pa);
      const mxkit_bench::profiled_backend::profile ops = be.collect();
      be.set_profiling(false);
      const std::array<double, mxkit_bench::step_part_count> split = mxkit_bench::split_by_part(ops, profiled_ms);
      std::printf("%-40s %-6s %8.2f ms/step %10.0f tokens/s %6.1f TFLOP/s  last loss %.3f  peak %.2f GiB\n", m.name.c_str(), rname.c_str(), ms,
                  tokens / ms * 1e3, flops / ms / 1e9, loss, static_cast<double>(be.memory().peak_total()) / (1u << 30));
      std::printf("  host enqueue %.2f ms/step; split (profiled step %.2f ms):", host_ms, profiled_ms);
      for (int p = 0; p < mxkit_bench::step_part_count; ++p) std::printf(" %s %.2f", mxkit_bench::step_part_names[p], split[static_cast<std::size_t>(p)]);
      std::printf("\n");
      mxkit_bench::print_op_times(ops);
      std::fflush(stdout);
      const std::string what = rname + " " + m.name + " B" + std::to_string(m.batch) + " T" + std::to_string(m.seq) + (step_graph ? "" : " graph off");
      rows.push_back({"train", what + " tokens/s", tokens / ms * 1e3, "tokens/s", "torch.compile bf16", 0.0});
      rows.push_back({"train", what + " host enqueue per step", host_ms, "ms", "", 0.0});
      for (int p = 0; p < mxkit_bench::step_part_count; ++p)
        rows.push_back({"train", what + " time in " + mxkit_bench::step_part_names[p], split[static_cast<std::size_t>(p)], "ms", "", 0.0});
    }
    if (m.recompute) continue;
    const std::string peer_run = peer_command(m);
    std::map<std::string, std::string> peer_text;
    const std::map<std::string, double> peer = mxkit_bench::run_peer(peer_run, &peer_text);
    const auto get = [&](const char* k) { return mxkit_bench::peer_value(peer, k); };
    const std::string settings = mxkit_bench::torch_peer_settings(peer_run, peer_text);
    for (mxkit_bench::result& row : rows)
      if (row.peer_value == 0.0 && row.unit == "tokens/s" && row.case_name.find(m.name) != std::string::npos) {
        row.peer_value = get("compiled_tokens_per_s");
        row.peer_settings = settings;
      }
    rows.push_back({"train", "torch eager bf16 " + m.name + " tokens/s", get("eager_tokens_per_s"), "tokens/s", "torch.compile bf16",
                    get("compiled_tokens_per_s"), settings});
  }
  mxkit_bench::finish(opt, props.name, rows);
  return 0;
}
