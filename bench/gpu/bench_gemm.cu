// SPDX-License-Identifier: Apache-2.0
// GEMM benchmark (mxkit:sm90a): TFLOP/s of mxkit's device GEMMs for the Llama 3.1 8B and Llama 2
// 70B linear layers at 8192 tokens, all three training products (fprop Y = X.W^T, dgrad dX = dY.W,
// wgrad dW = dY^T.X), in MXFP4, MXFP8 (E4M3), HYBRID (E5M2 gradients x E4M3) and per-tensor FP8,
// with cuBLAS BF16 and cuBLASLt FP8 (per-tensor E4M3, fp32 accumulation without fast accumulate)
// timed in the same run on the same device. Output bf16.
//
// Defaults: MXFP4 x MXFP4 runs line-scaled (folded into E5M2, exact block sums), MXFP8 and
// HYBRID on bf16 tensor cores (scales applied on expansion). On the fprop shapes two variants
// are timed as well: MXFP4 with four blocks per tensor-core sum (gemm_options::exact_block_sums
// = false) and MXFP8 on the FP8 block-scaled kernel (mxfp8_via_bf16 = false). mxkit's bf16 x
// bf16 is timed beside cuBLAS's. The fp8-pt and bf16 columns are mxkit's own kernels
// (gemm_options::vendor = false): `automatic` would take the vendor path (cuBLASLt itself) there. Each case is validated before it is timed: fresh random operands (random element codes over
// each format's finite range, random E8M0 scales 2^-4 .. 2^4) are generated on the device, the
// output is poisoned (NaN bytes), and a sample of output rows (all columns) is compared with the
// host reference (ref/gemm.hpp) computed on 16 threads; a full host reference of the largest
// shapes would take hours. Bounds: |d - ref| <= rel * S, S = sum |a b| (ref on sign-stripped
// copies); rel = (2 R/32 + 40) 2^-24 where block sums are exact (MXFP4 x MXFP4), 2^-8 for the FP8
// tensor-core paths (2^-7 per-tensor: 128-long tensor-core sums), + 2^-7 for the bf16 output
// (one ulp). The worst |d - ref| / S is printed (the GPU tests measured ~4e-4 on MX data).
// NVFP4 (gpu/gemm/nvfp4.hpp): random E2M1 codes, random E4M3 block scales 2^-4 .. 2^4 (any
// mantissa), tensor scales in device memory; timed with its expansion to bf16 (the quantizer
// excluded), on the default path (`automatic`: cuBLASLt bf16 where it loads) and on mxkit's own
// bf16 kernel (vendor = false); rel = (2 R + 2 R/16 + 8) 2^-24 (exact products, fp32 sums).
// MXFP8 and HYBRID take the default path too: expanded to bf16, the product on cuBLASLt where it
// loads (sm90/dispatch.hpp); their "own" columns keep the product on mxkit's bf16 kernel
// (vendor = false), what the plain columns measured before that route existed.
// The issue's target: NVFP4 >= 0.95x cuBLAS bf16 at 8192^3 (`--quick --format nvfp4`).
// `--format expand`: the passes before a Hopper MX product alone (gpu/gemm/expand.hpp), on every
// distinct operand of the layers' three products: MXFP8 to bf16 and MXFP4 folded into E5M2, in
// GB/s (code and scale bytes read, bytes written), against a device-to-device copy of the same
// number of bytes timed beside each; every output checked first (sampled lines against the
// host's exact values).
//
//   bench_gemm [--record | --results FILE] [--repeats N] [--quick] [--format F] [--model M] [--no-check] [--no-peers]
// --quick: the 8192^3 fprop only (the issue's target shape); --format mxfp4|mxfp8|hybrid|fp8|bf16|nvfp4|expand:
// that format only; --model 8B|70B|76M: that model's layers only; --no-check / --no-peers: skip
// validation / the cuBLAS peers (profiling runs).
// Not a test: nothing here asserts a speed. On HIP builds this file is device-compiled only and
// main() says so.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/gemm/nvfp4.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/random/philox.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/nvfp4_gemm.hpp>

#include "bench_common.hpp"

#if MXKIT_GPU_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#endif

#if MXKIT_GPU_CUDA
namespace {
using namespace mxkit;
namespace g = mxkit::gpu;

// ---- random operands on the device --------------------------------------------------------------
enum class fill_kind : int { fp4, e4m3, e5m2, fp6, bf16_values, scales, nvfp4_scales };

__global__ void fill_random(std::uint8_t* p, std::size_t n, std::uint64_t seed, int kind) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t r = random_bits(seed, 7, i);
  std::uint8_t c = static_cast<std::uint8_t>(r);
  switch (static_cast<fill_kind>(kind)) {
    case fill_kind::fp4: break;                                                  // every nibble is a value
    case fill_kind::e4m3: c = (c & 0x7F) == 0x7F ? static_cast<std::uint8_t>(c ^ 1) : c; break;  // no NaN
    case fill_kind::e5m2: c = (c & 0x7C) == 0x7C ? static_cast<std::uint8_t>(c & ~0x40) : c; break;  // no Inf/NaN
    case fill_kind::fp6: c &= 0x3F; break;
    case fill_kind::bf16_values:  // byte pairs: low byte random mantissa, high byte sign + exponent 2^-4..2^3
      c = (i & 1) ? static_cast<std::uint8_t>((r >> 8 & 0x80) | (0x3D + (r >> 16) % 4)) : c;
      break;
    case fill_kind::scales: c = static_cast<std::uint8_t>(127 - 4 + (r >> 8) % 9); break;
    case fill_kind::nvfp4_scales: c = static_cast<std::uint8_t>((7 - 4 + (r >> 8) % 9) << 3 | (r >> 16 & 7)); break;  // E4M3 2^-4 .. 2^4
  }
  p[i] = c;
}

void fill(std::uint8_t* p, std::size_t n, std::uint64_t seed, fill_kind k) {
  if (n == 0) return;
  fill_random<<<static_cast<unsigned>((n + 255) / 256), 256>>>(p, n, seed, static_cast<int>(k));
  MXKIT_GPU_CHECK_LAUNCH();
}

fill_kind element_fill(mx_type t) {
  switch (t) {
    case mx_type::mxfp4: return fill_kind::fp4;
    case mx_type::mxfp8_e5m2: return fill_kind::e5m2;
    case mx_type::mxfp6_e2m3:
    case mx_type::mxfp6_e3m2: return fill_kind::fp6;
    default: return fill_kind::e4m3;
  }
}

// ---- the shapes ----------------------------------------------------------------------------------
struct layer {
  const char* name;
  std::size_t m, n, k;  // Y[M,N] = X[M,K] . W[N,K]^T
};
const layer layers[] = {
    {"8B qkv", 8192, 6144, 4096},    {"8B o", 8192, 4096, 4096},     {"8B gate_up", 8192, 28672, 4096},
    {"8B down", 8192, 4096, 14336},  {"70B qkv", 8192, 10240, 8192}, {"70B o", 8192, 8192, 8192},
    {"70B gate_up", 8192, 57344, 8192}, {"70B down", 8192, 8192, 28672},
    // The 76 M training model of bench_train (d768, 4 KV heads of 64, SwiGLU 2048), B16 x T1024:
    // K or N of 768 gives short reductions and few tiles, where per-tile costs show.
    {"76M qkv", 16384, 1280, 768},      {"76M o", 16384, 768, 768},     {"76M gate_up", 16384, 4096, 768},
    {"76M down", 16384, 768, 2048},
};

// The stored copies each product takes (gemm/product.hpp): {axis, logical rows, logical cols}.
struct copy_shape {
  block_axis axis;
  std::size_t rows, cols;
};
struct product_shapes {
  copy_shape a, b;
  gemm_shape tn;
};
product_shapes shapes_of(gemm_product p, const layer& l) {
  switch (p) {
    case gemm_product::fprop: return {{block_axis::rowwise, l.m, l.k}, {block_axis::rowwise, l.n, l.k}, {l.m, l.n, l.k}};
    case gemm_product::dgrad: return {{block_axis::rowwise, l.m, l.n}, {block_axis::columnwise, l.n, l.k}, {l.m, l.k, l.n}};
    case gemm_product::wgrad: return {{block_axis::columnwise, l.m, l.n}, {block_axis::columnwise, l.m, l.k}, {l.n, l.k, l.m}};
  }
  return {};
}

// ---- a device MX copy and its host mirror -----------------------------------------------------
struct mx_operand {
  block_layout layout;
  g::device_buffer<std::uint8_t> data, scales;
  mx_operand(mx_type t, copy_shape s, std::uint64_t seed)
      : layout{format_of(t), s.axis, s.rows, s.cols}, data(layout.data_bytes()), scales(layout.scale_count()) {
    fill(data.data(), data.size(), seed, element_fill(t));
    fill(scales.data(), scales.size(), seed ^ 0x5CA1E, fill_kind::scales);
  }
  mx_const_view view() const { return {layout, {}, data.data(), scales.data()}; }
};

// ---- a device NVFP4 copy (random codes and E4M3 scales, a tensor scale in device memory) --------
struct nvfp4_device_copy {
  block_layout layout;
  float t;
  g::device_buffer<std::uint8_t> data, scales;
  g::device_buffer<float> tensor_scale;
  nvfp4_device_copy(copy_shape s, float t_, std::uint64_t seed)
      : layout{formats::nvfp4, s.axis, s.rows, s.cols}, t(t_), data(layout.data_bytes()), scales(layout.scale_count()),
        tensor_scale(std::span<const float>(std::vector<float>{t_})) {
    fill(data.data(), data.size(), seed, fill_kind::fp4);
    fill(scales.data(), scales.size(), seed ^ 0x5CA1E, fill_kind::nvfp4_scales);
  }
  g::nvfp4_operand operand() const { return {nvfp4_const_view{layout, {}, data.data(), scales.data()}, tensor_scale.data()}; }
  nvfp4_tensor host() const {
    nvfp4_tensor h(layout, {}, t, false);
    const std::vector<std::uint8_t> d = data.to_host(), sc = scales.to_host();
    std::copy(d.begin(), d.end(), h.data().begin());
    std::copy(sc.begin(), sc.end(), h.scales().begin());
    return h;
  }
};
// Lines [first, first + n) of a host NVFP4 copy (row-major scales) as a view, and a sign-stripped copy.
nvfp4_const_view nvfp4_lines(const nvfp4_tensor& t, std::size_t first, std::size_t n) {
  nvfp4_const_view v = t.view();
  (v.layout.axis == block_axis::rowwise ? v.layout.rows : v.layout.cols) = n;
  v.data += first * t.layout().line_bytes();
  v.scales += first * t.layout().blocks_per_line();
  return v;
}
nvfp4_tensor nvfp4_abs(nvfp4_const_view v) {
  nvfp4_tensor a(v.layout, v.options, v.tensor_scale, false);
  for (std::size_t i = 0; i < a.data().size(); ++i) a.data()[i] = v.data[i] & 0x77;
  std::memcpy(a.scales().data(), v.scales, a.scales().size());
  return a;
}
nvfp4_tensor nvfp4_gather(const nvfp4_tensor& t, const std::vector<std::size_t>& lines) {
  block_layout l = t.layout();
  (l.axis == block_axis::rowwise ? l.rows : l.cols) = lines.size();
  nvfp4_tensor g(l, t.options(), t.tensor_scale(), false);
  const std::size_t lb = l.line_bytes(), nb = l.blocks_per_line();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::memcpy(g.data().data() + i * lb, t.data().data() + lines[i] * lb, lb);
    std::memcpy(g.scales().data() + i * nb, t.scales().data() + lines[i] * nb, nb);
  }
  return g;
}

// ---- host reference on sampled rows ---------------------------------------------------------------
std::uint8_t abs_code(mx_type t, std::uint8_t c) {
  if (t == mx_type::mxfp4) return c & 0x77;  // both nibbles of a packed byte
  if (t == mx_type::mxfp6_e2m3 || t == mx_type::mxfp6_e3m2) return c & 0x1F;
  return c & 0x7F;
}
mx_tensor abs_copy(mx_const_view v) {
  mx_tensor t(v.layout, v.options);
  for (std::size_t i = 0; i < t.data().size(); ++i) t.data()[i] = abs_code(v.layout.mx(), v.data[i]);
  std::memcpy(t.scales().data(), v.scales, t.scales().size());
  return t;
}
mx_tensor host_copy(const mx_operand& o) {
  mx_tensor t(o.layout, {});
  t.set_data(o.data.to_host());
  t.set_scales(o.scales.to_host());
  return t;
}

// Runs fn(j0, n) over column chunks [j0, j0+n) of 0..q on up to 16 threads.
template <class F>
void parallel_columns(std::size_t q, F&& fn) {
  const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  constexpr std::size_t chunk = 256;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < nt; ++t)
    pool.emplace_back([&, t] {
      for (std::size_t j0 = t * chunk; j0 < q; j0 += nt * chunk) fn(j0, std::min(chunk, q - j0));
    });
  for (auto& th : pool) th.join();
}

struct check_result {
  std::size_t bad = 0;
  double max_rel = 0;  // max |d - ref| / S
  std::string worst;
};

// rows of the device result (bf16, [P,Q]) against the reference; S from sign-stripped copies.
// Compares sampled rows of the device result (bf16, [P,Q]) with ref (rows x Q) where
// |d - ref| <= (rel + 2^-7) * S (2^-7: one bf16 ulp, device and reference rounding to
// neighbouring bf16 values, relative to |d| <= S).
check_result compare_rows(const std::vector<std::size_t>& rows, std::size_t q, const std::vector<std::uint16_t>& got,
                          const std::vector<float>& ref, const std::vector<float>& mag, double rel) {
  check_result c;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = bfloat16::from_bits(got[i]).to_float(), want = ref[i], s = mag[i];
    const double err = std::fabs(d - want);
    if (!(err <= (rel + 0x1p-7) * s)) {
      if (c.bad++ == 0) c.worst = "row " + std::to_string(rows[i / q]) + " col " + std::to_string(i % q) + ": got " +
                                  std::to_string(d) + " want " + std::to_string(want) + " S " + std::to_string(s);
    }
    if (s > 0 && std::isfinite(err)) c.max_rel = std::max(c.max_rel, err / s);
  }
  return c;
}

// MX: the reference on the gathered A rows against B in column chunks; S from sign-stripped copies.
check_result check_rows(const mx_tensor& a, const mx_tensor& b, const std::vector<std::size_t>& rows,
                        const std::vector<std::uint16_t>& got, double rel) {
  const std::size_t q = b.layout().lines(), m = rows.size();
  const mx_tensor ga = gather_lines(a.view(), rows), gabs = abs_copy(ga.view());
  std::vector<float> ref(m * q), mag(m * q);
  parallel_columns(q, [&](std::size_t j0, std::size_t n) {
    const mx_const_view bs = slice_lines(b.view(), j0, n);
    const mx_tensor babs = abs_copy(bs);
    std::vector<float> r(m * n), s(m * n);
    ref::gemm(ga.view(), bs, matrix_view<float>{r.data(), m, n});
    ref::gemm(gabs.view(), babs.view(), matrix_view<float>{s.data(), m, n});
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        ref[i * q + j0 + j] = r[i * n + j];
        mag[i * q + j0 + j] = s[i * n + j];
      }
  });
  return compare_rows(rows, q, got, ref, mag, rel);
}

// Per-tensor FP8 ([P,R] and [Q,R] E4M3 codes, scales 1), same scheme.
check_result check_rows_fp8(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b, const gemm_shape& sh,
                            const std::vector<std::size_t>& rows, const std::vector<std::uint16_t>& got, double rel) {
  const std::size_t q = sh.q, r = sh.r, m = rows.size();
  fp8_tensor ga{fp8_type::e4m3, m, r, 1.0f, 0.0f, std::vector<std::uint8_t>(m * r)};
  for (std::size_t i = 0; i < m; ++i) std::memcpy(&ga.data[i * r], &a[rows[i] * r], r);
  fp8_tensor gabs = ga;
  for (auto& c : gabs.data) c &= 0x7F;
  std::vector<float> ref(m * q), mag(m * q);
  parallel_columns(q, [&](std::size_t j0, std::size_t n) {
    fp8_tensor bs{fp8_type::e4m3, n, r, 1.0f, 0.0f, std::vector<std::uint8_t>(b.begin() + static_cast<std::ptrdiff_t>(j0 * r),
                                                                              b.begin() + static_cast<std::ptrdiff_t>((j0 + n) * r))};
    fp8_tensor babs = bs;
    for (auto& c : babs.data) c &= 0x7F;
    std::vector<float> rr(m * n), ss(m * n);
    ref::gemm(ga, bs, matrix_view<float>{rr.data(), m, n});
    ref::gemm(gabs, babs, matrix_view<float>{ss.data(), m, n});
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        ref[i * q + j0 + j] = rr[i * n + j];
        mag[i * q + j0 + j] = ss[i * n + j];
      }
  });
  return compare_rows(rows, q, got, ref, mag, rel);
}

// bf16 ([P,R] and [Q,R] bf16 bits), same scheme, the reference in double.
check_result check_rows_bf16(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b, const gemm_shape& sh,
                             const std::vector<std::size_t>& rows, const std::vector<std::uint16_t>& got, double rel) {
  const std::size_t q = sh.q, r = sh.r, m = rows.size();
  auto value = [](std::uint16_t v) { return static_cast<double>(bfloat16::from_bits(v).to_float()); };
  std::vector<float> ref(m * q), mag(m * q);
  parallel_columns(q, [&](std::size_t j0, std::size_t n) {
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = j0; j < j0 + n; ++j) {
        double sum = 0, abs_sum = 0;
        for (std::size_t k = 0; k < r; ++k) {
          const double t = value(a[rows[i] * r + k]) * value(b[j * r + k]);
          sum += t;
          abs_sum += std::fabs(t);
        }
        ref[i * q + j] = static_cast<float>(sum);
        mag[i * q + j] = static_cast<float>(abs_sum);
      }
  });
  return compare_rows(rows, q, got, ref, mag, rel);
}

// NVFP4: the reference (ref/nvfp4_gemm.hpp) on the gathered A rows against B in column chunks.
check_result check_rows_nvfp4(const nvfp4_tensor& a, const nvfp4_tensor& b, const std::vector<std::size_t>& rows,
                              const std::vector<std::uint16_t>& got, double rel) {
  const std::size_t q = b.layout().lines(), m = rows.size();
  const nvfp4_tensor ga = nvfp4_gather(a, rows), gabs = nvfp4_abs(ga.view());
  std::vector<float> ref(m * q), mag(m * q);
  parallel_columns(q, [&](std::size_t j0, std::size_t n) {
    const nvfp4_const_view bs = nvfp4_lines(b, j0, n);
    const nvfp4_tensor babs = nvfp4_abs(bs);
    std::vector<float> r(m * n), s(m * n);
    ref::gemm(ga.view(), bs, matrix_view<float>{r.data(), m, n}, 1.0f, 0.0f, 1);
    ref::gemm(gabs.view(), babs.view(), matrix_view<float>{s.data(), m, n}, 1.0f, 0.0f, 1);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        ref[i * q + j0 + j] = r[i * n + j];
        mag[i * q + j0 + j] = s[i * n + j];
      }
  });
  return compare_rows(rows, q, got, ref, mag, rel);
}

std::vector<std::size_t> sample_rows(std::size_t p, std::size_t count, std::uint64_t seed) {
  std::vector<std::size_t> rows{0, p - 1};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> d(1, p - 2);
  while (rows.size() < count) rows.push_back(d(rng));
  return rows;
}

std::vector<std::uint16_t> device_rows(const g::device_buffer<std::uint16_t>& d, std::size_t q, const std::vector<std::size_t>& rows) {
  std::vector<std::uint16_t> out(rows.size() * q);
  for (std::size_t i = 0; i < rows.size(); ++i)
    MXKIT_GPU_CHECK(g::memcpy_async(out.data() + i * q, d.data() + rows[i] * q, q * 2, g::copy_kind::device_to_host, nullptr));
  MXKIT_GPU_CHECK(g::device_synchronize());
  return out;
}

template <class F>
double median_ms(F&& f, int repeats) {
  g::event e0, e1;
  for (int i = 0; i < 2; ++i) f();  // warm-up: module load, tensor-map encoder, allocator pool
  std::vector<float> t;
  for (int i = 0; i < repeats; ++i) {
    e0.record(nullptr);
    f();
    e1.record(nullptr);
    t.push_back(e1.elapsed_ms_since(e0));
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

#define CUBLAS_CHECK(expr)                                                                              \
  do {                                                                                                  \
    const cublasStatus_t st_ = (expr);                                                                  \
    if (st_ != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(#expr) + " failed: " + std::to_string(st_)); \
  } while (0)

// cuBLAS is column-major: row-major D[P,Q] = A[P,R] . B[Q,R]^T is column-major D^T = B . A^T,
// i.e. the "TN" call with B first.
struct cublas_peers {
  cublasHandle_t h = nullptr;
  cublasLtHandle_t lt = nullptr;
  mutable g::device_buffer<std::uint8_t> workspace{std::size_t{64} << 20};
  g::device_buffer<float> one{1};
  cublas_peers() {
    const std::vector<float> host_one{1.0f};
    one.copy_from(host_one);
    MXKIT_GPU_CHECK(g::device_synchronize());
    CUBLAS_CHECK(cublasCreate(&h));
    CUBLAS_CHECK(cublasLtCreate(&lt));
    CUBLAS_CHECK(cublasSetWorkspace(h, workspace.data(), workspace.size()));
  }
  ~cublas_peers() {
    cublasLtDestroy(lt);
    cublasDestroy(h);
  }
  void bf16(const void* a, const void* b, void* d, const gemm_shape& s) const {
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.q), static_cast<int>(s.p), static_cast<int>(s.r),
                              &alpha, b, CUDA_R_16BF, static_cast<int>(s.r), a, CUDA_R_16BF, static_cast<int>(s.r), &beta, d,
                              CUDA_R_16BF, static_cast<int>(s.q), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  // Per-tensor E4M3 x E4M3 -> bf16, scales 1 (device pointers), default (promoting) accumulation.
  struct fp8_plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  fp8_plan plan_fp8(const gemm_shape& s) const {
    fp8_plan pl;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&pl.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
    const float* sp = one.data();
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sp, sizeof sp));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sp, sizeof sp));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl.la, CUDA_R_8F_E4M3, s.r, s.q, s.r));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl.lb, CUDA_R_8F_E4M3, s.r, s.p, s.r));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl.lc, CUDA_R_16BF, s.q, s.p, s.q));
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::size_t ws = workspace.size();
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, pl.desc, pl.la, pl.lb, pl.lc, pl.lc, pref, 1, &res, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw std::runtime_error("cuBLASLt found no FP8 algorithm");
    pl.algo = res.algo;
    return pl;
  }
  void fp8(const fp8_plan& pl, const void* a, const void* b, void* d) const {
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt, pl.desc, &alpha, b, pl.la, a, pl.lb, &beta, d, pl.lc, d, pl.lc, &pl.algo, workspace.data(),
                                workspace.size(), nullptr));
  }
  static void destroy(fp8_plan& pl) {
    cublasLtMatrixLayoutDestroy(pl.la);
    cublasLtMatrixLayoutDestroy(pl.lb);
    cublasLtMatrixLayoutDestroy(pl.lc);
    cublasLtMatmulDescDestroy(pl.desc);
  }
};

struct format_case {
  const char* name;
  mx_type a_fwd, b_fwd;  // fprop: X, W
  mx_type a_bwd, b_bwd;  // dgrad/wgrad: dY, then W or X
};

// ---- --format expand: the expansion passes alone --------------------------------------------------
// Sampled lines of an expansion checked against the host: MXFP8 to bf16 must be the upper half of
// the exact product code x scale; an MXFP4 fold must give E5M2 byte x line factor = code x scale.
bool check_expansion(const mx_operand& op, const g::gemm_operand& o, const std::vector<std::uint8_t>& out,
                     const std::vector<float>& line_scale, const std::vector<std::size_t>& lines) {
  const std::vector<std::uint8_t> codes = op.data.to_host(), sc = op.scales.to_host();
  for (const std::size_t l : lines)
    for (std::size_t i = 0; i < o.length; ++i) {
      const unsigned s = sc[l * o.blocks + i / 32];
      if (o.type == mx_type::mxfp4) {
        const std::uint8_t byte = codes[l * o.line_bytes + i / 2], code = static_cast<std::uint8_t>(i % 2 ? byte >> 4 : byte & 0xF);
        const double want = static_cast<double>(e2m1::from_bits(code).to_float()) * std::ldexp(1.0, static_cast<int>(s) - 127);
        if (static_cast<double>(e5m2::from_bits(out[l * o.length + i]).to_float()) * line_scale[l] != want) return false;
      } else {
        const float want = g::decode_mx_element(o.type, codes[l * o.line_bytes + i]) * e8m0::from_bits(static_cast<std::uint8_t>(s)).to_float();
        std::uint16_t got;
        std::memcpy(&got, out.data() + 2 * (l * o.length + i), 2);
        if (got != bit_cast<std::uint32_t>(want) >> 16) return false;
      }
    }
  return true;
}

int run_expansions(const mxkit_bench::options& opt, const std::string& device, const std::string& model, int repeats,
                   std::uint64_t seed) {
  std::vector<mxkit_bench::result> rows;
  bool all_ok = true;
  std::vector<std::pair<std::size_t, std::size_t>> done;  // (lines, length) already timed
  std::printf("%-44s %14s %12s %12s %12s\n", "operand (lines x length)", "kernel", "us", "GB/s", "copy GB/s");
  for (const layer& l : layers) {
    if (!model.empty() && std::string(l.name).rfind(model, 0) != 0) continue;
    for (const gemm_product prod : {gemm_product::fprop, gemm_product::dgrad, gemm_product::wgrad}) {
      const product_shapes sh = shapes_of(prod, l);
      for (const copy_shape cs : {sh.a, sh.b}) {
        const std::size_t lines = cs.axis == block_axis::rowwise ? cs.rows : cs.cols, length = cs.axis == block_axis::rowwise ? cs.cols : cs.rows;
        if (std::find(done.begin(), done.end(), std::make_pair(lines, length)) != done.end()) continue;
        done.emplace_back(lines, length);
        for (const mx_type t : {mx_type::mxfp8_e4m3, mx_type::mxfp4}) {
          const mx_operand op(t, cs, ++seed);
          const g::gemm_operand o = g::make_operand(op.view());
          const bool fp8 = t == mx_type::mxfp8_e4m3;
          g::device_buffer<std::uint8_t> out(o.lines * o.length * (fp8 ? 2 : 1));
          g::device_buffer<float> line_scale(fp8 ? 1 : o.lines);
          g::device_buffer<int> flag(1);
          auto run = [&] {
            if (fp8) g::expand::to_bf16::launch(o, reinterpret_cast<std::uint16_t*>(out.data()), flag.data(), nullptr);
            else g::expand::fold::launch(o, out.data(), line_scale.data(), flag.data(), nullptr);
          };
          flag.fill_bytes(0);
          out.fill_bytes(0xFF);
          run();
          MXKIT_GPU_CHECK(g::device_synchronize());
          const bool ok = flag.to_host()[0] == 0 &&
                          check_expansion(op, o, out.to_host(), fp8 ? std::vector<float>{} : line_scale.to_host(), sample_rows(o.lines, 8, seed));
          all_ok = all_ok && ok;
          const double moved = static_cast<double>(op.data.size() + op.scales.size() + out.size());
          const double ms = median_ms(run, repeats);
          // The peer: a device copy moving the same bytes (half read, half written).
          g::device_buffer<std::uint8_t> from(static_cast<std::size_t>(moved / 2)), to(static_cast<std::size_t>(moved / 2));
          const double copy_ms = median_ms([&] {
            MXKIT_GPU_CHECK(g::memcpy_async(to.data(), from.data(), from.size(), g::copy_kind::device_to_device, nullptr));
          }, repeats);
          char label[128];
          std::snprintf(label, sizeof label, "expand %s %s %zux%zu", fp8 ? "mxfp8 to bf16" : "mxfp4 fold to e5m2", l.name, lines, length);
          const double gbs = moved / (ms * 1e-3) / 1e9, copy_gbs = 2.0 * static_cast<double>(from.size()) / (copy_ms * 1e-3) / 1e9;
          std::printf("%-44s %14s %12.1f %12.0f %12.0f %s\n", label + 7, fp8 ? "to_bf16" : "fold", 1e3 * ms, gbs, copy_gbs, ok ? "" : "CHECK FAILED");
          rows.push_back({"gemm", label, gbs, "GB/s", "device copy", copy_gbs,
                          "cudaMemcpyAsync device to device of the same bytes (counted read + written), same run"});
        }
      }
    }
    if (opt.record) {
      mxkit_bench::append_results(opt.results_path, device, rows);
      rows.clear();
    }
  }
  std::printf("validation: %s\n", all_ok ? "all cases passed" : "SOME CASES FAILED");
  return all_ok ? 0 : 1;
}

}  // namespace
#endif  // MXKIT_GPU_CUDA

int main(int argc, char** argv) {
#if !MXKIT_GPU_CUDA
  (void)argc;
  (void)argv;
  std::printf("bench_gemm: the HIP build compiles the kernels only; nothing to time here\n");
  return 0;
#else
  bool quick = false, check = true, with_peers = true;
  std::string only, model;
  std::vector<char*> args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--no-check") check = false;
    else if (a == "--no-peers") with_peers = false;
    else if (a == "--format" && i + 1 < argc) only = argv[++i];
    else if (a == "--model" && i + 1 < argc) model = std::string(argv[++i]) + " ";
    else args.push_back(argv[i]);
  }
  const mxkit_bench::options opt = mxkit_bench::parse_args(static_cast<int>(args.size()), args.data());
  if (g::device_count() == 0) {
    std::printf("bench_gemm: no GPU\n");
    return 0;
  }
  const g::device_properties prop = g::properties();
  const std::string device = prop.name;
  std::printf("device: %s, %d SMs; repeats %d\n", prop.name, prop.multiprocessors, opt.repeats);
  const int repeats = std::max(opt.repeats, 1);
  std::random_device rd;
  std::uint64_t seed = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  if (only == "expand") return run_expansions(opt, device, model, repeats, seed);

  const format_case formats[] = {
      {"mxfp4", mx_type::mxfp4, mx_type::mxfp4, mx_type::mxfp4, mx_type::mxfp4},
      {"mxfp8", mx_type::mxfp8_e4m3, mx_type::mxfp8_e4m3, mx_type::mxfp8_e4m3, mx_type::mxfp8_e4m3},
      {"hybrid", mx_type::mxfp8_e4m3, mx_type::mxfp8_e4m3, mx_type::mxfp8_e5m2, mx_type::mxfp8_e4m3},
  };
  const gemm_product products[] = {gemm_product::fprop, gemm_product::dgrad, gemm_product::wgrad};

  cublas_peers peers;
  std::vector<mxkit_bench::result> rows;
  std::size_t recorded = 0;
  bool all_ok = true;
  std::printf("%-34s %8s %8s %8s %8s %8s %10s %8s %9s %9s %8s %9s %9s %10s\n", "case (P x Q x R)", "mxfp4", "mxfp8", "hybrid", "fp8-pt",
              "cuBLAS", "cuBLASLt", "bf16", "mxfp4-4b", "mxfp8-fp8", "nvfp4", "nvfp4-own", "mxfp8-own", "hybrid-own");
  for (const layer& l : layers) {
    if (quick && std::string(l.name) != "70B o") continue;
    if (!model.empty() && std::string(l.name).rfind(model, 0) != 0) continue;
    for (const gemm_product prod : products) {
      if (quick && prod != gemm_product::fprop) continue;
      const product_shapes sh = shapes_of(prod, l);
      const gemm_shape s = sh.tn;
      const double flops = s.flops();
      char label[96];
      std::snprintf(label, sizeof label, "%s %s %zux%zux%zu", l.name, name_of(prod), s.p, s.q, s.r);
      g::device_buffer<std::uint16_t> d(s.p * s.q);
      // mxfp4 mxfp8 hybrid fp8-pt cuBLAS cuBLASLt bf16 | mxfp4 4-block, mxfp8 fp8 kernel | nvfp4, nvfp4 on mxkit's bf16 kernel
      // | mxfp8, hybrid on mxkit's bf16 kernel
      double tf[13] = {};

      // -- mxkit MX formats
      for (int f = 0; f < 3; ++f) {
        const format_case& fc = formats[f];
        if (f == 2 && prod == gemm_product::fprop) continue;  // HYBRID's forward is MXFP8
        if (!only.empty() && only != fc.name) continue;
        const mx_type ta = prod == gemm_product::fprop ? fc.a_fwd : fc.a_bwd, tb = prod == gemm_product::fprop ? fc.b_fwd : fc.b_bwd;
        const mx_operand a(ta, sh.a, ++seed), b(tb, sh.b, ++seed);
        matrix_view<bfloat16> dv{reinterpret_cast<bfloat16*>(d.data()), s.p, s.q};
        // The default route, then (fprop) the variant: MXFP4 four blocks per tensor-core sum,
        // MXFP8 on the FP8 block-scaled kernel; then MXFP8 and HYBRID with their bf16 product
        // on mxkit's kernel.
        for (int variant = 0; variant < 3; ++variant) {
          if (variant == 1 && (prod != gemm_product::fprop || f == 2)) continue;
          if (variant == 2 && f == 0) continue;
          g::gemm_options go;
          if (variant == 1 && f == 0) go.exact_block_sums = false;
          if (variant == 1 && f == 1) go.mxfp8_via_bf16 = false;
          if (variant == 2) go.vendor = false;
          auto run = [&] { g::product(prod, a.view(), b.view(), dv, {}, nullptr, go); };
          const char* vname = variant == 0 ? fc.name : variant == 2 ? (f == 1 ? "mxfp8-own" : "hybrid-own") : (f == 0 ? "mxfp4-4b" : "mxfp8-fp8");
          if (check) {  // validate on fresh data with a poisoned output
            d.fill_bytes(0xFF);
            const g::gemm_path path = g::product(prod, a.view(), b.view(), dv, {}, nullptr, go);
            MXKIT_GPU_CHECK(g::device_synchronize());
            const std::vector<std::size_t> sample = sample_rows(s.p, 8, seed);
            const bool exact = ta == mx_type::mxfp4 && tb == mx_type::mxfp4 && go.exact_block_sums;
            const double rel = exact ? (2.0 * static_cast<double>(s.r / 32) + 40) * 0x1p-24 : 0x1p-8;
            const check_result c = check_rows(host_copy(a), host_copy(b), sample, device_rows(d, s.q, sample), rel);
            std::printf("  check %-9s %-40s path %-8s max |d-ref|/S %.3g %s%s\n", vname, label, g::name_of(path), c.max_rel,
                        c.bad ? "FAILED: " : "ok", c.worst.c_str());
            all_ok = all_ok && c.bad == 0 && path == g::gemm_path::sm90;
          }
          tf[variant == 0 ? f : variant == 1 ? 7 + f : 10 + f] = flops / (median_ms(run, repeats) * 1e-3) / 1e12;
        }
      }

      // -- NVFP4: expanded to bf16 (timed with the GEMM), default path and mxkit's bf16 kernel
      if (only.empty() || only == "nvfp4") {
        const nvfp4_device_copy a(sh.a, 0.75f, ++seed), b(sh.b, 3.0f, ++seed);
        matrix_view<bfloat16> dv{reinterpret_cast<bfloat16*>(d.data()), s.p, s.q};
        for (int variant = 0; variant < 2; ++variant) {
          g::gemm_options go;
          go.vendor = variant == 0;
          auto run = [&] { return g::product(prod, a.operand(), b.operand(), dv, {}, nullptr, go); };
          if (check) {
            d.fill_bytes(0xFF);
            const g::gemm_path path = run();
            MXKIT_GPU_CHECK(g::device_synchronize());
            const std::vector<std::size_t> sample = sample_rows(s.p, 4, seed);
            const double rel = (2.0 * static_cast<double>(s.r) + 2.0 * static_cast<double>(s.r / 16) + 8) * 0x1p-24;
            const check_result c = check_rows_nvfp4(a.host(), b.host(), sample, device_rows(d, s.q, sample), rel);
            std::printf("  check %-9s %-40s path %-8s max |d-ref|/S %.3g %s%s\n", variant == 0 ? "nvfp4" : "nvfp4-own", label,
                        g::name_of(path), c.max_rel, c.bad ? "FAILED: " : "ok", c.worst.c_str());
            all_ok = all_ok && c.bad == 0;
          }
          tf[9 + variant] = flops / (median_ms(run, repeats) * 1e-3) / 1e12;
        }
      }

      // -- per-tensor FP8 (mxkit) and the peers on the same shapes
      if (only.empty() || only == "fp8" || with_peers) {
        g::device_buffer<std::uint8_t> a8(s.p * s.r), b8(s.q * s.r);
        fill(a8.data(), a8.size(), ++seed, fill_kind::e4m3);
        fill(b8.data(), b8.size(), ++seed, fill_kind::e4m3);
        const fp8_view va{fp8_type::e4m3, s.p, s.r, 1.0f, a8.data()}, vb{fp8_type::e4m3, s.q, s.r, 1.0f, b8.data()};
        g::gemm_options own;  // mxkit's kernel, not the vendor path
        own.vendor = false;
        matrix_view<bfloat16> dv{reinterpret_cast<bfloat16*>(d.data()), s.p, s.q};
        if (check && (only.empty() || only == "fp8")) {
        d.fill_bytes(0xFF);
        const g::gemm_path path = g::gemm(va, vb, dv, {}, nullptr, own);
        MXKIT_GPU_CHECK(g::device_synchronize());
        const std::vector<std::size_t> sample = sample_rows(s.p, 4, seed);
        const check_result c = check_rows_fp8(a8.to_host(), b8.to_host(), s, sample, device_rows(d, s.q, sample), 0x1p-7);
        std::printf("  check %-8s %-40s path %-8s max |d-ref|/S %.3g %s%s\n", "fp8-pt", label, g::name_of(path), c.max_rel,
                    c.bad ? "FAILED: " : "ok", c.worst.c_str());
        all_ok = all_ok && c.bad == 0 && path == g::gemm_path::sm90;
        }
        if (only.empty() || only == "fp8") tf[3] = flops / (median_ms([&] { g::gemm(va, vb, dv, {}, nullptr, own); }, repeats) * 1e-3) / 1e12;
        if (with_peers) {
          auto plan = peers.plan_fp8(s);
          tf[5] = flops / (median_ms([&] { peers.fp8(plan, a8.data(), b8.data(), d.data()); }, repeats) * 1e-3) / 1e12;
          cublas_peers::destroy(plan);
        }
      }
      if (with_peers) {
        g::device_buffer<std::uint8_t> a16(s.p * s.r * 2), b16(s.q * s.r * 2);
        fill(a16.data(), a16.size(), ++seed, fill_kind::bf16_values);
        fill(b16.data(), b16.size(), ++seed, fill_kind::bf16_values);
        tf[4] = flops / (median_ms([&] { peers.bf16(a16.data(), b16.data(), d.data(), s); }, repeats) * 1e-3) / 1e12;
        if (only.empty() || only == "bf16") {  // mxkit's bf16 x bf16, validated like the others
          const matrix_view<const bfloat16> va{reinterpret_cast<const bfloat16*>(a16.data()), s.p, s.r};
          const matrix_view<const bfloat16> vb{reinterpret_cast<const bfloat16*>(b16.data()), s.q, s.r};
          matrix_view<bfloat16> dv{reinterpret_cast<bfloat16*>(d.data()), s.p, s.q};
          g::gemm_options own;  // mxkit's kernel, not the vendor path
          own.vendor = false;
          if (check) {
            d.fill_bytes(0xFF);
            const g::gemm_path path = g::gemm(va, vb, dv, {}, nullptr, own);
            MXKIT_GPU_CHECK(g::device_synchronize());
            const std::vector<std::size_t> sample = sample_rows(s.p, 4, seed);
            std::vector<std::uint16_t> ha(s.p * s.r), hb(s.q * s.r);
            MXKIT_GPU_CHECK(g::memcpy_async(ha.data(), a16.data(), a16.size(), g::copy_kind::device_to_host, nullptr));
            MXKIT_GPU_CHECK(g::memcpy_async(hb.data(), b16.data(), b16.size(), g::copy_kind::device_to_host, nullptr));
            const check_result c = check_rows_bf16(ha, hb, s, sample, device_rows(d, s.q, sample), 0x1p-20);
            std::printf("  check %-9s %-40s path %-8s max |d-ref|/S %.3g %s%s\n", "bf16", label, g::name_of(path), c.max_rel,
                        c.bad ? "FAILED: " : "ok", c.worst.c_str());
            all_ok = all_ok && c.bad == 0 && path == g::gemm_path::sm90;
          }
          tf[6] = flops / (median_ms([&] { g::gemm(va, vb, dv, {}, nullptr, own); }, repeats) * 1e-3) / 1e12;
        }
      }
      std::printf("%-34s %8.1f %8.1f %8.1f %8.1f %8.1f %10.1f %8.1f %9.1f %9.1f %8.1f %9.1f %9.1f %10.1f\n", label, tf[0], tf[1], tf[2],
                  tf[3], tf[4], tf[5], tf[6], tf[7], tf[8], tf[9], tf[10], tf[11], tf[12]);
      std::fflush(stdout);
      // The peers' settings, recorded with each row (cublas_peers above).
      const char* const cublas = "cublasGemmEx, bf16 in and out, CUBLAS_COMPUTE_32F";
      const char* const cublaslt = "cublasLtMatmul, E4M3 x E4M3 per-tensor scales, bf16 out, default accumulation";
      const char* names[] = {"mxfp4", "mxfp8", "hybrid e5m2 x e4m3", "fp8 per-tensor"};
      for (int f = 0; f < 4; ++f) {
        if (tf[f] == 0) continue;
        rows.push_back({"gemm", std::string(names[f]) + " " + label, tf[f], "TFLOP/s", "cuBLAS bf16", tf[4], cublas});
        if (f == 3) rows.push_back({"gemm", std::string(names[f]) + " " + label, tf[f], "TFLOP/s", "cuBLASLt fp8", tf[5], cublaslt});
      }
      if (tf[6] > 0) rows.push_back({"gemm", std::string("bf16 ") + label, tf[6], "TFLOP/s", "cuBLAS bf16", tf[4], cublas});
      if (tf[7] > 0)
        rows.push_back({"gemm", std::string("mxfp4 4-block tensor-core sums ") + label, tf[7], "TFLOP/s", "cuBLAS bf16", tf[4], cublas});
      if (tf[8] > 0)
        rows.push_back({"gemm", std::string("mxfp8 fp8 block-scaled kernel ") + label, tf[8], "TFLOP/s", "cuBLAS bf16", tf[4], cublas});
      if (tf[9] > 0)
        rows.push_back({"gemm", std::string("nvfp4 (bf16 expansion included) ") + label, tf[9], "TFLOP/s", "cuBLAS bf16", tf[4], cublas});
      if (tf[10] > 0)
        rows.push_back({"gemm", std::string("nvfp4 on mxkit's bf16 kernel ") + label, tf[10], "TFLOP/s", "cuBLAS bf16", tf[4], cublas});
      if (tf[11] > 0)
        rows.push_back({"gemm", std::string("mxfp8 on mxkit's bf16 kernel ") + label, tf[11], "TFLOP/s", "cuBLAS bf16", tf[4], cublas});
      if (tf[12] > 0)
        rows.push_back({"gemm", std::string("hybrid e5m2 x e4m3 on mxkit's bf16 kernel ") + label, tf[12], "TFLOP/s", "cuBLAS bf16", tf[4],
                        cublas});
      if (with_peers)
        rows.push_back({"gemm", std::string("cuBLASLt fp8 per-tensor ") + label, tf[5], "TFLOP/s", "cuBLAS bf16", tf[4], cublas});
      if (opt.record) {  // per shape, so a cut-short run keeps what it measured
        mxkit_bench::append_results(opt.results_path, device, std::vector<mxkit_bench::result>(rows.begin() + static_cast<std::ptrdiff_t>(recorded), rows.end()));
        recorded = rows.size();
      }
    }
  }
  mxkit_bench::print_table(rows);
  std::printf("validation: %s\n", all_ok ? "all cases passed" : "SOME CASES FAILED (see 'check' lines)");
  return all_ok ? 0 : 1;
#endif
}
