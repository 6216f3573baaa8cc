// SPDX-License-Identifier: Apache-2.0
#pragma once
// Softmax cross-entropy of next-token logits, mean over the counted rows, fused with its gradient:
//   loss = sum_r m_r (logsumexp(z_r) - z_r[target_r]) / N,  dz_r = m_r (softmax(z_r) - onehot(target_r)) / N
// m_r the row's loss mask (0 or 1; every row counts without a mask) and N = max(1, sum_r m_r): the
// mean over the counted targets. A batch that counts none has loss 0 and a zero gradient (NeMo's
// masked-token loss divides by 1 there, MaskedTokenLossReduction: "no valid tokens"), where a
// mean over nothing would make every gradient NaN. A row that does not count contributes nothing:
// its loss is not formed into the sum and its gradient row is written as zeros, whatever its logits
// (even NaN). Computed in double from the logits (max subtracted first). dlogits may be logits
// itself (the gradient written in place: every element is read before it is overwritten).
// The rows may come a chunk at a time (nn/head_loss.hpp): cross_entropy_rows writes each row's
// loss apart, and cross_entropy_mean adds them all in row order, so any chunking gives the sum,
// and the gradient, of the whole batch bit for bit.
// Host reference kernels (the oracle of every device kernel), called by ref::host_backend.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// N: the counted rows of a batch of `rows` (the mask, or null: all), at least 1.
inline double cross_entropy_count(const std::int32_t* mask, std::size_t rows) {
  if (!mask) return static_cast<double>(rows);
  std::size_t n = 0;
  for (std::size_t r = 0; r < rows; ++r) n += mask[r] != 0;
  return n == 0 ? 1.0 : static_cast<double>(n);
}

// One row z (V logits) against target t: returns logsumexp(z) - z[t]; with dz, writes
// (softmax(z) - onehot(t)) / N there.
template <class T>
double cross_entropy_row(const T* z, std::size_t t, T* dz, std::size_t V, double N) {
  double mx = z[0];
  for (std::size_t j = 1; j < V; ++j) mx = z[j] > mx ? static_cast<double>(z[j]) : mx;
  double sum = 0.0;
  for (std::size_t j = 0; j < V; ++j) sum += std::exp(z[j] - mx);
  const double loss = std::log(sum) + mx - z[t];
  if (dz)
    for (std::size_t j = 0; j < V; ++j) dz[j] = static_cast<T>((std::exp(z[j] - mx) / sum - (j == t ? 1.0 : 0.0)) / N);
  return loss;
}

// Rows first .. first + rows - 1 of a batch: logits (rows, V), the batch's targets and mask
// (null: every row counts) indexed from `first`, N its count. row_loss[first + r] = the row's loss
// (0 where it does not count); the gradient into dlogits (null: none).
template <class T>
void cross_entropy_rows(const T* logits, const std::int32_t* targets, const std::int32_t* mask, std::size_t first, std::size_t rows,
                        std::size_t V, double N, T* dlogits, double* row_loss) {
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t b = first + r;
    T* dz = dlogits ? dlogits + r * V : nullptr;
    if (mask && mask[b] == 0) {
      if (dz)
        for (std::size_t j = 0; j < V; ++j) dz[j] = T(0);
      if (row_loss) row_loss[b] = 0.0;
      continue;
    }
    const double l = cross_entropy_row(logits + r * V, static_cast<std::size_t>(targets[b]), dz, V, N);
    if (row_loss) row_loss[b] = l;
  }
}

// The batch's loss from its row losses: their sum in row order, over N. (A row that does not
// count holds +0.0, which adds nothing: the sum over the counted rows.)
inline double cross_entropy_mean(const double* row_loss, std::size_t rows, double N) {
  double total = 0.0;
  for (std::size_t r = 0; r < rows; ++r) total += row_loss[r];
  return total / N;
}

// The whole batch at once, every row counted: the mean loss, the gradient into dlogits (null: none).
template <class T>
double cross_entropy(const T* logits, const std::int32_t* targets, T* dlogits, std::size_t rows, std::size_t V) {
  std::vector<double> row_loss(rows);
  cross_entropy_rows(logits, targets, nullptr, 0, rows, V, static_cast<double>(rows), dlogits, row_loss.data());
  return cross_entropy_mean(row_loss.data(), rows, static_cast<double>(rows));
}

}  // namespace ref
MXKIT_END_NAMESPACE
