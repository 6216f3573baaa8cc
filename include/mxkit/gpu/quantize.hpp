// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fused MX quantization on the GPU, one launch: a row-major [rows, cols] float, bfloat16 or
// float16 matrix (with a leading dimension) is read once and written as the rowwise copy, the
// columnwise copy (stored transposed), or both, each with its scales in any scale_layout, plus
// the per-tensor amax. Every block goes through the host's quantize_block, so each byte equals
// the host reference (ref/quantize.hpp). The kernels: gpu/quantize/kernel.hpp (tiled: the
// columnwise copy, or both) and gpu/quantize/rowwise_kernel.hpp (the rowwise copy alone).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/gpu/device_mx_tensor.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/quantize/kernel.hpp>
#include <mxkit/gpu/quantize/rowwise_kernel.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// What one quantize call writes; a null data pointer skips that copy, a null amax skips it.
struct quantize_outputs {
  std::uint8_t* rowwise_data = nullptr;
  std::uint8_t* rowwise_scales = nullptr;
  scale_layout rowwise_scales_layout = scale_layout::row_major;
  std::uint8_t* columnwise_data = nullptr;
  std::uint8_t* columnwise_scales = nullptr;
  scale_layout columnwise_scales_layout = scale_layout::row_major;
  float* amax = nullptr;  // max |x| over the input (bits of the integer max, as the host's)
  // MXFP8 (E4M3, E5M2) from a bfloat16 or float16 input, without the rotation: the copies asked
  // for hold each element as its bf16 value, code x block scale (block/bf16_values.hpp), 2 bytes an
  // element ([lines, padded length] bf16, sizes as values_bytes gives), in place of its code; the
  // scales are written as usual. That is the operand Hopper's GEMM multiplies on its bf16 tensor
  // cores (gpu::gemm of mx_values_view), without a pass that expands the codes, and every value is
  // exact: a 16-bit input's rounded elements stay on bf16's grid even under the least scales.
  // beyond_exact_range (required then; zeroed on the stream first) becomes non-zero when a
  // non-zero block lies beyond +-48 binades, where that product is not exact and the GEMM runs
  // its block-scaled fallback on the codes the values give back.
  bool values_as_bf16 = false;
  int* beyond_exact_range = nullptr;
};
// Bytes of a copy whose elements are bf16 values (quantize_outputs::values_as_bf16).
constexpr std::size_t values_bytes(const block_layout& l) noexcept { return 2 * l.lines() * l.padded_length(); }

namespace detail {
// Checks the arguments and fills the kernel parameters; false: nothing to launch.
template <class U>
bool make_quantize_params(matrix_view<const U> in, const quantize_options& options, const quantize_outputs& out,
                          stream_t stream, quantize_params<U>& p) {
  mxkit::detail::check_matrix(in, "gpu::quantize:");
  if (out.values_as_bf16) {
    mxkit::detail::require(out.beyond_exact_range, "gpu::quantize: values_as_bf16 needs beyond_exact_range (a device int)");
    mxkit::detail::require(sizeof(U) == 2, "gpu::quantize: values_as_bf16 takes a bfloat16 or float16 input, not ", sizeof(U) * 8,
                           "-bit floats (their least elements may fall off bf16's grid)");
    mxkit::detail::require(!options.hadamard, "gpu::quantize: values_as_bf16 takes no rotation (rotated elements may fall off bf16's grid)");
    MXKIT_GPU_CHECK(memset_async(out.beyond_exact_range, 0, sizeof(int), stream));
  }
  if (out.amax) MXKIT_GPU_CHECK(memset_async(out.amax, 0, sizeof(float), stream));
  if (in.rows == 0 || in.cols == 0) return false;  // nothing to write, padding included
  mxkit::detail::require(out.rowwise_data || out.columnwise_data, "gpu::quantize: no output copy requested");
  mxkit::detail::require(!out.rowwise_data || out.rowwise_scales, "gpu::quantize: rowwise data without rowwise scales");
  mxkit::detail::require(!out.columnwise_data || out.columnwise_scales, "gpu::quantize: columnwise data without columnwise scales");
  if (out.rowwise_data) check_aligned16(out.rowwise_data, "gpu::quantize", "rowwise data");
  if (out.columnwise_data) check_aligned16(out.columnwise_data, "gpu::quantize", "columnwise data");
  // Tiles of the smallest height: at most 2^32 of any height (the kernel numbers them in 32 bits).
  using tile = quantize_tile<U, 64>;
  mxkit::detail::require((in.rows + tile::rows - 1) / tile::rows * ((in.cols + tile::cols - 1) / tile::cols) < (std::size_t{1} << 32),
                         "gpu::quantize: ", in.rows, " x ", in.cols, " needs 2^32 tiles or more (64 x ", tile::cols, " each)");
  p = {};
  p.in = in.data;
  p.rows = in.rows;
  p.cols = in.cols;
  p.ld = in.stride();
  p.vector_loads = reinterpret_cast<std::uintptr_t>(in.data) % 16 == 0 && (p.ld * sizeof(U)) % 16 == 0;
  p.row_options = options;
  p.row_options.stream = stochastic_stream(options, block_axis::rowwise);
  p.col_options = options;
  p.col_options.stream = stochastic_stream(options, block_axis::columnwise);
  p.sign_mask = options.sign_mask();
  p.row_data = out.rowwise_data;
  p.row_scales = out.rowwise_scales;
  p.row_layout = out.rowwise_scales_layout;
  p.col_data = out.columnwise_data;
  p.col_scales = out.columnwise_scales;
  p.col_layout = out.columnwise_scales_layout;
  p.amax = reinterpret_cast<unsigned*>(out.amax);
  p.values_bf16 = out.values_as_bf16;
  p.beyond_exact_range = out.beyond_exact_range;
  return true;
}

// The tile grid is the variant's (quantize_tile_rows).
template <class Fmt, class U, bool Rotate, bool RandomSigns, int MinBlocks, bool Values = false>
void launch_quantize_kernel(quantize_params<U> p, stream_t stream) {
  using tile = quantize_tile<U, quantize_tile_rows<Fmt, Rotate>>;
  p.tiles_m = (p.rows + tile::rows - 1) / tile::rows;
  p.tiles_k = (p.cols + tile::cols - 1) / tile::cols;
  quantize_options o = p.row_options;
  o.hadamard = Rotate;
  p.bounds = mxkit::detail::float_path_bounds_for<typename Fmt::element_type>(o);
  constexpr auto kernel = quantize_kernel<Fmt, U, Rotate, RandomSigns, MinBlocks, Values>;
  const int grid = persistent_grid<kernel>(tile::threads, p.tiles_m * p.tiles_k);
  kernel<<<grid, tile::threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}
// The rowwise copy alone: the row-streaming kernel (gpu/quantize/rowwise_kernel.hpp), staged for
// bf16 values (64 bytes a block out) and not for codes (32 bytes or fewer), each the faster of
// the two on an H100 (docs/perf/quantize.md, v10). OtherStaging: the other choice, which
// bench_quantize_gpu times beside it.
template <class Fmt, class U, bool Rotate, bool RandomSigns, bool Staged, bool Values = false>
void launch_quantize_rowwise_kernel(const quantize_params<U>& p, stream_t stream) {
  constexpr auto kernel = quantize_rowwise_kernel<Fmt, U, Rotate, RandomSigns, Staged, Values>;
  constexpr int per_cta = rowwise_shape::threads / rowwise_shape::segment_blocks;  // segments a CTA takes at once
  const std::size_t segments = p.rows * ((p.cols + mx_block_size * rowwise_shape::segment_blocks - 1) /
                                         (mx_block_size * rowwise_shape::segment_blocks));
  const int grid = persistent_grid<kernel>(rowwise_shape::threads, (segments + per_cta - 1) / per_cta);
  kernel<<<grid, rowwise_shape::threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}
template <class Fmt, class U, bool OtherStaging = false>
void launch_quantize_rowwise(const quantize_params<U>& p, stream_t stream) {
  if constexpr (takes_bf16_values<Fmt> && sizeof(U) == 2) {
    if (p.values_bf16) return launch_quantize_rowwise_kernel<Fmt, U, false, false, !OtherStaging, true>(p, stream);  // make_quantize_params checked it
  }
  if (!p.row_options.hadamard) launch_quantize_rowwise_kernel<Fmt, U, false, false, OtherStaging>(p, stream);
  else if (p.sign_mask) launch_quantize_rowwise_kernel<Fmt, U, true, true, OtherStaging>(p, stream);
  else launch_quantize_rowwise_kernel<Fmt, U, true, false, OtherStaging>(p, stream);
}
// The tiled kernel (any copies; the columnwise copy and both always take it).
template <class Fmt, class U, int MinBlocks = quantize_tile<U, 64>::min_blocks>
void launch_quantize_tiled(const quantize_params<U>& p, stream_t stream) {
  if constexpr (takes_bf16_values<Fmt> && sizeof(U) == 2) {
    if (p.values_bf16) return launch_quantize_kernel<Fmt, U, false, false, MinBlocks, true>(p, stream);  // make_quantize_params checked it
  }
  if (!p.row_options.hadamard) launch_quantize_kernel<Fmt, U, false, false, MinBlocks>(p, stream);
  else if (p.sign_mask) launch_quantize_kernel<Fmt, U, true, true, MinBlocks>(p, stream);
  else launch_quantize_kernel<Fmt, U, true, false, MinBlocks>(p, stream);
}
template <class Fmt, class U>
void launch_quantize(const quantize_params<U>& p, stream_t stream) {
  if (!p.col_data) launch_quantize_rowwise<Fmt, U>(p, stream);
  else launch_quantize_tiled<Fmt, U>(p, stream);
}

// One format's quantize: the checks, then that format's kernels (three variants: plain, rotated,
// rotated with random signs). The unit the kernel library instantiates (below).
template <class Fmt, class U>
void quantize_format(matrix_view<const U> in, const quantize_options& options, const quantize_outputs& out, stream_t stream) {
  mxkit::detail::check_mx_layout({Fmt::format, block_axis::rowwise, in.rows, in.cols}, "gpu::quantize");  // sizes that fit
  mxkit::detail::check_mx_layout({Fmt::format, block_axis::columnwise, in.rows, in.cols}, "gpu::quantize");
  mxkit::detail::check_options(options, "gpu::quantize");
  mxkit::detail::require(!out.values_as_bf16 || takes_bf16_values<Fmt>,
                         "gpu::quantize: values_as_bf16 is for MXFP8 (E4M3, E5M2), not ", name_of(Fmt::type));
  quantize_params<U> p;
  if (!make_quantize_params<U>(in, options, out, stream, p)) return;
  launch_quantize<Fmt, U>(p, stream);
}

// The kernel library's instantiations (gpu/kernel_library.hpp): every format for float,
// bfloat16 and float16 inputs, one source per format (src/gpu/quantize_<format>.cu).
#define MXKIT_GPU_QUANTIZE_INSTANCES(prefix, type)                                                                        \
  prefix template void quantize_format<mx_format<mx_type::type>, float>(matrix_view<const float>, const quantize_options&,       \
                                                                       const quantize_outputs&, stream_t);                      \
  prefix template void quantize_format<mx_format<mx_type::type>, bfloat16>(matrix_view<const bfloat16>, const quantize_options&, \
                                                                          const quantize_outputs&, stream_t);                   \
  prefix template void quantize_format<mx_format<mx_type::type>, float16>(matrix_view<const float16>, const quantize_options&,   \
                                                                         const quantize_outputs&, stream_t);
#if defined(MXKIT_GPU_LIBRARY_HAS_QUANTIZE) && !defined(MXKIT_GPU_LIBRARY_DEFINES_QUANTIZE)
MXKIT_GPU_QUANTIZE_INSTANCES(extern, mxfp4)
MXKIT_GPU_QUANTIZE_INSTANCES(extern, mxfp6_e2m3)
MXKIT_GPU_QUANTIZE_INSTANCES(extern, mxfp6_e3m2)
MXKIT_GPU_QUANTIZE_INSTANCES(extern, mxfp8_e4m3)
MXKIT_GPU_QUANTIZE_INSTANCES(extern, mxfp8_e5m2)
MXKIT_GPU_QUANTIZE_INSTANCES(extern, mxint8)
#endif
}  // namespace detail

// Quantizes `in` (device memory) to MX format `type` as `options` say, into the copies named in
// `out` (device memory, sizes as block_layout and scale_storage_size give). Asynchronous on `stream`;
// out.amax, when given, is zeroed on the stream first. Throws std::invalid_argument on bad
// arguments and gpu::error on a runtime failure. The format is a run-time value, so a call
// compiles all six formats' kernels (header-only); gpu::quantize<Type> below compiles one.
template <class T>
  requires quantizer_input<T>
void quantize(matrix_view<const T> in, mx_type type, const quantize_options& options, const quantize_outputs& out,
              stream_t stream = nullptr) {
  using U = std::remove_const_t<T>;
  mxkit::detail::check_mx_layout({checked_format_of(type, "gpu::quantize"), block_axis::rowwise, in.rows, in.cols}, "gpu::quantize");  // known type first
  visit_mx_type(type, [&](auto fmt) {
    detail::quantize_format<decltype(fmt), U>({in.data, in.rows, in.cols, in.ld}, options, out, stream);
  });
}

// The same for a format known at compile time, gpu::quantize<mx_type::mxfp4>(in, options, out):
// the bytes of the call above, and only this format's kernels are compiled.
template <mx_type Type, class T>
  requires quantizer_input<T>
void quantize(matrix_view<const T> in, const quantize_options& options, const quantize_outputs& out, stream_t stream = nullptr) {
  using U = std::remove_const_t<T>;
  detail::quantize_format<mx_format<Type>, U>({in.data, in.rows, in.cols, in.ld}, options, out, stream);
}

template <class T>
  requires quantizer_input<T>
device_mx_pair quantize_both(matrix_view<const T> in, mx_type type, const quantize_options& options = {},
                             scale_layout scales_layout = scale_layout::row_major, float* amax = nullptr,
                             stream_t stream = nullptr) {
  const block_format format = checked_format_of(type, "gpu::quantize_both");  // before anything is allocated
  device_mx_pair r{device_mx_tensor({format, block_axis::rowwise, in.rows, in.cols}, options, scales_layout),
                   device_mx_tensor({format, block_axis::columnwise, in.rows, in.cols}, options, scales_layout)};
  quantize(in, type, options,
           {r.rowwise.data().data(), r.rowwise.scales().data(), scales_layout, r.columnwise.data().data(),
            r.columnwise.scales().data(), scales_layout, amax},
           stream);
  return r;
}

}  // namespace gpu
MXKIT_END_NAMESPACE
