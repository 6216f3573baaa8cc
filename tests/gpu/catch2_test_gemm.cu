// SPDX-License-Identifier: Apache-2.0
// Device GEMMs (gpu/gemm/gemm.hpp) against the host reference (ref/gemm.hpp) on fresh random data
// (the seed is printed on failure) with poisoned outputs (NaN bytes; every element must be
// written), for every path this build and device offer: portable always, sm90 on an H100/H200
// with an sm_90a build. Small and ragged shapes here; the Llama shapes are checked on sampled
// rows by bench/bench_gemm.cu before it times them. Paths are forced here (the MX probe's
// automatic choice): the vendor path (cuBLASLt), which `automatic` takes for bf16 and FP8
// operands, has its own file, catch2_test_gemm_vendor.cu.
//
// Two kinds of data:
//  - "exact" data: MX blocks built from codes whose values are small multiples of 1/2, with
//    random scales over 16 binades. Every block's dot product is then exact on any path (tensor
//    cores included), so device and reference differ only in fp32 rounding of the block adds
//    (the same adds in the same order): a tight bound that any layout, scale or indexing slip
//    breaks.
//  - realistic data: Gaussian matrices over many binades, quantized by the host quantizer. FP8
//    tensor cores sum a block with fewer bits than fp32 (ref/gemm.hpp); the bound is 2^-9 of
//    S = sum |a b| per element, and the worst measured |d - ref| / S is printed.
// Without a GPU the program exits 77 before Catch starts (gpu_skip.cu) and ctest reports a skip.
// Built for arch-specific targets (mxkit:sm90a, tests/gpu/CMakeLists.txt) so the sm90 path exists.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <mxkit/gpu/gemm/expand.hpp>  // the fold and expansion tests call it directly
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/quantize.hpp>

#include "../catch.hpp"
#include "../ref/gemm_test_util.hpp"
#include "gemm_epilogue_run.hpp"
#include "gpu_test_util.hpp"

namespace {
using namespace mxkit;
namespace g = mxkit::gpu;
constexpr double u = 0x1p-24;
// gemm_path's names, as tests/catch2_test_enum_names.cpp checks the host enums' (device-only header).
static_assert(enum_count<g::gemm_path> == 5 && std::string_view(g::name_of(g::gemm_path::automatic)) == "automatic" &&
              std::string_view(g::name_of(g::gemm_path::gfx950)) == "gfx950" &&
              std::string_view(g::name_of(g::gemm_path::vendor)) == "vendor" &&
              std::string_view(g::name_of(static_cast<g::gemm_path>(5))) == "unknown");

std::uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// ---- device copies --------------------------------------------------------------------------------
struct device_mx {
  g::device_buffer<std::uint8_t> data, scales;
  block_layout layout;
  quantize_options options;
  explicit device_mx(const mx_tensor& t)
      : data(std::span<const std::uint8_t>(t.data())), scales(std::span<const std::uint8_t>(t.scales())), layout(t.layout()),
        options(t.options()) {
    MXKIT_GPU_CHECK(g::device_synchronize());
  }
  mx_const_view view() const { return {layout, options, data.data(), scales.data()}; }
};

using gpu_test::device_out;  // D on the device, poisoned or holding C (set_all: the whole [rows, ld] buffer)

using gemm_test::as_double;
// bf16 operands and their values (gemm_test::random_bf16, as_float; transposes: gemm_test::transposed).
using gemm_test::as_float;
using gemm_test::random_bf16;

std::vector<double> magnitude(const mx_tensor& a, const mx_tensor& b) {
  const mx_tensor aa = gemm_test::abs_copy(a), bb = gemm_test::abs_copy(b);
  std::vector<float> s(a.layout().lines() * b.layout().lines());
  ref::gemm(aa.view(), bb.view(), matrix_view<float>{s.data(), a.layout().lines(), b.layout().lines()});
  return as_double(s);
}

// MX copy [lines, k] (rowwise layout) of "exact" data: codes with small half-integer values,
// scales 2^-8 .. 2^7.
mx_tensor exact_mx(std::size_t lines, std::size_t k, mx_type t, std::mt19937_64& rng) {
  mx_tensor m({mxkit::format_of(t), block_axis::rowwise, lines, k}, {});
  std::vector<std::uint8_t> codes;  // codes whose value v has 2v an integer in [-8, 8] (all codes for FP4)
  const int ncodes = t == mx_type::mxfp4 ? 16 : (t == mx_type::mxfp6_e2m3 || t == mx_type::mxfp6_e3m2) ? 64 : 256;
  for (int c = 0; c < ncodes; ++c) {
    if (t == mx_type::mxint8) {
      if (c % 32 == 0) codes.push_back(static_cast<std::uint8_t>(c));  // 0, +-0.5, +-1, +-1.5 (as k/64)
      continue;
    }
    const float v = g::decode_mx_element(t, static_cast<std::uint8_t>(c));
    if (std::isfinite(v) && std::fabs(v) <= 4.0f && std::floor(2 * v) == 2 * v) codes.push_back(static_cast<std::uint8_t>(c));
  }
  std::uniform_int_distribution<std::size_t> pick(0, codes.size() - 1);
  std::uniform_int_distribution<int> sc(127 - 8, 127 + 7);
  const int bits = m.layout().storage_bits();
  for (std::size_t line = 0; line < lines; ++line)
    for (std::size_t p = 0; p < m.layout().padded_length(); ++p)
      store_code(m.data().data() + line * m.layout().line_bytes(), p, codes[pick(rng)], bits);
  for (auto& s : m.scales()) s = static_cast<std::uint8_t>(sc(rng));
  return m;
}

mx_tensor realistic_mx(std::size_t lines, std::size_t k, mx_type t, std::uint64_t seed) {
  const std::vector<float> x = gemm_test::random_matrix(lines, k, seed);
  return ref::quantize(matrix_view<const float>{x.data(), lines, k}, t, block_axis::rowwise);
}

// Runs one MX product on `path` and compares with the reference: |d - ref| <= rel * S + 4u|beta C|.
template <class Out>
ref::gemm_validation_report run_mx(const mx_tensor& a, const mx_tensor& b, g::gemm_path path, gemm_epilogue e, double rel,
                             std::uint64_t seed, std::size_t ld_pad = 0, g::gemm_options opt = {}) {
  const std::size_t p = a.layout().lines(), q = b.layout().lines();
  const device_mx da(a), db(b);
  gpu_test::epilogue_run<Out> out(p, q, ld_pad, e, seed);
  const g::gemm_path used = g::gemm(da.view(), db.view(), out.d.view(), e, nullptr, [&] {
    opt.path = path;
    return opt;
  }());
  MXKIT_GPU_CHECK(g::device_synchronize());
  CHECK((path == g::gemm_path::automatic || used == path));
  const std::vector<Out> got = out.d.get();

  std::vector<Out> want = out.reference_start();
  ref::gemm(a.view(), b.view(), matrix_view<Out>{want.data(), p, q}, e.alpha, e.beta);
  const std::vector<double> s = out.magnitude(magnitude(a, b));
  // bf16 output: device and reference may round to neighbouring bf16 values, one ulp apart,
  // i.e. up to 2^-7 of |d| <= S.
  if constexpr (std::is_same_v<Out, bfloat16>) rel += 0x1p-7;
  return gemm_test::compare(as_double(got), as_double(want), s, rel, q);
}

std::vector<g::gemm_path> device_paths() {
  std::vector<g::gemm_path> paths{g::gemm_path::portable};
  const mx_tensor probe({formats::mxfp8_e4m3, block_axis::rowwise, 1, 32}, {});
  const device_mx dp(probe);
  const g::gemm_path a = g::automatic_path(dp.view(), dp.view());
  if (a != g::gemm_path::portable) paths.push_back(a);
  return paths;
}

bool path_takes(g::gemm_path path, mx_type t) {
  if (path == g::gemm_path::portable) return true;
  return t != mx_type::mxint8;  // sm90 and gfx950 take every FP element type
}

}  // namespace

TEST_CASE("gpu gemm: the expected fast path is available", "[gpu][gemm]") {
  // MXKIT_EXPECT_GEMM_PATH=sm90 (scripts/gpu.sh test sets it on an H100/H200):
  // the tensor-core path must be the automatic choice, so the tests below do exercise it.
  const char* want = std::getenv("MXKIT_EXPECT_GEMM_PATH");
  const std::vector<g::gemm_path> paths = device_paths();
  std::string have;
  for (const g::gemm_path p : paths) have += std::string(g::name_of(p)) + " ";
  WARN("GEMM paths tested on this device: " << have);
  if (want) CHECK(have.find(want) != std::string::npos);
}

TEST_CASE("gpu gemm: exact data, every path and MX type pair matches the reference to fp32 rounding", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  // Ragged P and Q, K not a multiple of the Hopper stage (128) and a multi-stage K.
  struct shape {
    std::size_t p, q, k;
  };
  for (const g::gemm_path path : device_paths())
    for (const shape sh : {shape{67, 45, 96}, shape{200, 300, 160}, shape{130, 257, 1024}})
      for (const mx_type ta : all_mx_types)
        for (const mx_type tb : all_mx_types) {
          if (!path_takes(path, ta) || !path_takes(path, tb)) continue;
          if (sh.k > 200 && !(ta == tb || (ta == mx_type::mxfp8_e4m3 && tb == mx_type::mxfp8_e5m2))) continue;
          const mx_tensor a = exact_mx(sh.p, sh.k, ta, rng), b = exact_mx(sh.q, sh.k, tb, rng);
          const double rel = (2.0 * static_cast<double>(sh.k / 32) + 8) * u;
          const auto c = run_mx<float>(a, b, path, {}, rel, seed);
          INFO(g::name_of(path) << " " << name_of(ta) << " x " << name_of(tb) << " " << sh.p << "x" << sh.q << "x" << sh.k << ": "
                                << c);
          CHECK(c.over_bound == 0);
        }
}

TEST_CASE("gpu gemm: realistic data, alpha/beta, bf16 output, padded ld", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const mx_type pairs[][2] = {{mx_type::mxfp4, mx_type::mxfp4},           {mx_type::mxfp8_e4m3, mx_type::mxfp8_e4m3},
                              {mx_type::mxfp8_e4m3, mx_type::mxfp8_e5m2}, {mx_type::mxfp8_e5m2, mx_type::mxfp8_e4m3},
                              {mx_type::mxfp6_e2m3, mx_type::mxfp4},      {mx_type::mxfp6_e3m2, mx_type::mxfp8_e5m2}};
  double worst_tc = 0;
  for (const g::gemm_path path : device_paths())
    for (const auto& pr : pairs) {
      const std::size_t p = 190, q = 333, k = 640;
      const mx_tensor a = realistic_mx(p, k, pr[0], seed + 1), b = realistic_mx(q, k, pr[1], seed + 2);
      const bool tensor_cores = path != g::gemm_path::portable;
      const double nb = static_cast<double>(k / 32);
      const double rel = tensor_cores ? 0x1p-9 : (2 * nb + 40) * u;
      const auto c1 = run_mx<float>(a, b, path, {}, rel, seed);
      const auto c2 = run_mx<float>(a, b, path, {-1.25f, 0.5f}, rel, seed, 3);
      const auto c3 = run_mx<bfloat16>(a, b, path, {2.0f, -1.0f}, rel, seed, 1);
      if (tensor_cores) worst_tc = std::max({worst_tc, c1.max_error_over_magnitude, c2.max_error_over_magnitude});
      INFO(g::name_of(path) << " " << name_of(pr[0]) << " x " << name_of(pr[1]) << ": max |d-ref|/S "
                            << c1.max_error_over_magnitude << "; " << c1 << " | " << c2 << " | " << c3);
      CHECK(c1.over_bound == 0);
      CHECK(c2.over_bound == 0);
      CHECK(c3.over_bound == 0);
    }
  if (worst_tc > 0) WARN("tensor-core paths: worst |d - ref| / S on realistic data = " << worst_tc << " (bound 2^-9 = 0.00195)");
}

TEST_CASE("gpu gemm: fprop, dgrad and wgrad take the quantizer's copies", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::size_t M = 192, N = 320, K = 256;
  const std::vector<float> x = gemm_test::random_matrix(M, K, seed), w = gemm_test::random_matrix(N, K, seed + 1),
                           dy = gemm_test::random_matrix(M, N, seed + 2);
  for (const mx_type t : {mx_type::mxfp4, mx_type::mxfp8_e4m3}) {
    const mx_type tg = t == mx_type::mxfp4 ? t : mx_type::mxfp8_e5m2;  // HYBRID: gradients in E5M2
    const auto X = ref::quantize_both(matrix_view<const float>{x.data(), M, K}, t);
    const auto W = ref::quantize_both(matrix_view<const float>{w.data(), N, K}, t);
    const auto DY = ref::quantize_both(matrix_view<const float>{dy.data(), M, N}, tg);
    struct product_case {
      gemm_product p;
      const mx_tensor *a, *b;
      std::size_t rows, cols, r;
    };
    for (const product_case pc : {product_case{gemm_product::fprop, &X.rowwise, &W.rowwise, M, N, K},
                                  product_case{gemm_product::dgrad, &DY.rowwise, &W.columnwise, M, K, N},
                                  product_case{gemm_product::wgrad, &DY.columnwise, &X.columnwise, N, K, M}}) {
      const device_mx da(*pc.a), db(*pc.b);
      device_out<float> d(pc.rows, pc.cols, pc.cols);
      if (pc.p == gemm_product::fprop) g::fprop(da.view(), db.view(), d.view());
      if (pc.p == gemm_product::dgrad) g::dgrad(da.view(), db.view(), d.view());
      if (pc.p == gemm_product::wgrad) g::wgrad(da.view(), db.view(), d.view());
      MXKIT_GPU_CHECK(g::device_synchronize());
      std::vector<float> want(pc.rows * pc.cols);
      ref::product(pc.p, pc.a->view(), pc.b->view(), matrix_view<float>{want.data(), pc.rows, pc.cols});
      const auto cmp = gemm_test::compare(as_double(d.get()), as_double(want), magnitude(*pc.a, *pc.b), 0x1p-9, pc.cols);
      INFO(name_of(pc.p) << " " << name_of(t) << ": " << cmp);
      CHECK(cmp.over_bound == 0);
    }
    // The device entry points reject what the reference rejects, with the same words.
    const device_mx xr(X.rowwise), wc(W.columnwise);
    device_out<float> d(M, N, N);
    REQUIRE_THROWS_WITH(g::fprop(xr.view(), wc.view(), d.view()), mxkit_test::contains("fprop: W must be the rowwise copy"));
    REQUIRE_THROWS_WITH(g::wgrad(xr.view(), wc.view(), d.view()), mxkit_test::contains("wgrad: dY must be the columnwise copy"));
  }
}

TEST_CASE("gpu gemm: per-tensor FP8 and bf16 operands", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  // Exact data: integer codes in [-3, 3], so even a 128-long tensor-core sum is exact.
  for (const std::size_t k : {std::size_t{77}, std::size_t{272}, std::size_t{1024}})  // 77: no 16-byte rows, portable only
    for (const fp8_type ta : {fp8_type::e4m3, fp8_type::e5m2})
      for (const fp8_type tb : {fp8_type::e4m3, fp8_type::e5m2}) {
        const std::size_t p = 150, q = 270;
        std::uniform_int_distribution<int> v(-3, 3);
        fp8_tensor a{ta, p, k, 4.0f, 0.0f, std::vector<std::uint8_t>(p * k)}, b{tb, q, k, 0.5f, 0.0f, std::vector<std::uint8_t>(q * k)};
        for (auto& c : a.data) c = fp8_encode(static_cast<float>(v(rng)), ta, 1.0f);
        for (auto& c : b.data) c = fp8_encode(static_cast<float>(v(rng)), tb, 1.0f);
        g::device_buffer<std::uint8_t> da{std::span<const std::uint8_t>(a.data)}, db{std::span<const std::uint8_t>(b.data)};
        MXKIT_GPU_CHECK(g::device_synchronize());
        const fp8_view va{ta, p, k, a.scale, da.data()}, vb{tb, q, k, b.scale, db.data()};
        for (const g::gemm_path path : device_paths()) {
          if (path != g::gemm_path::portable && k % 16 != 0) continue;
          device_out<float> d(p, q, q);
          g::gemm(va, vb, d.view(), {1.5f, 0.0f}, nullptr, g::gemm_options{path});
          MXKIT_GPU_CHECK(g::device_synchronize());
          std::vector<float> want(p * q);
          ref::gemm(a, b, matrix_view<float>{want.data(), p, q}, 1.5f);
          std::vector<double> s(p * q, 1.5 * 9.0 * static_cast<double>(k) / 2.0);  // |a b| <= 9, descale 1/2
          const auto cmp = gemm_test::compare(as_double(d.get()), as_double(want), s, 4 * u, q);
          INFO(g::name_of(path) << " fp8 " << name_of(ta) << " x " << name_of(tb) << " K=" << k << ": " << cmp);
          CHECK(cmp.over_bound == 0);
        }
      }
  // bf16 x bf16 on every path this device offers.
  const std::size_t p = 97, q = 131, k = 200;
  const std::vector<bfloat16> ha = random_bf16(p, k, seed + 5), hb = random_bf16(q, k, seed + 6);
  g::device_buffer<bfloat16> da{std::span<const bfloat16>(ha)}, db{std::span<const bfloat16>(hb)};
  MXKIT_GPU_CHECK(g::device_synchronize());
  std::vector<float> want(p * q);
  ref::gemm(matrix_view<const bfloat16>{ha.data(), p, k}, matrix_view<const bfloat16>{hb.data(), q, k},
                 matrix_view<float>{want.data(), p, q});
  const auto o = gemm_test::oracle_tn(as_float(ha), as_float(hb), p, q, k);
  for (const g::gemm_path path : device_paths()) {  // sm90: bf16 tensor cores (k = 200: 400-byte rows)
    device_out<float> d(p, q, q);
    const g::gemm_path used = g::gemm(matrix_view<const bfloat16>{da.data(), p, k}, matrix_view<const bfloat16>{db.data(), q, k},
                                      d.view(), {}, nullptr, g::gemm_options{path});
    MXKIT_GPU_CHECK(g::device_synchronize());
    CHECK(used == path);
    const auto cmp = gemm_test::compare(as_double(d.get()), as_double(want), o.s, (2.0 * k + 8) * u, q);
    INFO(g::name_of(path) << " bf16: " << cmp);
    CHECK(cmp.over_bound == 0);
  }
}

TEST_CASE("gpu gemm: bf16 output stored 16 bytes a lane has the bits of pair stores", "[gpu][gemm]") {
  // The sm90 epilogue writes bf16 D through quad transposes and 16-byte stores where D's rows
  // allow it (ld a multiple of 8: store_quad_rows) and 4-byte pair stores elsewhere, which an
  // odd ld forces. Both must give the same bits, with alpha, beta and C, on ragged tiles (rows
  // and columns past the edge in the last tiles), for every scaling of the kernel: line
  // (MXFP4), tensor (FP8, bf16, MXFP8 expanded), block (MXFP6: pair stores only). The 16-byte
  // result is also checked against the reference.
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::size_t p = 200, q = 328, k = 256, wide_ld = 336, pair_ld = 329;
  const std::vector<float> cf = gemm_test::random_matrix(p, q, seed ^ 0xC, 1);
  // D = 1.5 A.B^T - 0.75 C with C in D's memory at leading dimension ld; returns D [p, q].
  auto run = [&](std::size_t ld, auto&& gemm_into) {
    device_out<bfloat16> d(p, q, ld);
    std::vector<bfloat16> c(p * ld, bfloat16::from_float(0.0f));
    for (std::size_t i = 0; i < p; ++i)
      for (std::size_t j = 0; j < q; ++j) c[i * ld + j] = bfloat16::from_float(cf[i * q + j]);
    d.set_all(c);
    gemm_into(d.view());
    MXKIT_GPU_CHECK(g::device_synchronize());
    return d.get();
  };
  auto same_bits = [](const std::vector<bfloat16>& x, const std::vector<bfloat16>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(bfloat16)) == 0;
  };
  const gemm_epilogue e{1.5f, -0.75f};
  for (const g::gemm_path path : device_paths()) {
    if (path == g::gemm_path::gfx950) continue;
    const g::gemm_options opt{path};
    for (const mx_type t : {mx_type::mxfp4, mx_type::mxfp8_e4m3, mx_type::mxfp6_e2m3}) {
      const mx_tensor a = realistic_mx(p, k, t, seed + 1), b = realistic_mx(q, k, t, seed + 2);
      const device_mx da(a), db(b);
      auto gemm_into = [&](matrix_view<bfloat16> d) { g::gemm(da.view(), db.view(), d, e, nullptr, opt); };
      INFO(g::name_of(path) << " " << name_of(t));
      CHECK(same_bits(run(wide_ld, gemm_into), run(pair_ld, gemm_into)));
      const auto cmp = run_mx<bfloat16>(a, b, path, e, path == g::gemm_path::portable ? (2.0 * k / 32 + 40) * u : 0x1p-9, seed,
                                        wide_ld - q);
      INFO(cmp);
      CHECK(cmp.over_bound == 0);
    }
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> v(-3, 3);
    fp8_tensor fa{fp8_type::e4m3, p, k, 2.0f, 0.0f, std::vector<std::uint8_t>(p * k)}, fb{fp8_type::e4m3, q, k, 0.5f, 0.0f, std::vector<std::uint8_t>(q * k)};
    for (auto& c : fa.data) c = fp8_encode(static_cast<float>(v(rng)), fp8_type::e4m3, 1.0f);
    for (auto& c : fb.data) c = fp8_encode(static_cast<float>(v(rng)), fp8_type::e4m3, 1.0f);
    g::device_buffer<std::uint8_t> dfa{std::span<const std::uint8_t>(fa.data)}, dfb{std::span<const std::uint8_t>(fb.data)};
    const std::vector<bfloat16> ha = random_bf16(p, k, seed + 3), hb = random_bf16(q, k, seed + 4);
    g::device_buffer<bfloat16> dha{std::span<const bfloat16>(ha)}, dhb{std::span<const bfloat16>(hb)};
    MXKIT_GPU_CHECK(g::device_synchronize());
    auto fp8_into = [&](matrix_view<bfloat16> d) {
      g::gemm(fp8_view{fp8_type::e4m3, p, k, fa.scale, dfa.data()}, fp8_view{fp8_type::e4m3, q, k, fb.scale, dfb.data()}, d, e, nullptr, opt);
    };
    auto bf16_into = [&](matrix_view<bfloat16> d) {
      g::gemm(matrix_view<const bfloat16>{dha.data(), p, k}, matrix_view<const bfloat16>{dhb.data(), q, k}, d, e, nullptr, opt);
    };
    INFO(g::name_of(path) << " fp8 and bf16 operands");
    CHECK(same_bits(run(wide_ld, fp8_into), run(pair_ld, fp8_into)));
    CHECK(same_bits(run(wide_ld, bf16_into), run(pair_ld, bf16_into)));
  }
}

TEST_CASE("gpu gemm: bf16 operands stored MN-major give the K-major products bit for bit", "[gpu][gemm]") {
  // wgrad reads dY and X as the forward wrote them (major_order::mn_major: sm90 through wgmma's
  // transposed operands, the portable kernel by index). Every order pair must give the bits of
  // the K-major product of the same values (the same bf16 products, summed in the same order),
  // which is itself checked against the fp64 oracle. Shapes: ragged tiles with K rows past the
  // last 64-row stage, a split-K wgrad shape, and widths whose MN-major rows are not 16-byte
  // aligned (portable only: sm90 refuses them).
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  struct shape {
    std::size_t p, q, k;
  };
  for (const shape sh : {shape{136, 264, 200}, shape{96, 304, 4096}, shape{256, 512, 1000}, shape{37, 45, 77}}) {
    const std::size_t p = sh.p, q = sh.q, k = sh.k;
    // K-major, and stored MN-major ([k, p], [k, q])
    const std::vector<bfloat16> ha = random_bf16(p, k, seed + p), hb = random_bf16(q, k, seed + q);
    const std::vector<bfloat16> hat = gemm_test::transposed(ha, p, k), hbt = gemm_test::transposed(hb, q, k);
    g::device_buffer<bfloat16> da{std::span<const bfloat16>(ha)}, db{std::span<const bfloat16>(hb)},
        dat{std::span<const bfloat16>(hat)}, dbt{std::span<const bfloat16>(hbt)};
    MXKIT_GPU_CHECK(g::device_synchronize());
    const auto o = gemm_test::oracle_tn(as_float(ha), as_float(hb), p, q, k);
    const matrix_view<const bfloat16> va{da.data(), p, k}, vb{db.data(), q, k}, vat{dat.data(), k, p}, vbt{dbt.data(), k, q};
    for (const g::gemm_path path : device_paths()) {
      if (path == g::gemm_path::gfx950) continue;  // MX operands only
      const bool aligned = p % 8 == 0 && q % 8 == 0 && k % 8 == 0;
      if (path != g::gemm_path::portable && !aligned) {
        device_out<float> d(p, q, q);
        CHECK_THROWS_AS(g::gemm(vat, g::major_order::mn_major, vb, g::major_order::k_major, d.view(), {}, nullptr, g::gemm_options{path}),
                        std::invalid_argument);
        continue;
      }
      std::vector<float> k_major;
      for (int orders = 0; orders < 4; ++orders) {
        const bool mn_a = orders & 2, mn_b = orders & 1;
        device_out<float> d(p, q, q);
        const g::gemm_path used = g::gemm(mn_a ? vat : va, mn_a ? g::major_order::mn_major : g::major_order::k_major, mn_b ? vbt : vb,
                                          mn_b ? g::major_order::mn_major : g::major_order::k_major, d.view(), {}, nullptr,
                                          g::gemm_options{path});
        MXKIT_GPU_CHECK(g::device_synchronize());
        CHECK(used == path);
        const std::vector<float> got = d.get();
        INFO(g::name_of(path) << " " << p << "x" << q << "x" << k << " A " << (mn_a ? "MN" : "K") << "-major, B " << (mn_b ? "MN" : "K")
                              << "-major");
        if (orders == 0) {
          const auto cmp = gemm_test::compare(as_double(got), o.d, o.s, (2.0 * static_cast<double>(k) + 8) * u, q);
          INFO(cmp);
          CHECK(cmp.over_bound == 0);
          k_major = got;
        } else {
          CHECK(std::memcmp(k_major.data(), got.data(), got.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("gpu gemm: NaN scales propagate, empty shapes write nothing", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  for (const g::gemm_path path : device_paths()) {
    mx_tensor a = exact_mx(40, 128, mx_type::mxfp8_e4m3, rng);
    const mx_tensor b = exact_mx(50, 128, mx_type::mxfp8_e4m3, rng);
    a.scales()[7 * 4 + 2] = 0xFF;  // row 7, block 2
    const device_mx da(a), db(b);
    device_out<float> d(40, 50, 50);
    g::gemm(da.view(), db.view(), d.view(), {}, nullptr, g::gemm_options{path});
    MXKIT_GPU_CHECK(g::device_synchronize());
    const std::vector<float> got = d.get();
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO(g::name_of(path) << " element " << i);
      CHECK(std::isnan(got[i]) == (i / 50 == 7));
    }
  }
  // P = 0: nothing launched, nothing read.
  const mx_tensor a0({formats::mxfp4, block_axis::rowwise, 0, 64}, {}), b({formats::mxfp4, block_axis::rowwise, 3, 64}, {});
  const device_mx d0(a0), db(b);
  g::device_buffer<float> none(1);
  CHECK_NOTHROW(g::gemm(d0.view(), db.view(), matrix_view<float>{none.data(), 0, 3}));
  MXKIT_GPU_CHECK(g::device_synchronize());
}

// ---- MXFP4 on sm90: folded into E5M2 with one factor per line (expand.hpp, fold) ---------------
namespace {
struct fold_result {
  std::vector<std::uint8_t> bytes;
  std::vector<float> line_scale;
  int unsafe = 0;
};
fold_result run_fold(const mx_tensor& t) {
  const device_mx dt(t);
  const g::gemm_operand o = g::make_operand(dt.view());
  g::device_buffer<std::uint8_t> dst(o.lines * o.length);
  g::device_buffer<float> scale(o.lines);
  g::device_buffer<int> flag(1);
  flag.fill_bytes(0);
  g::expand::fold::launch(o, dst.data(), scale.data(), flag.data(), nullptr);
  MXKIT_GPU_CHECK(g::device_synchronize());
  return {dst.to_host(), scale.to_host(), flag.to_host()[0]};
}
// Every line that folds: E5M2 byte x line factor is exactly code x block scale (sign included).
void check_fold_exact(const mx_tensor& t, const fold_result& f) {
  const std::size_t k = t.layout().padded_length();
  for (std::size_t line = 0; line < t.layout().lines(); ++line) {
    const std::uint8_t* sc = t.scales().data() + line * t.layout().blocks_per_line();
    const bool nan_line = std::any_of(sc, sc + k / 32, [](std::uint8_t s) { return s == 0xFF; });
    INFO("line " << line);
    REQUIRE(std::isnan(f.line_scale[line]) == nan_line);
    if (nan_line) continue;
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint8_t code = load_code(t.data().data() + line * t.layout().line_bytes(), i, 4);
      const double want = static_cast<double>(e2m1::from_bits(code).to_float()) * std::ldexp(1.0, sc[i / 32] - 127);
      const double got = static_cast<double>(e5m2::from_bits(f.bytes[line * k + i]).to_float()) * f.line_scale[line];
      INFO("element " << i << " code " << int{code} << " scale byte " << int{sc[i / 32]});
      REQUIRE(got == want);
      REQUIRE(std::signbit(got) == std::signbit(want));
    }
  }
}
}  // namespace

TEST_CASE("gpu gemm: MXFP4 folds exactly into E5M2 line-scaled bytes, and lines that cannot raise the flag", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  // Lines of 10 blocks (a warp a line) and of 300 and 1,024 (expand::fold's long lines: a CTA a
  // line, staged in shared memory).
  for (const std::size_t k0 : {std::size_t{320}, std::size_t{9600}, std::size_t{32768}}) {
    INFO("K " << k0);
    mx_tensor t = exact_mx(70, k0, mx_type::mxfp4, rng);  // scales over 16 binades: every line folds
    std::uint8_t* sc = t.scales().data();
    const std::size_t nb = t.layout().blocks_per_line(), lb = t.layout().line_bytes();
    auto zero_block = [&](std::size_t line, std::size_t b) { std::memset(t.data().data() + line * lb + 16 * b, 0x88, 16); };  // -0
    for (std::size_t b = 0; b < nb; ++b) zero_block(5, b);  // line 5: all zero, scales anywhere
    sc[5 * nb + 0] = 0x00;
    sc[5 * nb + 1] = 0xFE;
    zero_block(6, 3);  // line 6: a zero block whose scale is 100 binades away does not count
    sc[6 * nb + 3] = 127 - 100;
    sc[7 * nb + 2] = 0xFF;  // line 7: NaN scale
    for (std::size_t b = 0; b < nb; ++b) sc[8 * nb + b] = static_cast<std::uint8_t>(127 - 20 + (b % 2) * 28);  // span 28: fits
    for (std::size_t b = 0; b < nb; ++b) sc[9 * nb + b] = 127 + 48;    // the largest exponent that folds
    for (std::size_t b = 0; b < nb; ++b) sc[10 * nb + b] = 127 - 48;   // the smallest
    const fold_result f = run_fold(t);
    CHECK(f.unsafe == 0);
    CHECK(f.line_scale[5] == 1.0f);
    check_fold_exact(t, f);
  }
  // Long lines, whose half-blocks wrap over the warp several times and end part-way (65 blocks:
  // 130 half-blocks) or at a whole round (128), a CTA's line (896 blocks: the 8B's dgrad) and one
  // past the CTA's longest (1,056 blocks: a warp a line again), with block scales drawn over a
  // 28-binade span, so that the fold takes shifts across its whole range (-15 to 13) in most lines.
  for (const std::size_t k : {std::size_t{2080}, std::size_t{4096}, std::size_t{28672}, std::size_t{33792}}) {
    mx_tensor u = exact_mx(9, k, mx_type::mxfp4, rng);
    std::uniform_int_distribution<int> span(127 - 14, 127 + 14);
    for (auto& s : u.scales()) s = static_cast<std::uint8_t>(span(rng));
    INFO("K " << k);
    const fold_result g = run_fold(u);
    CHECK(g.unsafe == 0);
    check_fold_exact(u, g);
  }

  struct bad_case {
    const char* what;
    int first, second;  // scale bytes of blocks 0 and 1 of line 3
  };
  for (const std::size_t k : {std::size_t{128}, std::size_t{9600}})
    for (const bad_case c : {bad_case{"span 29", 127 - 15, 127 + 14}, bad_case{"exponent 49", 127 + 49, 127 + 49},
                             bad_case{"exponent -49", 127 - 49, 127 - 49}}) {
      mx_tensor u = exact_mx(20, k, mx_type::mxfp4, rng);
      const std::size_t nb = k / 32;
      std::memset(u.data().data() + 3 * u.layout().line_bytes(), 0x11, 32);  // blocks 0 and 1 non-zero (0.5)
      u.scales()[3 * nb + 0] = static_cast<std::uint8_t>(c.first);
      u.scales()[3 * nb + 1] = static_cast<std::uint8_t>(c.second);
      INFO(c.what << ", K " << k);
      CHECK(run_fold(u).unsafe == 1);
    }
}

// ---- MXFP8 on sm90: expanded to bf16 with the block scales applied (expand.hpp, to_bf16) ------
TEST_CASE("gpu gemm: MXFP8 expands to bf16 exactly: every code, every scale class, padded lines, the flag", "[gpu][gemm]") {
  // Line l holds every code (256 a line: 8 blocks), shifted by l so that each code meets several
  // scales; block b of line l has scale byte scales_of[(l + b) % n]: +-48 binades (the last
  // that stay exact in the bf16 product), +-49 and the extremes (they raise the flag), NaN.
  // Sources with and without padded lines (the kernel divides only for the padded ones), both
  // element types.
  const std::uint8_t scales_of[] = {0x00, 0x01, 127 - 49, 127 - 48, 120, 127, 133, 127 + 48, 127 + 49, 0xFE, 0xFF};
  constexpr std::size_t n = sizeof scales_of, lines = 37, length = 256, blocks = length / 32;
  for (const mx_type t : {mx_type::mxfp8_e4m3, mx_type::mxfp8_e5m2})
    for (const std::size_t line_bytes : {length, length + 48}) {
      std::vector<std::uint8_t> codes(lines * line_bytes, 0xA5), sc(lines * blocks);
      for (std::size_t l = 0; l < lines; ++l) {
        for (std::size_t i = 0; i < length; ++i) codes[l * line_bytes + i] = static_cast<std::uint8_t>(i + 7 * l);
        for (std::size_t b = 0; b < blocks; ++b) sc[l * blocks + b] = scales_of[(l + b) % n];
      }
      const g::device_buffer<std::uint8_t> dc{std::span<const std::uint8_t>(codes)}, ds{std::span<const std::uint8_t>(sc)};
      g::gemm_operand o;
      o.type = t;
      o.data = dc.data();
      o.scales = ds.data();
      o.lines = lines;
      o.length = length;
      o.line_bytes = line_bytes;
      o.blocks = blocks;
      g::device_buffer<std::uint16_t> dst(lines * length);
      dst.fill_bytes(0xFF);
      g::device_buffer<int> flag(1);
      flag.fill_bytes(0);
      g::expand::to_bf16::launch(o, dst.data(), flag.data(), nullptr);
      const std::vector<std::uint16_t> got = dst.to_host();
      INFO((t == mx_type::mxfp8_e4m3 ? "E4M3" : "E5M2") << ", line bytes " << line_bytes);
      CHECK(flag.to_host()[0] == 1);  // +-49 meets non-zero codes
      std::size_t wrong = 0;
      for (std::size_t l = 0; l < lines; ++l)
        for (std::size_t i = 0; i < length; ++i) {
          const std::uint8_t c = codes[l * line_bytes + i], s = sc[l * blocks + i / 32];
          const float want = g::decode_mx_element(t, c) * e8m0::from_bits(s).to_float();
          const std::uint16_t bits = got[l * length + i];
          const float value = bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
          // The exact product's upper half; a NaN's payload is the device's (any NaN).
          const bool ok = std::isnan(want) ? std::isnan(value) : bits == bit_cast<std::uint32_t>(want) >> 16;
          if (!ok && wrong++ < 5) FAIL_CHECK("line " << l << " element " << i << " code " << int{c} << " scale " << int{s} << ": "
                                                     << bits << " for " << want);
          if (!std::isnan(want) && std::abs(s - 127) <= 48) REQUIRE(value == want);  // exact where the flag stays down
        }
      CHECK(wrong == 0);
      // Without the blocks beyond +-48 binades (+-49, 0x00, 0x01, 0xFE) nothing raises the flag;
      // zero blocks there do not either, nor NaN scales.
      for (std::size_t l = 0; l < lines; ++l)
        for (std::size_t b = 0; b < blocks; ++b)
          if (const int e = sc[l * blocks + b] - 127; sc[l * blocks + b] != 0xFF && (e > 48 || e < -48)) {
            if ((l + b) % 2) sc[l * blocks + b] = 127;
            else std::fill_n(codes.begin() + static_cast<std::ptrdiff_t>(l * line_bytes + 32 * b), 32, std::uint8_t{0x80});  // -0
          }
      const g::device_buffer<std::uint8_t> dc2{std::span<const std::uint8_t>(codes)}, ds2{std::span<const std::uint8_t>(sc)};
      o.data = dc2.data();
      o.scales = ds2.data();
      flag.fill_bytes(0);
      g::expand::to_bf16::launch(o, dst.data(), flag.data(), nullptr);
      CHECK(flag.to_host()[0] == 0);
    }
}

namespace {
// An MXFP8 copy of `a` with one non-zero block (block 1 of line 9: 1.0) at exponent 60, beyond
// the bf16 expansion's +-48: the expansion sets the gate and the FP8 block-scaled kernel runs.
mx_tensor with_far_block(const mx_tensor& a) {
  mx_tensor far = a;
  far.data()[9 * far.layout().line_bytes() + 40] = 0x38;
  far.scales()[9 * far.layout().blocks_per_line() + 1] = 127 + 60;
  return far;
}
}  // namespace

TEST_CASE("gpu gemm: MXFP8 on bf16 tensor cores and its block-scaled FP8 fallback, with beta", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  const std::size_t p = 140, q = 270, k = 320;
  const double rel = (2.0 * static_cast<double>(k / 32) + 8) * u;
  g::gemm_options fp8_only;
  fp8_only.mxfp8_via_bf16 = false;
  for (const g::gemm_path path : device_paths())
    for (const mx_type tb : {mx_type::mxfp8_e4m3, mx_type::mxfp8_e5m2}) {
      const mx_tensor a = exact_mx(p, k, mx_type::mxfp8_e4m3, rng), b = exact_mx(q, k, tb, rng);
      const mx_tensor far = with_far_block(a);  // the FP8 fallback runs instead
      mx_tensor far_zero = a;  // the same exponent on an all-zero block changes nothing
      std::memset(far_zero.data().data() + 9 * far_zero.layout().line_bytes() + 32, 0, 32);
      far_zero.scales()[9 * (k / 32) + 1] = 127 + 60;
      for (const mx_tensor* ta : {&a, static_cast<const mx_tensor*>(&far), static_cast<const mx_tensor*>(&far_zero)}) {
        const auto c1 = run_mx<float>(*ta, b, path, {1.5f, -0.5f}, rel, seed, 2);
        const auto c2 = run_mx<bfloat16>(*ta, b, path, {1.0f, 1.0f}, rel, seed);
        const auto c3 = run_mx<float>(*ta, b, path, {1.0f, 0.0f}, rel, seed, 0, fp8_only);
        INFO(g::name_of(path) << " e4m3 x " << name_of(tb) << " case " << (ta == &a ? 0 : ta == &far ? 1 : 2) << ": " << c1
                              << " | " << c2 << " | " << c3);
        CHECK(c1.over_bound == 0);
        CHECK(c2.over_bound == 0);
        CHECK(c3.over_bound == 0);
      }
    }
}

#if MXKIT_GPU_CUDA
// gemm_options::vendor under `automatic`: MXFP8's expanded bf16 copies are multiplied by cuBLASLt
// (sm90/dispatch.hpp, vendor_takes_expanded). The plan says where, and the results still meet the
// reference's bound, the gate's fallback included: a block with exponent 60 makes the expansion
// inexact, and the FP8 block-scaled kernel that runs after cuBLASLt overwrites its D, reading C
// from a buffer of its own.
TEST_CASE("gpu gemm: MXFP8's bf16 product on cuBLASLt where the call allows the vendor path, its fallback after it", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  const std::size_t p = 136, q = 264, k = 320;
  const double rel = (2.0 * static_cast<double>(k / 32) + 8) * u;
  const mx_tensor a = exact_mx(p, k, mx_type::mxfp8_e4m3, rng), b = exact_mx(q, k, mx_type::mxfp8_e5m2, rng);
  const device_mx da(a), db(b);
  if (g::automatic_path(da.view(), db.view()) != g::gemm_path::sm90) {
    WARN("not an sm90 device: nothing to check");
    return;
  }
  const bool vendor = g::cublaslt::available();
  if (!vendor) WARN("cuBLASLt cannot be loaded here: every plan stays on mxkit's kernel");
  const g::gemm_operand oa = g::make_operand(da.view()), ob = g::make_operand(db.view());
  device_out<float> d(p, q, q), c(p, q, q);
  const g::gemm_output_desc plain{d.buf.data(), d.buf.data(), q, q, false, 1.0f, 0.0f},
      aliased{d.buf.data(), d.buf.data(), q, q, false, 1.0f, 1.0f}, separate{d.buf.data(), c.buf.data(), q, q, false, 1.0f, 1.0f};
  g::gemm_options automatic, forced, no_vendor;
  forced.path = g::gemm_path::sm90;
  no_vendor.vendor = false;
  CHECK(g::sm90::make_plan(oa, ob, plain, automatic).route == g::sm90::route::via_bf16);
  CHECK(g::sm90::make_plan(oa, ob, plain, automatic).vendor_product == vendor);
  CHECK(g::sm90::make_plan(oa, ob, separate, automatic).vendor_product == vendor);
  CHECK_FALSE(g::sm90::make_plan(oa, ob, aliased, automatic).vendor_product);
  CHECK_FALSE(g::sm90::make_plan(oa, ob, plain, forced).vendor_product);
  CHECK_FALSE(g::sm90::make_plan(oa, ob, plain, no_vendor).vendor_product);

  const mx_tensor far = with_far_block(a);  // the gate closes the bf16 product
  for (const mx_tensor* ta : {&a, static_cast<const mx_tensor*>(&far)}) {
    INFO((ta == &a ? "in range" : "exponent 60"));
    const auto c1 = run_mx<float>(*ta, b, g::gemm_path::automatic, {1.5f, 0.0f}, rel, seed);
    const auto c2 = run_mx<bfloat16>(*ta, b, g::gemm_path::automatic, {1.0f, 0.0f}, rel, seed, 8);
    const auto c3 = run_mx<float>(*ta, b, g::gemm_path::automatic, {1.0f, -0.5f}, rel, seed, 2);  // C aliases D: mxkit's kernel
    INFO(c1 << " | " << c2 << " | " << c3);
    CHECK(c1.over_bound == 0);
    CHECK(c2.over_bound == 0);
    CHECK(c3.over_bound == 0);
    // beta with C apart from D, through the dispatch's own entry (the training backend's form).
    const device_mx dt(*ta);
    const std::vector<float> c0 = gemm_test::random_matrix(p, q, seed ^ 0xC, 1);
    c.set_all(c0);
    d.buf.fill_bytes(0xFF);
    const g::gemm_output_desc out{d.buf.data(), c.buf.data(), q, q, false, 2.0f, 1.0f};
    (void)g::detail::run(g::make_operand(dt.view()), ob, out, nullptr, automatic);
    MXKIT_GPU_CHECK(g::device_synchronize());
    std::vector<float> want = c0;
    ref::gemm(ta->view(), b.view(), matrix_view<float>{want.data(), p, q}, 2.0f, 1.0f);
    std::vector<double> mag = magnitude(*ta, b);
    for (std::size_t i = 0; i < mag.size(); ++i) mag[i] = 2.0 * mag[i] + std::fabs(static_cast<double>(c0[i]));
    const auto c4 = gemm_test::compare(as_double(d.get()), as_double(want), mag, rel, q);
    INFO("separate C: " << c4);
    CHECK(c4.over_bound == 0);
    CHECK(c.get() == c0);  // C is read, never written
  }
}
#endif

TEST_CASE("gpu gemm: MXFP4 x MXFP4, line-scaled path and its block-scaled fallback, with beta", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  const std::size_t p = 150, q = 260, k = 384;
  const double rel = (2.0 * static_cast<double>(k / 32) + 8) * u;
  for (const g::gemm_path path : device_paths()) {
    const mx_tensor a = exact_mx(p, k, mx_type::mxfp4, rng), b = exact_mx(q, k, mx_type::mxfp4, rng);
    mx_tensor wide = a;  // one line whose scales span 40 binades: the fallback runs instead
    std::memset(wide.data().data() + 11 * wide.layout().line_bytes(), 0x77, 32);
    wide.scales()[11 * (k / 32) + 0] = 127 - 20;
    wide.scales()[11 * (k / 32) + 1] = 127 + 20;
    const mx_tensor* cases[] = {&a, &wide};
    for (const mx_tensor* ta : cases) {
      const bool folds = ta == &a;
      const auto c1 = run_mx<float>(*ta, b, path, {1.5f, -0.5f}, rel, seed, 2);
      const auto c2 = run_mx<bfloat16>(*ta, b, path, {1.0f, 1.0f}, rel, seed);
      INFO(g::name_of(path) << (folds ? " folds" : " fallback") << ": " << c1 << " | " << c2);
      CHECK(c1.over_bound == 0);
      CHECK(c2.over_bound == 0);
    }
    // Four blocks per tensor-core accumulation: realistic data within the tensor-core bound.
    const mx_tensor ra = realistic_mx(p, k, mx_type::mxfp4, seed + 5), rb = realistic_mx(q, k, mx_type::mxfp4, seed + 6);
    g::gemm_options four;
    four.exact_block_sums = false;
    const auto c3 = run_mx<float>(ra, rb, path, {1.0f, 0.25f}, 0x1p-9, seed, 0, four);
    INFO(g::name_of(path) << " four blocks per accumulation: max |d-ref|/S " << c3.max_error_over_magnitude << "; " << c3);
    CHECK(c3.over_bound == 0);
    // NaN scale on the line-scaled path: exactly row 7's outputs are NaN.
    mx_tensor an = a;
    an.scales()[7 * (k / 32) + 2] = 0xFF;
    const device_mx da(an), db(b);
    device_out<float> d(p, q, q);
    g::gemm(da.view(), db.view(), d.view(), {}, nullptr, g::gemm_options{path});
    MXKIT_GPU_CHECK(g::device_synchronize());
    const std::vector<float> got = d.get();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < got.size(); ++i) wrong += std::isnan(got[i]) != (i / q == 7);
    INFO(g::name_of(path));
    CHECK(wrong == 0);
  }
}

TEST_CASE("gpu gemm: wgrad-shaped products split K, match the reference and repeat bit for bit", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  // 96 x 300 outputs are 2 tiles of 128 x 256: K = 4096 (32 stages of 128 bytes, 64 in bf16) is
  // split over several CTAs; a K that is not a multiple of the split leaves a short last split.
  const std::size_t p = 96, q = 300;
#if MXKIT_GPU_CUDA
  int device = 0, sms = 0;
  MXKIT_GPU_CHECK(g::get_device(&device));
  MXKIT_GPU_CHECK(g::get_multiprocessor_count(&sms, device));
  for (const std::size_t k : {std::size_t{4096}, std::size_t{3104}})
    CHECK(g::sm90::choose_k_splits(2, static_cast<std::uint32_t>(k / 128), static_cast<std::uint32_t>(sms)) > 1);
#endif
  g::gemm_options fp8_only;
  fp8_only.mxfp8_via_bf16 = false;
  for (const g::gemm_path path : device_paths())
    for (const std::size_t k : {std::size_t{4096}, std::size_t{3104}}) {
      const double rel = (2.0 * static_cast<double>(k / 32) + 8) * u;
      for (const mx_type t : {mx_type::mxfp4, mx_type::mxfp8_e4m3, mx_type::mxfp6_e2m3}) {
        const mx_tensor a = exact_mx(p, k, t, rng), b = exact_mx(q, k, t, rng);
        const auto c1 = run_mx<float>(a, b, path, {1.5f, -0.5f}, rel, seed, 2);
        const auto c2 = run_mx<bfloat16>(a, b, path, {1.0f, 1.0f}, rel, seed);
        const auto c3 = run_mx<float>(a, b, path, {1.0f, 0.0f}, rel, seed, 0, fp8_only);
        // A line the fast route cannot take (MXFP4: scales 40 binades apart; MXFP8: exponent
        // 60): its gate closes, the fallback's split kernel and reduction run instead.
        mx_tensor odd = a;
        if (t != mx_type::mxfp6_e2m3) {
          std::memset(odd.data().data() + 5 * odd.layout().line_bytes(), t == mx_type::mxfp4 ? 0x77 : 0x38, 32);
          odd.scales()[5 * (k / 32) + 0] = 127 - 20;
          odd.scales()[5 * (k / 32) + 1] = static_cast<std::uint8_t>(t == mx_type::mxfp4 ? 127 + 20 : 127 + 60);
        }
        const auto c4 = run_mx<float>(odd, b, path, {1.0f, 1.0f}, rel, seed);
        INFO(g::name_of(path) << " " << name_of(t) << " K=" << k << ": " << c1 << " | " << c2 << " | " << c3 << " | " << c4);
        CHECK(c1.over_bound == 0);
        CHECK(c2.over_bound == 0);
        CHECK(c3.over_bound == 0);
        CHECK(c4.over_bound == 0);
      }
      // bf16 operands (the bf16 recipe's wgrad), accumulating into D as the gradients do; two
      // runs give the same bits (the partials are added in split order).
      const std::vector<bfloat16> ha = random_bf16(p, k, seed + 7), hb = random_bf16(q, k, seed + 8);
      g::device_buffer<bfloat16> da{std::span<const bfloat16>(ha)}, db{std::span<const bfloat16>(hb)};
      const auto o = gemm_test::oracle_tn(as_float(ha), as_float(hb), p, q, k);
      const std::vector<float> c0 = gemm_test::random_matrix(p, q, seed + 9, 1);
      std::vector<float> first;
      for (int run = 0; run < 2; ++run) {
        device_out<float> d(p, q, q);
        d.set_all(c0);
        g::gemm(matrix_view<const bfloat16>{da.data(), p, k}, matrix_view<const bfloat16>{db.data(), q, k}, d.view(), {1.0f, 1.0f},
                nullptr, g::gemm_options{path});
        MXKIT_GPU_CHECK(g::device_synchronize());
        const std::vector<float> got = d.get();
        std::vector<double> want(p * q), s(p * q);
        for (std::size_t i = 0; i < want.size(); ++i) {
          want[i] = o.d[i] + c0[i];
          s[i] = o.s[i] + std::fabs(c0[i]);
        }
        const auto cmp = gemm_test::compare(as_double(got), want, s, (2.0 * static_cast<double>(k) + 8) * u, q);
        INFO(g::name_of(path) << " bf16 K=" << k << " run " << run << ": " << cmp);
        CHECK(cmp.over_bound == 0);
        if (run == 0) first = got;
        else CHECK(std::memcmp(first.data(), got.data(), got.size() * sizeof(float)) == 0);
      }
    }
}

TEST_CASE("gpu gemm: the dynamic tile order and a grid narrowed for a collective give the static order's bits; the counter stays zero",
          "[gpu][gemm]") {
  // gemm_options::tile_counter: the persistent sm90 kernel hands its tiles out from a counter
  // instead of CTA x taking x, x + grid, ... Which CTA computes a tile must not change its bits;
  // a tile handed out twice or never shows as a difference (D starts as NaN bytes), a counter
  // left non-zero would hand the next GEMM's tiles out wrongly (so each order runs three times).
  // Shapes with fewer tiles than SMs (each CTA's one fetch is past the end) and more (160 tiles
  // of 128 x 256 on an H200's 132 SMs: 28 handed out by the counter). gemm_options::reserved_sms
  // (the SMs left to NCCL, --comm-sms) narrows the persistent grid: 16 and all but one SM, in
  // either order, must give the same bits too (a CTA then takes more tiles in turn).
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  g::device_buffer<std::uint32_t> counter(2);
  counter.fill_bytes(0);
  const auto counter_words = [&] { return counter.to_host(); };
  for (const g::gemm_path path : device_paths()) {
    if (path == g::gemm_path::portable) continue;  // no tile order
    // run(opt) fills and returns D for one operand pair.
    const auto same_bits = [&](const char* what, auto run) {
      g::gemm_options fixed{path}, dynamic{path};
      dynamic.tile_counter = counter.data();
      const auto want = run(fixed);
      int device = 0, sms = 0;
      MXKIT_GPU_CHECK(g::get_device(&device));
      MXKIT_GPU_CHECK(g::get_multiprocessor_count(&sms, device));
      const std::uint32_t reserved[] = {0, 16, static_cast<std::uint32_t>(sms - 1)};
      for (int i = 0; i < 3; ++i) {
        dynamic.reserved_sms = reserved[i];
        const auto got = run(dynamic);
        INFO(g::name_of(path) << " " << what << ", dynamic run " << i << ", " << reserved[i] << " SMs reserved");
        REQUIRE(got.size() == want.size());
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(got[0])) == 0);
        CHECK(counter_words() == std::vector<std::uint32_t>{0, 0});
      }
      g::gemm_options narrow{path};
      narrow.reserved_sms = 16;
      const auto got = run(narrow);
      INFO(g::name_of(path) << " " << what << ", static order, 16 SMs reserved");
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(got[0])) == 0);
    };
    for (const auto& [p, q, k] : {std::array<std::size_t, 3>{200, 300, 512}, std::array<std::size_t, 3>{2048, 2560, 384}}) {
      INFO("P " << p << " Q " << q << " K " << k);
      const std::vector<bfloat16> ha = random_bf16(p, k, seed + 1), hb = random_bf16(q, k, seed + 2);
      g::device_buffer<bfloat16> da{std::span<const bfloat16>(ha)}, db{std::span<const bfloat16>(hb)};
      same_bits("bf16, bf16 output", [&](const g::gemm_options& o) {
        device_out<bfloat16> d(p, q, q);
        g::gemm(matrix_view<const bfloat16>{da.data(), p, k}, matrix_view<const bfloat16>{db.data(), q, k}, d.view(), {}, nullptr, o);
        MXKIT_GPU_CHECK(g::device_synchronize());
        return d.get();
      });
      std::mt19937_64 rng(seed + 3);
      std::uniform_int_distribution<int> v(-3, 3);
      fp8_tensor fa{fp8_type::e4m3, p, k, 4.0f, 0.0f, std::vector<std::uint8_t>(p * k)}, fb{fp8_type::e5m2, q, k, 0.5f, 0.0f, std::vector<std::uint8_t>(q * k)};
      for (auto& c : fa.data) c = fp8_encode(static_cast<float>(v(rng)), fa.type, 1.0f);
      for (auto& c : fb.data) c = fp8_encode(static_cast<float>(v(rng)), fb.type, 1.0f);
      g::device_buffer<std::uint8_t> dfa{std::span<const std::uint8_t>(fa.data)}, dfb{std::span<const std::uint8_t>(fb.data)};
      same_bits("fp8 e4m3 x e5m2", [&](const g::gemm_options& o) {
        device_out<float> d(p, q, q);
        g::gemm(fp8_view{fa.type, p, k, fa.scale, dfa.data()}, fp8_view{fb.type, q, k, fb.scale, dfb.data()}, d.view(), {1.5f, 0.0f},
                nullptr, o);
        MXKIT_GPU_CHECK(g::device_synchronize());
        return d.get();
      });
      // MXFP4: the folded line-scaled route; MXFP8: bf16 tensor cores; MXFP6: block-scaled FP8.
      for (const mx_type t : {mx_type::mxfp4, mx_type::mxfp8_e4m3, mx_type::mxfp6_e2m3}) {
        const device_mx ma(realistic_mx(p, k, t, seed + 4)), mb(realistic_mx(q, k, t, seed + 5));
        same_bits(name_of(t), [&](const g::gemm_options& o) {
          device_out<float> d(p, q, q);
          g::gemm(ma.view(), mb.view(), d.view(), {}, nullptr, o);
          MXKIT_GPU_CHECK(g::device_synchronize());
          return d.get();
        });
      }
    }
  }
}
