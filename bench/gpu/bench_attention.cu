// SPDX-License-Identifier: Apache-2.0
// mxkit:sm90a
// Causal GQA attention on the GPU (gpu/nn/attention.hpp): forward and forward+backward TFLOP/s
// at B = 1, T = 8192, H = 32, Hkv = 8, D = 128 (a Llama-3-8B layer) and B = 16, T = 1024, H = 12,
// Hkv = 4, D = 64 (the 76 M model of bench_train), against torch's scaled_dot_product_attention
// (bench/attention_peer.py, causal, enable_gqa, the same shape) run by this program in the same
// device call. FLOPs: causal forward 2 B H T^2 D (half of the full 4 B H T^2 D),
// backward 2.5 times that (Dao 2023's convention), so forward+backward 3.5 times.
// Each figure is the median over --repeats (at least 10) single calls timed with events.
// Usage: bench_attention [--record] [--results PATH] [--repeats N]
//   MXKIT_ATTENTION_PEER: the peer command (default "python3 bench/attention_peer.py"); empty:
//   no peer. Without a GPU it says so and exits 77.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/attention.hpp>

#include "bench_common.hpp"
#include "gpu_bench.hpp"

namespace {

namespace gpu = mxkit::gpu;

__global__ void fill_normalish(mxkit::bfloat16* x, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    h *= 3266489917u;
    h ^= h >> 16;
    // Sum of two uniforms: mean 0, sd ~0.8, a softmax neither flat nor one-hot.
    const float a = static_cast<float>(h & 0xFFFF) / 65536.0f + static_cast<float>(h >> 16) / 65536.0f - 1.0f;
    x[i] = mxkit::bfloat16::from_float(2.0f * a);
  }
}

using mxkit_bench::median_ms;

// Runs the peer and returns its two figures (0 when it fails).
void run_peer(double& fwd, double& fwdbwd, const mxkit::nn::head_shape& s) {
  const char* env = std::getenv("MXKIT_ATTENTION_PEER");
  const std::string cmd = env ? env : "python3 bench/attention_peer.py";
  fwd = fwdbwd = 0;
  if (cmd.empty()) return;
  std::string args;  // appended piece by piece: g++ 12 -O3 warns (-Wrestrict, a false positive) on " " + std::string&&
  for (const std::size_t v : {s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim}) {
    args += ' ';
    args += std::to_string(v);
  }
  FILE* f = popen((cmd + args + " 2>&1").c_str(), "r");
  if (!f) return;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    std::printf("peer: %s", line);
    std::sscanf(line, "fwd_tflops %lf", &fwd);
    std::sscanf(line, "fwdbwd_tflops %lf", &fwdbwd);
  }
  pclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  mxkit_bench::options opt = mxkit_bench::parse_args(argc, argv);
  opt.repeats = std::max(opt.repeats, 10);
  gpu::device_properties props;
  if (!mxkit_bench::first_gpu(props)) return 77;
  // The Llama 3.1 8B layer's attention, and the 76 M byte-level model's (bench_train).
  const mxkit::nn::head_shape shapes[] = {{1, 8192, 32, 8, 128}, {16, 1024, 12, 4, 64}};
  std::vector<mxkit_bench::result> rows;
  for (const mxkit::nn::head_shape& s : shapes) {
    const std::size_t N = s.tokens(), stride = s.qkv_dim();
    gpu::device_buffer<mxkit::bfloat16> qkv(N * stride), dout(N * s.q_dim()), out(N * s.q_dim()), dqkv(N * stride);
    gpu::device_buffer<float> lse(s.batch * s.n_heads * s.seq);
    gpu::device_buffer<std::byte> fws(gpu::attention_forward_workspace(s)), bws(gpu::attention_backward_workspace(s));
    fill_normalish<<<1024, 256>>>(qkv.data(), qkv.size(), 1u);
    fill_normalish<<<1024, 256>>>(dout.data(), dout.size(), 2u);
    MXKIT_GPU_CHECK(gpu::device_synchronize());
    gpu::stream_t st = nullptr;
    const double flops = 2.0 * s.batch * s.n_heads * double(s.seq) * s.seq * s.head_dim;
    auto fwd = [&] { gpu::attention_forward(qkv.data(), stride, out.data(), lse.data(), s, {fws.data(), fws.size()}, st); };
    auto fwdbwd = [&] {
      fwd();
      gpu::attention_backward(dout.data(), qkv.data(), stride, out.data(), lse.data(), dqkv.data(), s, {bws.data(), bws.size()}, st);
    };
    const double f_ms = median_ms(fwd, opt.repeats, st), fb_ms = median_ms(fwdbwd, opt.repeats, st);
    MXKIT_GPU_CHECK(gpu::device_synchronize());
    const double f_tf = flops / f_ms / 1e9, fb_tf = 3.5 * flops / fb_ms / 1e9;
    const std::string shape = "B" + std::to_string(s.batch) + " T" + std::to_string(s.seq) + " H" + std::to_string(s.n_heads) +
                              " Hkv" + std::to_string(s.n_kv_heads) + " D" + std::to_string(s.head_dim);
    std::printf("mxkit %s: forward %.3f ms, forward+backward %.3f ms (backward alone %.3f ms)\n", shape.c_str(), f_ms, fb_ms,
                fb_ms - f_ms);
    double p_f = 0, p_fb = 0;
    run_peer(p_f, p_fb, s);
    rows.push_back({"attention", "causal GQA forward bf16 " + shape, f_tf, "TFLOP/s", "torch SDPA", p_f});
    rows.push_back({"attention", "causal GQA forward+backward bf16 " + shape, fb_tf, "TFLOP/s", "torch SDPA", p_fb});
  }
  mxkit_bench::finish(opt, props.name, rows);
  return 0;
}
