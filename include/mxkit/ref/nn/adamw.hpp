// SPDX-License-Identifier: Apache-2.0
#pragma once
// AdamW (Loshchilov and Hutter 2019, decoupled weight decay) on fp32 master weights, with
// global-norm gradient clipping. The quantized or bf16 copies the GEMMs read are made from these
// masters after each update (the version bump invalidates them, linear.hpp).
//   g' = g * clip,  m = b1 m + (1 - b1) g',  v = b2 v + (1 - b2) g'^2
//   p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p)
// A step whose gradient norm is not finite is skipped (nothing is updated) and counted.
// The global norm is the square root of the sum over tensors of each tensor's sum of squares
// (sum_squares, double accumulation); the multi-tensor operations of nn::backend (global_norm,
// adamw_step) apply these kernels to every parameter in turn.
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/nn/kernel_args.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

template <class T>
double sum_squares(const T* x, std::size_t n) {
  double ss = 0.0;
  for (std::size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, std::size_t n, const nn::adamw_hyper& h) {
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  for (std::size_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]) * h.grad_scale;
    const double mi = h.beta1 * m[i] + (1.0 - h.beta1) * gi;
    const double vi = h.beta2 * v[i] + (1.0 - h.beta2) * gi * gi;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    const double update = (mi / bc1) / (std::sqrt(vi / bc2) + h.eps) + h.weight_decay * p[i];
    p[i] = static_cast<T>(p[i] - h.lr * update);
  }
}

}  // namespace ref
MXKIT_END_NAMESPACE
