// SPDX-License-Identifier: Apache-2.0
#pragma once
// RMSNorm (Zhang and Sennrich 2019), Llama's normalization: y = x / sqrt(mean(x^2) + eps) * g.
// Host kernels first (forward and backward side by side), then the layer. Reductions
// accumulate in double.
//   forward   r = 1 / sqrt(mean_j x_j^2 + eps),  y_j = g_j x_j r
//   backward  dx_j += r g_j dy_j - r^3 / C * x_j * sum_i g_i dy_i x_i,   dg_j += sum_rows dy_j x_j r
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cmath>
#include <cstddef>
#include <string>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {


// x, y (rows, C); w (1, C); rstd (rows, 1)
template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::size_t rows, std::size_t C, double eps) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = x + r * C;
    double ss = 0.0;
    for (std::size_t j = 0; j < C; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const T s = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(C) + eps));
    rstd[r] = s;
    for (std::size_t j = 0; j < C; ++j) y[r * C + j] = xr[j] * s * w[j];
  }
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw, std::size_t rows, std::size_t C) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* xr = x + r * C;
    const T* dyr = dy + r * C;
    const double s = rstd[r];
    double dot = 0.0;  // sum_i g_i dy_i x_i
    for (std::size_t j = 0; j < C; ++j) dot += static_cast<double>(w[j]) * dyr[j] * xr[j];
    const double k = s * s * s * dot / static_cast<double>(C);
    for (std::size_t j = 0; j < C; ++j) {
      dx[r * C + j] += static_cast<T>(s * w[j] * dyr[j] - k * xr[j]);
      if (dw) dw[j] += static_cast<T>(static_cast<double>(dyr[j]) * xr[j] * s);
    }
  }
}


}  // namespace ref
MXKIT_END_NAMESPACE
