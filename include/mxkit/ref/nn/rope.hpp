// SPDX-License-Identifier: Apache-2.0
#pragma once
// Rotary position embedding (Su et al. 2021, "RoFormer"), as in Llama: each q and k head of
// dimension D is split into halves (x1, x2) = (v[i], v[i + D/2]), i < D/2, and rotated by
// angle t * theta^(-2i/D) at position t (Llama 3.1: the frequency rescaled, nn/rope_frequencies.hpp):
//   forward   (x1 cos - x2 sin, x1 sin + x2 cos)
//   backward  the same rotation by -angle (a rotation's transpose is its inverse).
// The v heads are left alone. Angles are formed in double and rounded once.
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cmath>
#include <cstddef>

#include <mxkit/nn/kernel_args.hpp>
#include <mxkit/nn/rope_frequencies.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {


// qkv (B*T, qkv_dim), in place.
template <class T>
void rope(T* qkv, const nn::head_shape& s, const nn::rope_frequencies& f, bool inverse) {
  const std::size_t D = s.head_dim, half = D / 2, heads = s.n_heads + s.n_kv_heads, row = s.qkv_dim();
  for (std::size_t b = 0; b < s.batch; ++b)
    for (std::size_t t = 0; t < s.seq; ++t) {
      T* r = qkv + (b * s.seq + t) * row;
      for (std::size_t i = 0; i < half; ++i) {
        const double frequency = std::pow(f.theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
        const double angle = static_cast<double>(t) * nn::llama3_scaled_frequency(frequency, f.scaling);
        const T c = static_cast<T>(std::cos(angle)), sn = static_cast<T>(inverse ? -std::sin(angle) : std::sin(angle));
        for (std::size_t h = 0; h < heads; ++h) {  // q heads then k heads: contiguous
          T* v = r + h * D;
          const T x1 = v[i], x2 = v[i + half];
          v[i] = x1 * c - x2 * sn;
          v[i + half] = x1 * sn + x2 * c;
        }
      }
    }
}
template <class T>
void rope(T* qkv, const nn::head_shape& s, double theta, bool inverse) {
  rope(qkv, s, nn::rope_frequencies{theta, {}}, inverse);
}


}  // namespace ref
MXKIT_END_NAMESPACE
