// SPDX-License-Identifier: Apache-2.0
// The device NVFP4 GEMM (gpu/gemm/nvfp4.hpp) against the host reference (ref/nvfp4_gemm.hpp), on
// every bf16 path this build and device offer (portable always; sm90 on an H100/H200 with an
// sm_90a build; cuBLASLt where it loads; and `automatic`), with poisoned outputs (every element
// must be written) and fresh random data (the seed is printed on failure):
//  - "exact" copies (tests/ref/nvfp4_gemm_test_util.hpp: every block's dot product exact in fp32) and
//    quantized Gaussian data, from the host quantizer and from the device one (gpu::quantize_nvfp4,
//    its tensor scales left in device memory), tensor scales on the device and as host values;
//  - ragged P and Q, K a multiple of 16 but not of 32, 16 x 16 weight blocks, a tiled scale
//    layout, alpha/beta, bf16 output, padded leading dimensions;
//  - fprop, dgrad and wgrad on the quantizer's copies; NaN and zero scales, E4M3's extremes;
//  - the refusals, each naming the bad value.
// Bound: the products are exact on every path, so device and reference differ only in the order
// of fp32 adds: |d - ref| <= (2 K + 2 K/16 + 8) u S per element (S = sum |a b| t_a t_b; 2u per
// add allows a tensor core that truncates), plus 2^-7 |d| for a bf16 output's last rounding.
// A wrong scale, block or line moves an element by a block's share of S, far above it.
// Without a GPU the program exits 77 before Catch starts (gpu_skip.cu) and ctest reports a skip.
// Built for arch-specific targets (mxkit:sm90a, tests/gpu/CMakeLists.txt) so the sm90 path exists.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/gpu/gemm/nvfp4.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/quantize_nvfp4.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/ref/nvfp4_gemm.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>

#include "../catch.hpp"
#include "../ref/gemm_test_util.hpp"
#include "../ref/nvfp4_gemm_test_util.hpp"
#include "gemm_epilogue_run.hpp"
#include "gpu_test_util.hpp"

namespace {
using namespace mxkit;
namespace g = mxkit::gpu;
constexpr double u = 0x1p-24;
using gpu_test::device_out;

std::uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// A host NVFP4 copy in device memory: data, scales (in `layout`), its tensor scale as one device float.
struct device_copy {
  nvfp4_tensor host;
  scale_layout layout;
  g::device_buffer<std::uint8_t> data, scales;
  g::device_buffer<float> tensor_scale;
  explicit device_copy(const nvfp4_tensor& t, scale_layout l = scale_layout::row_major)
      : host(t),
        layout(l),
        data(std::span<const std::uint8_t>(t.data())),
        scales(std::span<const std::uint8_t>(
            to_scale_layout(t.scales().data(), t.layout().lines(), t.layout().blocks_per_line(), l))),
        tensor_scale(std::span<const float>(std::vector<float>{t.tensor_scale()})) {
    MXKIT_GPU_CHECK(g::device_synchronize());
  }
  // The operand with its tensor scale on the device, or as the view's host value.
  g::nvfp4_operand operand(bool device_scale = true) const {
    const nvfp4_const_view v{host.layout(), host.options(), data.data(), scales.data(), layout, host.tensor_scale(),
                             host.tensor_scale_from_amax()};
    return {v, device_scale ? tensor_scale.data() : nullptr};
  }
};

// The bf16 paths of this build and device (the NVFP4 GEMM runs one on its expanded copies).
std::vector<g::gemm_path> bf16_paths() {
  g::device_buffer<bfloat16> probe(16 * 16);
  const g::gemm_operand o = g::make_operand(matrix_view<const bfloat16>{probe.data(), 16, 16});
  std::vector<g::gemm_path> paths{g::gemm_path::automatic};
  for (const g::gemm_path p : {g::gemm_path::portable, g::gemm_path::sm90, g::gemm_path::gfx950, g::gemm_path::vendor})
    if (g::detail::gemm_archs::supports(p, o, o)) paths.push_back(p);
  return paths;
}

// The bound's relative part for reduction length k and output type Out.
template <class Out>
double bound(std::size_t k) {
  const double rel = (2.0 * static_cast<double>(k) + 2.0 * static_cast<double>(k / 16) + 8) * u;
  return std::is_same_v<Out, bfloat16> ? rel + 0x1p-7 : rel;
}

// Runs D = alpha A.B^T + beta C on `path` from device operands (da, db) whose host copies are
// (a, b), and compares with the reference on the host copies.
template <class Out>
ref::gemm_validation_report run(const nvfp4_tensor& a, const nvfp4_tensor& b, g::nvfp4_operand da, g::nvfp4_operand db,
                                g::gemm_path path, gemm_epilogue e, std::uint64_t seed, std::size_t ld_pad = 0) {
  const std::size_t p = a.layout().lines(), q = b.layout().lines();
  gpu_test::epilogue_run<Out> out(p, q, ld_pad, e, seed);
  const g::gemm_path used = g::gemm(da, db, out.d.view(), e, nullptr, g::gemm_options{path});
  MXKIT_GPU_CHECK(g::device_synchronize());
  CHECK((path == g::gemm_path::automatic || used == path));
  const std::vector<Out> got = out.d.get();
  std::vector<Out> want = out.reference_start();
  ref::gemm(a.view(), b.view(), matrix_view<Out>{want.data(), p, q}, e.alpha, e.beta);
  return gemm_test::compare(gemm_test::as_double(got), gemm_test::as_double(want), out.magnitude(nvfp4_gemm_test::magnitude(a, b)),
                            bound<Out>(a.layout().line_length()), q);
}

nvfp4_tensor quantized(std::size_t lines, std::size_t k, std::uint64_t seed, const block_format& f = formats::nvfp4) {
  const std::vector<float> x = gemm_test::random_matrix(lines, k, seed);
  return ref::quantize(matrix_view<const float>{x.data(), lines, k}, f, block_axis::rowwise);
}

}  // namespace

TEST_CASE("gpu nvfp4 gemm: every bf16 path matches the reference on exact and quantized data", "[gpu][gemm][nvfp4]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  struct shape {
    std::size_t p, q, k;
  };
  for (const shape sh : {shape{70, 130, 48}, shape{128, 256, 256}, shape{33, 17, 16}, shape{200, 300, 1040}})
    for (const g::gemm_path path : bf16_paths()) {
      INFO(g::name_of(path) << " " << sh.p << "x" << sh.q << "x" << sh.k);
      const nvfp4_tensor ea = nvfp4_gemm_test::exact_nvfp4(sh.p, sh.k, 0.75f, rng), eb = nvfp4_gemm_test::exact_nvfp4(sh.q, sh.k, 3.0f, rng);
      const nvfp4_tensor qa = quantized(sh.p, sh.k, seed ^ 1), qb = quantized(sh.q, sh.k, seed ^ 2, formats::nvfp4_2d);
      const device_copy dea(ea), deb(eb), dqa(qa), dqb(qb, scale_layout::cublas_128x4);
      for (const bool device_scale : {true, false}) {
        INFO("tensor scales " << (device_scale ? "on the device" : "host values"));
        const auto c1 = run<float>(ea, eb, dea.operand(device_scale), deb.operand(device_scale), path, {}, seed);
        const auto c2 = run<float>(qa, qb, dqa.operand(device_scale), dqb.operand(device_scale), path, {1.5f, -0.5f}, seed, 3);
        const auto c3 = run<bfloat16>(qa, qb, dqa.operand(device_scale), dqb.operand(device_scale), path, {1.0f, 1.0f}, seed, 8);
        INFO(c1.summary() << " | " << c2.summary() << " | " << c3.summary());
        CHECK(c1.over_bound == 0);
        CHECK(c2.over_bound == 0);
        CHECK(c3.over_bound == 0);
      }
    }
}

TEST_CASE("gpu nvfp4 gemm: fprop, dgrad and wgrad on the device quantizer's and the host quantizer's copies", "[gpu][gemm][nvfp4]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  // fprop reduces K = 80, dgrad N = 48 (outputs 70 x 48 and 70 x 80: ragged M); wgrad M = 48
  // (output 130 x 48). Every reduction a multiple of 16, 80 and 48 not of 32.
  struct dims {
    std::size_t m, n, k;
  };
  for (const dims dm : {dims{70, 48, 80}, dims{48, 130, 48}}) {
    const std::vector<float> x = gemm_test::random_matrix(dm.m, dm.k, seed ^ 3), w = gemm_test::random_matrix(dm.n, dm.k, seed ^ 4),
                             dy = gemm_test::random_matrix(dm.m, dm.n, seed ^ 5);
    const g::device_buffer<float> dx{std::span<const float>(x)}, dw{std::span<const float>(w)}, ddy{std::span<const float>(dy)};
    const g::device_nvfp4_pair gx = g::quantize_nvfp4_both(matrix_view<const float>{dx.data(), dm.m, dm.k}, formats::nvfp4);
    const g::device_nvfp4_pair gw = g::quantize_nvfp4_both(matrix_view<const float>{dw.data(), dm.n, dm.k}, formats::nvfp4_2d);
    const g::device_nvfp4_pair gdy = g::quantize_nvfp4_both(matrix_view<const float>{ddy.data(), dm.m, dm.n}, formats::nvfp4);
    MXKIT_GPU_CHECK(g::device_synchronize());
    const auto hx = ref::quantize_both(matrix_view<const float>{x.data(), dm.m, dm.k}, formats::nvfp4);
    const auto hw = ref::quantize_both(matrix_view<const float>{w.data(), dm.n, dm.k}, formats::nvfp4_2d);
    const auto hdy = ref::quantize_both(matrix_view<const float>{dy.data(), dm.m, dm.n}, formats::nvfp4);
    struct product_case {
      gemm_product p;
      const g::device_nvfp4_tensor *ga, *gb;
      const nvfp4_tensor *ha, *hb;
    };
    for (const product_case& pc : {product_case{gemm_product::fprop, &gx.rowwise, &gw.rowwise, &hx.rowwise, &hw.rowwise},
                                   product_case{gemm_product::dgrad, &gdy.rowwise, &gw.columnwise, &hdy.rowwise, &hw.columnwise},
                                   product_case{gemm_product::wgrad, &gdy.columnwise, &gx.columnwise, &hdy.columnwise, &hx.columnwise}}) {
      if (pc.ha->layout().line_length() % 16 != 0) continue;  // refused below
      for (const g::gemm_path path : bf16_paths()) {
        INFO(name_of(pc.p) << " " << dm.m << "x" << dm.n << "x" << dm.k << " on " << g::name_of(path));
        const std::size_t rows = pc.ha->layout().lines(), cols = pc.hb->layout().lines();
        // The device quantizer's copies, tensor scales in device memory, through the named product.
        const nvfp4_tensor ta = pc.ga->to_host(), tb = pc.gb->to_host();
        device_out<float> d(rows, cols, cols);
        const g::gemm_path used = pc.p == gemm_product::fprop   ? g::fprop(*pc.ga, *pc.gb, d.view(), {}, nullptr, {path})
                                  : pc.p == gemm_product::dgrad ? g::dgrad(*pc.ga, *pc.gb, d.view(), {}, nullptr, {path})
                                                                : g::wgrad(*pc.ga, *pc.gb, d.view(), {}, nullptr, {path});
        MXKIT_GPU_CHECK(g::device_synchronize());
        CHECK((path == g::gemm_path::automatic || used == path));
        std::vector<float> want(rows * cols);
        ref::product(pc.p, ta.view(), tb.view(), matrix_view<float>{want.data(), rows, cols});
        const auto c1 = gemm_test::compare(gemm_test::as_double(d.get()), gemm_test::as_double(want), nvfp4_gemm_test::magnitude(ta, tb),
                                           bound<float>(ta.layout().line_length()), cols);
        // The host quantizer's copies uploaded (the same bytes, gpu/quantize_nvfp4.hpp), plain gemm.
        const device_copy ha(*pc.ha), hb(*pc.hb);
        const auto c2 = run<float>(*pc.ha, *pc.hb, ha.operand(), hb.operand(), path, {}, seed);
        INFO(c1.summary() << " | " << c2.summary());
        CHECK(c1.over_bound == 0);
        CHECK(c2.over_bound == 0);
      }
    }
  }
}

TEST_CASE("gpu nvfp4 gemm: NaN and zero scales, E4M3's extremes, empty shapes", "[gpu][gemm][nvfp4]") {
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  const std::size_t p = 40, q = 50, k = 64;
  for (const g::gemm_path path : bf16_paths()) {
    INFO(g::name_of(path));
    nvfp4_tensor a = nvfp4_gemm_test::exact_nvfp4(p, k, 1.0f, rng), b = nvfp4_gemm_test::exact_nvfp4(q, k, 0.5f, rng);
    a.scales()[7 * 4 + 2] = 0x7F;  // a NaN scale: row 7 NaN
    b.scales()[11 * 4 + 1] = 0xFF;  // and column 11
    a.scales()[3 * 4 + 0] = 0x00;   // zero scales over non-zero codes: those blocks add nothing
    b.scales()[5 * 4 + 3] = 0x80;
    for (std::size_t i = 0; i < b.scales().size(); i += 3)
      if (i / 4 != 11 && i != 5 * 4 + 3) b.scales()[i] = i % 2 ? 0x01 : 0x7E;  // 2^-9 and 448
    const device_copy da(a), db(b);
    const auto c = run<float>(a, b, da.operand(), db.operand(), path, {}, seed);
    INFO(c.summary());
    CHECK(c.over_bound == 0);
    CHECK(c.nan_mismatches == 0);
    device_out<float> d(p, q, q);
    g::gemm(da.operand(), db.operand(), d.view(), {}, nullptr, {path});
    MXKIT_GPU_CHECK(g::device_synchronize());
    const std::vector<float> got = d.get();
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("element " << i);
      CHECK(std::isnan(got[i]) == (i / q == 7 || i % q == 11));
    }
  }
  // P = 0: nothing launched; K = 0: D = beta C (alpha times an empty sum).
  const nvfp4_tensor a0({formats::nvfp4, block_axis::rowwise, 0, 64}, {}), b3({formats::nvfp4, block_axis::rowwise, 3, 64}, {});
  const device_copy d0(a0), d3(b3);
  g::device_buffer<float> none(1);
  CHECK_NOTHROW(g::gemm(d0.operand(), d3.operand(), matrix_view<float>{none.data(), 0, 3}));
  const nvfp4_tensor k0a({formats::nvfp4, block_axis::rowwise, 2, 0}, {}), k0b({formats::nvfp4, block_axis::rowwise, 3, 0}, {});
  const device_copy dk0a(k0a), dk0b(k0b);
  device_out<float> dk(2, 3, 3);
  dk.set(std::vector<float>(6, 4.0f));
  g::gemm(dk0a.operand(), dk0b.operand(), dk.view(), {1.0f, 0.5f});
  MXKIT_GPU_CHECK(g::device_synchronize());
  CHECK(dk.get() == std::vector<float>(6, 2.0f));
}

TEST_CASE("gpu nvfp4 gemm: refusals name the bad value", "[gpu][gemm][nvfp4]") {
  using mxkit_test::contains;
  const nvfp4_tensor x = quantized(32, 64, 1), w = quantized(16, 64, 2), w48 = quantized(16, 48, 3);
  const std::vector<float> src = gemm_test::random_matrix(32, 40, 4);
  const nvfp4_tensor x40 = ref::quantize(matrix_view<const float>{src.data(), 32, 40}, formats::nvfp4, block_axis::rowwise);
  const auto both = ref::quantize_both(matrix_view<const float>{src.data(), 32, 32}, formats::nvfp4);
  const device_copy dx(x), dw(w), dw48(w48), dx40(x40), drow(both.rowwise), dcol(both.columnwise);
  device_out<float> d(32, 16, 16);
  REQUIRE_THROWS_WITH(g::fprop(dx.operand(), dw48.operand(), d.view()), contains("fprop: X is 32x64 but W is 16x48 (K must match)"));
  REQUIRE_THROWS_WITH(g::gemm(dx.operand(), dw48.operand(), d.view()), contains("gemm: reduction lengths differ: A has 64"));
  device_out<float> d32(32, 32, 32);
  REQUIRE_THROWS_WITH(g::gemm(dx40.operand(), dx40.operand(), d32.view()),
                      contains("reduction length K=40 is not a multiple of the NVFP4 block size 16"));
  REQUIRE_THROWS_WITH(g::fprop(drow.operand(), dcol.operand(), d32.view()), contains("fprop: W must be the rowwise copy, got the columnwise copy"));
  REQUIRE_THROWS_WITH(g::wgrad(drow.operand(), dcol.operand(), d32.view()), contains("wgrad: dY must be the columnwise copy"));
  g::nvfp4_operand null_scales = dx.operand();
  null_scales.copy.scales = nullptr;
  REQUIRE_THROWS_WITH(g::gemm(null_scales, dw.operand(), d.view()), contains("gemm: A has null data or scales (data set, scales null)"));
  REQUIRE_THROWS_WITH(g::gemm(dx.operand(true), dw.operand(false), d.view()),
                      contains("tensor scales must both be in device memory or both host values"));
  g::nvfp4_operand bad_t = dw.operand(false);
  bad_t.copy.tensor_scale = -1.0f;
  REQUIRE_THROWS_WITH(g::gemm(dx.operand(false), bad_t, d.view()), contains("gemm: B: tensor scale -1"));
  g::nvfp4_operand misaligned = dx.operand();
  misaligned.copy.data += 4;
  REQUIRE_THROWS_WITH(g::gemm(misaligned, dw.operand(), d.view()), contains("must be 8-byte aligned"));
  g::nvfp4_operand rotated = dx.operand();
  rotated.copy.options.hadamard = true;
  REQUIRE_THROWS_WITH(g::gemm(rotated, dw.operand(), d.view()), contains("operands were rotated differently"));
  device_out<float> wrong(32, 15, 15);
  REQUIRE_THROWS_WITH(g::gemm(dx.operand(), dw.operand(), wrong.view()), contains("gemm: output is 32x15, expected 32x16"));
}
