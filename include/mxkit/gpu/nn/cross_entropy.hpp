// SPDX-License-Identifier: Apache-2.0
#pragma once
// Softmax cross-entropy over the vocabulary fused with its gradient, the kernel of
// ref/nn/cross_entropy.hpp with float statistics:
//   loss = sum_r m_r (logsumexp(z_r) - z_r[target_r]) / N,  dz_r = m_r (softmax(z_r) - onehot(target_r)) / N
// m_r the loss mask (0/1; null: every row counts), N = max(1, sum_r m_r) (the batch's rows without
// a mask). A row that does not count gets a zero gradient row and a zero loss, its logits unread
// but for the write. The rows may be a chunk of the batch (cross_entropy_rows: rows first ..
// first + rows - 1; targets, mask and row losses are the batch's): each row's arithmetic is the
// same in any chunk, and cross_entropy_mean adds the whole batch's row losses in one fixed order
// afterwards, so a chunked batch gives the unchunked loss and gradient bit for bit.
// The gradient overwrites the logits in place (llm.c's fused classifier): the (rows, vocab)
// logits are the largest activation of a language model, and nothing reads them afterwards.
// One block per row. Pass 1 reads the row once with the online normalizer (Milakov and
// Gimelshein 2018, "Online normalizer calculation for softmax"): each thread keeps a running
// max m and sum s of exp(z - m); the (m, s) pairs merge across the block in a fixed order
// (gpu/nn/reduce.hpp's butterfly, then warps in order). Pass 2 reads the row again (from L2
// while the row is resident) and writes the gradient. Per-row losses go to a caller workspace;
// a one-block kernel adds them in a fixed order, in double, into the mean: the same bits every
// run. With a mask and a gradient, each block first counts the batch's mask (in double: exact),
// a read of 4 bytes a batch row per block, small beside its rows of logits.
// A target outside [0, vocab) sets *error to 1 (sticky), makes that row's loss (and so the
// mean) NaN, and its gradient row is the softmax without the one-hot; nothing outside the row
// is read.
// Bytes moved (s = sizeof(T)): rows * vocab * s read, and with the gradient another read and a
// write of as much; 8 bytes a row for the target and the row's loss.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/device.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/nn/reduce.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int cross_entropy_threads = 256;

// R: the row losses' type (float in the whole-batch cross_entropy's workspace, double in the
// backend's row-loss tensor: the same values, widened).
template <class T, class R>
struct cross_entropy_params {
  T* logits;                    // (rows, vocab), batch rows first ..; the gradient when `gradient`
  const std::int32_t* targets;  // (batch_rows)
  const std::int32_t* mask;     // (batch_rows) 0/1, or null: every row counts
  R* row_loss;                  // (batch_rows), or null: not written
  int* error;
  std::size_t rows, vocab, first, batch_rows;
  bool gradient;
};

// N of the batch: max(1, the mask's count), or its rows without a mask; every thread of the block
// gets it (a block_sum: all threads call it).
template <int Threads>
__device__ inline float counted_rows(const std::int32_t* mask, std::size_t batch_rows, double* partial) noexcept {
  if (!mask) return static_cast<float>(batch_rows);
  double n = 0.0;
  for (std::size_t b = threadIdx.x; b < batch_rows; b += Threads) n += mask[b] != 0 ? 1.0 : 0.0;
  n = block_sum<Threads>(n, partial);
  return static_cast<float>(n < 1.0 ? 1.0 : n);
}

// (m, s) <- the normalizer of both sets: max of the maxima, sums rescaled to it. Symmetric in
// its two arguments, bit for bit (fmax and + are commutative), as the butterfly needs. An
// empty set (s = 0, m = -Inf) contributes 0 without forming -Inf - -Inf.
__device__ inline void merge_normalizer(float& m, float& s, float om, float os) noexcept {
  const float nm = fmaxf(m, om);
  s = (s == 0.0f ? 0.0f : s * expf(m - nm)) + (os == 0.0f ? 0.0f : os * expf(om - nm));
  m = nm;
}

template <class T, class R>
MXKIT_GLOBAL void __launch_bounds__(cross_entropy_threads) cross_entropy_kernel(const cross_entropy_params<T, R> p) {
  constexpr int N = chunk_elements<T>, warps = cross_entropy_threads / warp_size;
  constexpr std::size_t step = static_cast<std::size_t>(cross_entropy_threads) * N;
  __shared__ float part_m[warps], part_s[warps];
  __shared__ double part_n[warps];
  const float counted = p.gradient ? counted_rows<cross_entropy_threads>(p.mask, p.batch_rows, part_n) : 1.0f;
  for (std::size_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    T* z = p.logits + r * p.vocab;
    const std::size_t b = p.first + r;
    if (p.mask && p.mask[b] == 0) {  // (the same branch for the whole block: no barrier is skipped by some threads only)
      if (threadIdx.x == 0 && p.row_loss) p.row_loss[b] = R(0);
      if (p.gradient)
        for (std::size_t c = threadIdx.x * static_cast<std::size_t>(N); c < p.vocab; c += step) {
          float v[N] = {};
          store_chunk(z, c, p.vocab, v);
        }
      continue;
    }
    const std::int32_t target = p.targets[b];
    const bool valid = target >= 0 && static_cast<std::size_t>(target) < p.vocab;
    // Read before any thread of the block writes the row (the barriers below come first).
    const float zt = threadIdx.x == 0 && valid ? load_float(z[target]) : 0.0f;
    float m = -INFINITY, s = 0.0f;
    for (std::size_t c = threadIdx.x * static_cast<std::size_t>(N); c < p.vocab; c += step) {
      float v[N];
      load_chunk(z, c, p.vocab, v, -INFINITY);
      for (int k = 0; k < N; ++k) {
        if (v[k] > m) {
          s = s * expf(m - v[k]) + 1.0f;
          m = v[k];
        } else if (!(v[k] == -INFINITY)) {  // -Inf adds exp(-Inf) = 0; NaN goes in (and out as NaN)
          s += expf(v[k] - m);
        }
      }
    }
    for (int o = warp_size / 2; o > 0; o /= 2) {
      const float om = shfl_xor(m, o), os = shfl_xor(s, o);
      merge_normalizer(m, s, om, os);
    }
    if (lane_id() == 0) part_m[threadIdx.x / warp_size] = m, part_s[threadIdx.x / warp_size] = s;
    sync_threads();
    m = part_m[0], s = part_s[0];
    for (int w = 1; w < warps; ++w) merge_normalizer(m, s, part_m[w], part_s[w]);
    sync_threads();  // part_* are rewritten by the next row
    if (threadIdx.x == 0) {
      if (p.row_loss) p.row_loss[b] = static_cast<R>(valid ? logf(s) + m - zt : bit_cast<float>(0x7FC00000u));
      if (!valid) atomic_max(reinterpret_cast<unsigned*>(p.error), 1u);
    }
    if (p.gradient) {
      const float rows = counted;
      const std::size_t t = valid ? static_cast<std::size_t>(target) : p.vocab;
      for (std::size_t c = threadIdx.x * static_cast<std::size_t>(N); c < p.vocab; c += step) {
        float v[N];
        load_chunk(z, c, p.vocab, v);
        for (int k = 0; k < N; ++k) v[k] = (expf(v[k] - m) / s - (c + static_cast<std::size_t>(k) == t ? 1.0f : 0.0f)) / rows;
        store_chunk(z, c, p.vocab, v);
      }
    }
  }
}

// *loss = (sum of row_loss in a fixed order, in double) / N. One block of Threads.
template <int Threads, class R>
MXKIT_GLOBAL void __launch_bounds__(Threads) cross_entropy_mean_kernel(const R* row_loss, const std::int32_t* mask, std::size_t rows,
                                                                       float* loss) {
  __shared__ double partial[Threads / warp_size];
  double acc = 0.0;
  for (std::size_t r = threadIdx.x; r < rows; r += Threads) acc += static_cast<double>(row_loss[r]);
  acc = block_sum<Threads>(acc, partial);
  const double n = static_cast<double>(counted_rows<Threads>(mask, rows, partial));  // (a count below 2^24: exact as a float)
  if (threadIdx.x == 0) *loss = static_cast<float>(acc / n);
}

}  // namespace detail

// Floats of workspace cross_entropy needs: one loss per row.
inline constexpr std::size_t cross_entropy_workspace(std::size_t rows) noexcept { return rows; }

// *loss = mean over rows of logsumexp(logits[r]) - logits[r][targets[r]], and, when `gradient`,
// logits[r] = (softmax(logits[r]) - onehot(targets[r])) / rows in place. logits (rows, vocab);
// targets (rows); loss: one float; error: one int (set to 1 on a target outside [0, vocab));
// workspace: cross_entropy_workspace(rows) floats. All device pointers. Asynchronous on `stream`.
template <layer_element T>
void cross_entropy(T* logits, const std::int32_t* targets, std::size_t rows, std::size_t vocab, bool gradient, float* loss, int* error,
                   std::span<float> workspace, stream_t stream = nullptr) {
  mxkit::detail::require(rows > 0, "gpu::cross_entropy: rows is 0 (the mean of no losses)");
  mxkit::detail::require(vocab > 0 && vocab <= 0x7FFFFFFFu, "gpu::cross_entropy: vocab ", vocab, " is outside [1, ", 0x7FFFFFFF,
                         "] (int32 targets)");
  mxkit::detail::require(logits && targets && loss && error, "gpu::cross_entropy: null pointer (logits ", logits != nullptr,
                         ", targets ", targets != nullptr, ", loss ", loss != nullptr, ", error ", error != nullptr, ")");
  mxkit::detail::require(workspace.data() != nullptr && workspace.size() >= cross_entropy_workspace(rows), "gpu::cross_entropy: workspace of ",
                         workspace.size(), " floats, need ", cross_entropy_workspace(rows), " (one per row)");
  const detail::cross_entropy_params<T, float> p{logits, targets, nullptr, workspace.data(), error, rows, vocab, 0, rows, gradient};
  const int grid = detail::persistent_grid<detail::cross_entropy_kernel<T, float>>(detail::cross_entropy_threads, rows);
  detail::cross_entropy_kernel<T, float><<<grid, detail::cross_entropy_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
  detail::cross_entropy_mean_kernel<detail::cross_entropy_threads, float>
      <<<1, detail::cross_entropy_threads, 0, stream>>>(workspace.data(), nullptr, rows, loss);
  MXKIT_GPU_CHECK_LAUNCH();
}

// Rows first .. first + rows - 1 of a batch of batch_rows (the head's loss a chunk at a time):
// logits (rows, vocab) of those rows; targets and mask (null: every row counts) the batch's, of
// batch_rows each; row_loss (batch_rows doubles, or null) gets each row's loss at its batch row, 0
// where the row does not count; when `gradient`, logits[r] = m (softmax - onehot) / N in place,
// N = max(1, the mask's count) (batch_rows without a mask). error: as cross_entropy's. All device
// pointers. Asynchronous on `stream`.
template <layer_element T>
void cross_entropy_rows(T* logits, const std::int32_t* targets, const std::int32_t* mask, std::size_t first, std::size_t rows,
                        std::size_t batch_rows, std::size_t vocab, bool gradient, double* row_loss, int* error, stream_t stream = nullptr) {
  mxkit::detail::require(rows > 0 && first <= batch_rows && rows <= batch_rows - first, "gpu::cross_entropy_rows: rows ", first, " .. ",
                         first + rows, " of a batch of ", batch_rows);
  mxkit::detail::require(vocab > 0 && vocab <= 0x7FFFFFFFu, "gpu::cross_entropy_rows: vocab ", vocab, " is outside [1, ", 0x7FFFFFFF,
                         "] (int32 targets)");
  mxkit::detail::require(logits && targets && error, "gpu::cross_entropy_rows: null pointer (logits ", logits != nullptr, ", targets ",
                         targets != nullptr, ", error ", error != nullptr, ")");
  const detail::cross_entropy_params<T, double> p{logits, targets, mask, row_loss, error, rows, vocab, first, batch_rows, gradient};
  const int grid = detail::persistent_grid<detail::cross_entropy_kernel<T, double>>(detail::cross_entropy_threads, rows);
  detail::cross_entropy_kernel<T, double><<<grid, detail::cross_entropy_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

// *loss = (sum of the batch's row losses, in a fixed order, in double) / N, stored as a float;
// mask as cross_entropy_rows' (null: N = rows). Device pointers; asynchronous on `stream`.
inline void cross_entropy_mean(const double* row_loss, const std::int32_t* mask, std::size_t rows, float* loss, stream_t stream = nullptr) {
  mxkit::detail::require(rows > 0 && row_loss && loss, "gpu::cross_entropy_mean: ", rows, " rows, row_loss ", row_loss != nullptr,
                         ", loss ", loss != nullptr);
  detail::cross_entropy_mean_kernel<detail::cross_entropy_threads, double>
      <<<1, detail::cross_entropy_threads, 0, stream>>>(row_loss, mask, rows, loss);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace gpu
MXKIT_END_NAMESPACE
