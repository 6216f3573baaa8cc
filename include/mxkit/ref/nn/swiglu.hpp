// SPDX-License-Identifier: Apache-2.0
#pragma once
// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"), Llama's MLP activation, on the fused
// gate/up projection output gu = [g | u] (M, 2F):
//   forward   out = silu(g) * u,  silu(g) = g * sigmoid(g)
//   backward  dg = dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  du = dout * silu(g)
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cmath>
#include <cstddef>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {


template <class T>
void swiglu_forward(const T* gu, T* out, std::size_t rows, std::size_t F) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < F; ++j) {
      const double g = gu[r * 2 * F + j], u = gu[r * 2 * F + F + j];
      out[r * F + j] = static_cast<T>(g / (1.0 + std::exp(-g)) * u);
    }
}

template <class T>
void swiglu_backward(const T* dout, const T* gu, T* dgu, std::size_t rows, std::size_t F) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < F; ++j) {
      const double g = gu[r * 2 * F + j], u = gu[r * 2 * F + F + j], d = dout[r * F + j];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      dgu[r * 2 * F + j] = static_cast<T>(d * u * sig * (1.0 + g * (1.0 - sig)));
      dgu[r * 2 * F + F + j] = static_cast<T>(d * g * sig);
    }
}


}  // namespace ref
MXKIT_END_NAMESPACE
