// SPDX-License-Identifier: Apache-2.0
#pragma once
// Per-tensor scaled FP8 cast for the delayed-scaling recipe (tensor/fp8_tensor.hpp): every
// element is fp8_encode(x, type, scale, overflow), the host's function; optionally the
// transposed codes (what dgrad and wgrad consume) from the same read, and the input's amax.
// A CTA of 256 threads owns a 64x64 tile, four columns a thread; the transposed copy goes through
// shared memory so both outputs are written a row at a time. The kernel reads through a source
// (detail::matrix_source, or a producer's values computed on the fly: gpu/nn/swiglu.hpp).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/matrix_view.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// What one cast writes; null pointers skip that output.
struct fp8_outputs {
  std::uint8_t* data = nullptr;        // [rows, cols] codes
  std::uint8_t* transposed = nullptr;  // [cols, rows] codes
  float* amax = nullptr;               // max |x| (bits of the integer max, as the host's)
  // Delayed scaling (cast_fp8_delayed): where each copy keeps the scale its codes were made with
  // (its GEMM's descale, while the table moves on), written by the cast itself.
  float* data_scale = nullptr;
  float* transposed_scale = nullptr;
};

namespace detail {

inline constexpr int fp8_tile = 64;
inline constexpr int fp8_threads = 256;

// A tile's four consecutive elements in one load: 8 bytes of bf16/fp16, 16 of fp32.
template <class T>
using chunk4 = std::conditional_t<sizeof(T) == 2, uint2, uint4>;  // T: a quantizer_input, 2 or 4 bytes
template <class T>
__device__ inline void decode4(const chunk4<T>& c, float (&v)[4]) {
  using word = std::conditional_t<sizeof(T) == 2, std::uint16_t, std::uint32_t>;
  const word* w = reinterpret_cast<const word*>(&c);
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = load_float(bit_cast<T>(w[k]));
}

// Four consecutive elements of `in` from (row, col) as floats: one load when the caller found
// the rows aligned for it (`vector`), else element by element within `cols`.
template <class T>
__device__ inline void load4(const T* in, std::size_t row_start, std::size_t col, std::size_t cols, bool vector, float (&v)[4]) {
  const T* src = in + row_start + col;
  if (vector && col + 4 <= cols) {
    decode4<T>(*reinterpret_cast<const chunk4<T>*>(src), v);
    return;
  }
  for (int k = 0; k < 4; ++k) v[k] = col + static_cast<std::size_t>(k) < cols ? load_float(src[k]) : 0.0f;
}

// What a cast reads: element (r, c) of a [rows, cols] matrix, four consecutive columns at a
// time. A stored matrix (matrix_source), or values a producer computes from its own inputs
// (gpu/nn/swiglu.hpp), whose codes are then written without the values ever being stored.
//   chunk, fetch(r, c)    the raw loads of four elements (c a multiple of 4, all four in range)
//   decode(chunk, c, x)   their values; an interior tile issues every fetch before any decode,
//                         so that they are all in flight at once
//   load(r, c, cols, vector, x)  four values at (r, c), zero past `cols` (the edge tiles)
//   vectors()             whether fetch's loads are aligned (the host checks it once)
template <class T>
struct matrix_source {
  const T* in;
  std::size_t ld;
  using chunk = chunk4<T>;
  __device__ chunk fetch(std::size_t r, std::size_t c) const { return *reinterpret_cast<const chunk*>(in + r * ld + c); }
  __device__ void decode(const chunk& v, std::size_t, float (&x)[4]) const { decode4<T>(v, x); }
  __device__ void load(std::size_t r, std::size_t c, std::size_t cols, bool vector, float (&x)[4]) const {
    load4(in, r * ld, c, cols, vector, x);
  }
  bool vectors() const { return ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(in) % (4 * sizeof(T)) == 0; }
};

template <class Source>
struct fp8_params {
  Source src;
  std::size_t rows, cols;
  fp8_type type;
  float scale;
  overflow o;
  fp8_outputs out;
  std::size_t tiles_m, tiles_k;
  const float* scale_in = nullptr;  // delayed scaling: the scale, read on the device (else `scale`)
  bool vector_in = false, vector_data = false, vector_transposed = false;  // set_vector_access
};

// Writes codes[0..n) at dst: one 4-byte store when all four land and `vector` says dst is aligned.
__device__ inline void store4(std::uint8_t* dst, std::uint32_t codes, int n, bool vector) {
  if (vector && n == 4) {
    *reinterpret_cast<std::uint32_t*>(dst) = codes;
    return;
  }
  for (int k = 0; k < n; ++k) dst[k] = static_cast<std::uint8_t>(codes >> (8 * k));
}

// The codes of x[0..n) (n <= 4), packed little-endian, and their amax folded into `amax`. The
// element type is a template argument and a whole chunk (n == 4) a fixed-count loop, so each
// element unrolls to straight-line code with no per-element choice of type: the cast is bound by
// its arithmetic, not by memory (docs/perf/training.md).
template <fp8_type Type>
__device__ inline std::uint32_t encode4(const float (&x)[4], int n, float scale, overflow o, std::uint32_t& amax) {
  std::uint32_t codes = 0;
  if (n == 4) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      amax = amax_bits(amax, x[k]);
      codes |= static_cast<std::uint32_t>(fp8_encode(x[k], Type, scale, o)) << (8 * k);
    }
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (k >= n) break;
      amax = amax_bits(amax, x[k]);
      codes |= static_cast<std::uint32_t>(fp8_encode(x[k], Type, scale, o)) << (8 * k);
    }
  }
  return codes;
}

// Each thread handles four consecutive columns of a tile row (16 threads a row, 16 rows a pass,
// four passes a tile): 8- or 16-byte loads and 4-byte stores of the codes; the transposed rows
// are gathered from the shared tile four codes at a time. A thread issues its four loads of a
// tile before it encodes and stores any of them, so that four are in flight at once.
// Interior tiles whose every access may be a vector (all but the edges of a matrix) take a path
// with no bounds or alignment tests: the general path's per-chunk choices cost more issue slots
// than the conversion itself (ncu and the SASS: docs/perf/training.md).
template <class Source, fp8_type Type>
MXKIT_GLOBAL void __launch_bounds__(fp8_threads) fp8_cast_kernel(const fp8_params<Source> p) {
  constexpr int quads = fp8_tile / 4, rows_per_pass = fp8_threads / quads, passes = fp8_tile / rows_per_pass;
  __shared__ __align__(4) std::uint8_t tile[fp8_tile][fp8_tile + 4];  // +4: the transposed gathers spread over banks
  const int t = static_cast<int>(threadIdx.x), q = (t % quads) * 4, row_base = t / quads;
  std::uint32_t amax = 0;
  const float scale = p.scale_in ? *p.scale_in : p.scale;
  if (blockIdx.x == 0 && t == 0) {
    if (p.out.data_scale) *p.out.data_scale = scale;
    if (p.out.transposed_scale) *p.out.transposed_scale = scale;
  }
  const bool vectors = p.vector_in && (!p.out.data || p.vector_data) && (!p.out.transposed || p.vector_transposed);
  for (std::size_t tile_id = blockIdx.x; tile_id < p.tiles_m * p.tiles_k; tile_id += gridDim.x) {
    const std::size_t r0 = tile_id / p.tiles_k * fp8_tile, c0 = tile_id % p.tiles_k * fp8_tile;
    const std::size_t gc = c0 + static_cast<std::size_t>(q);
    const bool interior = vectors && r0 + fp8_tile <= p.rows && c0 + fp8_tile <= p.cols;
    if (interior) {
      typename Source::chunk c[passes];
#pragma unroll
      for (int i = 0; i < passes; ++i) c[i] = p.src.fetch(r0 + static_cast<std::size_t>(row_base + i * rows_per_pass), gc);
#pragma unroll
      for (int i = 0; i < passes; ++i) {
        const int r = row_base + i * rows_per_pass;
        float x[4];
        p.src.decode(c[i], gc, x);
        const std::uint32_t codes = encode4<Type>(x, 4, scale, p.o, amax);
        if (p.out.data) *reinterpret_cast<std::uint32_t*>(p.out.data + (r0 + static_cast<std::size_t>(r)) * p.cols + gc) = codes;
        *reinterpret_cast<std::uint32_t*>(&tile[r][q]) = codes;
      }
    } else {
      const int n = gc >= p.cols ? 0 : (p.cols - gc < 4 ? static_cast<int>(p.cols - gc) : 4);
      float x[passes][4];
#pragma unroll
      for (int i = 0; i < passes; ++i) {
        const std::size_t gr = r0 + static_cast<std::size_t>(row_base + i * rows_per_pass);
        if (gr < p.rows && n > 0) p.src.load(gr, gc, p.cols, p.vector_in, x[i]);
      }
#pragma unroll
      for (int i = 0; i < passes; ++i) {
        const int r = row_base + i * rows_per_pass;
        const std::size_t gr = r0 + static_cast<std::size_t>(r);
        if (gr >= p.rows || n == 0) continue;
        const std::uint32_t codes = encode4<Type>(x[i], n, scale, p.o, amax);
        if (p.out.data) store4(p.out.data + gr * p.cols + gc, codes, n, p.vector_data);
        *reinterpret_cast<std::uint32_t*>(&tile[r][q]) = codes;
      }
    }
    if (p.out.transposed) {
      sync_threads();
      const std::size_t tc = r0 + static_cast<std::size_t>(q);  // transposed rows c0 + r, columns tc ..
#pragma unroll 1
      for (int i = 0; i < passes; ++i) {
        const int r = row_base + i * rows_per_pass;
        const std::size_t tr = c0 + static_cast<std::size_t>(r);
        const int n = interior ? 4 : (tr >= p.cols || tc >= p.rows ? 0 : (p.rows - tc < 4 ? static_cast<int>(p.rows - tc) : 4));
        std::uint32_t codes = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (k < n) codes |= static_cast<std::uint32_t>(tile[q + k][r]) << (8 * k);
        if (interior) *reinterpret_cast<std::uint32_t*>(p.out.transposed + tr * p.rows + tc) = codes;
        else if (n > 0) store4(p.out.transposed + tr * p.rows + tc, codes, n, p.vector_transposed);
      }
      sync_threads();
    }
  }
  if (p.out.amax) {
    amax = warp_max(amax);
    if (lane_id() == 0) atomic_max(reinterpret_cast<unsigned*>(p.out.amax), amax);
  }
}

// Which accesses may be vectors: the source's fetches (rows of a matrix start on 4-element
// boundaries of a 4-element aligned base); the outputs' rows start on 4-byte boundaries.
template <class Source>
void set_vector_access(fp8_params<Source>& p) {
  const auto aligned = [](const void* ptr, std::size_t n) { return reinterpret_cast<std::uintptr_t>(ptr) % n == 0; };
  p.vector_in = p.src.vectors();
  p.vector_data = p.cols % 4 == 0 && aligned(p.out.data, 4);
  p.vector_transposed = p.rows % 4 == 0 && aligned(p.out.transposed, 4);
}

// One launch of the cast over p's tiles, the kernel chosen by p.type.
template <class Source>
void launch_fp8_cast(fp8_params<Source>& p, stream_t stream) {
  set_vector_access(p);
  if (p.type == fp8_type::e4m3) {
    constexpr auto kernel = fp8_cast_kernel<Source, fp8_type::e4m3>;
    kernel<<<persistent_grid<kernel>(fp8_threads, p.tiles_m * p.tiles_k), fp8_threads, 0, stream>>>(p);
  } else {
    constexpr auto kernel = fp8_cast_kernel<Source, fp8_type::e5m2>;
    kernel<<<persistent_grid<kernel>(fp8_threads, p.tiles_m * p.tiles_k), fp8_threads, 0, stream>>>(p);
  }
  MXKIT_GPU_CHECK_LAUNCH();
}

// The kernel library's instantiations (gpu/kernel_library.hpp): the casts of stored float,
// bfloat16 and float16 matrices (cast_fp8, cast_fp8_delayed), both FP8 types; src/gpu/fp8_cast.cu.
#define MXKIT_GPU_FP8_CAST_INSTANCES(prefix)                                                      \
  prefix template void launch_fp8_cast<matrix_source<float>>(fp8_params<matrix_source<float>>&, stream_t);       \
  prefix template void launch_fp8_cast<matrix_source<bfloat16>>(fp8_params<matrix_source<bfloat16>>&, stream_t); \
  prefix template void launch_fp8_cast<matrix_source<float16>>(fp8_params<matrix_source<float16>>&, stream_t);
#if defined(MXKIT_GPU_LIBRARY_HAS_FP8_CAST) && !defined(MXKIT_GPU_LIBRARY_DEFINES_FP8_CAST)
MXKIT_GPU_FP8_CAST_INSTANCES(extern)
#endif

}  // namespace detail

// Casts `in` (device) to FP8 `type` with code = cast(x * scale), as quantize_fp8 on the host.
// Asynchronous on `stream`; out.amax, when given, is zeroed on the stream first.
template <class T>
  requires quantizer_input<T>
void cast_fp8(matrix_view<const T> in, fp8_type type, float scale, const fp8_outputs& out,
              overflow o = overflow::saturate, stream_t stream = nullptr) {
  using U = std::remove_const_t<T>;
  mxkit::detail::check_fp8_cast(type, scale, o, "gpu::cast_fp8");  // scale, and type/overflow values in their enums
  mxkit::detail::check_matrix(in, "gpu::cast_fp8:");
  mxkit::detail::require(!out.data_scale && !out.transposed_scale,
                         "gpu::cast_fp8: the scale is the caller's; data_scale and transposed_scale are cast_fp8_delayed's");
  if (out.amax) MXKIT_GPU_CHECK(memset_async(out.amax, 0, sizeof(float), stream));
  if (in.rows == 0 || in.cols == 0) return;
  mxkit::detail::require(out.data || out.transposed || out.amax, "gpu::cast_fp8: no output requested");
  detail::fp8_params<detail::matrix_source<U>> p{{in.data, in.stride()}, in.rows, in.cols, type, scale, o, out,
                                                  (in.rows + detail::fp8_tile - 1) / detail::fp8_tile,
                                                  (in.cols + detail::fp8_tile - 1) / detail::fp8_tile};
  detail::launch_fp8_cast(p, stream);
}

namespace detail {
// The delayed-scaling cast of any source (cast_fp8_delayed below; the fused producers of
// gpu/nn/swiglu.hpp): the checks past the source's own, then one launch.
template <class Source>
void cast_fp8_delayed_from(const Source& src, std::size_t rows, std::size_t cols, fp8_type type, const float* scale, float* amax_history,
                           const fp8_outputs& out, overflow o, stream_t stream, const char* what) {
  mxkit::detail::check_fp8_cast(type, 1.0f, o, what);  // type and overflow values in their enums
  mxkit::detail::require(scale != nullptr && out.amax == nullptr, what, ": needs a device scale and no out.amax");
  if (rows == 0 || cols == 0) {  // nothing to cast; the copies still record their scale
    for (float* kept : {out.data_scale, out.transposed_scale})
      if (kept) MXKIT_GPU_CHECK(memcpy_async(kept, scale, sizeof(float), copy_kind::device_to_device, stream));
    return;
  }
  fp8_outputs outs = out;
  outs.amax = amax_history;
  fp8_params<Source> p{src, rows, cols, type, 1.0f, o, outs, (rows + fp8_tile - 1) / fp8_tile, (cols + fp8_tile - 1) / fp8_tile, scale};
  launch_fp8_cast(p, stream);
}
}  // namespace detail

// Delayed scaling (nn/delayed_scaling.hpp): the cast of one step's tensor with the scale its
// scaling table holds in device memory, so no host round trip is needed to learn it. *scale is
// read when the kernel runs and written to out.data_scale and out.transposed_scale where given;
// the amax is max-combined into *amax_history (when given) without zeroing it first, as every
// cast of a step adds to the step's history slot (NaN wins, being the largest bit pattern).
// out.amax must be null.
template <class T>
  requires quantizer_input<T>
void cast_fp8_delayed(matrix_view<const T> in, fp8_type type, const float* scale, float* amax_history, const fp8_outputs& out,
                      overflow o = overflow::saturate, stream_t stream = nullptr) {
  using U = std::remove_const_t<T>;
  mxkit::detail::check_matrix(in, "gpu::cast_fp8_delayed:");
  detail::cast_fp8_delayed_from(detail::matrix_source<U>{in.data, in.stride()}, in.rows, in.cols, type, scale, amax_history, out, o, stream,
                                "gpu::cast_fp8_delayed");
}

}  // namespace gpu
MXKIT_END_NAMESPACE
