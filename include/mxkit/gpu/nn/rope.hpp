// SPDX-License-Identifier: Apache-2.0
#pragma once
// Rotary position embedding (Su et al. 2021, "RoFormer"), Llama's halves layout, in place on the
// q and k heads of a qkv tensor [tokens, (n_heads + 2 n_kv_heads) head_dim]; the kernel of
// ref/nn/rope.hpp. Head element pair (i, i + D/2) of token b*seq + t turns by angle
// t * theta^(-2i/D) (forward) or by minus that (inverse, the backward pass: a rotation's
// transpose is its inverse); v heads are left alone. Llama 3.1's frequency scaling, when on,
// rescales theta^(-2i/D) by nn::llama3_scaled_frequency, the host's function (nn/rope_frequencies.hpp).
// The rotation factors cos and sin of each (position t, pair i) are computed in double, as the
// reference does, and rounded to float, so they equal the host's float factors (up to the double
// libraries' last bit); an fp32 angle t * inv_freq would be off by up to t * 2^-24 radians (5e-4
// at t = 8192). That is one pow and one sincos (slow for the large angles of late positions)
// per pair and token: rope_factors computes them once into a [seq, head_dim / 2] table of
// (cos, sin) that every layer and step reads (the device backend keeps one), and rope without a
// table computes them on the fly. One thread per token and run of consecutive pairs, looping
// over the rotated heads a few at a time (all loads of a batch before its stores):
//   from a table   4 pairs a thread, each half's elements one 8-byte (bf16) or 16-byte (float)
//                  access, 2 heads a batch (the fastest of the shapes timed in
//                  docs/perf/training.md);
//   on the fly     1 pair a thread, 8 heads a batch (the double math's registers leave no room
//                  for more).
// Consecutive threads take consecutive pairs: coalesced within each half.
// Bytes moved: 2 * tokens * (n_heads + n_kv_heads) * head_dim * sizeof(T) (read and write).
#include <cmath>
#include <cstddef>
#include <type_traits>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/kernel_args.hpp>
#include <mxkit/nn/rope_frequencies.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// One entry of a RoPE factor table: the cosine and sine of one (position, pair) angle. A struct
// of our own: HIP's vector pair type is not trivially copyable, so no device_buffer holds it.
struct alignas(8) rope_factor {
  float cos, sin;
};

namespace detail {

inline constexpr int rope_threads = 256;
// Consecutive pairs a thread rotates (elements of each half), and heads whose loads it issues
// together, with and without a factor table.
template <bool Table>
inline constexpr int rope_pairs = Table ? 4 : 1;
template <bool Table>
inline constexpr int rope_batch = Table ? 2 : 8;

// cos and sin of t * theta^(-2i/D) (scaled), in double, rounded to float: the reference's
// expression, in its order.
__device__ inline void rotation_factors(std::size_t t, std::size_t i, std::size_t head_dim, const nn::rope_frequencies& f, float& c,
                                        float& s) noexcept {
  const double frequency = pow(f.theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  const double angle = static_cast<double>(t) * nn::llama3_scaled_frequency(frequency, f.scaling);
  double sd, cd;
  sincos(angle, &sd, &cd);
  c = static_cast<float>(cd);
  s = static_cast<float>(sd);
}

template <int Threads>  // a template, as every kernel here (an unused plain kernel warns per unit)
MXKIT_GLOBAL void __launch_bounds__(Threads) rope_factors_kernel(rope_factor* table, std::size_t seq, std::size_t half, std::size_t head_dim,
                                                                  const nn::rope_frequencies f) {
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(Threads) + threadIdx.x; idx < seq * half;
       idx += gridDim.x * static_cast<std::size_t>(Threads)) {
    float c, s;
    rotation_factors(idx / half, idx % half, head_dim, f, c, s);
    table[idx] = {c, s};
  }
}

template <class T>
struct rope_params {
  const rope_factor* factors;  // (seq, half) from rope_factors, or null: computed here
  T* qkv;                    // (tokens, row)
  std::size_t tokens, seq;   // tokens = batch * seq; position = token % seq
  std::size_t row, rotated;  // qkv row width; heads rotated (q heads then k heads, contiguous)
  std::size_t head_dim, half, groups;  // groups = ceil(half / V) per token
  nn::rope_frequencies frequencies;
  bool inverse;
};

// Table: the factors come from p.factors (an instantiation of its own: with the on-the-fly pow
// and sincos in the same kernel the table path ran at the registers of both).
template <class T, bool Table, int V = rope_pairs<Table>, int Batch = rope_batch<Table>>
MXKIT_GLOBAL void __launch_bounds__(rope_threads) rope_kernel(const rope_params<T> p) {
  const std::size_t total = p.tokens * p.groups;
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(rope_threads) + threadIdx.x; idx < total;
       idx += gridDim.x * static_cast<std::size_t>(rope_threads)) {
    const std::size_t token = idx / p.groups, i0 = idx % p.groups * V, t = token % p.seq;
    float c[V], s[V];
    for (int k = 0; k < V; ++k) {  // past the half (a partial group) the factors are unused
      const std::size_t i = i0 + static_cast<std::size_t>(k);
      if constexpr (Table) {
        const rope_factor f = i < p.half ? p.factors[t * p.half + i] : rope_factor{0.0f, 0.0f};
        c[k] = f.cos, s[k] = f.sin;
      } else {
        rotation_factors(t, i, p.head_dim, p.frequencies, c[k], s[k]);
      }
      if (p.inverse) s[k] = -s[k];
    }
    T* v = p.qkv + token * p.row;
    // Heads Batch at a time, every load of a batch before its stores: a load after a store
    // through the same pointer waits for it.
    for (std::size_t h0 = 0; h0 < p.rotated; h0 += Batch) {
      float x1[Batch][V], x2[Batch][V];
#pragma unroll
      for (int j = 0; j < Batch; ++j) {
        if (h0 + static_cast<std::size_t>(j) >= p.rotated) break;
        const T* e = v + (h0 + static_cast<std::size_t>(j)) * p.head_dim;
        load_chunk(e, i0, p.half, x1[j]);
        load_chunk(e + p.half, i0, p.half, x2[j]);
      }
#pragma unroll
      for (int j = 0; j < Batch; ++j) {
        if (h0 + static_cast<std::size_t>(j) >= p.rotated) break;
        T* e = v + (h0 + static_cast<std::size_t>(j)) * p.head_dim;
        float y1[V], y2[V];
        for (int k = 0; k < V; ++k) {  // the fused multiply-adds spelled out: every instantiation rounds alike
          y1[k] = fmaf(x1[j][k], c[k], -(x2[j][k] * s[k]));
          y2[k] = fmaf(x1[j][k], s[k], x2[j][k] * c[k]);
        }
        store_chunk(e, i0, p.half, y1);
        store_chunk(e + p.half, i0, p.half, y2);
      }
    }
  }
}

}  // namespace detail

// The rotation factors of positions 0 .. seq - 1 for head_dim and the frequencies: table[t *
// head_dim / 2 + i] = (cos, sin) of t * theta^(-2i/D) (scaled), float from double (device, seq *
// head_dim / 2 entries). Asynchronous on `stream`.
inline std::size_t rope_factors_size(std::size_t seq, std::size_t head_dim) noexcept { return seq * (head_dim / 2); }
inline void rope_factors(rope_factor* table, std::size_t seq, std::size_t head_dim, const nn::rope_frequencies& f, stream_t stream = nullptr) {
  mxkit::detail::require(head_dim > 0 && head_dim % 2 == 0, "gpu::rope_factors: head_dim ", head_dim, " must be even and > 0");
  mxkit::detail::require(std::isfinite(f.theta) && f.theta > 0.0, "gpu::rope_factors: theta must be finite and > 0, got ", f.theta);
  nn::check_config(f);
  const std::size_t n = rope_factors_size(seq, head_dim);
  if (n == 0) return;
  mxkit::detail::require(table != nullptr, "gpu::rope_factors: null table for ", n, " entries");
  constexpr int threads = detail::rope_threads;
  const int grid = detail::persistent_grid<detail::rope_factors_kernel<threads>>(threads, (n + threads - 1) / threads);
  detail::rope_factors_kernel<threads><<<grid, threads, 0, stream>>>(table, seq, head_dim / 2, head_dim, f);
  MXKIT_GPU_CHECK_LAUNCH();
}
inline void rope_factors(rope_factor* table, std::size_t seq, std::size_t head_dim, double theta, stream_t stream = nullptr) {
  rope_factors(table, seq, head_dim, nn::rope_frequencies{theta, {}}, stream);
}

// Rotates the q and k heads of qkv (device, [s.tokens(), s.qkv_dim()]) in place: by
// t * theta^(-2i/D) (scaled) at position t, or back by it when `inverse`. factors:
// rope_factors(s.seq, s.head_dim, f)'s table (device), or null to compute them here. Asynchronous
// on `stream`.
template <layer_element T>
void rope(T* qkv, const nn::head_shape& s, const nn::rope_frequencies& f, bool inverse, const rope_factor* factors, stream_t stream = nullptr) {
  const double theta = f.theta;
  mxkit::detail::require(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "gpu::rope: n_heads ", s.n_heads,
                         " is not a multiple of n_kv_heads ", s.n_kv_heads);
  mxkit::detail::require(s.head_dim > 0 && s.head_dim % 2 == 0, "gpu::rope: head_dim ", s.head_dim, " must be even and > 0");
  mxkit::detail::require(std::isfinite(theta) && theta > 0.0, "gpu::rope: theta must be finite and > 0, got ", theta);
  nn::check_config(f);
  if (s.tokens() == 0) return;
  mxkit::detail::require(s.seq > 0, "gpu::rope: seq is 0 for ", s.tokens(), " tokens");
  mxkit::detail::require(qkv != nullptr, "gpu::rope: null qkv for ", s.tokens(), " tokens");
  auto launch = [&](auto table) {
    constexpr bool Table = decltype(table)::value;
    constexpr std::size_t V = detail::rope_pairs<Table>;
    const std::size_t half = s.head_dim / 2, groups = (half + V - 1) / V;
    const detail::rope_params<T> p{factors, qkv, s.tokens(), s.seq, s.qkv_dim(), s.n_heads + s.n_kv_heads, s.head_dim, half, groups, f,
                                   inverse};
    const std::size_t blocks = (p.tokens * groups + detail::rope_threads - 1) / detail::rope_threads;
    const int grid = detail::persistent_grid<detail::rope_kernel<T, Table>>(detail::rope_threads, blocks);
    detail::rope_kernel<T, Table><<<grid, detail::rope_threads, 0, stream>>>(p);
    MXKIT_GPU_CHECK_LAUNCH();
  };
  if (factors) launch(std::true_type{});
  else launch(std::false_type{});
}
template <layer_element T>
void rope(T* qkv, const nn::head_shape& s, double theta, bool inverse, const rope_factor* factors, stream_t stream = nullptr) {
  rope(qkv, s, nn::rope_frequencies{theta, {}}, inverse, factors, stream);
}
template <layer_element T>
void rope(T* qkv, const nn::head_shape& s, double theta, bool inverse, stream_t stream = nullptr) {
  rope(qkv, s, nn::rope_frequencies{theta, {}}, inverse, static_cast<const rope_factor*>(nullptr), stream);
}
template <layer_element T>
void rope(T* qkv, const nn::head_shape& s, const nn::rope_frequencies& f, bool inverse, stream_t stream = nullptr) {
  rope(qkv, s, f, inverse, static_cast<const rope_factor*>(nullptr), stream);
}

}  // namespace gpu
MXKIT_END_NAMESPACE
