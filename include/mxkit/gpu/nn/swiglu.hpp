// SPDX-License-Identifier: Apache-2.0
#pragma once
// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"), Llama's MLP activation, on the
// fused gate/up projection gu = [g | u] (M, 2F); the kernels of ref/nn/swiglu.hpp in float:
//   forward   out = silu(g) * u,  silu(g) = g * sigmoid(g)
//   backward  dg = dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  du = dout * silu(g)
// Element-wise: a thread owns a chunk of 16 bytes of one row's columns in each operand
// (gpu/nn/chunk.hpp), chunks grid-strided. sigmoid(g) = 1 / (1 + exp(-g)) with the accurate
// expf (not __expf); for g below about -88, exp(-g) is Inf and sigmoid(g) is 0, the float
// nearest to the true value's.
// Bytes moved (s = sizeof(T)): forward 3 M F s, backward 5 M F s.
#include <cstddef>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int swiglu_threads = 256;

template <class T>
struct swiglu_params {
  const T* dout;  // (rows, F); backward only
  const T* gu;    // (rows, 2F)
  T* out;         // forward: (rows, F); backward: dgu (rows, 2F)
  std::size_t rows, f, chunks;  // chunks = ceil(F / N) per row
};

template <class T, bool Backward>
MXKIT_GLOBAL void __launch_bounds__(swiglu_threads) swiglu_kernel(const swiglu_params<T> p) {
  constexpr int N = chunk_elements<T>;
  const std::size_t total = p.rows * p.chunks;
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(swiglu_threads) + threadIdx.x; idx < total;
       idx += gridDim.x * static_cast<std::size_t>(swiglu_threads)) {
    const std::size_t r = idx / p.chunks, c = idx % p.chunks * N;
    const T* gate = p.gu + r * 2 * p.f;
    float g[N], u[N];
    load_chunk(gate, c, p.f, g);
    load_chunk(gate + p.f, c, p.f, u);
    if constexpr (!Backward) {
      float o[N];
      for (int k = 0; k < N; ++k) o[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
      store_chunk(p.out + r * p.f, c, p.f, o);
    } else {
      float d[N], dg[N], du[N];
      load_chunk(p.dout + r * p.f, c, p.f, d);
      for (int k = 0; k < N; ++k) {
        const float sig = 1.0f / (1.0f + expf(-g[k]));
        dg[k] = d[k] * u[k] * sig * (1.0f + g[k] * (1.0f - sig));
        du[k] = d[k] * g[k] * sig;
      }
      T* dgate = p.out + r * 2 * p.f;
      store_chunk(dgate, c, p.f, dg);
      store_chunk(dgate + p.f, c, p.f, du);
    }
  }
}

template <class T, bool Backward>
void launch_swiglu(const swiglu_params<T>& p, stream_t stream) {
  const std::size_t total = p.rows * p.chunks;
  const int grid = persistent_grid<swiglu_kernel<T, Backward>>(swiglu_threads, (total + swiglu_threads - 1) / swiglu_threads);
  swiglu_kernel<T, Backward><<<grid, swiglu_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace detail

// out = silu(g) * u. gu (rows, 2F) = [g | u], out (rows, F); device pointers. Asynchronous on `stream`.
template <layer_element T>
void swiglu_forward(const T* gu, T* out, std::size_t rows, std::size_t f, stream_t stream = nullptr) {
  if (rows == 0 || f == 0) return;
  mxkit::detail::require(gu && out, "gpu::swiglu_forward: null pointer (gu ", gu != nullptr, ", out ", out != nullptr, ")");
  constexpr std::size_t N = detail::chunk_elements<T>;
  detail::launch_swiglu<T, false>({nullptr, gu, out, rows, f, (f + N - 1) / N}, stream);
}

// dgu = [dg | du] (rows, 2F), overwritten, from dout (rows, F) and gu (rows, 2F); device
// pointers. dgu may be gu: a thread loads its chunks of g and u before it stores theirs.
// Asynchronous on `stream`.
template <layer_element T>
void swiglu_backward(const T* dout, const T* gu, T* dgu, std::size_t rows, std::size_t f, stream_t stream = nullptr) {
  if (rows == 0 || f == 0) return;
  mxkit::detail::require(dout && gu && dgu, "gpu::swiglu_backward: null pointer (dout ", dout != nullptr, ", gu ", gu != nullptr,
                         ", dgu ", dgu != nullptr, ")");
  constexpr std::size_t N = detail::chunk_elements<T>;
  detail::launch_swiglu<T, true>({dout, gu, dgu, rows, f, (f + N - 1) / N}, stream);
}

}  // namespace gpu
MXKIT_END_NAMESPACE
