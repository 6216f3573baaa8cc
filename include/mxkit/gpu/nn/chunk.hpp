// SPDX-License-Identifier: Apache-2.0
#pragma once
// Element access of the layer kernels (gpu/nn/). Activations are float or bfloat16 and every
// kernel computes in float: a load widens (exact), a store rounds once with bfloat16::from_float
// (nearest even, Inf stays Inf: the rounding of gpu/dequantize.hpp and of the host).
//
// A thread owns chunks of N consecutive elements of a row (N = chunk_elements<T>: 16 bytes, 4
// floats or 8 bf16). A whole chunk whose address is aligned to its size moves as 16-byte (or
// 8-byte) vector accesses; a chunk that is not (an odd row width, a row start off the 16-byte
// grid, the row's last partial chunk) moves element by element. Which elements a thread owns,
// and so the order of every reduction over them, depends on the index alone, never on the
// alignment: the same values give the same bits wherever they lie in memory.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/format/float16.hpp>
#include <mxkit/tensor/matrix_view.hpp>  // load_float

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// Element types of the layer kernels' activations.
template <class T>
concept layer_element = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;

namespace detail {

template <class T>
inline constexpr int chunk_elements = 16 / static_cast<int>(sizeof(T));

// v rounded to T: nearest even, overflow to Inf, NaN stays NaN.
template <class T>
MXKIT_HD constexpr T round_to(float v) noexcept {
  if constexpr (std::is_same_v<T, float>) return v;
  else return T::from_float(v, rounding::nearest_even, overflow::propagate);
}

template <int Bytes>
__device__ inline bool aligned_to(const void* p) noexcept {
  return (reinterpret_cast<std::uintptr_t>(p) & static_cast<std::uintptr_t>(Bytes - 1)) == 0;
}

// Bytes of one vector access of an N-element chunk of T: 16, or 8 (a 4-element bf16 chunk), or 0
// (no vector access).
template <class T, int N>
inline constexpr int chunk_vector_bytes = (N * static_cast<int>(sizeof(T))) % 16 == 0 ? 16 : (N * static_cast<int>(sizeof(T))) == 8 ? 8 : 0;

// 32-bit words <-> elements (little endian: the element at the lower address is the low half).
template <class T, int N>
__device__ inline void unpack_words(const std::uint32_t* w, float (&v)[N]) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    for (int k = 0; k < N; ++k) v[k] = bit_cast<float>(w[k]);
  } else {
    for (int k = 0; k < N / 2; ++k) {
      v[2 * k] = T::from_bits(static_cast<std::uint16_t>(w[k] & 0xFFFFu)).to_float();
      v[2 * k + 1] = T::from_bits(static_cast<std::uint16_t>(w[k] >> 16)).to_float();
    }
  }
}
template <class T, int N>
__device__ inline void pack_words(const float (&v)[N], std::uint32_t* w) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    for (int k = 0; k < N; ++k) w[k] = bit_cast<std::uint32_t>(v[k]);
  } else {
    for (int k = 0; k < N / 2; ++k)
      w[k] = static_cast<std::uint32_t>(round_to<T>(v[2 * k]).bits()) | (static_cast<std::uint32_t>(round_to<T>(v[2 * k + 1]).bits()) << 16);
  }
}

// The N elements at q as 32-bit words, by vector loads (q aligned to chunk_vector_bytes).
template <int N, class T>
__device__ inline void load_vector_words(const T* q, std::uint32_t (&w)[N * sizeof(T) / 4]) noexcept {
  constexpr int vb = chunk_vector_bytes<T, N>;
#pragma unroll
  for (int j = 0; j < static_cast<int>(N * sizeof(T)) / vb; ++j) {
    if constexpr (vb == 16) {
      const uint4 a = reinterpret_cast<const uint4*>(q)[j];
      w[4 * j] = a.x, w[4 * j + 1] = a.y, w[4 * j + 2] = a.z, w[4 * j + 3] = a.w;
    } else {
      const uint2 a = reinterpret_cast<const uint2*>(q)[j];
      w[2 * j] = a.x, w[2 * j + 1] = a.y;
    }
  }
}

// Elements [i, i + N) of p (a row of n elements) as floats; `pad` for positions at or past n.
template <int N, class T>
__device__ inline void load_chunk(const T* p, std::size_t i, std::size_t n, float (&v)[N], float pad = 0.0f) noexcept {
  constexpr int vb = chunk_vector_bytes<T, N>;
  const T* q = p + i;
  if constexpr (vb > 0) {
    if (i + N <= n && aligned_to<vb>(q)) {
      std::uint32_t w[N * sizeof(T) / 4];
      load_vector_words<N>(q, w);
      unpack_words<T>(w, v);
      return;
    }
  }
  for (int k = 0; k < N; ++k) v[k] = i + static_cast<std::size_t>(k) < n ? load_float(q[k]) : pad;
}

// The same elements kept as their 32-bit words (zeros at and past n): a bf16 chunk in half the
// registers of its floats, widened (unpack_words) where it is used.
template <int N, class T>
__device__ inline void load_words(const T* p, std::size_t i, std::size_t n, std::uint32_t (&w)[N * sizeof(T) / 4]) noexcept {
  constexpr int vb = chunk_vector_bytes<T, N>;
  const T* q = p + i;
  if constexpr (vb > 0) {
    if (i + N <= n && aligned_to<vb>(q)) {
      load_vector_words<N>(q, w);
      return;
    }
  }
  float v[N];
  for (int k = 0; k < N; ++k) v[k] = i + static_cast<std::size_t>(k) < n ? load_float(q[k]) : 0.0f;
  pack_words<T>(v, w);  // exact: each value came from a T
}

// Stores elements [i, min(i + N, n)) of p from v, each rounded once to T.
template <int N, class T>
__device__ inline void store_chunk(T* p, std::size_t i, std::size_t n, const float (&v)[N]) noexcept {
  constexpr int vb = chunk_vector_bytes<T, N>;
  T* q = p + i;
  if constexpr (vb > 0) {
    if (i + N <= n && aligned_to<vb>(q)) {
      std::uint32_t w[N * sizeof(T) / 4];
      pack_words<T>(v, w);
      for (int j = 0; j < static_cast<int>(N * sizeof(T)) / vb; ++j) {
        if constexpr (vb == 16) reinterpret_cast<uint4*>(q)[j] = make_uint4(w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]);
        else reinterpret_cast<uint2*>(q)[j] = make_uint2(w[2 * j], w[2 * j + 1]);
      }
      return;
    }
  }
  for (int k = 0; k < N && i + static_cast<std::size_t>(k) < n; ++k) q[k] = round_to<T>(v[k]);
}

// Copies elements [i, min(i + N, n)) from src to dst bit for bit (a NaN keeps its payload).
template <int N, class T>
__device__ inline void copy_chunk(T* dst, const T* src, std::size_t i, std::size_t n) noexcept {
  constexpr int vb = chunk_vector_bytes<T, N>;
  if constexpr (vb == 16) {
    if (i + N <= n && aligned_to<16>(dst + i) && aligned_to<16>(src + i)) {
      for (int j = 0; j < static_cast<int>(N * sizeof(T)) / 16; ++j)
        reinterpret_cast<uint4*>(dst + i)[j] = reinterpret_cast<const uint4*>(src + i)[j];
      return;
    }
  }
  for (int k = 0; k < N && i + static_cast<std::size_t>(k) < n; ++k) dst[i + k] = src[i + k];
}

// A float is finite (neither Inf nor NaN), by its bits: no math-library call on the device.
MXKIT_HD constexpr bool finite_bits(float x) noexcept { return (bit_cast<std::uint32_t>(x) & 0x7F800000u) != 0x7F800000u; }
MXKIT_HD constexpr bool finite_bits(double x) noexcept {
  return (bit_cast<std::uint64_t>(x) & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
