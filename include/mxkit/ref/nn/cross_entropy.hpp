// SPDX-License-Identifier: Apache-2.0
#pragma once
// Softmax cross-entropy of next-token logits, mean over rows, fused with its gradient:
//   loss = mean_r (logsumexp(z_r) - z_r[target_r]),  dz_r = (softmax(z_r) - onehot(target_r)) / rows
// Computed in double from the logits (max subtracted first). dlogits may be logits itself (the
// gradient written in place: every element is read before it is overwritten).
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {


template <class T>
double cross_entropy(const T* logits, const std::int32_t* targets, T* dlogits, std::size_t rows, std::size_t V) {
  double total = 0.0;
  for (std::size_t r = 0; r < rows; ++r) {
    const T* z = logits + r * V;
    double mx = z[0];
    for (std::size_t j = 1; j < V; ++j) mx = z[j] > mx ? static_cast<double>(z[j]) : mx;
    double sum = 0.0;
    for (std::size_t j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
    const std::size_t t = static_cast<std::size_t>(targets[r]);
    total += std::log(sum) + mx - z[t];
    if (dlogits)
      for (std::size_t j = 0; j < V; ++j)
        dlogits[r * V + j] = static_cast<T>((std::exp(z[j] - mx) / sum - (j == t ? 1.0 : 0.0)) / static_cast<double>(rows));
  }
  return total / static_cast<double>(rows);
}


}  // namespace ref
MXKIT_END_NAMESPACE
