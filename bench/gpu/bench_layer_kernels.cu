// SPDX-License-Identifier: Apache-2.0
// The layer kernels around the GEMMs, at the shapes of bench_train's models and of bench_layer,
// against the copy floor of their bytes: a device-to-device copy of the same number of bytes
// moved (read plus written), timed in the same run.
//   rmsnorm backward   dx = dr + the norm's gradient, and dw (the library's choice of kernel);
//                      the group kernel alone, without dw, is printed beside it
//   rope               from the factor table (the device backend's path) and on the fly
//   embedding backward the training models' 256-row table (76 M shape only)
// Shapes: 76M: 16384 tokens (16 x 1024), d_model 768, 12/4 heads of 64, theta 10000 (the layer
// default the training program keeps); 8B: 8192 tokens, d_model 4096, 32/8 heads of 128, theta
// 500000. bf16 activations, fp32 weights and gradients. Each figure is the median over --repeats
// (at least 20) single calls timed with events. Inputs are pseudo-random, never zeros.
// Usage: bench_layer_kernels [--record] [--results PATH] [--repeats N]
//   Without a GPU it says so and exits 77.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/embedding.hpp>
#include <mxkit/gpu/nn/rmsnorm.hpp>
#include <mxkit/gpu/nn/rope.hpp>

#include "bench_common.hpp"
#include "gpu_bench.hpp"

namespace {

namespace gpu = mxkit::gpu;
using mxkit::bfloat16;
using mxkit_bench::median_ms;

struct shape {
  const char* name;
  std::size_t batch, seq, d_model, heads, kv_heads, head_dim;
  double theta;
  bool embedding;
  std::size_t tokens() const { return batch * seq; }
};

// Values in (-1, 1) from a hash of the index: plausible activations, no zeros, no denormals.
template <class T>
std::vector<T> hashed_values(std::size_t n, std::uint32_t seed) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    const float x = (static_cast<float>(h % 65521u) + 0.5f) / 32760.5f - 1.0f;
    if constexpr (std::is_same_v<T, float>) v[i] = x;
    else v[i] = T::from_float(x);
  }
  return v;
}

template <class T>
gpu::device_buffer<T> upload(const std::vector<T>& h) {
  gpu::device_buffer<T> d(h.size());
  MXKIT_GPU_CHECK(gpu::memcpy_async(d.data(), h.data(), h.size() * sizeof(T), gpu::copy_kind::host_to_device, nullptr));
  MXKIT_GPU_CHECK(gpu::stream_synchronize(nullptr));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  mxkit_bench::options opt = mxkit_bench::parse_args(argc, argv);
  opt.repeats = std::max(opt.repeats, 20);
  gpu::device_properties props;
  if (!mxkit_bench::first_gpu(props)) return 77;
  const gpu::stream_t st = nullptr;

  std::vector<mxkit_bench::result> rows;
  const shape shapes[] = {{"76M", 16, 1024, 768, 12, 4, 64, 10000.0, true}, {"8B", 1, 8192, 4096, 32, 8, 128, 500000.0, false}};
  for (const shape& sh : shapes) {
    const std::size_t M = sh.tokens(), C = sh.d_model;
    const mxkit::nn::head_shape hs{sh.batch, sh.seq, sh.heads, sh.kv_heads, sh.head_dim};
    // The copy floor: bytes moved over the bandwidth of a large device-to-device copy.
    const std::size_t copy_bytes = std::size_t{256} << 20;
    gpu::device_buffer<std::uint8_t> src(copy_bytes), dst(copy_bytes);
    MXKIT_GPU_CHECK(gpu::memset_async(src.data(), 1, copy_bytes, st));
    const double copy_ms = median_ms([&] {
      MXKIT_GPU_CHECK(gpu::memcpy_async(dst.data(), src.data(), copy_bytes, gpu::copy_kind::device_to_device, st));
    }, opt.repeats, st);
    const double bytes_per_us = 2.0 * static_cast<double>(copy_bytes) / (copy_ms * 1e3);
    std::printf("%s: %zu tokens, d_model %zu, heads %zu/%zu of %zu; device copy %.0f GB/s\n", sh.name, M, C, sh.heads, sh.kv_heads,
                sh.head_dim, bytes_per_us * 1e-3);
    auto report = [&](const std::string& what, double us, double bytes, bool record) {
      const double floor_us = bytes / bytes_per_us;
      std::printf("  %-44s %8.1f us   floor %7.1f us   %5.2fx\n", what.c_str(), us, floor_us, us / floor_us);
      if (record) rows.push_back({"layer_kernels", what + " (" + sh.name + ")", us, "us", "copy floor", floor_us});
    };

    {  // RMSNorm backward
      auto dy = upload(hashed_values<bfloat16>(M * C, 1)), x = upload(hashed_values<bfloat16>(M * C, 2)),
           dr = upload(hashed_values<bfloat16>(M * C, 3));
      gpu::device_buffer<bfloat16> dx(M * C);
      std::vector<float> w_host = hashed_values<float>(C, 4), rstd_host = hashed_values<float>(M, 5);
      for (float& v : w_host) v += 1.5f;
      for (float& v : rstd_host) v = 1.0f + 0.25f * v;
      auto w = upload(w_host), rstd = upload(rstd_host), dw = upload(hashed_values<float>(C, 6));
      gpu::device_buffer<float> ws(gpu::rmsnorm_backward_workspace(M, C));
      const double bytes = 4.0 * static_cast<double>(M * C * sizeof(bfloat16));
      const double lib = median_ms([&] {
        gpu::rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), static_cast<const bfloat16*>(dr.data()), dx.data(), dw.data(), M, C,
                              std::span<float>(ws.data(), ws.size()), st);
      }, opt.repeats, st);
      report("rmsnorm backward, dx = dr + grad, and dw", lib * 1e3, bytes, true);
      namespace d = gpu::detail;
      const d::rmsnorm_backward_params<bfloat16, float> p{dy.data(), x.data(), w.data(), rstd.data(), dr.data(), dx.data(), nullptr,
                                                          M, C, (M + d::rmsnorm_group_rows - 1) / d::rmsnorm_group_rows};
      const double group = median_ms([&] { d::launch_rmsnorm_backward<d::rmsnorm_backward_kernel<bfloat16, float>>(p, st); }, opt.repeats, st);
      report("rmsnorm backward, group kernel, no dw", group * 1e3, bytes, false);
    }
    {  // RoPE
      auto qkv = upload(hashed_values<bfloat16>(M * hs.qkv_dim(), 7));
      gpu::device_buffer<gpu::rope_factor> table(gpu::rope_factors_size(sh.seq, sh.head_dim));
      gpu::rope_factors(table.data(), sh.seq, sh.head_dim, sh.theta, st);
      const double bytes = 2.0 * static_cast<double>(M * (sh.heads + sh.kv_heads) * sh.head_dim * sizeof(bfloat16));
      const double tab = median_ms([&] { gpu::rope(qkv.data(), hs, sh.theta, false, table.data(), st); }, opt.repeats, st);
      const double fly = median_ms([&] { gpu::rope(qkv.data(), hs, sh.theta, false, st); }, opt.repeats, st);
      report("rope from the factor table", tab * 1e3, bytes, true);
      report("rope, factors on the fly", fly * 1e3, bytes, true);
    }
    if (sh.embedding) {  // the embedding backward of a 256-row (byte) vocabulary
      constexpr std::size_t vocab = 256;
      std::vector<std::int32_t> ids(M);
      for (std::size_t i = 0; i < M; ++i) ids[i] = static_cast<std::int32_t>((i * 2654435761u >> 7) % vocab);
      auto gids = upload(ids);
      auto dout = upload(hashed_values<bfloat16>(M * C, 8));
      gpu::device_buffer<float> table(vocab * C);
      MXKIT_GPU_CHECK(gpu::memset_async(table.data(), 0, table.bytes(), st));
      gpu::device_buffer<int> error(1);
      MXKIT_GPU_CHECK(gpu::memset_async(error.data(), 0, sizeof(int), st));
      gpu::device_buffer<std::uint32_t> ws(gpu::embedding_backward_workspace(vocab));
      const double bytes = static_cast<double>(M * C * sizeof(bfloat16) + 2 * vocab * C * sizeof(float) + M * sizeof(std::int32_t));
      const double emb = median_ms([&] {
        gpu::embedding_backward(gids.data(), M, dout.data(), table.data(), vocab, C, error.data(), std::span<std::uint32_t>(ws.data(), ws.size()),
                                st);
      }, opt.repeats, st);
      report("embedding backward, 256-row table", emb * 1e3, bytes, true);
    }
  }
  mxkit_bench::finish(opt, props.name, rows);
  return 0;
}
