// SPDX-License-Identifier: Apache-2.0
#pragma once
// Token embedding on the device, the kernels of ref/nn/embedding.hpp:
//   forward   out[i] = table[ids[i]]                 (rows copied bit for bit)
//   backward  dtable[v] += sum over i with ids[i] == v of dout[i], in increasing i
// Token ids are checked on the device: an id outside [0, vocab) sets *error to 1 (sticky: the
// kernels never clear it; the caller zeroes it and reads it when it synchronizes anyway), its
// output row is zeros (forward) or it adds nothing (backward), and nothing outside the table
// is read or written.
//
// The backward pass is deterministic without sorting and without float atomics. Pass 1
// counts each vocabulary row's tokens (integer atomics: the counts do not depend on the
// order). Pass 2 gives each vocabulary row with a nonzero count a block (per column tile):
// the block scans the token ids in order, embedding_scan_ids at a time, until it has met all
// of that row's tokens. Each warp marks its ids of the row in a ballot mask; after one barrier
// every thread walks the tile's masks in token order, visiting only the marked tokens, and adds
// their dout rows to a float accumulator that started from dtable's row. The row's sum is then
// the same every run, and for float it is bit for bit the reference's (the same additions in
// the same order); bf16 rows round once. (The earlier walk over every token of a tile, with a
// barrier per 256 ids, was latency-bound: docs/perf/training.md.)
// Cost: pass 1 reads the n ids; pass 2 reads every count (vocab x 4 bytes), and for each
// distinct token present scans ids up to its last occurrence: at most distinct * n id reads
// (from L2; n^2 / 2 when all ids differ: 32M reads for n = 8192), plus n C s of dout and
// 2 distinct C s of dtable. For token counts far beyond 10^4 a stable counting sort (scan of
// the counts, ranked fill) would replace the scans.
// Forward bytes: 2 n C s + 4 n.
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include <mxkit/gpu/nn/chunk.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/device.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int embedding_threads = 256;
static_assert(std::is_same_v<std::uint32_t, unsigned>, "counts are the unsigned of atomic_add");

__device__ inline void raise_flag(int* error) noexcept { atomic_max(reinterpret_cast<unsigned*>(error), 1u); }

template <class W, class T>
struct embedding_forward_params {
  const std::int32_t* ids;  // (n)
  const W* table;           // (vocab, cols)
  T* out;                   // (n, cols)
  int* error;
  std::size_t n, vocab, cols, chunks;  // chunks = ceil(cols / N) per row
};

template <class W, class T>
MXKIT_GLOBAL void __launch_bounds__(embedding_threads) embedding_forward_kernel(const embedding_forward_params<W, T> p) {
  constexpr int N = chunk_elements<T>;
  const std::size_t total = p.n * p.chunks;
  for (std::size_t idx = blockIdx.x * static_cast<std::size_t>(embedding_threads) + threadIdx.x; idx < total;
       idx += gridDim.x * static_cast<std::size_t>(embedding_threads)) {
    const std::size_t i = idx / p.chunks, c = idx % p.chunks * N;
    const std::int32_t id = p.ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= p.vocab) {
      if (c == 0) raise_flag(p.error);
      float zero[N] = {};
      store_chunk(p.out + i * p.cols, c, p.cols, zero);
    } else {
      if constexpr (std::is_same_v<W, T>) {
        copy_chunk<N>(p.out + i * p.cols, p.table + static_cast<std::size_t>(id) * p.cols, c, p.cols);
      } else {  // an fp32 table into bf16 activations: each element rounded once
        float v[N];
        load_chunk(p.table + static_cast<std::size_t>(id) * p.cols, c, p.cols, v);
        store_chunk(p.out + i * p.cols, c, p.cols, v);
      }
    }
  }
}

struct embedding_count_params {
  const std::int32_t* ids;  // (n)
  unsigned* count;          // (vocab), zeroed before
  int* error;
  std::size_t n, vocab;
};

// A template (on its block size) like every kernel here: an unused non-template kernel with
// internal linkage is a warning in every translation unit that includes the header.
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) embedding_count_kernel(const embedding_count_params p) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(Threads) + threadIdx.x; i < p.n; i += gridDim.x * static_cast<std::size_t>(Threads)) {
    const std::int32_t id = p.ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= p.vocab) raise_flag(p.error);
    else atomic_add(p.count + id, 1u);
  }
}

template <class T, class W>
struct embedding_backward_params {
  const std::int32_t* ids;  // (n)
  const T* dout;            // (n, cols)
  W* dtable;                // (vocab, cols), added into
  const unsigned* count;    // (vocab) from embedding_count_kernel
  std::size_t n, vocab, cols;
};

// Ids a backward block tests per barrier: embedding_id_rounds per thread.
inline constexpr int embedding_id_rounds = 4;
inline constexpr std::size_t embedding_scan_ids = static_cast<std::size_t>(embedding_threads) * embedding_id_rounds;

// Block (v, tile): columns [tile * 256 N, (tile + 1) * 256 N) of vocabulary rows v, v + gridDim.x, ...
template <class T, class W>
MXKIT_GLOBAL void __launch_bounds__(embedding_threads) embedding_backward_kernel(const embedding_backward_params<T, W> p) {
  constexpr int N = chunk_elements<T>, warps = embedding_threads / warp_size, words = embedding_id_rounds * warps;
  // Bit l of word k * warps + w: token base + (k * warps + w) * warp_size + l has id v (round k
  // of warp w), so the words in order cover the tile's tokens in order.
  __shared__ lane_mask_t hits[words];
  const std::size_t c = (blockIdx.y * static_cast<std::size_t>(embedding_threads) + threadIdx.x) * N;
  const int warp = static_cast<int>(threadIdx.x) / warp_size;
  for (std::size_t v = blockIdx.x; v < p.vocab; v += gridDim.x) {
    const unsigned expected = p.count[v];
    if (expected == 0) continue;  // uniform over the block
    W* row = p.dtable + v * p.cols;
    float acc[N];
    load_chunk(row, c, p.cols, acc);
    unsigned found = 0;  // the same in every thread: read from hits[]
    for (std::size_t base = 0; base < p.n && found < expected; base += embedding_scan_ids) {
      std::int32_t id[embedding_id_rounds];
      for (int k = 0; k < embedding_id_rounds; ++k) {  // the loads first, all in flight together
        const std::size_t i = base + static_cast<std::size_t>(k) * embedding_threads + threadIdx.x;
        id[k] = i < p.n ? p.ids[i] : -1;
      }
      for (int k = 0; k < embedding_id_rounds; ++k) {
        const lane_mask_t m = ballot(static_cast<std::size_t>(id[k]) == v);  // a negative id wraps past vocab: no match
        if (lane_id() == 0) hits[k * warps + warp] = m;
      }
      sync_threads();
      for (int w = 0; w < words; ++w) {
        lane_mask_t m = hits[w];
        found += static_cast<unsigned>(lane_count(m));
        for (; m != 0 && c < p.cols; m &= m - 1) {
          float d[N];
          load_chunk(p.dout + (base + static_cast<std::size_t>(w) * warp_size + static_cast<std::size_t>(lowest_lane(m))) * p.cols, c,
                     p.cols, d);
          for (int e = 0; e < N; ++e) acc[e] += d[e];
        }
      }
      sync_threads();  // hits[] is rewritten by the next tile
    }
    if (c < p.cols) store_chunk(row, c, p.cols, acc);
  }
}

inline constexpr std::size_t embedding_max_grid = 65535;  // grid x and y limits common to both vendors

}  // namespace detail

// out[i] = table[ids[i]] (bit for bit when both are of one type, else rounded once to T); an id
// outside [0, vocab) sets *error = 1 and zeroes its row. ids (n); table (vocab, cols); out (n,
// cols); error: one int; all device pointers. Asynchronous on `stream`.
template <layer_element W, layer_element T>
void embedding_forward(const std::int32_t* ids, std::size_t n, const W* table, std::size_t vocab, T* out, std::size_t cols,
                       int* error, stream_t stream = nullptr) {
  if (n == 0 || cols == 0) return;
  mxkit::detail::require(ids && table && out && error, "gpu::embedding_forward: null pointer (ids ", ids != nullptr, ", table ",
                         table != nullptr, ", out ", out != nullptr, ", error ", error != nullptr, ")");
  constexpr std::size_t N = detail::chunk_elements<T>;
  const detail::embedding_forward_params<W, T> p{ids, table, out, error, n, vocab, cols, (cols + N - 1) / N};
  const std::size_t total = n * p.chunks;
  const int grid = detail::persistent_grid<detail::embedding_forward_kernel<W, T>>(detail::embedding_threads,
                                                                         (total + detail::embedding_threads - 1) / detail::embedding_threads);
  detail::embedding_forward_kernel<W, T><<<grid, detail::embedding_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

// Unsigned ints of workspace embedding_backward needs: one count per vocabulary row.
inline constexpr std::size_t embedding_backward_workspace(std::size_t vocab) noexcept { return vocab; }

// dtable[ids[i]] += dout[i], deterministically (see the file comment); an id outside
// [0, vocab) sets *error = 1 and adds nothing. ids (n); dout (n, cols); dtable (vocab, cols);
// error: one int; workspace: embedding_backward_workspace(vocab) counts, zeroed here on the
// stream; dtable of T or float (an fp32 gradient of bf16 activations). All device pointers.
// Asynchronous on `stream`.
template <layer_element T, layer_element W>
void embedding_backward(const std::int32_t* ids, std::size_t n, const T* dout, W* dtable, std::size_t vocab, std::size_t cols,
                        int* error, std::span<std::uint32_t> workspace, stream_t stream = nullptr) {
  if (n == 0 || cols == 0) return;
  mxkit::detail::require(ids && dout && dtable && error, "gpu::embedding_backward: null pointer (ids ", ids != nullptr, ", dout ",
                         dout != nullptr, ", dtable ", dtable != nullptr, ", error ", error != nullptr, ")");
  mxkit::detail::require(vocab <= 0x7FFFFFFFu, "gpu::embedding_backward: vocab ", vocab, " exceeds the int32 ids' range ", 0x7FFFFFFF);
  mxkit::detail::require(workspace.data() != nullptr && workspace.size() >= embedding_backward_workspace(vocab),
                         "gpu::embedding_backward: workspace of ", workspace.size(), " counts, need ", embedding_backward_workspace(vocab),
                         " (one per vocabulary row)");
  constexpr std::size_t N = detail::chunk_elements<T>, tile = static_cast<std::size_t>(detail::embedding_threads) * N;
  const std::size_t tiles = (cols + tile - 1) / tile;
  mxkit::detail::require(tiles <= detail::embedding_max_grid, "gpu::embedding_backward: cols ", cols, " exceeds ",
                         detail::embedding_max_grid * tile);
  mxkit::detail::require(vocab > 0, "gpu::embedding_backward: vocab is 0 for ", n, " tokens");
  MXKIT_GPU_CHECK(memset_async(workspace.data(), 0, vocab * sizeof(std::uint32_t), stream));
  const detail::embedding_count_params cp{ids, workspace.data(), error, n, vocab};
  const int g1 = detail::persistent_grid<detail::embedding_count_kernel<detail::embedding_threads>>(detail::embedding_threads,
                                                                  (n + detail::embedding_threads - 1) / detail::embedding_threads);
  detail::embedding_count_kernel<detail::embedding_threads><<<g1, detail::embedding_threads, 0, stream>>>(cp);
  MXKIT_GPU_CHECK_LAUNCH();
  const detail::embedding_backward_params<T, W> p{ids, dout, dtable, workspace.data(), n, vocab, cols};
  const dim3 grid(static_cast<unsigned>(vocab < detail::embedding_max_grid ? vocab : detail::embedding_max_grid),
                  static_cast<unsigned>(tiles));
  detail::embedding_backward_kernel<T, W><<<grid, detail::embedding_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace gpu
MXKIT_END_NAMESPACE
