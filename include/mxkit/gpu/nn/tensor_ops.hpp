// SPDX-License-Identifier: Apache-2.0
#pragma once
// The small element-wise kernels of the device training backend (gpu/nn/backend.hpp): fill, type
// conversion, axpy, amax and the byte or bf16 transposes of stored GEMM operands. Each is one
// pass over its data, grid-strided, and never waits for the host. (The fused delayed-scaling
// update: gpu/nn/delayed_scaling.hpp; the one-thread moves of the optimizer's device scalars:
// gpu/nn/device_scalars.hpp.)
//   fill       every element = one value, rounded to the element type on the host
//   convert    float <-> bf16 <-> double element by element (bf16 rounds to nearest even)
//   axpy       y = y + alpha * x in float (double for f64), rounded once to y's type
//   amax       max |x| over a tensor into a double (NaN wins: the largest bit pattern of |x|)
//   transpose  [rows, cols] -> [cols, rows] through a shared-memory tile, converting on the way
//              (float or bf16 to bf16: the columnwise bf16 copy; bytes as they are: FP8 codes)
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/config.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/gpu/device.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/nn/chunk.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int tensor_ops_threads = 256;
inline constexpr int transpose_tile = 64;

// Element conversions of the backend's dtypes (float, bfloat16, double).
template <class D, class S>
MXKIT_HD constexpr D convert_element(S v) noexcept {
  if constexpr (std::is_same_v<D, S>) return v;
  else if constexpr (std::is_same_v<S, bfloat16>) return static_cast<D>(v.to_float());
  else if constexpr (std::is_same_v<D, bfloat16>) return bfloat16::from_float(static_cast<float>(v), rounding::nearest_even, overflow::propagate);
  else return static_cast<D>(v);
}

template <class T>
MXKIT_GLOBAL void __launch_bounds__(tensor_ops_threads) fill_kernel(T* p, std::size_t n, T value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(tensor_ops_threads) + threadIdx.x; i < n;
       i += gridDim.x * static_cast<std::size_t>(tensor_ops_threads))
    p[i] = value;
}

template <class S, class D>
MXKIT_GLOBAL void __launch_bounds__(tensor_ops_threads) convert_kernel(const S* in, D* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(tensor_ops_threads) + threadIdx.x; i < n;
       i += gridDim.x * static_cast<std::size_t>(tensor_ops_threads))
    out[i] = convert_element<D>(in[i]);
}

// y = y + alpha * x with the arithmetic type A (float for float and bf16, double for double).
template <class T, class A>
MXKIT_GLOBAL void __launch_bounds__(tensor_ops_threads) axpy_kernel(A alpha, const T* x, T* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(tensor_ops_threads) + threadIdx.x; i < n;
       i += gridDim.x * static_cast<std::size_t>(tensor_ops_threads))
    y[i] = convert_element<T>(convert_element<A>(y[i]) + alpha * convert_element<A>(x[i]));
}

// |x| of float or bf16 as float bits: integer order is float order for non-negative values, and a
// NaN's bits (exponent all ones, mantissa non-zero) exceed Inf's.
template <class T>
MXKIT_GLOBAL void __launch_bounds__(tensor_ops_threads) amax_kernel(const T* x, std::size_t n, unsigned* out) {
  unsigned m = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(tensor_ops_threads) + threadIdx.x; i < n;
       i += gridDim.x * static_cast<std::size_t>(tensor_ops_threads)) {
    const unsigned b = bit_cast<unsigned>(load_float(x[i])) & 0x7FFFFFFFu;
    m = b > m ? b : m;
  }
  m = warp_max(m);
  if (lane_id() == 0) atomic_max(out, m);
}

template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) float_bits_to_double_kernel(const unsigned* bits, double* out) {
  *out = static_cast<double>(bit_cast<float>(*bits));
}


// [rows, cols] S -> [cols, rows] D, a 64 x 64 tile per pass. Each thread moves 2 x 2 blocks:
// two adjacent elements of two adjacent input rows (one vector load a row where the pair is
// aligned), regrouped in registers into two adjacent elements of two output rows, so a warp reads
// 64 consecutive inputs of a row and writes 64 consecutive outputs of a row, and the shared tile
// holds output pairs (one 2-element access each way). A 32 x 32 tile of single elements was bound
// by its shared-memory and 2-byte global accesses, far under copy bandwidth. Interior tiles with
// aligned pairs (all but a matrix's edges) load all of a thread's pairs before the first shared
// store and test no bounds: a load placed after a shared store waits for it (the compiler cannot
// tell the two apart), so one pair at a time was in flight per thread (docs/perf/training.md).
template <class S, class D>
MXKIT_GLOBAL void __launch_bounds__(tensor_ops_threads) transpose_kernel(const S* in, std::size_t rows, std::size_t cols, D* out) {
  // Raw bits: a __shared__ array cannot hold a type with a default member initializer (bfloat16).
  using bits = std::conditional_t<sizeof(D) == 1, std::uint8_t, std::conditional_t<sizeof(D) == 2, std::uint16_t, std::uint32_t>>;
  using pair_bits = std::conditional_t<sizeof(D) == 1, std::uint16_t, std::conditional_t<sizeof(D) == 2, std::uint32_t, std::uint64_t>>;
  static_assert(sizeof(bits) == sizeof(D) && sizeof(pair_bits) == 2 * sizeof(D));
  struct alignas(2 * sizeof(S)) two {
    S x, y;
  };
  constexpr int T = transpose_tile, pairs = T / 2, groups = tensor_ops_threads / pairs, passes = pairs / groups;
  static_assert(pairs % groups == 0 && T % groups == 0, "every thread makes the same number of passes");
  __shared__ pair_bits tile[T][pairs + 1];  // [output row][output column pair]; +1 spreads the writes' banks
  const std::size_t tiles_r = (rows + T - 1) / T, tiles_c = (cols + T - 1) / T;
  const int w = static_cast<int>(threadIdx.x) % pairs, g = static_cast<int>(threadIdx.x) / pairs;
  const bool vector_in = cols % 2 == 0 && aligned_to<static_cast<int>(2 * sizeof(S))>(in);
  const bool vector_out = rows % 2 == 0 && aligned_to<static_cast<int>(2 * sizeof(D))>(out);
  const auto pack = [](D lo, D hi) {
    return static_cast<pair_bits>(static_cast<pair_bits>(bit_cast<bits>(lo)) | (static_cast<pair_bits>(bit_cast<bits>(hi)) << (8 * sizeof(D))));
  };
  for (std::size_t t = blockIdx.x; t < tiles_r * tiles_c; t += gridDim.x) {
    const std::size_t r0 = t / tiles_c * T, c0 = t % tiles_c * T;
    const std::size_t gc = c0 + 2 * static_cast<std::size_t>(w);  // input columns gc, gc + 1
    const bool interior = vector_in && vector_out && r0 + T <= rows && c0 + T <= cols;
    if (interior) {
      two v[passes][2];  // input rows r0 + 2i, r0 + 2i + 1 of each pass, i = g + pass * groups
      const S* src = in + (r0 + 2 * static_cast<std::size_t>(g)) * cols + gc;
#pragma unroll
      for (int pass = 0; pass < passes; ++pass)
#pragma unroll
        for (int k = 0; k < 2; ++k)
          v[pass][k] = *reinterpret_cast<const two*>(src + static_cast<std::size_t>(2 * pass * groups + k) * cols);
#pragma unroll
      for (int pass = 0; pass < passes; ++pass) {
        const int i = g + pass * groups;
        tile[2 * w][i] = pack(convert_element<D>(v[pass][0].x), convert_element<D>(v[pass][1].x));
        tile[2 * w + 1][i] = pack(convert_element<D>(v[pass][0].y), convert_element<D>(v[pass][1].y));
      }
    } else {
#pragma unroll
      for (int pass = 0; pass < passes; ++pass) {
        const int i = g + pass * groups;
        D v[2][2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const std::size_t gr = r0 + 2 * static_cast<std::size_t>(i) + static_cast<std::size_t>(k);
          S a = S(), b = S();
          if (gr < rows && gc < cols) {
            const S* src = in + gr * cols + gc;
            if (vector_in && gc + 1 < cols) {
              const two p = *reinterpret_cast<const two*>(src);
              a = p.x, b = p.y;
            } else {
              a = src[0];
              if (gc + 1 < cols) b = src[1];
            }
          }
          v[k][0] = convert_element<D>(a);
          v[k][1] = convert_element<D>(b);
        }
        tile[2 * w][i] = pack(v[0][0], v[1][0]);  // output row c0 + 2w: columns r0 + 2i, r0 + 2i + 1
        tile[2 * w + 1][i] = pack(v[0][1], v[1][1]);
      }
    }
    sync_threads();
    const std::size_t oc = r0 + 2 * static_cast<std::size_t>(w);  // output columns oc, oc + 1
#pragma unroll
    for (int pass = 0; pass < T / groups; ++pass) {
      const int c = g + pass * groups;
      const std::size_t orow = c0 + static_cast<std::size_t>(c);
      if (!interior && (orow >= cols || oc >= rows)) continue;
      const pair_bits p = tile[c][w];
      D* dst = out + orow * rows + oc;
      if (interior || (vector_out && oc + 1 < rows)) {
        *reinterpret_cast<pair_bits*>(dst) = p;
      } else {
        dst[0] = bit_cast<D>(static_cast<bits>(p));
        if (oc + 1 < rows) dst[1] = bit_cast<D>(static_cast<bits>(p >> (8 * sizeof(D))));
      }
    }
    sync_threads();
  }
}

template <auto Kernel>
inline int elementwise_grid(std::size_t n) {
  return persistent_grid<Kernel>(tensor_ops_threads, (n + tensor_ops_threads - 1) / tensor_ops_threads);
}

}  // namespace detail

// Every element of p (n of them, device) = value. Asynchronous on `stream`.
template <class T>
void fill(T* p, std::size_t n, T value, stream_t stream) {
  if (n == 0) return;
  detail::fill_kernel<T><<<detail::elementwise_grid<detail::fill_kernel<T>>(n), detail::tensor_ops_threads, 0, stream>>>(p, n, value);
  MXKIT_GPU_CHECK_LAUNCH();
}

// out[i] = in[i] converted (bf16: nearest even, Inf and NaN kept). Asynchronous on `stream`.
template <class S, class D>
void convert(const S* in, D* out, std::size_t n, stream_t stream) {
  if (n == 0) return;
  detail::convert_kernel<S, D><<<detail::elementwise_grid<detail::convert_kernel<S, D>>(n), detail::tensor_ops_threads, 0, stream>>>(in, out, n);
  MXKIT_GPU_CHECK_LAUNCH();
}

// y = y + alpha * x (n elements of float, bf16 or double). Asynchronous on `stream`.
template <class T>
void axpy(double alpha, const T* x, T* y, std::size_t n, stream_t stream) {
  if (n == 0) return;
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  constexpr auto kernel = detail::axpy_kernel<T, A>;
  kernel<<<detail::elementwise_grid<kernel>(n), detail::tensor_ops_threads, 0, stream>>>(static_cast<A>(alpha), x, y, n);
  MXKIT_GPU_CHECK_LAUNCH();
}

// *out = max |x| (float or bf16 x, n elements; 0 for none; NaN if any is NaN); `scratch` is one
// unsigned of device memory. Asynchronous on `stream`.
template <layer_element T>
void amax(const T* x, std::size_t n, double* out, unsigned* scratch, stream_t stream) {
  MXKIT_GPU_CHECK(memset_async(scratch, 0, sizeof(unsigned), stream));
  if (n > 0) {
    detail::amax_kernel<T><<<detail::elementwise_grid<detail::amax_kernel<T>>(n), detail::tensor_ops_threads, 0, stream>>>(x, n, scratch);
    MXKIT_GPU_CHECK_LAUNCH();
  }
  detail::float_bits_to_double_kernel<1><<<1, 1, 0, stream>>>(scratch, out);
  MXKIT_GPU_CHECK_LAUNCH();
}

// out [cols, rows] = in [rows, cols] transposed, converted to D. Asynchronous on `stream`.
template <class S, class D>
void transpose(const S* in, std::size_t rows, std::size_t cols, D* out, stream_t stream) {
  if (rows == 0 || cols == 0) return;
  const std::size_t tiles = (rows + detail::transpose_tile - 1) / detail::transpose_tile * ((cols + detail::transpose_tile - 1) / detail::transpose_tile);
  constexpr auto kernel = detail::transpose_kernel<S, D>;
  kernel<<<detail::persistent_grid<kernel>(detail::tensor_ops_threads, tiles), detail::tensor_ops_threads, 0, stream>>>(in, rows, cols, out);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace gpu
MXKIT_END_NAMESPACE
