// SPDX-License-Identifier: Apache-2.0
// The vendor GEMM path (gpu/gemm/vendor/: cuBLASLt, loaded at run time) against the fp64 oracle
// and the host reference, on fresh random data (the seed is printed on failure) with poisoned
// outputs (NaN bytes: every element must be written):
//   - bf16 x bf16 in all four storage-order pairs, fp32 and bf16 D, beta 0 and 1, ragged shapes;
//   - per-tensor FP8 (E4M3 x E4M3 and the E4M3/E5M2 mixes) with host scale_inv and device scales;
//   - two runs give the same bits (one algorithm per problem, no in-place split-K reduction);
//   - `automatic` takes vendor for bf16 and FP8 where cuBLASLt loads, gemm_options::path = sm90
//     still runs mxkit's kernel, and what cuBLASLt cannot take (MX operands, E5M2 x E5M2, empty
//     K, FP8 outputs without 16-byte rows) goes to the other paths.
// Without a GPU the program exits 77 before Catch starts (gpu_skip.cu); without cuBLASLt the
// cases that need it warn and return. Built for arch-specific targets (mxkit:sm90a) so the sm90
// path is there to compare with.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/ref/gemm.hpp>

#include "../catch.hpp"
#include "../ref/gemm_test_util.hpp"
#include "gpu_test_util.hpp"

namespace {
using namespace mxkit;
namespace g = mxkit::gpu;
constexpr double u = 0x1p-24;

static_assert(enum_count<g::gemm_path> == 5 && std::string_view(g::name_of(g::gemm_path::vendor)) == "vendor");

std::uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

using gemm_test::as_double;
using gemm_test::as_float;
using gemm_test::random_bf16;
double to_double(float v) { return v; }
double to_double(bfloat16 v) { return v.to_float(); }
template <class T>
T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return T::from_float(v);
}
template <class T>
bool same_bits(const std::vector<T>& x, const std::vector<T>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

using gpu_test::device_out;  // D on the device, poisoned or holding C (set: the logical values)

// Whether the vendor path runs here: a 16 x 16 x 16 bf16 product is `automatic`'s vendor choice.
bool vendor_runs() {
  static const bool on = [] {
    g::device_buffer<bfloat16> x(16 * 16);
    const g::gemm_operand o = g::make_operand(matrix_view<const bfloat16>{x.data(), 16, 16});
    return g::detail::automatic_path_of(o, o) == g::gemm_path::vendor;
  }();
  return on;
}
// An FP8 probe: the vendor path where cuBLASLt has FP8 kernels for this device (sm_89 and newer).
g::gemm_path fp8_automatic() {
  static const g::gemm_path p = [] {
    g::device_buffer<std::uint8_t> x(16 * 128);
    const g::gemm_operand o = g::make_operand(fp8_view{fp8_type::e4m3, 16, 128, 1.0f, x.data()});
    return g::detail::automatic_path_of(o, o);
  }();
  return p;
}
bool sm90_runs() {
#if MXKIT_GPU_CUDA
  static const bool on = [] {
    g::device_buffer<std::uint8_t> x(16 * 128);
    const g::gemm_operand o = g::make_operand(fp8_view{fp8_type::e4m3, 16, 128, 1.0f, x.data()});
    return g::sm90::gemm_arch::supports(o, o);
  }();
  return on;
#else
  return false;  // HIP: gfx950 and portable (this file is compiled, never run, there)
#endif
}
bool skip_without_vendor() {
  if (vendor_runs()) return false;
  WARN("cuBLASLt does not load here (or the device is older than sm_80): the vendor path is not exercised");
  return true;
}

g::gemm_options forced(g::gemm_path p) {
  g::gemm_options o;
  o.path = p;
  return o;
}

}  // namespace

TEST_CASE("gpu gemm vendor: the library and what automatic takes", "[gpu][gemm][vendor]") {
  // MXKIT_EXPECT_GEMM_PATH=sm90 (scripts/gpu.sh on an H100/H200) also expects cuBLASLt there.
#if MXKIT_GPU_CUDA
  const bool expect = std::getenv("MXKIT_EXPECT_GEMM_PATH") != nullptr;
  if (g::cublaslt::available()) {
    WARN("cuBLASLt: " << g::cublaslt::library().library << ", version " << g::cublaslt::library().version);
  } else {
    try {
      (void)g::cublaslt::library();
    } catch (const std::exception& e) {
      WARN(e.what());
    }
  }
  if (expect) CHECK(vendor_runs());
#else
  CHECK(!vendor_runs());  // HIP has no vendor path (hipBLASLt would be it)
#endif
  // MX operands never take the vendor path, on any device.
  const mx_tensor probe({formats::mxfp8_e4m3, block_axis::rowwise, 16, 64}, {});
  g::device_buffer<std::uint8_t> data{std::span<const std::uint8_t>(probe.data())}, scales{std::span<const std::uint8_t>(probe.scales())};
  const mx_const_view mv{probe.layout(), probe.options(), data.data(), scales.data()};
  CHECK(g::automatic_path(mv, mv) != g::gemm_path::vendor);
  device_out<float> d(16, 16, 16);
  CHECK_THROWS_AS(g::gemm(mv, mv, d.view(), {}, nullptr, forced(g::gemm_path::vendor)), std::invalid_argument);
}

TEST_CASE("gpu gemm vendor: bf16 in every storage order, fp32 and bf16 D, beta 0 and 1, against the oracle", "[gpu][gemm][vendor]") {
  if (skip_without_vendor()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  struct shape {
    std::size_t p, q, k, ld_pad;
  };
  const auto run_shape = [&](const shape sh, auto out_tag) {
    using Out = decltype(out_tag);
    const std::size_t p = sh.p, q = sh.q, k = sh.k, ldd = q + sh.ld_pad;
    const std::vector<bfloat16> ha = random_bf16(p, k, seed + p), hb = random_bf16(q, k, seed + q + 1);
    const std::vector<bfloat16> hat = gemm_test::transposed(ha, p, k), hbt = gemm_test::transposed(hb, q, k);
    g::device_buffer<bfloat16> da{std::span<const bfloat16>(ha)}, db{std::span<const bfloat16>(hb)}, dat{std::span<const bfloat16>(hat)},
        dbt{std::span<const bfloat16>(hbt)};
    MXKIT_GPU_CHECK(g::device_synchronize());
    const auto o = gemm_test::oracle_tn(as_float(ha), as_float(hb), p, q, k);
    const std::vector<float> cf = gemm_test::random_matrix(p, q, seed ^ 0xC, 1);
    std::vector<Out> c(p * q);
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = from_float<Out>(cf[i]);
    const matrix_view<const bfloat16> va{da.data(), p, k}, vb{db.data(), q, k}, vat{dat.data(), k, p}, vbt{dbt.data(), k, q};
    for (const float beta : {0.0f, 1.0f}) {
      const gemm_epilogue e{1.5f, beta};
      std::vector<double> want(p * q), s(p * q);
      for (std::size_t i = 0; i < want.size(); ++i) {
        want[i] = 1.5 * o.d[i] + beta * to_double(c[i]);
        s[i] = 1.5 * o.s[i] + std::fabs(beta * to_double(c[i]));
      }
      double rel = (2.0 * static_cast<double>(k) + 8) * u;
      if constexpr (std::is_same_v<Out, bfloat16>) rel += 0x1p-7;  // D rounded to bf16 (to_double(c) is exact)
      for (int orders = 0; orders < 4; ++orders) {
        const bool mn_a = orders & 2, mn_b = orders & 1;
        INFO(p << "x" << q << "x" << k << " ldd " << ldd << (std::is_same_v<Out, bfloat16> ? " bf16" : " fp32") << " D, beta " << beta
               << ", A " << (mn_a ? "MN" : "K") << "-major, B " << (mn_b ? "MN" : "K") << "-major");
        std::vector<Out> first;
        for (int run = 0; run < 2; ++run) {
          device_out<Out> d(p, q, ldd);
          if (beta != 0.0f) d.set(c);
          const g::gemm_path used =
              g::gemm(mn_a ? vat : va, mn_a ? g::major_order::mn_major : g::major_order::k_major, mn_b ? vbt : vb,
                      mn_b ? g::major_order::mn_major : g::major_order::k_major, d.view(), e, nullptr);
          MXKIT_GPU_CHECK(g::device_synchronize());
          CHECK(used == g::gemm_path::vendor);  // automatic
          const std::vector<Out> got = d.get();
          if (run == 0) {
            const auto cmp = gemm_test::compare(as_double(got), want, s, rel, q);
            INFO(cmp);
            CHECK(cmp.over_bound == 0);
            first = got;
          } else {
            CHECK(same_bits(first, got));
          }
        }
      }
    }
  };
  // Ragged (200 x 136 x 264), odd and unaligned (97 x 131 x 77: 154-byte rows), padded D, and a
  // long K (split-K candidates).
  for (const shape sh : {shape{200, 136, 264, 0}, shape{97, 131, 77, 3}, shape{64, 96, 4096, 8}}) {
    run_shape(sh, float{});
    run_shape(sh, bfloat16{});
  }
}

TEST_CASE("gpu gemm vendor: forcing sm90 runs mxkit's kernel; both paths agree with the oracle", "[gpu][gemm][vendor]") {
  if (skip_without_vendor()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  const std::size_t p = 200, q = 136, k = 264;
  const std::vector<bfloat16> ha = random_bf16(p, k, seed + 1), hb = random_bf16(q, k, seed + 2);
  g::device_buffer<bfloat16> da{std::span<const bfloat16>(ha)}, db{std::span<const bfloat16>(hb)};
  MXKIT_GPU_CHECK(g::device_synchronize());
  const auto o = gemm_test::oracle_tn(as_float(ha), as_float(hb), p, q, k);
  const matrix_view<const bfloat16> va{da.data(), p, k}, vb{db.data(), q, k};
  std::vector<std::vector<float>> results;
  for (const g::gemm_path path : {g::gemm_path::automatic, g::gemm_path::vendor, g::gemm_path::sm90, g::gemm_path::portable}) {
    if (path == g::gemm_path::sm90 && !sm90_runs()) continue;
    device_out<float> d(p, q, q);
    const g::gemm_path used = g::gemm(va, vb, d.view(), {}, nullptr, forced(path));
    MXKIT_GPU_CHECK(g::device_synchronize());
    CHECK(used == (path == g::gemm_path::automatic ? g::gemm_path::vendor : path));
    const std::vector<float> got = d.get();
    const auto cmp = gemm_test::compare(as_double(got), o.d, o.s, (2.0 * k + 8) * u, q);
    INFO(g::name_of(path) << ": " << cmp);
    CHECK(cmp.over_bound == 0);
    results.push_back(got);
  }
  // gemm_options::vendor = false keeps automatic on mxkit's kernels.
  {
    g::gemm_options own;
    own.vendor = false;
    device_out<float> d(p, q, q);
    const g::gemm_path used = g::gemm(va, vb, d.view(), {}, nullptr, own);
    MXKIT_GPU_CHECK(g::device_synchronize());
    CHECK(used == (sm90_runs() ? g::gemm_path::sm90 : g::gemm_path::portable));
  }
  // C in a buffer of its own with another leading dimension (the device backend's residual
  // form): cuBLASLt's C layout is ldc, D's ldd.
  {
    const std::size_t ldc = q + 5, ldd = q + 2;
    const std::vector<float> cf = gemm_test::random_matrix(p, q, seed + 3, 1);
    device_out<float> c(p, q, ldc), d(p, q, ldd);
    c.set(cf);
    const g::gemm_output_desc out{d.buf.data(), c.buf.data(), ldd, ldc, false, 0.5f, 1.0f};
    const g::gemm_path used = g::detail::run(g::make_operand(va), g::make_operand(vb), out, nullptr, {});
    MXKIT_GPU_CHECK(g::device_synchronize());
    CHECK(used == g::gemm_path::vendor);
    std::vector<double> want(p * q), s(p * q);
    for (std::size_t i = 0; i < want.size(); ++i) {
      want[i] = 0.5 * o.d[i] + cf[i];
      s[i] = 0.5 * o.s[i] + std::fabs(cf[i]);
    }
    const auto cmp = gemm_test::compare(as_double(d.get()), want, s, (2.0 * k + 8) * u, q);
    INFO("separate C: " << cmp);
    CHECK(cmp.over_bound == 0);
    CHECK(same_bits(c.get(), cf));  // C is only read
  }
  CHECK(same_bits(results[0], results[1]));  // automatic is vendor
  // Every pair of paths within twice the bound of one (the fp32 sums of each).
  const std::vector<double> vendor = as_double(results[1]);
  for (std::size_t r = 2; r < results.size(); ++r) {
    const auto cmp = gemm_test::compare(as_double(results[r]), vendor, o.s, 2 * (2.0 * k + 8) * u, q);
    INFO("path " << r << " against vendor: " << cmp);
    CHECK(cmp.over_bound == 0);
  }
}

TEST_CASE("gpu gemm vendor: what cuBLASLt cannot take goes to the other paths", "[gpu][gemm][vendor]") {
  if (skip_without_vendor()) return;
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  // Empty K: D = beta C, written by the portable kernel (vendor and sm90 refuse K = 0).
  {
    const std::size_t p = 40, q = 24;
    const std::vector<float> c = gemm_test::random_matrix(p, q, seed, 1);
    device_out<float> d(p, q, q);
    d.set(c);
    const matrix_view<const bfloat16> va{nullptr, p, 0}, vb{nullptr, q, 0};
    const g::gemm_path used = g::gemm(va, vb, d.view(), {1.5f, 0.5f}, nullptr);
    MXKIT_GPU_CHECK(g::device_synchronize());
    CHECK(used == g::gemm_path::portable);
    const std::vector<float> got = d.get();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != 0.5f * c[i];
    CHECK(wrong == 0);
    CHECK_THROWS_AS(g::gemm(va, vb, d.view(), {1.5f, 0.5f}, nullptr, forced(g::gemm_path::vendor)), std::invalid_argument);
  }
  // FP8: E5M2 x E5M2 (no cuBLASLt kernel), K not a multiple of 16, and D rows that are not
  // 16-byte multiples (fp32 D with Q = 131): each runs on another path, still right.
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> v(-3, 3);
  struct fp8_case {
    const char* what;
    fp8_type ta, tb;
    std::size_t p, q, k;
  };
  for (const fp8_case fc : {fp8_case{"e5m2 x e5m2", fp8_type::e5m2, fp8_type::e5m2, 64, 128, 256},
                            fp8_case{"K = 88", fp8_type::e4m3, fp8_type::e4m3, 64, 128, 88},
                            fp8_case{"Q = 131, fp32 D", fp8_type::e4m3, fp8_type::e4m3, 64, 131, 256}}) {
    INFO(fc.what);
    fp8_tensor a{fc.ta, fc.p, fc.k, 4.0f, 0.0f, std::vector<std::uint8_t>(fc.p * fc.k)};
    fp8_tensor b{fc.tb, fc.q, fc.k, 0.5f, 0.0f, std::vector<std::uint8_t>(fc.q * fc.k)};
    for (auto& x : a.data) x = fp8_encode(static_cast<float>(v(rng)), a.type, 1.0f);
    for (auto& x : b.data) x = fp8_encode(static_cast<float>(v(rng)), b.type, 1.0f);
    g::device_buffer<std::uint8_t> da{std::span<const std::uint8_t>(a.data)}, db{std::span<const std::uint8_t>(b.data)};
    MXKIT_GPU_CHECK(g::device_synchronize());
    const fp8_view va{a.type, fc.p, fc.k, a.scale, da.data()}, vb{b.type, fc.q, fc.k, b.scale, db.data()};
    device_out<float> d(fc.p, fc.q, fc.q);
    const g::gemm_path used = g::gemm(va, vb, d.view(), {1.5f, 0.0f}, nullptr);
    MXKIT_GPU_CHECK(g::device_synchronize());
    CHECK(used != g::gemm_path::vendor);
    std::vector<float> want(fc.p * fc.q);
    ref::gemm(a, b, matrix_view<float>{want.data(), fc.p, fc.q}, 1.5f);
    std::vector<double> s(want.size(), 1.5 * 9.0 * static_cast<double>(fc.k) / 2.0);
    const auto cmp = gemm_test::compare(as_double(d.get()), as_double(want), s, 4 * u, fc.q);
    INFO(g::name_of(used) << ": " << cmp);
    CHECK(cmp.over_bound == 0);
    device_out<float> d2(fc.p, fc.q, fc.q);
    CHECK_THROWS_AS(g::gemm(va, vb, d2.view(), {1.5f, 0.0f}, nullptr, forced(g::gemm_path::vendor)), std::invalid_argument);
  }
}

TEST_CASE("gpu gemm vendor: per-tensor FP8 with host and device scales, fp32 and bf16 D, beta", "[gpu][gemm][vendor]") {
  if (skip_without_vendor()) return;
  if (fp8_automatic() != g::gemm_path::vendor) {
    WARN("no FP8 tensor cores (sm_89 or newer needed): the vendor FP8 path is not exercised");
    return;
  }
  const std::uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  // Integer codes in [-3, 3] and power-of-two scales: every product and sum is exact in fp32, so
  // any path that promotes its tensor-core sums gives the reference's values.
  std::uniform_int_distribution<int> v(-3, 3);
  const std::size_t p = 200, q = 136, k = 272;
  const float scale_a = 4.0f, scale_b = 0.5f;
  g::device_buffer<float> scales{std::span<const float>(std::vector<float>{scale_a, scale_b})};
  for (const auto& [ta, tb] : {std::pair{fp8_type::e4m3, fp8_type::e4m3}, std::pair{fp8_type::e4m3, fp8_type::e5m2},
                               std::pair{fp8_type::e5m2, fp8_type::e4m3}}) {
    fp8_tensor a{ta, p, k, scale_a, 0.0f, std::vector<std::uint8_t>(p * k)}, b{tb, q, k, scale_b, 0.0f, std::vector<std::uint8_t>(q * k)};
    for (auto& x : a.data) x = fp8_encode(static_cast<float>(v(rng)), ta, 1.0f);
    for (auto& x : b.data) x = fp8_encode(static_cast<float>(v(rng)), tb, 1.0f);
    g::device_buffer<std::uint8_t> da{std::span<const std::uint8_t>(a.data)}, db{std::span<const std::uint8_t>(b.data)};
    MXKIT_GPU_CHECK(g::device_synchronize());
    const std::vector<float> cf = gemm_test::random_matrix(p, q, seed ^ 0xF, 1);
    // Scales: 0 both on the host (folded into alpha), 1 both on the device (alpha written on the
    // device by a kernel), 2 A's on the device and B's on the host.
    for (int where = 0; where < 3; ++where)
      for (const float beta : {0.0f, 1.0f}) {
        const auto check_out = [&](auto out_tag) {
          using Out = decltype(out_tag);
          INFO(name_of(ta) << " x " << name_of(tb) << ", scales " << (where == 0 ? "host" : where == 1 ? "device" : "A device, B host")
                           << ", beta " << beta << (std::is_same_v<Out, bfloat16> ? ", bf16 D" : ", fp32 D"));
          g::gemm_operand oa = g::make_operand(fp8_view{ta, p, k, where == 0 ? scale_a : 1.0f, da.data()});
          g::gemm_operand ob = g::make_operand(fp8_view{tb, q, k, where == 1 ? 1.0f : scale_b, db.data()});
          if (where >= 1) oa.scale = scales.data();
          if (where == 1) ob.scale = scales.data() + 1;
          std::vector<Out> c(p * q);
          for (std::size_t i = 0; i < c.size(); ++i) c[i] = from_float<Out>(cf[i]);
          std::vector<Out> want = c;
          ref::gemm(a, b, matrix_view<Out>{want.data(), p, q}, 1.5f, beta);
          std::vector<double> s(p * q);
          for (std::size_t i = 0; i < s.size(); ++i) s[i] = 1.5 * 9.0 * static_cast<double>(k) / 2.0 + std::fabs(beta * to_double(c[i]));
          const double rel = std::is_same_v<Out, bfloat16> ? 0x1p-7 + 4 * u : 4 * u;
          std::vector<Out> first;
          for (int run = 0; run < 2; ++run) {
            device_out<Out> d(p, q, q);
            if (beta != 0.0f) d.set(c);
            const g::gemm_path used = g::detail::run(oa, ob, g::detail::make_output(d.view(), gemm_epilogue{1.5f, beta}), nullptr, {});
            MXKIT_GPU_CHECK(g::device_synchronize());
            // Device scales too: folded into a device-side alpha (cublaslt.hpp).
            CHECK(used == g::gemm_path::vendor);
            const std::vector<Out> got = d.get();
            if (run == 0) {
              const auto cmp = gemm_test::compare(as_double(got), as_double(want), s, rel, q);
              INFO(cmp);
              CHECK(cmp.over_bound == 0);
              first = got;
            } else {
              CHECK(same_bits(first, got));
            }
          }
        };
        check_out(float{});
        check_out(bfloat16{});
      }
  }
}
