// SPDX-License-Identifier: Apache-2.0
// mxkit:sm90a
// The Llama 2 70B LoRA recipe at its real size on one GPU (healing.hpp, lora_base.hpp): 80 layers,
// d_model 8192, 64 query heads and 8 KV heads of 128, SwiGLU 28672, vocabulary 32000, sequence
// 8192, batch 1; LoRA rank 16, alpha 32 on the QKV and output projections (the MLPerf reference's
// targets); bf16 activations, activation recomputation per layer (model::set_recompute), the
// linears' lean memory trade (linear_memory::lean(): after healing each FP8 dgrad copy is the
// transpose of the fprop copy made per GEMM, so the FP8 base is held once).
//   build    layer by layer (build_lora_base): random N(0, 0.02) masters written on the device by a
//            kernel here (no host generation), each layer's FP8 copy stashed in page-locked host
//            memory, its MXFP4 copies made, its master freed before the next layer is allocated;
//   MXFP4    --warmup steps, then up to --steps timed steps (CUDA events), within --budget seconds;
//   healing  heal(): pass 1 frees every MXFP4 copy, pass 2 uploads the stashed FP8 copies;
//   FP8      the same steps under FP8 delayed scaling (history 4, most recent).
// Device memory at each phase, two ways: the runtime's query (cudaMemGetInfo: used = total - free;
// "high-water" before the pool is trimmed, i.e. the most the phase held, "live" after trimming it
// to what is allocated) and the backend's memory tracker (bytes of live tensors, and their peak).
// Speed per phase: tokens/s per GPU (median step) and MFU against the bf16 dense peak (989.4
// TFLOP/s on H100/H200 SXM; $MXKIT_PEAK_TFLOPS overrides). Model FLOPs of a LoRA step (frozen
// base: no weight gradient): 4 N_base tokens (forward and dgrad) + 6 N_adapter tokens + the head's
// 4 V C tokens + attention 3.5 * 2 * B * H * T^2 * D per layer (causal forward and backward);
// the recomputed forward is not model FLOPs.
// Before it allocates anything it predicts each phase's bytes; a model whose MXFP4 phase cannot
// fit the device is reported and skipped (--force runs it anyway) — bench/NOTES_lora70b.md.
// Peer in the same call, after mxkit has freed the device: bench/lora70b_peer.py under torchrun
// on --peer-gpus GPUs (default: every visible GPU): bf16 base, FSDP2, torch.compile, activation
// checkpointing.
// Usage: bench_lora70b [--layers N] [--seq T] [--batch B] [--d-model C --heads H --kv-heads K
//                      --ffn F --vocab V] [--warmup N] [--steps N] [--budget S] [--peer-gpus N]
//                      [--force] [--predict] [--record] [--results PATH]
//   --predict: print the predicted bytes and FLOPs and exit (no GPU needed).
//   MXKIT_LORA70B_PEER: the peer command (default: torchrun ... bench/lora70b_peer.py); empty: none.
//   Without a GPU it says so and exits 77.
#include <algorithm>
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
#include <mxkit/nn/healing.hpp>
#include <mxkit/nn/lora_base.hpp>
#include <mxkit/nn/training.hpp>

#include "bench_common.hpp"
#include "gpu_bench.hpp"
#include "training_bench.hpp"

namespace {

namespace gpu = mxkit::gpu;
namespace nn = mxkit::nn;

// N(0, stddev) floats from a counter hash (splitmix64) and Box-Muller: random base weights written
// where they live, so a 70B base is initialized in milliseconds instead of hours of host Philox.
MXKIT_GLOBAL void fill_normal_kernel(float* out, std::size_t n, std::uint64_t seed, float stddev) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u1 = (static_cast<float>(z >> 40) + 1.0f) * 0x1p-24f;  // (0, 1]: never log(0)
    const float u2 = static_cast<float>((z >> 16) & 0xFFFFFFu) * 0x1p-24f;
    out[i] = stddev * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}

struct shape {
  std::size_t layers = 80, d_model = 8192, heads = 64, kv_heads = 8, ffn = 28672, vocab = 32000, seq = 8192, batch = 1;
};

double gib(double bytes) { return bytes / double(1ull << 30); }

// Parameters of the base's layer linears, of the adapters, and the model FLOPs of one LoRA step.
struct model_counts {
  double base = 0, adapters = 0, flops = 0;
};
model_counts counts(const shape& s, const nn::layer_config& c, std::size_t rank) {
  model_counts m;
  const double C = double(c.d_model), HD = double(c.n_heads * c.head_dim()), QKV = double(c.qkv_dim()), F = double(c.d_ff);
  const double L = double(s.layers), T = double(s.seq), B = double(s.batch), tokens = B * T, r = double(rank);
  m.base = L * (C * QKV + HD * C + 3.0 * C * F);
  m.adapters = L * r * (C + QKV + HD + C);
  m.flops = 4.0 * m.base * tokens + 6.0 * m.adapters * tokens + 4.0 * double(s.vocab) * C * tokens +
            L * 3.5 * 2.0 * B * double(c.n_heads) * T * T * double(c.head_dim());
  return m;
}

// Predicted device bytes (bench/NOTES_lora70b.md has the arithmetic).
struct prediction {
  double mxfp4_base = 0, fp8_base = 0, frozen_rest = 0, adapters = 0, activations = 0, stash = 0;
  double mxfp4_phase() const { return mxfp4_base + frozen_rest + adapters + activations; }
  double fp8_phase() const { return fp8_base + frozen_rest + adapters + activations; }
};
prediction predict(const shape& s, const nn::layer_config& c, const model_counts& m) {
  prediction p;
  const double C = double(c.d_model), F = double(c.d_ff), QKV = double(c.qkv_dim()), V = double(s.vocab);
  const double tokens = double(s.batch) * double(s.seq);
  p.mxfp4_base = 2.0 * m.base * (0.5 + 1.0 / 32.0);  // rowwise + columnwise: 4-bit codes + an E8M0 scale per 32
  p.fp8_base = m.base;                               // the fprop copy only (dgrad: its transpose per GEMM)
  p.stash = m.base;
  // Embedding and head fp32 masters, the head's bf16 copies, the norms.
  p.frozen_rest = 2.0 * V * C * 4.0 + 2.0 * V * C * 2.0 + double(s.layers) * 2.0 * C * 4.0;
  p.adapters = m.adapters * 4.0 * 4.0;  // value, gradient, two AdamW moments (fp32)
  // Recomputation: every layer's input (bf16) kept; one layer's working set at a time (its gate/up
  // output and its gradient, the SwiGLU output, QKV and attention and their quantized copies:
  // about 8 (M, 2F) bf16 tensors' worth); the logits (f32 and their bf16 copy).
  p.activations = double(s.layers + 1) * tokens * C * 2.0 + 8.0 * tokens * F * 2.0 + 4.0 * tokens * QKV * 2.0 + tokens * V * 6.0;
  return p;
}

void print_prediction(const prediction& p) {
  std::printf("predicted: MXFP4 base %.1f GiB, FP8 base %.1f GiB, rest %.1f GiB, adapters %.2f GiB, activations %.1f GiB -> "
              "MXFP4 phase %.1f GiB, FP8 phase %.1f GiB; host stash %.1f GiB (page-locked)\n",
              gib(p.mxfp4_base), gib(p.fp8_base), gib(p.frozen_rest), gib(p.adapters), gib(p.activations), gib(p.mxfp4_phase()),
              gib(p.fp8_phase()), gib(p.stash));
}

// The runtime's view of device memory: used = total - free, before trimming the pool (the phase's
// high-water) and after (what is live).
struct device_snapshot {
  double high_water = 0, live = 0, tracked = 0, tracked_peak = 0;
};

}  // namespace

int main(int argc, char** argv) {
  shape s;
  int warmup = 1, steps = 3, peer_gpus = 0;
  double budget = 90.0;
  bool force = false, predict_only = false;
  std::vector<char*> rest{argv[0]};
  const auto size_arg = [&](int& i) { return static_cast<std::size_t>(std::strtoull(argv[++i], nullptr, 10)); };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--layers" && has) s.layers = size_arg(i);
    else if (a == "--seq" && has) s.seq = size_arg(i);
    else if (a == "--batch" && has) s.batch = size_arg(i);
    else if (a == "--d-model" && has) s.d_model = size_arg(i);
    else if (a == "--heads" && has) s.heads = size_arg(i);
    else if (a == "--kv-heads" && has) s.kv_heads = size_arg(i);
    else if (a == "--ffn" && has) s.ffn = size_arg(i);
    else if (a == "--vocab" && has) s.vocab = size_arg(i);
    else if (a == "--warmup" && has) warmup = std::atoi(argv[++i]);
    else if (a == "--steps" && has) steps = std::atoi(argv[++i]);
    else if (a == "--budget" && has) budget = std::atof(argv[++i]);
    else if (a == "--peer-gpus" && has) peer_gpus = std::atoi(argv[++i]);
    else if (a == "--force") force = true;
    else if (a == "--predict") predict_only = true;
    else rest.push_back(argv[i]);
  }
  mxkit_bench::options opt = mxkit_bench::parse_args(static_cast<int>(rest.size()), rest.data());
  mxkit::detail::require(s.layers >= 1 && s.seq >= 1 && s.batch >= 1 && steps >= 1 && warmup >= 0, "bench_lora70b: --layers, --seq, ",
                         "--batch and --steps must be positive");
  nn::model_config mc;
  mc.vocab = s.vocab;
  mc.n_layers = s.layers;
  mc.layer.d_model = s.d_model;
  mc.layer.n_heads = s.heads;
  mc.layer.n_kv_heads = s.kv_heads;
  mc.layer.d_ff = s.ffn;
  nn::check_config(mc.layer);
  nn::lora_base_config lc;  // rank 16, alpha 32, QKV and output
  const model_counts mcount = counts(s, mc.layer, lc.lora.rank);
  const prediction pred = predict(s, mc.layer, mcount);
  if (predict_only) {
    print_prediction(pred);
    return 0;
  }
  gpu::device_properties props;
  if (!mxkit_bench::first_gpu(props)) return 77;
  int devices = 1;
  MXKIT_GPU_CHECK(gpu::get_device_count(&devices));
  if (peer_gpus <= 0) peer_gpus = devices;
  const std::string device = props.name;
  const char* peak_env = std::getenv("MXKIT_PEAK_TFLOPS");
  const double peak_flops = (peak_env ? std::atof(peak_env) : 989.4) * 1e12;
  const std::string model_name = s.layers == 80 && s.d_model == 8192 ? "Llama 2 70B LoRA" : "Llama 2 70B LoRA (" + std::to_string(s.layers) + "L d" + std::to_string(s.d_model) + ")";
  const std::string tag = model_name + " B" + std::to_string(s.batch) + " T" + std::to_string(s.seq);
  const gpu::device_memory_info at_start = gpu::memory_info();
  std::printf("%s on %s (%.1f GiB, %.1f GiB free): base %.2f B parameters, adapters %.1f M, %.3g model FLOP per step\n", tag.c_str(),
              device.c_str(), gib(double(at_start.total_bytes)), gib(double(at_start.free_bytes)), mcount.base / 1e9, mcount.adapters / 1e6,
              mcount.flops);
  print_prediction(pred);
  std::fflush(stdout);

  const double tokens = double(s.batch) * double(s.seq);
  std::vector<mxkit_bench::result> rows;
  const auto row = [&](const std::string& what, double v, const std::string& unit) { rows.push_back({"lora70b", tag + " " + what, v, unit, "", 0.0}); };
  row("predicted MXFP4 phase", gib(pred.mxfp4_phase()), "GiB");
  row("predicted FP8 phase", gib(pred.fp8_phase()), "GiB");
  const bool fits = pred.mxfp4_phase() < 0.97 * double(at_start.total_bytes) && pred.fp8_phase() < 0.97 * double(at_start.total_bytes);
  if (!fits && !force) {
    std::printf("does not fit one %s (%.1f GiB): skipped (--force runs it anyway); see bench/NOTES_lora70b.md\n", device.c_str(),
                gib(double(at_start.total_bytes)));
    row("fits one GPU (0 = no)", 0.0, "");
  } else {
    gpu::device_backend be;
    const auto snapshot = [&](const char* what) {
      device_snapshot d;
      be.synchronize();
      gpu::device_memory_info m = gpu::memory_info();
      d.high_water = double(m.total_bytes - m.free_bytes);
      gpu::trim_device_memory();
      m = gpu::memory_info();
      d.live = double(m.total_bytes - m.free_bytes);
      d.tracked = double(be.memory().total());
      d.tracked_peak = double(be.memory().peak_total());
      std::printf("memory %-28s device used %7.2f GiB (high-water %7.2f), tracked %7.2f GiB (peak %7.2f), weights %7.2f GiB\n", what,
                  gib(d.live), gib(d.high_water), gib(d.tracked), gib(d.tracked_peak), gib(double(be.memory().weight_bytes())));
      std::fflush(stdout);
      row(std::string("memory ") + what + " (device used)", gib(d.live), "GiB");
      row(std::string("memory ") + what + " (device high-water)", gib(d.high_water), "GiB");
      row(std::string("memory ") + what + " (tracked)", gib(d.tracked), "GiB");
      return d;
    };
    snapshot("empty");
    be.memory().reset_peak();

    // Build: the device fill, one seed per weight.
    std::uint64_t fills = 0;
    lc.init = [&](nn::parameter& p, double stddev) {
      mxkit::detail::require(p.value.type() == nn::dtype::f32, "bench_lora70b: f32 masters expected");
      const std::size_t n = p.value.size();
      const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 65535 * 4));
      fill_normal_kernel<<<blocks, 256, 0, be.stream()>>>(static_cast<float*>(p.value.data()), n, 0x70B00000ull + 7919 * ++fills,
                                                         static_cast<float>(stddev));
      MXKIT_GPU_CHECK_LAUNCH();
    };
    const auto t_build = std::chrono::steady_clock::now();
    lc.after_layer = [&](std::size_t i) {
      if ((i + 1) % 10 == 0 || i + 1 == s.layers) {
        std::printf("  built %zu/%zu layers, %.1f s, tracked %.2f GiB\n", i + 1, s.layers,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t_build).count(), gib(double(be.memory().total())));
        std::fflush(stdout);
      }
    };
    const nn::recipe mxfp4 = mxkit_bench::training_recipe("mxfp4");
    nn::recipe fp8 = nn::recipes::fp8_healing();
    fp8.activations = nn::dtype::bf16;
    nn::lora_base base = nn::build_lora_base(be, mc, mxfp4, 1, lc);
    const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_build).count();
    row("build (layer by layer)", build_s, "s");
    row("host FP8 stash", gib(double(base.stash.bytes())), "GiB");
    row("build weight peak (tracked)", gib(double(base.peak_weight_bytes)), "GiB");
    snapshot("after build: MXFP4 base");

    nn::model& m = *base.m;
    m.set_recompute(true);
    for (nn::transformer_layer& l : m.layers()) l.set_memory(nn::linear_memory::lean());
    nn::trainer t(m, mxkit_bench::random_bytes(std::size_t{1} << 22), mxkit_bench::timing_config({s.batch, s.seq}, 1e-4, 0));
    std::map<std::string, double> tps;
    const auto phase = [&](const std::string& name) {
      be.memory().reset_peak();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < warmup; ++i) t.step();
      be.synchronize();
      std::vector<double> times;
      for (int i = 0; i < steps; ++i) {
        gpu::event a, b;
        a.record(be.stream());
        t.step();
        b.record(be.stream());
        times.push_back(b.elapsed_ms_since(a));
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget) break;
      }
      std::sort(times.begin(), times.end());
      const double ms = times[times.size() / 2];
      const double loss = be.read_scalar(m.loss());
      tps[name] = tokens / ms * 1e3;
      std::printf("%-6s %zu timed steps: %9.1f ms/step %9.0f tokens/s per GPU  MFU %5.1f%%  model %6.1f TFLOP/s  loss %.3f  tracked peak %.2f GiB\n",
                  name.c_str(), times.size(), ms, tps[name], 100.0 * mcount.flops / (ms * 1e-3) / peak_flops, mcount.flops / ms / 1e9, loss,
                  gib(double(be.memory().peak_total())));
      std::fflush(stdout);
      rows.push_back({"lora70b", tag + " " + name + " phase tokens/s per GPU", tps[name], "tokens/s", "torch FSDP2 bf16 (per GPU)", 0.0});
      row(name + " phase MFU (bf16 dense peak)", 100.0 * mcount.flops / (ms * 1e-3) / peak_flops, "%");
      row(name + " phase step", ms, "ms");
      row(name + " phase tracked peak", gib(double(be.memory().peak_total())), "GiB");
      snapshot((name + " phase").c_str());
    };
    phase("MXFP4");
    const auto t_heal = std::chrono::steady_clock::now();
    const nn::healing_report h = nn::heal(m, base.stash, fp8, [&] { snapshot("switch: MXFP4 freed"); });
    be.synchronize();
    const double heal_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_heal).count();
    base.stash = {};  // the host copies are no longer needed
    std::printf("healing: %.1f s, weights %.2f -> %.2f -> %.2f GiB (tracked), peak %.2f GiB, co-resident would be %.2f GiB, %zu linears\n",
                heal_s, gib(double(h.weight_bytes_before)), gib(double(h.weight_bytes_dropped)), gib(double(h.weight_bytes_after)),
                gib(double(h.peak_weight_bytes)), gib(double(h.co_resident_bytes)), h.restored_linears);
    row("healing switch", heal_s, "s");
    row("healing weight peak (tracked)", gib(double(h.peak_weight_bytes)), "GiB");
    row("healing co-resident weights (avoided)", gib(double(h.co_resident_bytes)), "GiB");
    snapshot("after healing: FP8 base");
    phase("FP8");
    row("FP8 / MXFP4 tokens/s", tps["FP8"] / tps["MXFP4"], "x");
  }

  // The peer, on a device mxkit has released (the pool keeps freed memory until trimmed).
  gpu::trim_device_memory();
  const char* env = std::getenv("MXKIT_LORA70B_PEER");
  std::string cmd = env ? env
                        : "torchrun --standalone --nproc_per_node " + std::to_string(peer_gpus) + " bench/lora70b_peer.py";
  if (!cmd.empty())
    cmd += " --layers " + std::to_string(s.layers) + " --d-model " + std::to_string(s.d_model) + " --heads " + std::to_string(s.heads) +
           " --kv-heads " + std::to_string(s.kv_heads) + " --ffn " + std::to_string(s.ffn) + " --vocab " + std::to_string(s.vocab) +
           " --seq " + std::to_string(s.seq) + " --batch " + std::to_string(s.batch) + " --steps " + std::to_string(steps) +
           " --budget " + std::to_string(static_cast<int>(budget));
  const std::map<std::string, double> peer = mxkit_bench::run_peer(cmd);
  const double peer_tps = mxkit_bench::peer_value(peer, "tokens_per_s_per_gpu");
  for (mxkit_bench::result& r : rows)
    if (r.unit == "tokens/s") r.peer_value = peer_tps;
  if (!peer.empty()) {
    const double g = mxkit_bench::peer_value(peer, "gpus");
    rows.push_back({"lora70b", tag + " torch FSDP2 bf16 on " + std::to_string(int(g)) + " GPUs tokens/s per GPU", peer_tps, "tokens/s",
                    "torch FSDP2 bf16 (per GPU)", peer_tps});
    rows.push_back({"lora70b", tag + " torch FSDP2 bf16 MFU (bf16 dense peak)", 100.0 * mcount.flops * peer_tps / tokens / peak_flops, "%", "", 0.0});
    rows.push_back({"lora70b", tag + " torch FSDP2 bf16 peak memory per GPU", mxkit_bench::peer_value(peer, "peak_memory_gib"), "GiB", "", 0.0});
  }
  mxkit_bench::finish(opt, device, rows);
  return 0;
}
