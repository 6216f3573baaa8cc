// SPDX-License-Identifier: Apache-2.0
#pragma once
// Rotary position embedding (Su et al. 2021, "RoFormer"), Llama's halves layout, in place on the
// q and k heads of a qkv tensor [tokens, (n_heads + 2 n_kv_heads) head_dim]; the kernel of
// ref/nn/rope.hpp. Head element pair (i, i + D/2) of token b*seq + t turns by angle
// t * theta^(-2i/D) (forward) or by minus that (inverse, the backward pass: a rotation's
// transpose is its inverse); v heads are left alone.
// One thread per (token, i) pair, looping over the rotated heads: the angle, its cosine and
// sine are computed once per pair in double, as the reference does, and rounded to float, so
// the rotation factors equal the host's float factors (up to the double libraries' last bit);
// an fp32 angle t * inv_freq would be off by up to t * 2^-24 radians (5e-4 at t = 8192).
// The double work is one pow and one sincos per pair, shared by all 2 (n_heads + n_kv_heads)
// elements of the pair. Consecutive threads take consecutive i: coalesced within each half.
// Bytes moved: 2 * tokens * (n_heads + n_kv_heads) * head_dim * sizeof(T) (read and write).
#include <cmath>
#include <cstddef>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/kernel_args.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int rope_threads = 256;
inline constexpr int rope_batch = 8;  // heads whose loads a thread issues together

template <class T>
struct rope_params {
  T* qkv;                    // (tokens, row)
  std::size_t tokens, seq;   // tokens = batch * seq; position = token % seq
  std::size_t row, rotated;  // qkv row width; heads rotated (q heads then k heads, contiguous)
  std::size_t head_dim, half;
  double theta;
  bool inverse;
};

template <class T>
MXKIT_GLOBAL void __launch_bounds__(rope_threads) rope_kernel(const rope_params<T> p) {
  const std::size_t total = p.tokens * p.half;
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(rope_threads) + threadIdx.x; idx < total;
       idx += gridDim.x * static_cast<std::size_t>(rope_threads)) {
    const std::size_t token = idx / p.half, i = idx % p.half, t = token % p.seq;
    // The reference's expression, in its order: t * theta^((-2 i) / D).
    const double angle = static_cast<double>(t) * pow(p.theta, -2.0 * static_cast<double>(i) / static_cast<double>(p.head_dim));
    double sd, cd;
    sincos(angle, &sd, &cd);
    const float c = static_cast<float>(cd), s = static_cast<float>(p.inverse ? -sd : sd);
    T* v = p.qkv + token * p.row + i;
    // Heads rope_batch at a time, every load of a batch before its stores: a load after a store
    // through the same pointer waits for it, so head by head one pair was in flight.
    for (std::size_t h0 = 0; h0 < p.rotated; h0 += rope_batch) {
      float x1[rope_batch], x2[rope_batch];
#pragma unroll
      for (int j = 0; j < rope_batch; ++j) {
        const T* e = v + (h0 + static_cast<std::size_t>(j)) * p.head_dim;
        const bool in = h0 + static_cast<std::size_t>(j) < p.rotated;
        x1[j] = in ? load_float(e[0]) : 0.0f;
        x2[j] = in ? load_float(e[p.half]) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < rope_batch; ++j) {
        if (h0 + static_cast<std::size_t>(j) >= p.rotated) break;
        T* e = v + (h0 + static_cast<std::size_t>(j)) * p.head_dim;
        e[0] = round_to<T>(x1[j] * c - x2[j] * s);
        e[p.half] = round_to<T>(x1[j] * s + x2[j] * c);
      }
    }
  }
}

}  // namespace detail

// Rotates the q and k heads of qkv (device, [s.tokens(), s.qkv_dim()]) in place: by
// t * theta^(-2i/D) at position t, or back by it when `inverse`. Asynchronous on `stream`.
template <layer_element T>
void rope(T* qkv, const nn::head_shape& s, double theta, bool inverse, stream_t stream = nullptr) {
  mxkit::detail::require(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "gpu::rope: n_heads ", s.n_heads,
                         " is not a multiple of n_kv_heads ", s.n_kv_heads);
  mxkit::detail::require(s.head_dim > 0 && s.head_dim % 2 == 0, "gpu::rope: head_dim ", s.head_dim, " must be even and > 0");
  mxkit::detail::require(std::isfinite(theta) && theta > 0.0, "gpu::rope: theta must be finite and > 0, got ", theta);
  if (s.tokens() == 0) return;
  mxkit::detail::require(s.seq > 0, "gpu::rope: seq is 0 for ", s.tokens(), " tokens");
  mxkit::detail::require(qkv != nullptr, "gpu::rope: null qkv for ", s.tokens(), " tokens");
  const detail::rope_params<T> p{qkv, s.tokens(), s.seq, s.qkv_dim(), s.n_heads + s.n_kv_heads, s.head_dim, s.head_dim / 2,
                                 theta, inverse};
  const std::size_t pairs = p.tokens * p.half;
  const int grid = detail::persistent_grid<detail::rope_kernel<T>>(detail::rope_threads, (pairs + detail::rope_threads - 1) / detail::rope_threads);
  detail::rope_kernel<T><<<grid, detail::rope_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace gpu
MXKIT_END_NAMESPACE
