// Fused MX quantizer on the GPU: effective bandwidth (bytes read + bytes written per second) of
// gpu::quantize on bf16 [8192, 4096] and [16384, 8192], rowwise / columnwise / both copies,
// with and without the 16-point Hadamard rotation, MXFP4 and MXFP8 (E4M3), row-major scales,
// against a device-to-device copy of the input timed in the same run (its bytes: read + write).
// Each case is validated first: the first 256 rows' rowwise lines and every column's first
// eight columnwise blocks equal the host reference byte for byte.
// Inputs rotate among enough buffers that the set is at least 4x the L2, so repeated runs read
// memory, not cache. Each figure is the median of `--repeats` launches timed with events.
// Usage: bench_quantize_gpu [--record] [--results PATH] [--repeats N]
//   MXKIT_BENCH_ONLY=<text>: run only the cases whose name contains <text> (for a profiler run).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include <mxkit/gpu/quantize.hpp>
#include <mxkit/tensor/quantize.hpp>

#include "bench_common.hpp"

namespace {

namespace gpu = mxkit::gpu;
using bf16 = mxkit::bfloat16;

// Deterministic bf16 test data: Philox uniforms shaped into a heavy-ish tailed distribution with
// per-row scales over 2^-8 .. 2^8, generated on the device.
__global__ void fill_input(bf16* x, std::size_t n, std::size_t cols, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t u = mxkit::random_bits(seed, 1, i), v = mxkit::random_bits(seed, 2, i / cols);
    const float a = (static_cast<float>(u >> 8) * (1.0f / 16777216.0f) - 0.5f) * 4.0f;
    const float t = a * a * a + a;                               // tails
    const float row_scale = mxkit::detail::exp2i(static_cast<int>(v % 17) - 8);
    x[i] = bf16::from_float(t * row_scale);
  }
}

struct timing {
  double ms = 0;  // median
  double spread = 0;  // (max - min) / median over the repeats
};

template <class F>
timing time_ms(F&& launch, int repeats, gpu::stream_t s) {
  for (int i = 0; i < 3; ++i) launch(i);
  std::vector<double> t;
  gpu::event start, stop;
  for (int i = 0; i < repeats; ++i) {
    start.record(s);
    launch(i);
    stop.record(s);
    t.push_back(stop.elapsed_ms_since(start));
  }
  std::sort(t.begin(), t.end());
  const double med = t[t.size() / 2];
  return {med, (t.back() - t.front()) / med};
}

std::string first_diff(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  std::size_t n = 0, first = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && n++ == 0) first = i;
  return n ? std::to_string(n) + " bytes differ, first at " + std::to_string(first) : "";
}

struct mode {
  const char* name;
  bool rowwise, columnwise;
};

}  // namespace

int main(int argc, char** argv) {
  const mxkit_bench::options opt = mxkit_bench::parse_args(argc, argv);
  const int repeats = std::max(opt.repeats, 20);
  const char* only = std::getenv("MXKIT_BENCH_ONLY");
  if (gpu::device_count() == 0) {
    std::printf("no GPU: nothing to measure\n");
    return 0;
  }
  const gpu::device_properties prop = gpu::properties();
  const std::string device = prop.name;
  std::printf("device: %s, %d multiprocessors, L2 %zu MB\n", prop.name, prop.multiprocessors, prop.l2_cache_bytes >> 20);
  gpu::stream s;
  std::vector<mxkit_bench::result> rows_out;
  int failures = 0;
  const mode modes[] = {{"rowwise", true, false}, {"columnwise", false, true}, {"rowwise+columnwise", true, true}};

  for (const auto& [M, K] : {std::pair<std::size_t, std::size_t>{8192, 4096}, {16384, 8192}}) {
    const std::size_t n = M * K, in_bytes = n * sizeof(bf16);
    const std::size_t nbuf = std::max<std::size_t>(2, (4 * prop.l2_cache_bytes + in_bytes - 1) / in_bytes);
    std::vector<gpu::device_buffer<bf16>> in;
    for (std::size_t b = 0; b < nbuf; ++b) {
      in.emplace_back(n);
      fill_input<<<4 * prop.multiprocessors, 256, 0, s>>>(in.back().data(), n, K, 11 + b);
      MXKIT_GPU_CHECK_LAUNCH();
    }
    std::vector<gpu::device_buffer<bf16>> copy_dst;
    for (std::size_t b = 0; b < nbuf; ++b) copy_dst.emplace_back(n);
    const timing copy = time_ms(
        [&](int i) {
          MXKIT_GPU_CHECK(gpu::memcpy_async(copy_dst[i % nbuf].data(), in[(i + 1) % nbuf].data(), in_bytes,
                                            gpu::copy_kind::device_to_device, s));
        },
        repeats, s);
    const double copy_gbs = 2.0 * static_cast<double>(in_bytes) / (copy.ms * 1e-3) / 1e9;
    const std::string shape = std::to_string(M) + "x" + std::to_string(K);
    std::printf("\n%s bf16: d2d copy %.1f us = %.0f GB/s (spread %.0f%%), %zu input buffers\n", shape.c_str(), copy.ms * 1e3,
                copy_gbs, copy.spread * 100, nbuf);

    // Host copy of the first 256 rows of input 0, for validation.
    const std::size_t band = 256;
    std::vector<bf16> head(band * K);
    MXKIT_GPU_CHECK(gpu::memcpy_async(head.data(), in[0].data(), band * K * sizeof(bf16), gpu::copy_kind::device_to_host, s));
    s.synchronize();
    const mxkit::matrix_view<const bf16> head_view{head.data(), band, K};

    for (const mxkit::mx_type type : {mxkit::mx_type::mxfp4, mxkit::mx_type::mxfp8_e4m3})
      for (const bool rotate : {false, true})
        for (const mode& md : modes) {
          mxkit::quantize_options o;
          o.hadamard = rotate;
          const mxkit::mx_layout rl{type, mxkit::block_axis::rowwise, M, K}, cl{type, mxkit::block_axis::columnwise, M, K};
          std::vector<gpu::device_buffer<std::uint8_t>> rd, rs, cd, cs;
          for (std::size_t b = 0; b < nbuf; ++b) {
            rd.emplace_back(md.rowwise ? rl.data_bytes() : 0);
            rs.emplace_back(md.rowwise ? rl.scale_count() : 0);
            cd.emplace_back(md.columnwise ? cl.data_bytes() : 0);
            cs.emplace_back(md.columnwise ? cl.scale_count() : 0);
          }
          auto launch = [&](int i) {
            const std::size_t b = static_cast<std::size_t>(i) % nbuf;
            gpu::quantize(mxkit::matrix_view<const bf16>{in[b].data(), M, K}, type, o,
                          {md.rowwise ? rd[b].data() : nullptr, rs[b].data(), mxkit::scale_layout::row_major,
                           md.columnwise ? cd[b].data() : nullptr, cs[b].data(), mxkit::scale_layout::row_major},
                          s);
          };
          const std::string name = std::string(mxkit::name_of(type)) + " " + md.name + (rotate ? " hadamard" : "") + " bf16 " + shape;
          if (only && name.find(only) == std::string::npos) continue;
          // Validate against the host on the first 256 rows.
          launch(0);
          s.synchronize();
          std::string bad;
          if (md.rowwise) {
            const mxkit::mx_tensor want = mxkit::quantize_rowwise(head_view, type, o);
            std::vector<std::uint8_t> got = rd[0].to_host(s), got_s = rs[0].to_host(s);
            got.resize(want.data().size());
            got_s.resize(want.scales().size());
            bad += first_diff(got, want.data()) + first_diff(got_s, want.scales());
          }
          if (md.columnwise) {
            const mxkit::mx_tensor want = mxkit::quantize_columnwise(head_view, type, o);  // 8 blocks per column
            const std::vector<std::uint8_t> got = cd[0].to_host(s), got_s = cs[0].to_host(s);
            const std::size_t wl = want.layout().line_bytes(), gl = cl.line_bytes(), wb = want.layout().blocks_per_line();
            std::vector<std::uint8_t> g(want.data().size()), gs(want.scales().size());
            for (std::size_t c = 0; c < K; ++c) {
              std::copy_n(got.begin() + static_cast<std::ptrdiff_t>(c * gl), wl, g.begin() + static_cast<std::ptrdiff_t>(c * wl));
              std::copy_n(got_s.begin() + static_cast<std::ptrdiff_t>(c * cl.blocks_per_line()), wb,
                          gs.begin() + static_cast<std::ptrdiff_t>(c * wb));
            }
            bad += first_diff(g, want.data()) + first_diff(gs, want.scales());
          }
          if (!bad.empty()) {
            std::fprintf(stderr, "FAILED validation: %s: %s\n", name.c_str(), bad.c_str());
            ++failures;
            continue;
          }
          const timing t = time_ms(launch, repeats, s);
          const double bytes = static_cast<double>(in_bytes) + (md.rowwise ? static_cast<double>(rl.data_bytes() + rl.scale_count()) : 0.0) +
                               (md.columnwise ? static_cast<double>(cl.data_bytes() + cl.scale_count()) : 0.0);
          const double gbs = bytes / (t.ms * 1e-3) / 1e9;
          std::printf("  %-52s %8.1f us %7.0f GB/s %5.1f%% of copy (spread %.0f%%)\n", name.c_str(), t.ms * 1e3, gbs,
                      100.0 * gbs / copy_gbs, t.spread * 100);
          rows_out.push_back({"quantize_gpu", name, gbs, "GB/s", "d2d copy", copy_gbs});
          if (md.rowwise && md.columnwise) {  // kernel variants (not recorded): CTAs per SM the registers are capped for
            mxkit::visit_mx_type(type, [&](auto fmt) {
              using Fmt = decltype(fmt);
              auto variant = [&](auto min_blocks) {
                constexpr int mb = decltype(min_blocks)::value;
                const timing tv = time_ms(
                    [&](int i) {
                      const std::size_t b = static_cast<std::size_t>(i) % nbuf;
                      gpu::detail::quantize_params<bf16> p;
                      gpu::detail::make_quantize_params<bf16>({in[b].data(), M, K}, o,
                                                              {rd[b].data(), rs[b].data(), mxkit::scale_layout::row_major,
                                                               cd[b].data(), cs[b].data(), mxkit::scale_layout::row_major},
                                                              s, p);
                      gpu::detail::launch_quantize<Fmt, bf16, mb>(p, s);
                    },
                    repeats, s);
                std::printf("    variant: register cap for %d CTAs/SM %8.1f us %5.1f%% of copy\n", mb, tv.ms * 1e3,
                            100.0 * bytes / (tv.ms * 1e-3) / 1e9 / copy_gbs);
              };
              variant(std::integral_constant<int, 2>{});
              variant(std::integral_constant<int, 3>{});
              variant(std::integral_constant<int, 4>{});
            });
          }
        }
  }
  std::printf("\n");
  mxkit_bench::finish(opt, device, rows_out);
  return failures ? 1 : 0;
}
