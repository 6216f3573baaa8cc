// SPDX-License-Identifier: Apache-2.0
// Fused MX quantizer on the GPU: effective bandwidth (bytes read + bytes written per second) of
// gpu::quantize on [8192, 4096] and [16384, 8192], against a device-to-device copy of the same
// input timed in the same run (its bytes: read + write).
//   bf16 input: rowwise / columnwise / both copies, with and without the 16-point Hadamard
//   rotation, MXFP4 and MXFP8 (E4M3), row-major scales (case "mxfp4 rowwise+columnwise hadamard
//   bf16 8192x4096"); the register-cap variants of the two-copy cases (compiled with
//   -DMXKIT_BENCH_QUANTIZE_VARIANTS=1) are printed, not recorded.
//   fp16 and fp32 input: rowwise, and rowwise+columnwise with Hadamard, MXFP4 and MXFP8 (cases
//   "... fp16 ..." / "... fp32 ..."); bytes read = rows * cols * sizeof(input).
//   The per-tensor FP8 cast (gpu::cast_fp8) of bf16 and fp32 input: E4M3 codes, their transpose
//   and the amax (case "fp8 e4m3 rowwise+transposed+amax bf16 8192x4096").
//   NVFP4 (gpu::quantize_nvfp4, issue #46 section 3) of bf16 8192x4096, both copies, row-major
//   E4M3 scales, each copy's tensor scale from its amax (the whole call: amax pass, tensor
//   scales, quantize pass): 1 x 16 blocks with the 16-point Hadamard rotation and a sign mask
//   ("nvfp4 rowwise+columnwise hadamard bf16 8192x4096"), without it ("nvfp4 rowwise+columnwise
//   bf16 8192x4096"), and 16 x 16 blocks for weights ("nvfp4_2d rowwise+columnwise bf16
//   8192x4096"); and the first two with the tensor scale given ("... given-scale ..."), the
//   quantize pass alone, as a caller whose producer supplies the amax runs it. Bytes: the input
//   once + both copies' codes and scales (the amax pass's second read of the input, the tensor
//   scales and the amax are not counted), as the row's peer_settings say. Validated in full
//   first (every code, scale and tensor scale of both copies equal ref::quantize's).
//   MXKIT_BENCH_ONLY=nvfp4 runs only these.
//   MXFP8 (E4M3) bf16 input with both copies held as bf16 values (quantize_outputs::
//   values_as_bf16; case "mxfp8_e4m3 rowwise+columnwise bf16-values bf16 <shape>") and with the
//   rowwise copy alone ("mxfp8_e4m3 rowwise bf16-values ..."), and their time against the route
//   they replace, the copies as codes then expanded to bf16 ("... vs codes+expansions",
//   microseconds).
// Each case is validated first: the first 256 rows' rowwise lines and every column's first
// eight columnwise blocks equal the host reference byte for byte.
// Inputs rotate among enough buffers that the set is at least 4x the L2, so repeated runs read
// memory, not cache. Each figure is the median over `--repeats` (at least 20) batches of 8
// back-to-back launches timed with events, per launch.
// Usage: bench_quantize_gpu [--record] [--results PATH] [--repeats N]
//   MXKIT_BENCH_ONLY=<text>: run only the cases whose name contains <text> (for a profiler run;
//   MXKIT_BENCH_ONLY=nvfp4: the NVFP4 cases only).
// Without a GPU it says so and exits 77 (the GPU programs' "skipped"; MXKIT_SKIP_EXIT_CODE
// overrides it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/block/bf16_values.hpp>
#include <mxkit/gpu/fp8_cast.hpp>
#include <mxkit/gpu/gemm/expand.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/quantize_nvfp4.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>

#include "bench_common.hpp"

namespace {

namespace gpu = mxkit::gpu;
using bf16 = mxkit::bfloat16;
using fp16 = mxkit::float16;

// Name of an input type in case names.
template <class T>
constexpr const char* input_name() {
  if constexpr (std::is_same_v<T, bf16>) return "bf16";
  else if constexpr (std::is_same_v<T, fp16>) return "fp16";
  else return "fp32";
}

// Deterministic test data: Philox uniforms shaped into a heavy-ish tailed distribution with
// per-row scales over 2^-8 .. 2^8 (|x| < 2^12: finite in fp16 too), generated on the device.
template <class T>
__global__ void fill_input(T* x, std::size_t n, std::size_t cols, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t u = mxkit::random_bits(seed, 1, i), v = mxkit::random_bits(seed, 2, i / cols);
    const float a = (static_cast<float>(u >> 8) * (1.0f / 16777216.0f) - 0.5f) * 4.0f;
    const float t = a * a * a + a;                               // tails
    const float row_scale = mxkit::detail::exp2i(static_cast<int>(v % 17) - 8);
    if constexpr (std::is_same_v<T, float>) x[i] = t * row_scale;
    else x[i] = T::from_float(t * row_scale);
  }
}

// The peer of every case: a device-to-device copy of the input's bytes, timed as the cases are.
constexpr const char* copy_settings = "memcpy_async device to device of the input, batches of 8 launches, rotating buffers";

struct timing {
  double ms = 0;  // median
  double spread = 0;  // (max - min) / median over the repeats
};

// Each repeat times `batch` launches back to back between two events (launch i rotates the
// buffers), so the host's per-call work overlaps the GPU's and the figure is GPU time per launch.
template <class F>
timing time_ms(F&& launch, int repeats, gpu::stream_t s) {
  constexpr int batch = 8;
  for (int i = 0; i < 3; ++i) launch(i);
  std::vector<double> t;
  gpu::event start, stop;
  for (int i = 0; i < repeats; ++i) {
    start.record(s);
    for (int b = 0; b < batch; ++b) launch(i * batch + b);
    stop.record(s);
    t.push_back(stop.elapsed_ms_since(start) / batch);
  }
  std::sort(t.begin(), t.end());
  const double med = t[t.size() / 2];
  return {med, (t.back() - t.front()) / med};
}

std::string first_diff(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  std::size_t n = 0, first = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && n++ == 0) first = i;
  return n ? std::to_string(n) + " bytes differ, first at " + std::to_string(first) : "";
}

struct mode {
  const char* name;
  bool rowwise, columnwise, hadamard;
};

struct run_context {
  const gpu::device_properties& prop;
  gpu::stream& s;
  int repeats;
  const char* only;
  std::vector<mxkit_bench::result>& rows_out;
  int failures = 0;
};

// A device-to-device copy of each input buffer into as many others, timed like a case: the
// peer every case of these inputs is compared with (its bytes: read + write).
template <class T>
timing copy_time(run_context& ctx, const std::vector<gpu::device_buffer<T>>& in) {
  const std::size_t nbuf = in.size(), n = in.front().size();
  std::vector<gpu::device_buffer<T>> dst;
  for (std::size_t b = 0; b < nbuf; ++b) dst.emplace_back(n);
  return time_ms(
      [&](int i) {
        MXKIT_GPU_CHECK(gpu::memcpy_async(dst[i % nbuf].data(), in[(i + 1) % nbuf].data(), n * sizeof(T), gpu::copy_kind::device_to_device,
                                          ctx.s));
      },
      ctx.repeats, ctx.s);
}

// MXFP8 (E4M3) copies held as bf16 values (quantize_outputs::values_as_bf16), the operands
// Hopper's bf16 GEMM route reads, both copies (the tiled kernel) or the rowwise one alone (the
// row-streaming kernel): case "mxfp8_e4m3 rowwise+columnwise bf16-values bf16 <shape>" (or
// "rowwise bf16-values") against the copy (bytes: the input once + the copies' bf16 values and
// scales), and case "... vs codes+expansions" in microseconds against what it replaces in the
// same run: the copies as codes, then each expanded to bf16 by gpu::expand::to_bf16 (the GEMM's
// pass before the bf16 product). Validated first: the first 256 rows' rowwise values and every
// column's first eight columnwise blocks equal ref::quantize's codes times their scales
// (bf16_values::element_bits).
std::string values_case(bool both) { return both ? "mxfp8_e4m3 rowwise+columnwise bf16-values" : "mxfp8_e4m3 rowwise bf16-values"; }
void run_values(run_context& ctx, const std::vector<gpu::device_buffer<bf16>>& in, std::size_t M, std::size_t K, double copy_gbs,
                mxkit::matrix_view<const bf16> head_view, const std::string& suffix, bool both) {
  const std::string name = values_case(both) + suffix;
  if (ctx.only && name.find(ctx.only) == std::string::npos) return;
  gpu::stream& s = ctx.s;
  const mxkit::mx_type type = mxkit::mx_type::mxfp8_e4m3;
  const mxkit::block_layout rl{mxkit::format_of(type), mxkit::block_axis::rowwise, M, K}, cl{mxkit::format_of(type), mxkit::block_axis::columnwise, M, K};
  const std::size_t nbuf = in.size();
  std::vector<gpu::device_buffer<std::uint8_t>> rv, rs, cv, cs, rc, cc;
  std::vector<gpu::device_buffer<int>> flag;
  for (std::size_t b = 0; b < nbuf; ++b) {
    rv.emplace_back(gpu::values_bytes(rl));
    rs.emplace_back(rl.scale_count());
    cv.emplace_back(gpu::values_bytes(cl));
    cs.emplace_back(cl.scale_count());
    flag.emplace_back(1);
  }
  for (std::size_t b = 0; b < 2; ++b) {  // the codes of the route replaced (their expansions write into rv, cv)
    rc.emplace_back(rl.data_bytes());
    cc.emplace_back(cl.data_bytes());
  }
  auto launch = [&](int i) {
    const std::size_t b = static_cast<std::size_t>(i) % nbuf;
    gpu::quantize_outputs o{rv[b].data(), rs[b].data(), mxkit::scale_layout::row_major, both ? cv[b].data() : nullptr,
                            both ? cs[b].data() : nullptr, mxkit::scale_layout::row_major};
    o.values_as_bf16 = true;
    o.beyond_exact_range = flag[b].data();
    gpu::quantize(mxkit::matrix_view<const bf16>{in[b].data(), M, K}, type, {}, o, s);
  };
  launch(0);
  s.synchronize();
  std::size_t wrong = 0;
  auto check = [&](const mxkit::mx_tensor& want, const std::vector<std::uint8_t>& values, const std::vector<std::uint8_t>& scales,
                   const mxkit::block_layout& l) {
    const mxkit::block_layout& wl = want.layout();
    for (std::size_t line = 0; line < wl.lines(); ++line)
      for (std::size_t i = 0; i < wl.padded_length(); ++i) {
        const std::uint8_t sc = scales[line * l.blocks_per_line() + i / 32];
        if (sc != want.scales()[line * wl.blocks_per_line() + i / 32]) ++wrong;
        const std::uint32_t bits = mxkit::bf16_values::element_bits<true>(want.data()[line * wl.line_bytes() + i], mxkit::e8m0::from_bits(sc).to_float());
        const std::size_t at = 2 * (line * l.padded_length() + i);
        if ((static_cast<std::uint32_t>(values[at]) | static_cast<std::uint32_t>(values[at + 1]) << 8) != bits) ++wrong;
      }
  };
  check(mxkit::ref::quantize_rowwise(head_view, type, {}), rv[0].to_host(s), rs[0].to_host(s), rl);
  if (both) check(mxkit::ref::quantize_columnwise(head_view, type, {}), cv[0].to_host(s), cs[0].to_host(s), cl);  // 8 blocks per column
  if (wrong != 0) {
    std::fprintf(stderr, "FAILED validation: %s: %zu values or scales differ\n", name.c_str(), wrong);
    ++ctx.failures;
    return;
  }
  const timing t = time_ms(launch, ctx.repeats, s);
  const double bytes = static_cast<double>(M * K * sizeof(bf16) + gpu::values_bytes(rl) + rl.scale_count() +
                                           (both ? gpu::values_bytes(cl) + cl.scale_count() : 0));
  const double gbs = bytes / (t.ms * 1e-3) / 1e9;
  std::printf("  %-52s %8.1f us %7.0f GB/s %5.1f%% of copy (spread %.0f%%)\n", name.c_str(), t.ms * 1e3, gbs, 100.0 * gbs / copy_gbs,
              t.spread * 100);
  ctx.rows_out.push_back({"quantize_gpu", name, gbs, "GB/s", "d2d copy", copy_gbs, copy_settings});
  if (!both) {  // printed beside it (not recorded): the row-streaming kernel unstaged
    const timing u = time_ms(
        [&](int i) {
          const std::size_t b = static_cast<std::size_t>(i) % nbuf;
          gpu::quantize_outputs o{rv[b].data(), rs[b].data(), mxkit::scale_layout::row_major};
          o.values_as_bf16 = true;
          o.beyond_exact_range = flag[b].data();
          gpu::detail::quantize_params<bf16> p;
          gpu::detail::make_quantize_params<bf16>({in[b].data(), M, K}, {}, o, s, p);
          gpu::detail::launch_quantize_rowwise<mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>, bf16, true>(p, s);
        },
        ctx.repeats, s);
    std::printf("    %-48s %8.1f us %5.1f%% of copy\n", "row-streaming kernel, unstaged", u.ms * 1e3,
                100.0 * bytes / (u.ms * 1e-3) / 1e9 / copy_gbs);
  }
  // The route it replaces: codes, then their expansions (their flag in flag[b], their bf16 into rv, cv).
  const timing r = time_ms(
      [&](int i) {
        const std::size_t b = static_cast<std::size_t>(i) % nbuf, c = static_cast<std::size_t>(i) % 2;
        gpu::quantize(mxkit::matrix_view<const bf16>{in[b].data(), M, K}, type, {},
                      {rc[c].data(), rs[b].data(), mxkit::scale_layout::row_major, both ? cc[c].data() : nullptr,
                       both ? cs[b].data() : nullptr, mxkit::scale_layout::row_major},
                      s);
        MXKIT_GPU_CHECK(gpu::memset_async(flag[b].data(), 0, sizeof(int), s));
        gpu::expand::to_bf16::launch(gpu::make_operand(mxkit::mx_const_view{rl, {}, rc[c].data(), rs[b].data()}),
                                     reinterpret_cast<std::uint16_t*>(rv[b].data()), flag[b].data(), s);
        if (both)
          gpu::expand::to_bf16::launch(gpu::make_operand(mxkit::mx_const_view{cl, {}, cc[c].data(), cs[b].data()}),
                                       reinterpret_cast<std::uint16_t*>(cv[b].data()), flag[b].data(), s);
      },
      ctx.repeats, s);
  std::printf("  %-52s %8.1f us, codes + expansions %8.1f us: %.2fx the time\n", (name + " vs codes+expansions").c_str(), t.ms * 1e3,
              r.ms * 1e3, t.ms / r.ms);
  ctx.rows_out.push_back({"quantize_gpu", name + " vs codes+expansions", t.ms * 1e3, "us",
                          both ? "codes + to_bf16 of both copies" : "codes + to_bf16 of the rowwise copy", r.ms * 1e3,
                          std::string("gpu::quantize of ") + (both ? "both MXFP8 copies" : "the rowwise MXFP8 copy") +
                              " as codes, then gpu::expand::to_bf16 of each (the sm90 GEMM's pass before its bf16 product), "
                              "rotating buffers, batches of 8; a ratio below 100% is faster"});
}

// Every case of one input type T at one shape [M, K]: the copy, then each format x mode.
// Variants: also time the two-copy cases with other register caps (bf16 only: each is a kernel,
// 18 in all, two thirds of this file's compile time: built only with -DMXKIT_BENCH_QUANTIZE_VARIANTS).
#ifndef MXKIT_BENCH_QUANTIZE_VARIANTS
#define MXKIT_BENCH_QUANTIZE_VARIANTS 0
#endif
template <class T, bool Variants>
void run_shape(run_context& ctx, std::size_t M, std::size_t K, const std::vector<mode>& modes) {
  gpu::stream& s = ctx.s;
  const int repeats = ctx.repeats;
  const std::string shape = std::to_string(M) + "x" + std::to_string(K);
  const std::string suffix = std::string(" ") + input_name<T>() + " " + shape;
  if (ctx.only) {  // nothing to do (not even the copy) when no case of this type and shape is asked for
    bool any = false;
    for (const mxkit::mx_type type : {mxkit::mx_type::mxfp4, mxkit::mx_type::mxfp8_e4m3})
      for (const mode& md : modes)
        any = any || (std::string(mxkit::name_of(type)) + " " + md.name + suffix).find(ctx.only) != std::string::npos;
    for (const bool both : {true, false}) any = any || (std::is_same_v<T, bf16> && (values_case(both) + suffix).find(ctx.only) != std::string::npos);
    if (!any) return;
  }
  const std::size_t n = M * K, in_bytes = n * sizeof(T);
  const std::size_t nbuf = std::max<std::size_t>(2, (4 * ctx.prop.l2_cache_bytes + in_bytes - 1) / in_bytes);
  std::vector<gpu::device_buffer<T>> in;
  for (std::size_t b = 0; b < nbuf; ++b) {
    in.emplace_back(n);
    fill_input<T><<<4 * ctx.prop.multiprocessors, 256, 0, s>>>(in.back().data(), n, K, 11 + b);
    MXKIT_GPU_CHECK_LAUNCH();
  }
  const timing copy = copy_time(ctx, in);
  const double copy_gbs = 2.0 * static_cast<double>(in_bytes) / (copy.ms * 1e-3) / 1e9;
  std::printf("\n%s %s: d2d copy %.1f us = %.0f GB/s (spread %.0f%%), %zu input buffers\n", shape.c_str(), input_name<T>(),
              copy.ms * 1e3, copy_gbs, copy.spread * 100, nbuf);

  // Host copy of the first 256 rows of input 0, for validation.
  const std::size_t band = 256;
  std::vector<T> head(band * K);
  MXKIT_GPU_CHECK(gpu::memcpy_async(head.data(), in[0].data(), band * K * sizeof(T), gpu::copy_kind::device_to_host, s));
  s.synchronize();
  const mxkit::matrix_view<const T> head_view{head.data(), band, K};

  for (const mxkit::mx_type type : {mxkit::mx_type::mxfp4, mxkit::mx_type::mxfp8_e4m3})
    for (const mode& md : modes) {
      const std::string name = std::string(mxkit::name_of(type)) + " " + md.name + suffix;
      if (ctx.only && name.find(ctx.only) == std::string::npos) continue;
      mxkit::quantize_options o;
      o.hadamard = md.hadamard;
      const mxkit::block_layout rl{mxkit::format_of(type), mxkit::block_axis::rowwise, M, K}, cl{mxkit::format_of(type), mxkit::block_axis::columnwise, M, K};
      std::vector<gpu::device_buffer<std::uint8_t>> rd, rs, cd, cs;
      for (std::size_t b = 0; b < nbuf; ++b) {
        rd.emplace_back(md.rowwise ? rl.data_bytes() : 0);
        rs.emplace_back(md.rowwise ? rl.scale_count() : 0);
        cd.emplace_back(md.columnwise ? cl.data_bytes() : 0);
        cs.emplace_back(md.columnwise ? cl.scale_count() : 0);
      }
      auto launch = [&](int i) {
        const std::size_t b = static_cast<std::size_t>(i) % nbuf;
        gpu::quantize(mxkit::matrix_view<const T>{in[b].data(), M, K}, type, o,
                      {md.rowwise ? rd[b].data() : nullptr, rs[b].data(), mxkit::scale_layout::row_major,
                       md.columnwise ? cd[b].data() : nullptr, cs[b].data(), mxkit::scale_layout::row_major},
                      s);
      };
      // Validate against the host on the first 256 rows.
      launch(0);
      s.synchronize();
      std::string bad;
      if (md.rowwise) {
        const mxkit::mx_tensor want = mxkit::ref::quantize_rowwise(head_view, type, o);
        std::vector<std::uint8_t> got = rd[0].to_host(s), got_s = rs[0].to_host(s);
        got.resize(want.data().size());
        got_s.resize(want.scales().size());
        bad += first_diff(got, want.data()) + first_diff(got_s, want.scales());
      }
      if (md.columnwise) {
        const mxkit::mx_tensor want = mxkit::ref::quantize_columnwise(head_view, type, o);  // 8 blocks per column
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
        ++ctx.failures;
        continue;
      }
      const timing t = time_ms(launch, repeats, s);
      const double bytes = static_cast<double>(in_bytes) + (md.rowwise ? static_cast<double>(rl.data_bytes() + rl.scale_count()) : 0.0) +
                           (md.columnwise ? static_cast<double>(cl.data_bytes() + cl.scale_count()) : 0.0);
      const double gbs = bytes / (t.ms * 1e-3) / 1e9;
      std::printf("  %-52s %8.1f us %7.0f GB/s %5.1f%% of copy (spread %.0f%%)\n", name.c_str(), t.ms * 1e3, gbs,
                  100.0 * gbs / copy_gbs, t.spread * 100);
      ctx.rows_out.push_back({"quantize_gpu", name, gbs, "GB/s", "d2d copy", copy_gbs, copy_settings});
      if constexpr (std::is_same_v<T, bf16>) {
        if (md.rowwise && !md.columnwise) {
          // The rowwise copy alone runs the row-streaming kernel; printed beside it (not
          // recorded): the tiled kernel on the same call, and the row-streaming kernel staged
          // through shared memory (the codes' kernel is not).
          auto compare = [&](auto fmt) {  // the two formats this bench runs, only their kernels compiled
            using Fmt = decltype(fmt);
            auto other = [&](const char* what, auto launch_other) {
              const timing tv = time_ms(
                  [&](int i) {
                    const std::size_t b = static_cast<std::size_t>(i) % nbuf;
                    gpu::detail::quantize_params<T> p;
                    gpu::detail::make_quantize_params<T>({in[b].data(), M, K}, o,
                                                         {rd[b].data(), rs[b].data(), mxkit::scale_layout::row_major},
                                                         s, p);
                    launch_other(p);
                  },
                  repeats, s);
              std::printf("    %-48s %8.1f us %5.1f%% of copy\n", what, tv.ms * 1e3, 100.0 * bytes / (tv.ms * 1e-3) / 1e9 / copy_gbs);
            };
            other("tiled kernel", [&](const gpu::detail::quantize_params<T>& p) { gpu::detail::launch_quantize_tiled<Fmt, T>(p, s); });
            other("row-streaming kernel, staged",
                  [&](const gpu::detail::quantize_params<T>& p) { gpu::detail::launch_quantize_rowwise<Fmt, T, true>(p, s); });
          };
          if (type == mxkit::mx_type::mxfp4) compare(mxkit::mx_format<mxkit::mx_type::mxfp4>{});
          else compare(mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>{});
        }
      }
      if constexpr (Variants) {
        if (!(md.rowwise && md.columnwise)) continue;
        // Kernel variants (not recorded): CTAs per SM the registers are capped for.
        mxkit::visit_mx_type(type, [&](auto fmt) {
          using Fmt = decltype(fmt);
          auto variant = [&](auto min_blocks) {
            constexpr int mb = decltype(min_blocks)::value;
            const timing tv = time_ms(
                [&](int i) {
                  const std::size_t b = static_cast<std::size_t>(i) % nbuf;
                  gpu::detail::quantize_params<T> p;
                  gpu::detail::make_quantize_params<T>({in[b].data(), M, K}, o,
                                                       {rd[b].data(), rs[b].data(), mxkit::scale_layout::row_major,
                                                        cd[b].data(), cs[b].data(), mxkit::scale_layout::row_major},
                                                       s, p);
                  gpu::detail::launch_quantize_tiled<Fmt, T, mb>(p, s);
                },
                repeats, s);
            std::printf("    variant: register cap for %d CTAs/SM %8.1f us %5.1f%% of copy\n", mb, tv.ms * 1e3,
                        100.0 * bytes / (tv.ms * 1e-3) / 1e9 / copy_gbs);
          };
          variant(std::integral_constant<int, 4>{});
          variant(std::integral_constant<int, 6>{});
          variant(std::integral_constant<int, 8>{});
        });
      }
    }
  if constexpr (std::is_same_v<T, bf16>)
    for (const bool both : {true, false}) run_values(ctx, in, M, K, copy_gbs, head_view, suffix, both);
}

// The per-tensor FP8 cast of the delayed-scaling recipe (gpu::cast_fp8: E4M3 codes, their
// transpose and the amax from one read), as the recipe's layer casts its bf16 activations and
// fp32 weights. Validated first: every code of both outputs and the amax equal quantize_fp8's.
// Bytes: input + codes + transposed codes.
template <class T>
void run_fp8_shape(run_context& ctx, std::size_t M, std::size_t K) {
  const std::string name = std::string("fp8 e4m3 rowwise+transposed+amax ") + input_name<T>() + " " + std::to_string(M) + "x" + std::to_string(K);
  if (ctx.only && name.find(ctx.only) == std::string::npos) return;
  gpu::stream& s = ctx.s;
  const std::size_t n = M * K, in_bytes = n * sizeof(T);
  const std::size_t nbuf = std::max<std::size_t>(2, (4 * ctx.prop.l2_cache_bytes + in_bytes - 1) / in_bytes);
  std::vector<gpu::device_buffer<T>> in;
  std::vector<gpu::device_buffer<std::uint8_t>> codes, transposed;
  std::vector<gpu::device_buffer<float>> amax;
  for (std::size_t b = 0; b < nbuf; ++b) {
    in.emplace_back(n);
    codes.emplace_back(n);
    transposed.emplace_back(n);
    amax.emplace_back(1);
    fill_input<T><<<4 * ctx.prop.multiprocessors, 256, 0, s>>>(in.back().data(), n, K, 31 + b);
    MXKIT_GPU_CHECK_LAUNCH();
  }
  const timing copy = copy_time(ctx, in);
  const double copy_gbs = 2.0 * static_cast<double>(in_bytes) / (copy.ms * 1e-3) / 1e9;
  const float scale = 16.0f;  // |x| < 2^12 times 2^4: some codes saturate at 448, as an overflowing step's do
  auto launch = [&](int i) {
    const std::size_t b = static_cast<std::size_t>(i) % nbuf;
    gpu::cast_fp8(mxkit::matrix_view<const T>{in[b].data(), M, K}, mxkit::fp8_type::e4m3, scale,
                  {codes[b].data(), transposed[b].data(), amax[b].data()}, mxkit::overflow::saturate, s);
  };
  launch(0);
  s.synchronize();
  const std::vector<T> host = in[0].to_host(s);
  const mxkit::fp8_tensor want = mxkit::quantize_fp8(mxkit::matrix_view<const T>{host.data(), M, K}, mxkit::fp8_type::e4m3, scale);
  const mxkit::fp8_tensor want_t = mxkit::transpose(want);
  std::string bad = first_diff(codes[0].to_host(s), want.data) + first_diff(transposed[0].to_host(s), want_t.data);
  if (amax[0].to_host(s)[0] != want.amax) bad += " amax differs";
  if (!bad.empty()) {
    std::fprintf(stderr, "FAILED validation: %s: %s\n", name.c_str(), bad.c_str());
    ++ctx.failures;
    return;
  }
  const timing t = time_ms(launch, ctx.repeats, s);
  const double gbs = (static_cast<double>(in_bytes) + 2.0 * static_cast<double>(n)) / (t.ms * 1e-3) / 1e9;
  std::printf("\n%s: d2d copy %.0f GB/s\n  %-52s %8.1f us %7.0f GB/s %5.1f%% of copy (spread %.0f%%)\n", input_name<T>(), copy_gbs,
              name.c_str(), t.ms * 1e3, gbs, 100.0 * gbs / copy_gbs, t.spread * 100);
  ctx.rows_out.push_back({"quantize_gpu", name, gbs, "GB/s", "d2d copy", copy_gbs, copy_settings});
}

// NVFP4 (gpu::quantize_nvfp4) of T [M, K]: both copies, tensor scales from their amaxes,
// row-major scales, each variant validated in full against ref::quantize before it is timed.
template <class T>
void run_nvfp4_shape(run_context& ctx, std::size_t M, std::size_t K) {
  struct variant {
    const char* name;
    mxkit::block_format format;
    bool hadamard;
    bool given;  // the tensor scale passed in (one pass over the input), not found from the amax
  };
  const variant variants[] = {{"nvfp4 rowwise+columnwise hadamard", mxkit::formats::nvfp4, true, false},
                              {"nvfp4 rowwise+columnwise", mxkit::formats::nvfp4, false, false},
                              {"nvfp4_2d rowwise+columnwise", mxkit::formats::nvfp4_2d, false, false},
                              {"nvfp4 rowwise+columnwise hadamard given-scale", mxkit::formats::nvfp4, true, true},
                              {"nvfp4 rowwise+columnwise given-scale", mxkit::formats::nvfp4, false, true}};
  const std::string suffix = std::string(" ") + input_name<T>() + " " + std::to_string(M) + "x" + std::to_string(K);
  auto wanted = [&](const variant& v) { return !ctx.only || (v.name + suffix).find(ctx.only) != std::string::npos; };
  if (std::none_of(std::begin(variants), std::end(variants), wanted)) return;
  gpu::stream& s = ctx.s;
  const std::size_t n = M * K, in_bytes = n * sizeof(T);
  const std::size_t nbuf = std::max<std::size_t>(2, (4 * ctx.prop.l2_cache_bytes + in_bytes - 1) / in_bytes);
  std::vector<gpu::device_buffer<T>> in;
  for (std::size_t b = 0; b < nbuf; ++b) {
    in.emplace_back(n);
    fill_input<T><<<4 * ctx.prop.multiprocessors, 256, 0, s>>>(in.back().data(), n, K, 41 + b);
    MXKIT_GPU_CHECK_LAUNCH();
  }
  const timing copy = copy_time(ctx, in);
  const double copy_gbs = 2.0 * static_cast<double>(in_bytes) / (copy.ms * 1e-3) / 1e9;
  std::printf("\nnvfp4 %s %zux%zu: d2d copy %.1f us = %.0f GB/s (spread %.0f%%), %zu input buffers\n", input_name<T>(), M, K,
              copy.ms * 1e3, copy_gbs, copy.spread * 100, nbuf);
  const std::vector<T> host = in[0].to_host(s);
  const mxkit::matrix_view<const T> host_view{host.data(), M, K};
  // The given tensor scale: the input's own (the rotated copies' amax may differ; any valid scale
  // defines the bytes, and the validation passes the same one to ref::quantize).
  float input_amax = 0.0f;
  for (const T& x : host) input_amax = std::max(input_amax, std::fabs(mxkit::load_float(x)));
  const float given_scale = mxkit::nvfp4_tensor_scale(input_amax);
  const std::string settings = std::string(copy_settings) +
                               "; case bytes = input read once + both copies' FP4 codes and E4M3 scales written (the amax pass's "
                               "second read, the tensor scales and the amax not counted); the whole gpu::quantize_nvfp4 call timed; "
                               "given-scale: the input's tensor scale passed in, so no amax pass";
  for (const variant& v : variants) {
    if (!wanted(v)) continue;
    const std::string name = v.name + suffix;
    mxkit::nvfp4_options o;
    o.hadamard = v.hadamard;
    o.hadamard_signs = v.hadamard ? mxkit::hadamard_sign_mask(5) : 0u;
    const mxkit::block_layout rl{v.format, mxkit::block_axis::rowwise, M, K}, cl{v.format, mxkit::block_axis::columnwise, M, K};
    std::vector<gpu::device_buffer<std::uint8_t>> rd, rs, cd, cs;
    std::vector<gpu::device_buffer<float>> scalars;  // rowwise t, columnwise t
    for (std::size_t b = 0; b < nbuf; ++b) {
      rd.emplace_back(rl.data_bytes());
      rs.emplace_back(rl.scale_count());
      cd.emplace_back(cl.data_bytes());
      cs.emplace_back(cl.scale_count());
      scalars.emplace_back(2);
    }
    auto launch = [&](int i) {
      const std::size_t b = static_cast<std::size_t>(i) % nbuf;
      gpu::quantize_nvfp4(mxkit::matrix_view<const T>{in[b].data(), M, K}, v.format, o,
                          {rd[b].data(), rs[b].data(), mxkit::scale_layout::row_major, scalars[b].data(), cd[b].data(), cs[b].data(),
                           mxkit::scale_layout::row_major, scalars[b].data() + 1, nullptr},
                          v.given ? std::optional<float>(given_scale) : std::nullopt, s);
    };
    launch(0);
    s.synchronize();
    std::string bad;
    const std::vector<float> t = scalars[0].to_host(s);
    for (const mxkit::block_axis axis : {mxkit::block_axis::rowwise, mxkit::block_axis::columnwise}) {
      const bool row = axis == mxkit::block_axis::rowwise;
      const mxkit::nvfp4_tensor want = v.given ? mxkit::ref::quantize(host_view, v.format, axis, o, given_scale)
                                               : mxkit::ref::quantize(host_view, v.format, axis, o);
      bad += first_diff((row ? rd : cd)[0].to_host(s), want.data()) + first_diff((row ? rs : cs)[0].to_host(s), want.scales());
      if (mxkit::bit_cast<std::uint32_t>(t[row ? 0 : 1]) != mxkit::bit_cast<std::uint32_t>(want.tensor_scale()))
        bad += std::string(" ") + (row ? "rowwise" : "columnwise") + " tensor scale differs";
    }
    if (!bad.empty()) {
      std::fprintf(stderr, "FAILED validation: %s: %s\n", name.c_str(), bad.c_str());
      ++ctx.failures;
      continue;
    }
    const timing tm = time_ms(launch, ctx.repeats, s);
    const double bytes = static_cast<double>(in_bytes + rl.data_bytes() + rl.scale_count() + cl.data_bytes() + cl.scale_count());
    const double gbs = bytes / (tm.ms * 1e-3) / 1e9;
    std::printf("  %-52s %8.1f us %7.0f GB/s %5.1f%% of copy (spread %.0f%%)\n", name.c_str(), tm.ms * 1e3, gbs, 100.0 * gbs / copy_gbs,
                tm.spread * 100);
    ctx.rows_out.push_back({"quantize_gpu", name, gbs, "GB/s", "d2d copy", copy_gbs, settings, "nvfp4"});
  }
}

}  // namespace

int main(int argc, char** argv) {
  const mxkit_bench::options opt = mxkit_bench::parse_args(argc, argv);
  if (gpu::device_count() == 0) {
    std::printf("bench_quantize_gpu: no GPU: nothing to measure\n");
    const char* code = std::getenv("MXKIT_SKIP_EXIT_CODE");
    return code ? std::atoi(code) : 77;
  }
  const gpu::device_properties prop = gpu::properties();
  const std::string device = prop.name;
  std::printf("device: %s, %d multiprocessors, L2 %zu MB\n", prop.name, prop.multiprocessors, prop.l2_cache_bytes >> 20);
  gpu::stream s;
  std::vector<mxkit_bench::result> rows_out;
  run_context ctx{prop, s, std::max(opt.repeats, 20), std::getenv("MXKIT_BENCH_ONLY"), rows_out};
  // bf16: the full set (these case names are compared across commits: keep them).
  const std::vector<mode> all_modes = {{"rowwise", true, false, false},
                                       {"columnwise", false, true, false},
                                       {"rowwise+columnwise", true, true, false},
                                       {"rowwise hadamard", true, false, true},
                                       {"columnwise hadamard", false, true, true},
                                       {"rowwise+columnwise hadamard", true, true, true}};
  // fp16 and fp32: the single-copy baseline and the MXFP4 recipe's case.
  const std::vector<mode> other_modes = {{"rowwise", true, false, false}, {"rowwise+columnwise hadamard", true, true, true}};

  for (const auto& [M, K] : {std::pair<std::size_t, std::size_t>{8192, 4096}, {16384, 8192}}) {
    run_shape<bf16, MXKIT_BENCH_QUANTIZE_VARIANTS != 0>(ctx, M, K, all_modes);
    run_shape<fp16, false>(ctx, M, K, other_modes);
    run_shape<float, false>(ctx, M, K, other_modes);
    run_fp8_shape<bf16>(ctx, M, K);
    run_fp8_shape<float>(ctx, M, K);
  }
  run_nvfp4_shape<bf16>(ctx, 8192, 4096);
  std::printf("\n");
  mxkit_bench::finish(opt, device, rows_out);
  return ctx.failures ? 1 : 0;
}
