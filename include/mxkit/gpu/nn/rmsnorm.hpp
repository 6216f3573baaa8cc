// SPDX-License-Identifier: Apache-2.0
#pragma once
// RMSNorm (Zhang and Sennrich 2019), forward and backward, on the device: the kernels of
// ref/nn/rmsnorm.hpp with float statistics (the reference accumulates in double).
//   forward   r = 1 / sqrt(mean_j x_j^2 + eps),  y_j = x_j r w_j              (r saved, float)
//   backward  dx_j = dr_j + r w_j dy_j - r^3 / C * x_j * sum_i w_i dy_i x_i,   dw_j += sum_rows dy_j x_j r
//             (dr: the residual stream's gradient, which dx may be: then dx +=)
// Forward: one warp per row (a warp-shuffle reduction, no shared memory), rows grid-strided.
// Backward: one block per group of rows, in one of two shapes, and the group's dw terms to a
// row of the caller's workspace [groups, C]; a second kernel adds the workspace rows to dw in a
// fixed order. dw is the same every run: nothing is added in scheduler order (no float atomics).
//   rows that fit a warp (C <= warp_size N rmsnorm_row_chunks; groups of
//     rmsnorm_row_group_rows): a warp takes the group's rows warp, warp + warps, ... in order,
//     holds a row's dy, x and dr in registers (as loaded words: bf16 pairs), reduces its dot
//     product, writes its dx and adds its dw terms to the lanes' own sums; the warps' sums are
//     then added in warp order through shared memory. Every thread works and the loads of a
//     row are all in flight together.
//   wider rows (groups of rmsnorm_group_rows): each warp reduces the dot products of its rows;
//     then each thread owns a chunk of columns and walks the group's rows in order, updating
//     dx and summing dw's terms. (At C = 768 this shape left 160 of 256 threads idle and each
//     walked its rows one dependent load after another: docs/perf/training.md.)
// Bytes moved (s = sizeof(T), R rows, C columns, G groups):
//   forward   2 R C s + 4 R (x is read twice per row, the second time from cache)
//   backward  4 R C s (dy, x, dr read, dx written; wider rows read dy and x again per group,
//             from L2 while the group's rows stay there) + 8 G C (workspace) + C (s +
//             sizeof(dw)) (dw)
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

inline constexpr int rmsnorm_threads = 256;
// Rows of one backward group: the rows one block walks per column chunk. Fewer rows per group
// mean more workspace ([ceil(R / rows), C] floats) and a longer column reduction; more mean
// fewer blocks and more of dy and x to keep in L2 between the two passes. The block walks its
// rows one after another, so the bytes in flight come from the number of resident blocks: at
// 32 rows an 8192-row input gave 256 blocks, two per SM, and the kernel waited on memory
// (docs/perf/training.md).
inline constexpr std::size_t rmsnorm_group_rows = 16;

template <class T, class W>
struct rmsnorm_forward_params {
  const T* x;   // (rows, cols)
  const W* w;   // (cols)
  T* y;         // (rows, cols)
  float* rstd;  // (rows)
  std::size_t rows, cols;
  float eps;
};

template <class T, class W>
MXKIT_GLOBAL void __launch_bounds__(rmsnorm_threads) rmsnorm_forward_kernel(const rmsnorm_forward_params<T, W> p) {
  constexpr int N = chunk_elements<T>;
  constexpr std::size_t warps = rmsnorm_threads / warp_size, step = static_cast<std::size_t>(warp_size) * N;
  const std::size_t lane = static_cast<std::size_t>(lane_id());
  for (std::size_t r = blockIdx.x * warps + threadIdx.x / warp_size; r < p.rows; r += gridDim.x * warps) {
    const T* x = p.x + r * p.cols;
    float ss = 0.0f;
    for (std::size_t c = lane * N; c < p.cols; c += step) {
      float v[N];
      load_chunk(x, c, p.cols, v);
      for (int k = 0; k < N; ++k) ss = fmaf(v[k], v[k], ss);
    }
    ss = warp_sum(ss);
    const float s = 1.0f / sqrtf(ss / static_cast<float>(p.cols) + p.eps);
    if (lane == 0) p.rstd[r] = s;
    T* y = p.y + r * p.cols;
    for (std::size_t c = lane * N; c < p.cols; c += step) {
      float v[N], g[N];
      load_chunk(x, c, p.cols, v);
      load_chunk(p.w, c, p.cols, g);
      for (int k = 0; k < N; ++k) v[k] = v[k] * s * g[k];
      store_chunk(y, c, p.cols, v);
    }
  }
}

template <class T, class W>
struct rmsnorm_backward_params {
  const T* dy;        // (rows, cols)
  const T* x;         // (rows, cols)
  const W* w;         // (cols)
  const float* rstd;  // (rows)
  const T* dr;        // (rows, cols): added to dx's gradient; may be dx
  T* dx;              // (rows, cols)
  float* partial;     // (groups, cols): each group's sum of dy x r; null when dw is not wanted
  std::size_t rows, cols, groups;
};

// Rows of one group of the row-per-warp backward (8 a warp with 32-lane warps): the warps' sums
// are added once per group, and the dw kernel reads R / 64 partial rows (with groups of 16 it
// took a large part of the call at d_model 768: docs/perf/training.md). Needs no more
// workspace than rmsnorm_group_rows.
inline constexpr std::size_t rmsnorm_row_group_rows = 64;
static_assert(rmsnorm_row_group_rows >= rmsnorm_group_rows, "rmsnorm_backward_workspace is sized for the smaller groups");

// Chunks of a row one lane holds in the row-per-warp backward: rows up to warp_size N
// rmsnorm_row_chunks elements (768 bf16 or 384 float with 32-lane warps) take it. A fourth
// chunk's registers would leave one block an SM instead of two (docs/perf/training.md).
inline constexpr int rmsnorm_row_chunks = 3;

template <class T, class W, int K>  // K chunks a lane: cols <= warp_size N K
MXKIT_GLOBAL void __launch_bounds__(rmsnorm_threads) rmsnorm_backward_rows_kernel(const rmsnorm_backward_params<T, W> p) {
  constexpr int N = chunk_elements<T>, warps = rmsnorm_threads / warp_size, width = warp_size * N * K;
  __shared__ float sums[warps][width];  // each warp's dw terms of the group
  const int lane = lane_id(), warp = static_cast<int>(threadIdx.x) / warp_size;
  const float inv_cols = 1.0f / static_cast<float>(p.cols);
  for (std::size_t g = blockIdx.x; g < p.groups; g += gridDim.x) {
    constexpr std::size_t R = rmsnorm_row_group_rows;
    const std::size_t r0 = g * R, nr = p.rows - r0 < R ? p.rows - r0 : R;
    float acc[K][N] = {};
    for (std::size_t i = static_cast<std::size_t>(warp); i < nr; i += warps) {  // this warp's rows in order: dw's fixed order
      const std::size_t row = (r0 + i) * p.cols;
      // The row's chunks as loaded words (half the registers of floats for bf16), all loads in
      // flight together; every array is indexed by unrolled constants, so it stays in registers.
      constexpr int words = N * static_cast<int>(sizeof(T)) / 4;
      std::uint32_t dq[K][words], xq[K][words], rq[K][words];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const std::size_t c = static_cast<std::size_t>(k * warp_size + lane) * N;
        load_words<N>(p.dy + row, c, p.cols, dq[k]);  // zeros at and past cols
        load_words<N>(p.x + row, c, p.cols, xq[k]);
        load_words<N>(p.dr + row, c, p.cols, rq[k]);
      }
      float dot = 0.0f;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float d[N], xv[N], wv[N];
        unpack_words<T>(dq[k], d);
        unpack_words<T>(xq[k], xv);
        load_chunk(p.w, static_cast<std::size_t>(k * warp_size + lane) * N, p.cols, wv);  // from L1: every row reads it
#pragma unroll
        for (int e = 0; e < N; ++e) dot = fmaf(wv[e] * d[e], xv[e], dot);
      }
      dot = warp_sum(dot);
      const float s = p.rstd[r0 + i], kc = s * s * s * dot * inv_cols;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const std::size_t c = static_cast<std::size_t>(k * warp_size + lane) * N;
        float d[N], xv[N], o[N], wv[N];
        unpack_words<T>(dq[k], d);
        unpack_words<T>(xq[k], xv);
        unpack_words<T>(rq[k], o);
        load_chunk(p.w, c, p.cols, wv);
#pragma unroll
        for (int e = 0; e < N; ++e) {
          o[e] += s * wv[e] * d[e] - kc * xv[e];
          acc[k][e] = fmaf(d[e] * xv[e], s, acc[k][e]);
        }
        if (c < p.cols) store_chunk(p.dx + row, c, p.cols, o);
      }
    }
    if (p.partial) {
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int e = 0; e < N; ++e) sums[warp][(k * warp_size + lane) * N + e] = acc[k][e];
      sync_threads();
      for (std::size_t c = threadIdx.x; c < p.cols; c += rmsnorm_threads) {
        float t = 0.0f;
        for (int w = 0; w < warps; ++w) t += sums[w][c];  // warp order: fixed
        p.partial[g * p.cols + c] = t;
      }
      sync_threads();  // sums is rewritten by the next group
    }
  }
}

template <class T, class W>
MXKIT_GLOBAL void __launch_bounds__(rmsnorm_threads) rmsnorm_backward_kernel(const rmsnorm_backward_params<T, W> p) {
  constexpr int N = chunk_elements<T>;
  constexpr std::size_t warps = rmsnorm_threads / warp_size, R = rmsnorm_group_rows;
  __shared__ float coef[R];  // r^3 / C * sum_i w_i dy_i x_i of each row of the group
  const std::size_t lane = static_cast<std::size_t>(lane_id()), warp = threadIdx.x / warp_size;
  for (std::size_t g = blockIdx.x; g < p.groups; g += gridDim.x) {
    const std::size_t r0 = g * R, nr = p.rows - r0 < R ? p.rows - r0 : R;
    for (std::size_t i = warp; i < nr; i += warps) {
      const std::size_t r = r0 + i;
      float dot = 0.0f;
      for (std::size_t c = lane * N; c < p.cols; c += static_cast<std::size_t>(warp_size) * N) {
        float d[N], xv[N], wv[N];
        load_chunk(p.dy + r * p.cols, c, p.cols, d);
        load_chunk(p.x + r * p.cols, c, p.cols, xv);
        load_chunk(p.w, c, p.cols, wv);
        for (int k = 0; k < N; ++k) dot = fmaf(wv[k] * d[k], xv[k], dot);
      }
      dot = warp_sum(dot);
      if (lane == 0) {
        const float s = p.rstd[r];
        coef[i] = s * s * s * dot / static_cast<float>(p.cols);
      }
    }
    sync_threads();
    for (std::size_t c = threadIdx.x * static_cast<std::size_t>(N); c < p.cols; c += static_cast<std::size_t>(rmsnorm_threads) * N) {
      float wv[N], acc[N];
      load_chunk(p.w, c, p.cols, wv);
      for (int k = 0; k < N; ++k) acc[k] = 0.0f;
      for (std::size_t i = 0; i < nr; ++i) {  // the group's rows in order: dw's fixed order
        const std::size_t r = r0 + i;
        const float s = p.rstd[r], kc = coef[i];
        float d[N], xv[N], dx[N];
        load_chunk(p.dy + r * p.cols, c, p.cols, d);
        load_chunk(p.x + r * p.cols, c, p.cols, xv);
        load_chunk(p.dr + r * p.cols, c, p.cols, dx);
        for (int k = 0; k < N; ++k) {
          dx[k] += s * wv[k] * d[k] - kc * xv[k];
          acc[k] = fmaf(d[k] * xv[k], s, acc[k]);
        }
        store_chunk(p.dx + r * p.cols, c, p.cols, dx);
      }
      if (p.partial) store_chunk(p.partial + g * p.cols, c, p.cols, acc);
    }
    sync_threads();  // coef is rewritten by the next group
  }
}

template <class W>
struct rmsnorm_dw_params {
  const float* partial;  // (groups, cols)
  W* dw;                 // (cols), added into
  std::size_t groups, cols;
};

// dw_j += sum over groups of partial[g][j] in a fixed order: a block takes warp_size columns;
// its rmsnorm_dw_lanes threads per column each sum every lanes-th group in order (a warp reads
// consecutive columns of one group row), then lane 0 adds the lanes' sums in lane order. One
// thread per column walking all groups serially was latency-bound (R = 16384 rows: 512 groups).
inline constexpr int rmsnorm_dw_lanes = rmsnorm_threads / warp_size;
template <class W>
MXKIT_GLOBAL void __launch_bounds__(rmsnorm_threads) rmsnorm_dw_kernel(const rmsnorm_dw_params<W> p) {
  __shared__ float sums[rmsnorm_dw_lanes][warp_size];
  const std::size_t lane = threadIdx.x / warp_size, col = threadIdx.x % warp_size;
  for (std::size_t c0 = blockIdx.x * static_cast<std::size_t>(warp_size); c0 < p.cols; c0 += gridDim.x * static_cast<std::size_t>(warp_size)) {
    const std::size_t c = c0 + col;
    float acc = 0.0f;
    if (c < p.cols)
      for (std::size_t g = lane; g < p.groups; g += rmsnorm_dw_lanes) acc += p.partial[g * p.cols + c];
    sums[lane][col] = acc;
    sync_threads();
    if (lane == 0 && c < p.cols) {
      float total = load_float(p.dw[c]);
      for (int l = 0; l < rmsnorm_dw_lanes; ++l) total += sums[l][col];
      p.dw[c] = round_to<W>(total);
    }
    sync_threads();  // sums is rewritten by the next column group
  }
}

template <auto Kernel, class T, class W>
void launch_rmsnorm_backward(const rmsnorm_backward_params<T, W>& p, stream_t stream) {
  const int grid = persistent_grid<Kernel>(rmsnorm_threads, p.groups);
  Kernel<<<grid, rmsnorm_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace detail

// Floats of workspace rmsnorm_backward needs for a (rows, cols) input when it computes dw.
inline constexpr std::size_t rmsnorm_backward_workspace(std::size_t rows, std::size_t cols) noexcept {
  return (rows + detail::rmsnorm_group_rows - 1) / detail::rmsnorm_group_rows * cols;
}

// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) per row, saved in float.
// x, y (rows, cols); w (cols), of T or float (bf16 activations with an fp32 weight, as mixed
// precision training keeps it); rstd (rows); all device pointers. Asynchronous on `stream`.
template <layer_element T, layer_element W>
void rmsnorm_forward(const T* x, const W* w, T* y, float* rstd, std::size_t rows, std::size_t cols, double eps,
                     stream_t stream = nullptr) {
  mxkit::detail::require(std::isfinite(eps) && eps >= 0.0, "gpu::rmsnorm_forward: eps must be finite and >= 0, got ", eps);
  if (rows == 0) return;
  mxkit::detail::require(cols > 0, "gpu::rmsnorm_forward: cols is 0 for ", rows, " rows (the mean of no squares)");
  mxkit::detail::require(x && w && y && rstd, "gpu::rmsnorm_forward: null pointer (x ", x != nullptr, ", w ", w != nullptr,
                         ", y ", y != nullptr, ", rstd ", rstd != nullptr, ")");
  const detail::rmsnorm_forward_params<T, W> p{x, w, y, rstd, rows, cols, static_cast<float>(eps)};
  constexpr std::size_t rows_per_block = detail::rmsnorm_threads / warp_size;
  const int grid = detail::persistent_grid<detail::rmsnorm_forward_kernel<T, W>>(detail::rmsnorm_threads, (rows + rows_per_block - 1) / rows_per_block);
  detail::rmsnorm_forward_kernel<T, W><<<grid, detail::rmsnorm_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

// dx = dr + dL/dx (dr, the gradient that reaches x by the residual path, may be dx itself:
// then dx +=); dw += dL/dw unless dw is null (a frozen weight; then no workspace is needed; a
// null dw is spelled with its type, static_cast<float*>(nullptr), for the deduction of DW).
// dy, x, dr, dx (rows, cols); w (cols) and dw (cols) of T or float; rstd (rows) from
// rmsnorm_forward; workspace: at least rmsnorm_backward_workspace(rows, cols) floats of device
// memory, used between the two kernels this enqueues. All device pointers. Asynchronous on
// `stream`.
template <layer_element T, layer_element W, layer_element DW>
void rmsnorm_backward(const T* dy, const T* x, const W* w, const float* rstd, const T* dr, T* dx, DW* dw, std::size_t rows,
                      std::size_t cols, std::span<float> workspace, stream_t stream = nullptr) {
  if (rows == 0 || cols == 0) return;
  mxkit::detail::require(dy && x && w && rstd && dr && dx, "gpu::rmsnorm_backward: null pointer (dy ", dy != nullptr, ", x ",
                         x != nullptr, ", w ", w != nullptr, ", rstd ", rstd != nullptr, ", dr ", dr != nullptr, ", dx ", dx != nullptr, ")");
  constexpr std::size_t lane_cols = static_cast<std::size_t>(warp_size) * detail::chunk_elements<T>;
  const std::size_t chunks = (cols + lane_cols - 1) / lane_cols;  // a lane's, were a warp to take a row
  const std::size_t group_rows = chunks <= detail::rmsnorm_row_chunks ? detail::rmsnorm_row_group_rows : detail::rmsnorm_group_rows;
  const std::size_t groups = (rows + group_rows - 1) / group_rows;
  if (dw) {
    const std::size_t need = rmsnorm_backward_workspace(rows, cols);
    mxkit::detail::require(workspace.data() != nullptr && workspace.size() >= need, "gpu::rmsnorm_backward: workspace of ",
                           workspace.size(), " floats, need ", need, " (rmsnorm_backward_workspace(", rows, ", ", cols, "))");
  }
  const detail::rmsnorm_backward_params<T, W> p{dy, x, w, rstd, dr, dx, dw ? workspace.data() : nullptr, rows, cols, groups};
  static_assert(detail::rmsnorm_row_chunks == 3, "a case below for each chunk count a lane may hold");
  switch (chunks) {
    case 1: detail::launch_rmsnorm_backward<detail::rmsnorm_backward_rows_kernel<T, W, 1>>(p, stream); break;
    case 2: detail::launch_rmsnorm_backward<detail::rmsnorm_backward_rows_kernel<T, W, 2>>(p, stream); break;
    case 3: detail::launch_rmsnorm_backward<detail::rmsnorm_backward_rows_kernel<T, W, 3>>(p, stream); break;
    default: detail::launch_rmsnorm_backward<detail::rmsnorm_backward_kernel<T, W>>(p, stream); break;
  }
  if (dw) {
    const detail::rmsnorm_dw_params<DW> q{workspace.data(), dw, groups, cols};
    const int g2 = detail::persistent_grid<detail::rmsnorm_dw_kernel<DW>>(detail::rmsnorm_threads, (cols + warp_size - 1) / warp_size);
    detail::rmsnorm_dw_kernel<DW><<<g2, detail::rmsnorm_threads, 0, stream>>>(q);
    MXKIT_GPU_CHECK_LAUNCH();
  }
}

// dx += dL/dx: the residual path's gradient already in dx.
template <layer_element T, layer_element W, layer_element DW>
void rmsnorm_backward(const T* dy, const T* x, const W* w, const float* rstd, T* dx, DW* dw, std::size_t rows, std::size_t cols,
                      std::span<float> workspace, stream_t stream = nullptr) {
  rmsnorm_backward(dy, x, w, rstd, static_cast<const T*>(dx), dx, dw, rows, cols, workspace, stream);
}

}  // namespace gpu
MXKIT_END_NAMESPACE
