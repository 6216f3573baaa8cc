// SPDX-License-Identifier: Apache-2.0
// mxkit:sm90a
// The Llama 2 70B LoRA recipe at its real size on one GPU (healing.hpp, lora_base.hpp): 80 layers,
// d_model 8192, 64 query heads and 8 KV heads of 128, SwiGLU 28672, vocabulary 32000, sequence
// 8192, batch 1; LoRA rank 16, alpha 32 on the QKV and output projections (the MLPerf reference's
// targets); bf16 activations, activation recomputation per layer (model::set_recompute), the
// linears' lean memory trade (linear_memory::lean(): after healing each FP8 dgrad copy is the
// transpose of the fprop copy made per GEMM, so the FP8 base is held once).
//   stash    the FP8 stash's page-locked host memory taken once (pinned_arena below: faulted in
//            by every core, then registered in one call), timed;
//   build    layer by layer (build_lora_base): random N(0, 0.02) masters written on the device by a
//            kernel here (no host generation, never a whole bf16 or fp32 base on the device), or
//            with --init-from the real weights read from a Hugging Face checkpoint as each
//            parameter is created (io/hf_streamed_import.hpp); each layer's FP8 copy stashed in
//            the arena, its MXFP4 copies made, its master freed before the next layer is allocated;
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
// fit the device is reported and skipped (--force runs it anyway) — docs/perf/lora70b.md.
// Peer in the same call, after mxkit has freed the device: bench/lora70b_peer.py under torchrun
// on --peer-gpus GPUs (default: every visible GPU): bf16 base, FSDP2, torch.compile, activation
// checkpointing; its rows are labelled "second reference" (the one-GPU FP8-base peer, the first,
// is run by scripts/gpu.sh lora70b and its rows written by bench/lora70b_rows.py). The end of the
// output is a summary table (speed, MFU, memory per phase, the peer, the ratios against the
// FSDP2 targets: MXFP4 >= 1.0x the peer per GPU, FP8 >= 1.2x).
// Usage: bench_lora70b [--layers N] [--seq T] [--batch B] [--d-model C --heads H --kv-heads K
//                      --ffn F --vocab V] [--warmup N] [--steps N] [--budget S] [--peer-gpus N]
//                      [--mxkit-limit S] [--peer-only] [--force] [--predict] [--record]
//                      [--results PATH] [--init-from PATH] [--gemm mxkit|vendor]
//   --predict: print the predicted bytes and FLOPs and exit (no GPU needed).
//   --init-from PATH: the base's weights from a Hugging Face Llama checkpoint (the index
//     model.safetensors.index.json, its folder, or one safetensors file; F32 or BF16 tensors)
//     instead of the random fill. The shape options must give the checkpoint's shape (the default
//     is Llama 2 70B's); the index and every shard's header are read and checked against it
//     before anything is allocated, and a mismatch is refused naming the file and the tensor.
//   --gemm vendor: the device backend's bf16 and per-tensor FP8 products (the FP8 phase's base
//     GEMMs, the adapters, the head) on cuBLASLt (gpu/gemm/vendor/); MXFP4 products stay on
//     mxkit's exact kernels. Default mxkit: every product on mxkit's kernels.
//   --mxkit-limit S: a watchdog ends the process (exit 124) once mxkit's part has run S seconds,
//     after printing the summary and recording the rows measured so far (a hung or slow part
//     cannot hold the device the peer needs; scripts/gpu.sh lora70b then runs --peer-only).
//   --peer-only: the peer alone (its rows, the prediction rows).
//   MXKIT_LORA70B_PEER: the peer command (default: torchrun ... bench/lora70b_peer.py); empty: none.
//   Without a GPU it says so and exits 77.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/io/hf_streamed_import.hpp>
#include <mxkit/nn/healing.hpp>
#include <mxkit/nn/lora_base.hpp>
#include <mxkit/train/training.hpp>

#include "bench_common.hpp"
#include "gpu_bench.hpp"
#include "training_bench.hpp"

namespace {

namespace gpu = mxkit::gpu;
namespace nn = mxkit::nn;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

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

// Page-locked host memory for the FP8 stash, taken once. cudaMallocHost per weight (320 calls,
// 64 GiB at 70B) faults every page in and pins it in the calling thread; on the device machines
// fresh host memory is first-touched at a few GB/s per thread (the VM grows into it), so one
// thread needs tens of seconds. Here anonymous memory is faulted in by every core at once, then
// registered with the runtime in one call (PyTorch's host allocator offers the same choice: its
// pinned_use_cuda_host_register option with page-touching threads). A request that does not fit,
// or any request if registration failed, falls back to the backend's own page-locked allocation.
#if MXKIT_GPU_HIP
gpu::error_t host_register(void* p, std::size_t bytes) { return hipHostRegister(p, bytes, hipHostRegisterDefault); }
gpu::error_t host_unregister(void* p) { return hipHostUnregister(p); }
#else
gpu::error_t host_register(void* p, std::size_t bytes) { return cudaHostRegister(p, bytes, cudaHostRegisterDefault); }
gpu::error_t host_unregister(void* p) { return cudaHostUnregister(p); }
#endif
class pinned_arena {
 public:
  pinned_arena(std::size_t bytes, unsigned threads) : bytes_(bytes) {
    if (bytes_ == 0) return;
    const auto t0 = clock_type::now();
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::printf("pinned_arena: mmap of %zu bytes failed (%s): per-weight page-locked allocations instead\n", bytes_, std::strerror(errno));
      bytes_ = 0;
      return;
    }
    base_ = static_cast<std::uint8_t*>(p);
    (void)madvise(base_, bytes_, MADV_HUGEPAGE);  // fewer faults where transparent huge pages are on; advice only
    threads = std::max(1u, threads);
    std::vector<std::thread> pool;
    const std::size_t slice = (bytes_ / threads + 4095) / 4096 * 4096;
    for (unsigned k = 0; k < threads; ++k)
      pool.emplace_back([this, k, slice] {
        const std::size_t begin = std::min(bytes_, k * slice), end = std::min(bytes_, begin + slice);
        for (std::size_t i = begin; i < end; i += 4096) base_[i] = 0;
      });
    for (std::thread& t : pool) t.join();
    touch_s = seconds_since(t0);
    const auto t1 = clock_type::now();
    const gpu::error_t e = host_register(base_, bytes_);
    register_s = seconds_since(t1);
    if (e != gpu::success) {
      (void)gpu::get_last_error();  // not sticky: clear it
      std::printf("pinned_arena: registering %zu bytes failed (%s): per-weight page-locked allocations instead\n", bytes_,
                  gpu::error_string(e));
      munmap(base_, bytes_);
      base_ = nullptr;
      bytes_ = 0;
      return;
    }
    registered_ = true;
  }
  pinned_arena(const pinned_arena&) = delete;
  pinned_arena& operator=(const pinned_arena&) = delete;
  ~pinned_arena() {
    if (registered_) (void)host_unregister(base_);
    if (base_) munmap(base_, bytes_);
  }
  // `bytes` of the arena (256-byte aligned), owned by the arena: the pointer's deleter does
  // nothing. Null when it does not fit or the arena is not page-locked.
  std::shared_ptr<std::uint8_t[]> take(std::size_t bytes) {
    const std::size_t at = (used_ + 255) / 256 * 256;
    if (!registered_ || at + bytes > bytes_) return nullptr;
    used_ = at + bytes;
    return std::shared_ptr<std::uint8_t[]>(base_ + at, [](std::uint8_t*) {});
  }
  bool registered() const noexcept { return registered_; }
  std::size_t bytes() const noexcept { return bytes_; }
  std::size_t used() const noexcept { return used_; }
  double touch_s = 0, register_s = 0;

 private:
  std::uint8_t* base_ = nullptr;
  std::size_t bytes_ = 0, used_ = 0;
  bool registered_ = false;
};

// The device backend with its host copies (the healing stash) taken from the arena.
class stash_backend final : public gpu::device_backend {
 public:
  explicit stash_backend(pinned_arena& arena) : arena_(&arena) {}

 protected:
  std::shared_ptr<std::uint8_t[]> do_alloc_host(std::size_t bytes) override {
    if (std::shared_ptr<std::uint8_t[]> p = arena_->take(bytes)) return p;
    ++fallbacks;
    return gpu::device_backend::do_alloc_host(bytes);
  }

 public:
  std::size_t fallbacks = 0;  // host copies not served by the arena

 private:
  pinned_arena* arena_;
};

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

// Host bytes of the FP8 stash: each layer linear's codes (padded to 16) and its amax, as
// device_backend::export_fp8 allocates them, each aligned as the arena aligns.
std::size_t stash_bytes(const shape& s, const nn::layer_config& c) {
  const std::size_t C = c.d_model, HD = c.n_heads * c.head_dim(), F = c.d_ff;
  const std::size_t per_linear[] = {C * c.qkv_dim(), HD * C, C * 2 * F, F * C};
  std::size_t layer = 0;
  for (std::size_t n : per_linear) layer += ((n + 15) / 16 * 16 + sizeof(float) + 255) / 256 * 256;
  return s.layers * layer + 4096;
}

// Predicted device bytes (docs/perf/lora70b.md has the arithmetic).
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

struct phase_result {
  double ms = 0, tokens_per_s = 0, mfu = 0, loss = 0;
  std::size_t steps = 0;
};

// Everything the summary table reads; rows for RESULTS.md beside it. Guarded by a mutex: the
// watchdog thread prints and records them if mxkit's part runs out of time.
struct report {
  std::mutex lock;
  std::vector<mxkit_bench::result> rows;
  std::vector<std::pair<std::string, device_snapshot>> memory;
  std::map<std::string, phase_result> phases;
  std::map<std::string, double> peer;
  std::map<std::string, std::string> peer_text;  // the peer's "key text" lines: its "settings" go into the rows
  std::string mxkit_status = "not run", peer_status = "not run";
  double stash_s = 0, stash_gib = 0, build_s = 0, heal_s = 0, heal_peak_gib = 0, co_resident_gib = 0;
  int peer_gpus = 0;
  void set_status(std::string s) {
    std::lock_guard<std::mutex> g(lock);
    mxkit_status = std::move(s);
  }
  void add(mxkit_bench::result r) {
    std::lock_guard<std::mutex> g(lock);
    rows.push_back(std::move(r));
  }
};

const char* target_verdict(double ratio, double target) { return ratio <= 0 ? "n/a" : ratio >= target ? "met" : "MISSED"; }

// The summary (callers hold r.lock).
void print_summary(const report& r, const std::string& tag, const std::string& device) {
  std::printf("\n== summary: %s on %s ==\n", tag.c_str(), device.c_str());
  std::printf("mxkit: %s; peer: %s\n", r.mxkit_status.c_str(), r.peer_status.c_str());
  const double peer_tps = mxkit_bench::peer_value(r.peer, "tokens_per_s_per_gpu");
  std::printf("%-34s %6s %14s %8s %10s %s\n", "", "GPUs", "tokens/s/GPU", "MFU %", "step ms", "vs peer (target)");
  const auto line = [&](const std::string& name, const phase_result& p, double target) {
    const double ratio = peer_tps > 0 ? p.tokens_per_s / peer_tps : 0.0;
    char vs[64] = "n/a";
    if (ratio > 0) std::snprintf(vs, sizeof vs, "%.3fx (>= %.1fx: %s)", ratio, target, target_verdict(ratio, target));
    std::printf("%-34s %6d %14.1f %8.1f %10.1f %s\n", name.c_str(), 1, p.tokens_per_s, p.mfu, p.ms, vs);
  };
  for (const auto& [name, target] : {std::pair<std::string, double>{"MXFP4", 1.0}, {"FP8", 1.2}}) {
    const auto it = r.phases.find(name);
    if (it != r.phases.end()) line("mxkit " + name + " phase (" + std::to_string(it->second.steps) + " timed steps)", it->second, target);
    else std::printf("%-34s %6d %14s\n", ("mxkit " + name + " phase").c_str(), 1, "not measured");
  }
  if (peer_tps > 0)
    std::printf("%-34s %6d %14.1f %8.1f %10.1f peak %.1f GiB per GPU\n", "2nd reference: torch FSDP2 bf16", r.peer_gpus, peer_tps,
                mxkit_bench::peer_value(r.peer, "mfu_percent"), mxkit_bench::peer_value(r.peer, "step_ms"),
                mxkit_bench::peer_value(r.peer, "peak_memory_gib"));
  else
    std::printf("%-34s %6d %14s%s\n", "2nd reference: torch FSDP2 bf16", r.peer_gpus, "not measured",
                mxkit_bench::peer_value(r.peer, "oom") > 0 ? " (out of memory)" : "");
  // used: after trimming the pool (what is allocated); high-water: before trimming it, i.e. the
  // most held since the previous line.
  std::printf("%-68s %10s %10s %10s\n", "device memory, GiB (runtime query; tracked: live tensors)", "used", "high-water", "tracked");
  for (const auto& [what, d] : r.memory)
    std::printf("  %-66s %10.2f %10.2f %10.2f\n", what.c_str(), gib(d.live), gib(d.high_water), gib(d.tracked));
  if (r.heal_s > 0) {
    std::printf("healing: %.1f s; weight peak during the switch %.2f GiB (tracked) against %.2f GiB had both copies been "
                "resident: %s\n",
                r.heal_s, r.heal_peak_gib, r.co_resident_gib, r.heal_peak_gib < r.co_resident_gib ? "never co-resident" : "CO-RESIDENT");
    for (const auto& [what, d] : r.memory)
      if (what.rfind("after healing", 0) == 0)
        std::printf("device high-water from the switch to the FP8 base (runtime query): %.2f GiB\n", gib(d.high_water));
  }
  if (r.stash_gib > 0) std::printf("host FP8 stash: %.1f GiB page-locked in %.1f s; build %.1f s\n", r.stash_gib, r.stash_s, r.build_s);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line: a killed run keeps what it printed
  shape s;
  int warmup = 1, steps = 3, peer_gpus = 0;
  double budget = 90.0, mxkit_limit = 0.0;
  bool force = false, predict_only = false, peer_only = false, vendor_gemm = false;
  std::string init_from;
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
    else if (a == "--mxkit-limit" && has) mxkit_limit = std::atof(argv[++i]);
    else if (a == "--peer-gpus" && has) peer_gpus = std::atoi(argv[++i]);
    else if (a == "--peer-only") peer_only = true;
    else if (a == "--force") force = true;
    else if (a == "--predict") predict_only = true;
    else if (a == "--init-from" && has) init_from = argv[++i];
    else if (a == "--gemm" && has) {
      const std::string g = argv[++i];
      mxkit::detail::require(g == "mxkit" || g == "vendor", "bench_lora70b: --gemm is mxkit or vendor, not '", g, "'");
      vendor_gemm = g == "vendor";
    }
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
  // The checkpoint's index and headers, checked against the shape before any memory is taken.
  std::optional<nn::hf_streamed_import> reader;
  if (!init_from.empty() && !peer_only) {
    try {
      reader.emplace(init_from, mc);
    } catch (const nn::safetensors_error& e) {
      std::fprintf(stderr,
                   "bench_lora70b: --init-from %s: %s\n  (the model's shape is --layers %zu --d-model %zu --heads %zu --kv-heads %zu "
                   "--ffn %zu --vocab %zu; it must be the checkpoint's)\n",
                   init_from.c_str(), e.what(), s.layers, s.d_model, s.heads, s.kv_heads, s.ffn, s.vocab);
      return 2;
    }
    std::printf("base weights: from %s, %zu tensors in %zu files, %.2f GiB\n", reader->catalog().what.c_str(), reader->catalog().tensors.size(),
                reader->catalog().shard_paths.size(), gib(double(reader->catalog().bytes)));
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
  const std::string tag = model_name + (vendor_gemm ? ", bf16 and FP8 GEMMs on cuBLASLt (--gemm vendor)" : "") + " B" +
                          std::to_string(s.batch) + " T" + std::to_string(s.seq);
  const gpu::device_memory_info at_start = gpu::memory_info();
  std::printf("%s on %s (%.1f GiB, %.1f GiB free): base %.2f B parameters, adapters %.1f M, %.3g model FLOP per step\n", tag.c_str(),
              device.c_str(), gib(double(at_start.total_bytes)), gib(double(at_start.free_bytes)), mcount.base / 1e9, mcount.adapters / 1e6,
              mcount.flops);
  print_prediction(pred);

  const double tokens = double(s.batch) * double(s.seq);
  report rep;
  rep.peer_gpus = peer_gpus;
  const auto row = [&](const std::string& what, double v, const std::string& unit) { rep.add({"lora70b", tag + " " + what, v, unit, "", 0.0}); };
  row("predicted MXFP4 phase", gib(pred.mxfp4_phase()), "GiB");
  row("predicted FP8 phase", gib(pred.fp8_phase()), "GiB");
  const bool fits = pred.mxfp4_phase() < 0.97 * double(at_start.total_bytes) && pred.fp8_phase() < 0.97 * double(at_start.total_bytes);
  bool device_free = true;  // false: a failure may have left device memory behind (the peer is not started)
  if (peer_only) {
    rep.mxkit_status = "skipped (--peer-only)";
  } else if (!fits && !force) {
    std::printf("does not fit one %s (%.1f GiB): skipped (--force runs it anyway); see docs/perf/lora70b.md\n", device.c_str(),
                gib(double(at_start.total_bytes)));
    row("fits one GPU (0 = no)", 0.0, "");
    rep.mxkit_status = "skipped: does not fit one GPU";
  } else {
    // The watchdog: past --mxkit-limit seconds it prints and records what was measured and ends
    // the process (the device memory it holds goes with it).
    std::mutex done_lock;
    std::condition_variable done_cv;
    bool done = false;
    std::thread watchdog;
    if (mxkit_limit > 0)
      watchdog = std::thread([&] {
        std::unique_lock<std::mutex> g(done_lock);
        if (done_cv.wait_for(g, std::chrono::duration<double>(mxkit_limit), [&] { return done; })) return;
        std::lock_guard<std::mutex> r(rep.lock);
        rep.mxkit_status = "STOPPED by the watchdog after " + std::to_string(static_cast<int>(mxkit_limit)) + " s";
        std::printf("\nmxkit part: over --mxkit-limit %.0f s: stopped\n", mxkit_limit);
        print_summary(rep, tag, device);
        mxkit_bench::print_table(rep.rows);
        if (opt.record) mxkit_bench::append_results(opt.results_path, device, rep.rows);
        std::fflush(stdout);
        std::_Exit(124);
      });
    const auto t_mxkit = clock_type::now();
    try {
      rep.set_status("running");
      // The stash's host memory first (before the backend: it outlives every host copy).
      const auto t_stash = clock_type::now();
      pinned_arena arena(stash_bytes(s, mc.layer), std::max(1u, std::thread::hardware_concurrency()));
      rep.stash_s = seconds_since(t_stash);
      rep.stash_gib = gib(double(arena.bytes()));
      std::printf("host stash: %.1f GiB page-locked in %.1f s (faulted in by %u threads %.1f s, registered %.1f s)%s\n", rep.stash_gib,
                  rep.stash_s, std::max(1u, std::thread::hardware_concurrency()), arena.touch_s, arena.register_s,
                  arena.registered() ? "" : ": NOT registered, per-weight allocations instead");
      row("host stash page-locking", rep.stash_s, "s");
      stash_backend be(arena);
      be.set_vendor_gemm(vendor_gemm);  // --gemm vendor: the FP8 phase's products (and bf16 ones) on cuBLASLt
      const auto snapshot = [&](const std::string& what) {
        device_snapshot d;
        be.synchronize();
        gpu::device_memory_info m = gpu::memory_info();
        d.high_water = double(m.total_bytes - m.free_bytes);
        gpu::trim_device_memory();
        m = gpu::memory_info();
        d.live = double(m.total_bytes - m.free_bytes);
        d.tracked = double(be.memory().total());
        d.tracked_peak = double(be.memory().peak_total());
        std::printf("memory %-28s device used %7.2f GiB (high-water %7.2f), tracked %7.2f GiB (peak %7.2f), weights %7.2f GiB\n",
                    what.c_str(), gib(d.live), gib(d.high_water), gib(d.tracked), gib(d.tracked_peak),
                    gib(double(be.memory().weight_bytes())));
        row("memory " + what + " (device used)", gib(d.live), "GiB");
        row("memory " + what + " (device high-water)", gib(d.high_water), "GiB");
        row("memory " + what + " (tracked)", gib(d.tracked), "GiB");
        std::lock_guard<std::mutex> g(rep.lock);
        rep.memory.emplace_back(what, d);
        return d;
      };
      snapshot("empty");
      be.memory().reset_peak();

      // Build: the checkpoint's weights, or the device fill, one seed per weight.
      std::uint64_t fills = 0;
      if (reader) {
        lc.load = [&](nn::parameter& p) { reader->fill(be, p); };
      } else {
        lc.init = [&](nn::parameter& p, double stddev) {
          mxkit::detail::require(p.value.type() == nn::dtype::f32, "bench_lora70b: f32 masters expected");
          const std::size_t n = p.value.size();
          const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 65535 * 4));
          fill_normal_kernel<<<blocks, 256, 0, be.stream()>>>(static_cast<float*>(p.value.data()), n, 0x70B00000ull + 7919 * ++fills,
                                                             static_cast<float>(stddev));
          MXKIT_GPU_CHECK_LAUNCH();
        };
      }
      const auto t_build = clock_type::now();
      lc.after_layer = [&](std::size_t i) {
        if ((i + 1) % 10 == 0 || i + 1 == s.layers)
          std::printf("  built %zu/%zu layers, %.1f s, tracked %.2f GiB, stash %.1f GiB\n", i + 1, s.layers, seconds_since(t_build),
                      gib(double(be.memory().total())), gib(double(arena.used())));
      };
      const nn::recipe mxfp4 = mxkit_bench::training_recipe("mxfp4");
      nn::recipe fp8 = nn::recipes::fp8_healing();
      fp8.activations = nn::dtype::bf16;
      nn::lora_base base = nn::build_lora_base(be, mc, mxfp4, 1, lc);
      rep.build_s = seconds_since(t_build);
      if (reader) {
        const nn::hf_import_stats read = reader->finish();  // every tensor of the checkpoint read
        std::printf("base weights: %zu tensors, %.2f GiB read from %s\n", read.tensors, gib(double(read.bytes_read)),
                    reader->catalog().what.c_str());
      } else {
        std::printf("base weights: random N(0, %g) on the device (no --init-from)\n", mc.init_std);
      }
      std::printf("build: %.1f s, %zu host copies outside the arena\n", rep.build_s, be.fallbacks);
      row("build (layer by layer)", rep.build_s, "s");
      row("host FP8 stash", gib(double(base.stash.bytes())), "GiB");
      row("build weight peak (tracked)", gib(double(base.peak_weight_bytes)), "GiB");
      snapshot("after build: MXFP4 base");

      nn::model& m = *base.m;
      m.set_recompute(true);
      for (nn::transformer_layer& l : m.layers()) l.set_memory(nn::linear_memory::lean());
      nn::trainer t(m, mxkit_bench::random_bytes(std::size_t{1} << 22), mxkit_bench::timing_config({s.batch, s.seq}, 1e-4, 0));
      // A phase stops taking timed steps past its --budget, or (under --mxkit-limit) once the next
      // step would end past `end_s` seconds of mxkit's part: the MXFP4 phase leaves time for
      // healing and the FP8 phase, the FP8 phase for the teardown. One timed step at least.
      const auto phase = [&](const std::string& name, double end_s) {
        be.memory().reset_peak();
        const auto start = clock_type::now();
        for (int i = 0; i < warmup; ++i) {
          t.step();
          be.synchronize();
          std::printf("%-6s warm-up step %d: %.1f s\n", name.c_str(), i + 1, seconds_since(start));
        }
        std::vector<double> times;
        for (int i = 0; i < steps; ++i) {
          gpu::event a, b;
          a.record(be.stream());
          t.step();
          b.record(be.stream());
          times.push_back(b.elapsed_ms_since(a));
          std::printf("%-6s step %d: %.1f ms\n", name.c_str(), i + 1, times.back());
          if (seconds_since(start) > budget) break;
          if (mxkit_limit > 0 && seconds_since(t_mxkit) + times.back() * 1e-3 > end_s) {
            std::printf("%-6s stopped after %zu timed steps: %.0f s of mxkit's %.0f s limit used\n", name.c_str(), times.size(),
                        seconds_since(t_mxkit), mxkit_limit);
            break;
          }
        }
        std::sort(times.begin(), times.end());
        phase_result p;
        p.steps = times.size();
        p.ms = times[times.size() / 2];
        p.loss = be.read_scalar(m.loss());
        p.tokens_per_s = tokens / p.ms * 1e3;
        p.mfu = 100.0 * mcount.flops / (p.ms * 1e-3) / peak_flops;
        std::printf("%-6s %zu timed steps: %9.1f ms/step %9.0f tokens/s per GPU  MFU %5.1f%%  model %6.1f TFLOP/s  loss %.3f  tracked peak %.2f GiB\n",
                    name.c_str(), p.steps, p.ms, p.tokens_per_s, p.mfu, mcount.flops / p.ms / 1e9, p.loss, gib(double(be.memory().peak_total())));
        rep.add({"lora70b", tag + " " + name + " phase tokens/s per GPU", p.tokens_per_s, "tokens/s", "torch FSDP2 bf16, second reference (per GPU)", 0.0});
        row(name + " phase MFU (bf16 dense peak)", p.mfu, "%");
        row(name + " phase step", p.ms, "ms");
        row(name + " phase tracked peak", gib(double(be.memory().peak_total())), "GiB");
        {
          std::lock_guard<std::mutex> g(rep.lock);
          rep.phases[name] = p;
        }
        snapshot(name + (name == "MXFP4" ? " phase (before healing)" : " phase (after healing)"));
      };
      phase("MXFP4", 0.55 * mxkit_limit);
      const auto t_heal = clock_type::now();
      const nn::healing_report h = nn::heal(m, base.stash, fp8, [&] { snapshot("switch: MXFP4 freed, FP8 not yet up"); });
      be.synchronize();
      rep.heal_s = seconds_since(t_heal);
      base.stash = {};  // the host copies are no longer needed (the arena goes at the end)
      rep.heal_peak_gib = gib(double(h.peak_weight_bytes));
      rep.co_resident_gib = gib(double(h.co_resident_bytes));
      std::printf("healing: %.1f s, weights %.2f -> %.2f -> %.2f GiB (tracked), peak %.2f GiB, co-resident would be %.2f GiB, %zu linears\n",
                  rep.heal_s, gib(double(h.weight_bytes_before)), gib(double(h.weight_bytes_dropped)), gib(double(h.weight_bytes_after)),
                  rep.heal_peak_gib, rep.co_resident_gib, h.restored_linears);
      row("healing switch", rep.heal_s, "s");
      row("healing weight peak (tracked)", rep.heal_peak_gib, "GiB");
      row("healing co-resident weights (avoided)", rep.co_resident_gib, "GiB");
      snapshot("after healing: FP8 base");
      phase("FP8", mxkit_limit - 15.0);
      double fp8_over_mxfp4 = 0;
      {
        std::lock_guard<std::mutex> g(rep.lock);
        fp8_over_mxfp4 = rep.phases["FP8"].tokens_per_s / rep.phases["MXFP4"].tokens_per_s;
      }
      row("FP8 / MXFP4 tokens/s", fp8_over_mxfp4, "x");
      rep.set_status("done");
    } catch (const std::exception& e) {
      std::printf("mxkit part FAILED: %s\n", e.what());
      rep.set_status(std::string("FAILED: ") + e.what());
      // A failed GPU call can leave device memory held by this process: start the peer only if
      // the device is free again (else scripts/gpu.sh lora70b runs it alone).
      try {
        gpu::trim_device_memory();
        const gpu::device_memory_info m = gpu::memory_info();
        device_free = double(m.free_bytes) > 0.9 * double(at_start.free_bytes);
      } catch (const std::exception&) {
        device_free = false;
      }
    }
    {
      std::lock_guard<std::mutex> g(done_lock);
      done = true;
    }
    done_cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
    std::printf("mxkit part: %.1f s\n", seconds_since(t_mxkit));
  }

  // The peer, on a device mxkit has released (the pool keeps freed memory until trimmed).
  if (device_free) {
    try {
      gpu::trim_device_memory();
    } catch (const std::exception&) {
    }
    const char* env = std::getenv("MXKIT_LORA70B_PEER");
    std::string cmd = env ? env : "python3 -m torch.distributed.run --standalone --nproc_per_node " + std::to_string(peer_gpus) + " bench/lora70b_peer.py";
    if (!cmd.empty()) {
      cmd += " --layers " + std::to_string(s.layers) + " --d-model " + std::to_string(s.d_model) + " --heads " + std::to_string(s.heads) +
             " --kv-heads " + std::to_string(s.kv_heads) + " --ffn " + std::to_string(s.ffn) + " --vocab " + std::to_string(s.vocab) +
             " --seq " + std::to_string(s.seq) + " --batch " + std::to_string(s.batch) + " --steps " + std::to_string(steps) +
             " --budget " + std::to_string(static_cast<int>(budget)) + " --peak-tflops " + std::to_string(peak_flops / 1e12) +
             " --model-flops " + std::to_string(mcount.flops);
      const auto t_peer = clock_type::now();
      rep.peer = mxkit_bench::run_peer(cmd, &rep.peer_text);
      const double peer_tps = mxkit_bench::peer_value(rep.peer, "tokens_per_s_per_gpu");
      rep.peer_status = peer_tps > 0 ? "done" : mxkit_bench::peer_value(rep.peer, "oom") > 0 ? "out of memory" : "FAILED (no tokens/s)";
      if (mxkit_bench::peer_value(rep.peer, "compile_failed") > 0) rep.peer_status += " (torch.compile failed: eager where it could not compile)";
      std::printf("peer: %.1f s\n", seconds_since(t_peer));
      if (mxkit_bench::peer_value(rep.peer, "gpus") > 0) rep.peer_gpus = static_cast<int>(mxkit_bench::peer_value(rep.peer, "gpus"));
    } else {
      rep.peer_status = "not run (MXKIT_LORA70B_PEER empty)";
    }
  } else {
    rep.peer_status = "not run (device memory not released)";
  }
  std::lock_guard<std::mutex> g(rep.lock);
  const double peer_tps = mxkit_bench::peer_value(rep.peer, "tokens_per_s_per_gpu");
  for (mxkit_bench::result& r : rep.rows)
    if (r.unit == "tokens/s") {
      r.peer_value = peer_tps;
      r.peer_settings = rep.peer_text["settings"];
    }
  if (peer_tps > 0) {
    const std::string on = " on " + std::to_string(rep.peer_gpus) + " GPUs";
    const std::string compiled = mxkit_bench::peer_value(rep.peer, "compile_failed") > 0 ? " (compile FAILED)" : "";
    rep.rows.push_back({"lora70b", tag + " torch FSDP2 bf16 (second reference)" + on + compiled + " tokens/s per GPU", peer_tps, "tokens/s", "torch FSDP2 bf16, second reference (per GPU)", peer_tps, rep.peer_text["settings"]});
    rep.rows.push_back({"lora70b", tag + " torch FSDP2 bf16 (second reference)" + on + " MFU (bf16 dense peak)", 100.0 * mcount.flops * peer_tps / tokens / peak_flops, "%", "", 0.0});
    rep.rows.push_back({"lora70b", tag + " torch FSDP2 bf16 (second reference)" + on + " peak memory per GPU", mxkit_bench::peer_value(rep.peer, "peak_memory_gib"), "GiB", "", 0.0});
    for (const auto& [name, target] : {std::pair<std::string, double>{"MXFP4", 1.0}, {"FP8", 1.2}}) {
      const auto it = rep.phases.find(name);
      if (it == rep.phases.end()) continue;
      const double ratio = it->second.tokens_per_s / peer_tps;
      rep.rows.push_back({"lora70b", tag + " " + name + " (1 GPU) / torch FSDP2 bf16 (second reference)" + on + ", per GPU (target " +
                                         mxkit_bench::detail::number(target) + "x: " + target_verdict(ratio, target) + ")",
                          ratio, "x", "", 0.0});
    }
  }
  mxkit_bench::finish(opt, device, rep.rows);
  print_summary(rep, tag, device);
  return rep.mxkit_status == "done" || rep.mxkit_status.rfind("skipped", 0) == 0 ? 0 : 1;
}
