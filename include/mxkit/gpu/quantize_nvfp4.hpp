// SPDX-License-Identifier: Apache-2.0
#pragma once
// NVFP4 quantization on the GPU (issue #46, section 2): a row-major [rows, cols] float, bfloat16
// or float16 matrix (with a leading dimension) to the rowwise copy, the columnwise copy (stored
// transposed), or both, in formats::nvfp4 (1 x 16 blocks) or formats::nvfp4_2d (16 x 16 blocks,
// for weights), each copy with its E4M3 scales in any scale_layout and its fp32 tensor scale in
// device memory, plus the input's amax. Each byte, scale and tensor scale equals the host
// reference's, ref::quantize(in, format, axis, options, tensor_scale), for every option
// (rounding to nearest or stochastic, the 16-point Hadamard rotation with a sign mask).
//
// The tensor scale of a copy is nvfp4_tensor_scale of that copy's amax (its finite values after
// the rotation: with the rotation the two copies' amaxes differ), computed on the device by a
// reduction pass before the quantize pass reads it, or the caller's (a calibrated or another
// copy's scale), written to the same device float. The kernels: gpu/quantize/nvfp4_kernel.hpp (a
// tiled amax pass and a fused quantize pass, each reading the input once for both copies); the
// kernel library's family NVFP4_QUANTIZE compiles them once for float, bfloat16 and float16
// inputs (src/gpu/nvfp4_quantize.cu; gpu/kernel_library.hpp), for the device backend's NVFP4
// recipe, the Python module and any program that links the library.
//
//   mxkit::gpu::quantize_nvfp4(x, mxkit::formats::nvfp4, {}, {.rowwise_data = d, .rowwise_scales = s,
//                                                             .rowwise_tensor_scale = t});
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/gpu/device_nvfp4_tensor.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/quantize/nvfp4_kernel.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// What one quantize_nvfp4 call writes (device pointers); a null data pointer skips that copy, a
// null amax skips it. A copy needs its scales (scale_storage_size(layout, lines, blocks_per_line)
// bytes) and its tensor scale (one float); its data (block_layout::data_bytes()) 8-byte aligned.
struct nvfp4_outputs {
  std::uint8_t* rowwise_data = nullptr;
  std::uint8_t* rowwise_scales = nullptr;
  scale_layout rowwise_scales_layout = scale_layout::row_major;
  float* rowwise_tensor_scale = nullptr;
  std::uint8_t* columnwise_data = nullptr;
  std::uint8_t* columnwise_scales = nullptr;
  scale_layout columnwise_scales_layout = scale_layout::row_major;
  float* columnwise_tensor_scale = nullptr;
  float* amax = nullptr;  // max |x| over the input, as gpu::quantize's (amax_bits: NaN above all)
};

// Where quantize_nvfp4 takes the copies' tensor scale from. By default each copy's own amax (an
// amax pass over the input before the quantize pass). `given`: the scale itself, for both copies
// (a calibrated or another copy's scale: a positive normal float). `amax`: nvfp4_tensor_scale of
// the float at that device address, for both copies: the amax of a whole tensor of which the input
// is a part (found by nvfp4_amax over each part, then their maximum), so that the part's codes
// and scales are the whole tensor's. Full sharding quantizes a rank's rows of a weight so
// (parallel/gathered_copies.hpp); the float is read on the stream, no host waits for it.
struct nvfp4_tensor_scale_source {
  std::optional<float> given;
  const float* amax = nullptr;

  constexpr nvfp4_tensor_scale_source() = default;
  constexpr nvfp4_tensor_scale_source(std::nullopt_t) noexcept {}
  constexpr nvfp4_tensor_scale_source(std::optional<float> t) noexcept : given(t) {}
  constexpr nvfp4_tensor_scale_source(float t) noexcept : given(t) {}
  static constexpr nvfp4_tensor_scale_source from_amax(const float* device_amax) noexcept {
    nvfp4_tensor_scale_source s;
    s.amax = device_amax;
    return s;
  }
  // Each copy's from its own amax: the amax pass runs.
  constexpr bool from_own_amax() const noexcept { return !given && !amax; }
};

namespace detail {

// One copy's pointers, null data: not requested.
struct nvfp4_copy_outputs {
  block_axis axis;
  std::uint8_t* data;
  std::uint8_t* scales;
  scale_layout scales_layout;
  float* tensor_scale;
};

inline void check_tensor_scale_source(const nvfp4_tensor_scale_source& s, const char* where) {
  mxkit::detail::require(!(s.given && s.amax), where, ": both a tensor scale and an amax to compute it from were given");
  if (s.given) mxkit::detail::check_tensor_scale(*s.given, where);
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(s.amax) % alignof(float) == 0, where, ": amax ", static_cast<const void*>(s.amax),
                         " is not aligned for a float");
}

inline void check_nvfp4_copy_outputs(const nvfp4_copy_outputs& c) {
  if (!c.data) return;
  const char* name = c.axis == block_axis::rowwise ? "rowwise" : "columnwise";
  mxkit::detail::require(c.scales, "gpu::quantize_nvfp4: ", name, " data without ", name, " scales");
  mxkit::detail::require(c.tensor_scale, "gpu::quantize_nvfp4: ", name, " data without a ", name, " tensor scale");
  mxkit::detail::check_enum(c.scales_layout, scale_layout::aiter_shuffle, "scale_layout", "gpu::quantize_nvfp4");
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(c.data) % 8 == 0, "gpu::quantize_nvfp4: ", name, " data ",
                         static_cast<const void*>(c.data), " must be 8-byte aligned (a block's 16 codes are stored 8 bytes at a time)");
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(c.tensor_scale) % alignof(float) == 0, "gpu::quantize_nvfp4: ", name,
                         " tensor scale ", static_cast<const void*>(c.tensor_scale), " is not aligned for a float");
}

// CTAs of a tile kernel over `tiles` tiles: at most as many as are resident.
template <auto Kernel>
int nvfp4_grid(std::size_t tiles) {
  return persistent_grid<Kernel>(nvfp4_threads, tiles);
}

// The amax pass (nvfp4_amax_kernel), the rotated variant when `rotate`.
template <class U>
void launch_nvfp4_amax(const nvfp4_amax_params<U>& p, bool rotate, stream_t stream) {
  if (rotate) {
    constexpr auto kernel = nvfp4_amax_kernel<U, true>;
    kernel<<<nvfp4_grid<kernel>(p.in.tiles), nvfp4_threads, 0, stream>>>(p);
  } else {
    constexpr auto kernel = nvfp4_amax_kernel<U, false>;
    kernel<<<nvfp4_grid<kernel>(p.in.tiles), nvfp4_threads, 0, stream>>>(p);
  }
  MXKIT_GPU_CHECK_LAUNCH();
}

template <class U, bool Rotate, bool TwoD>
void launch_nvfp4_quantize(const nvfp4_quantize_params<U>& p, stream_t stream) {
  constexpr auto kernel = nvfp4_quantize_kernel<U, Rotate, TwoD>;
  kernel<<<nvfp4_grid<kernel>(p.in.tiles), nvfp4_threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

// The checks, then: one kernel zeroing the accumulators, the amax pass over both requested copies
// at once (unless the tensor scale is given), one kernel for both tensor scales, and the quantize
// pass writing both copies from one read of the input. The input's amax comes with the amax
// pass, or with the quantize pass when there is none (or a pass of its own when no copy is
// written).
template <class U>
void quantize_nvfp4_impl(matrix_view<const U> in, const block_format& format, const nvfp4_options& options,
                         const nvfp4_outputs& out, const nvfp4_tensor_scale_source& source, stream_t stream) {
  mxkit::detail::check_matrix(in, "gpu::quantize_nvfp4:");
  const block_layout layouts[2] = {{format, block_axis::rowwise, in.rows, in.cols}, {format, block_axis::columnwise, in.rows, in.cols}};
  for (const block_layout& l : layouts) mxkit::detail::check_nvfp4_layout(l, "gpu::quantize_nvfp4");  // NVFP4, sizes that fit
  mxkit::detail::check_nvfp4_options(options, "gpu::quantize_nvfp4");
  check_tensor_scale_source(source, "gpu::quantize_nvfp4");
  const nvfp4_tile_input<U> tiles = make_nvfp4_tile_input(in);
  mxkit::detail::require(tiles.tiles < (std::size_t{1} << 32), "gpu::quantize_nvfp4: a ", in.rows, " x ", in.cols,
                         " matrix is 2^32 tiles of 64 x 64 or more (the kernels number tiles in 32 bits)");
  const nvfp4_copy_outputs copies[2] = {
      {block_axis::rowwise, out.rowwise_data, out.rowwise_scales, out.rowwise_scales_layout, out.rowwise_tensor_scale},
      {block_axis::columnwise, out.columnwise_data, out.columnwise_scales, out.columnwise_scales_layout, out.columnwise_tensor_scale}};
  // A copy is asked for by its data pointer; an empty input's copies hold no byte (a buffer of
  // data_bytes() == 0 may have a null pointer), so there its tensor-scale pointer asks for it.
  const bool empty = in.rows == 0 || in.cols == 0;  // no block, padding included: only the scalars are written
  auto wanted = [&](const nvfp4_copy_outputs& c) { return c.data || (empty && c.tensor_scale); };
  mxkit::detail::require(wanted(copies[0]) || wanted(copies[1]) || out.amax, "gpu::quantize_nvfp4: no output requested");
  for (const nvfp4_copy_outputs& c : copies) check_nvfp4_copy_outputs(c);

  float* ts[2] = {nullptr, nullptr};  // the wanted copies' tensor scales
  for (int k = 0; k < 2; ++k)
    if (wanted(copies[k])) ts[k] = copies[k].tensor_scale;
  const bool own = source.from_own_amax();
  if (out.amax || (own && (ts[0] || ts[1]))) {  // the accumulators start at 0
    nvfp4_zero_kernel<float><<<1, 1, 0, stream>>>(out.amax, own ? ts[0] : nullptr, own ? ts[1] : nullptr);
    MXKIT_GPU_CHECK_LAUNCH();
  }
  unsigned* input_amax = empty ? nullptr : reinterpret_cast<unsigned*>(out.amax);
  const bool any_copy = ts[0] || ts[1];
  if (any_copy) {
    if (own && !empty) {
      launch_nvfp4_amax<U>({tiles, options, reinterpret_cast<unsigned*>(ts[0]), reinterpret_cast<unsigned*>(ts[1]), input_amax},
                           options.hadamard, stream);
      input_amax = nullptr;
    }
    nvfp4_tensor_scale_kernel<float><<<1, 1, 0, stream>>>(ts[0], ts[1], source.given ? *source.given : 0.0f, source.amax);
    MXKIT_GPU_CHECK_LAUNCH();
  }
  if (!empty && any_copy) {
    nvfp4_options ro = options, co = options;
    ro.stream = stochastic_stream(options.stream, block_axis::rowwise);
    co.stream = stochastic_stream(options.stream, block_axis::columnwise);
    const nvfp4_copy_outputs &r = copies[0], &c = copies[1];
    const nvfp4_quantize_params<U> p{tiles,
                                     nvfp4_view{layouts[0], ro, r.data, r.scales, r.scales_layout},
                                     nvfp4_view{layouts[1], co, c.data, c.scales, c.scales_layout},
                                     r.data ? r.tensor_scale : nullptr,
                                     c.data ? c.tensor_scale : nullptr,
                                     input_amax};
    input_amax = nullptr;
    const bool two_d = layouts[0].tile_lines() > 1;
    if (options.hadamard) {
      if (two_d) launch_nvfp4_quantize<U, true, true>(p, stream);
      else launch_nvfp4_quantize<U, true, false>(p, stream);
    } else {
      if (two_d) launch_nvfp4_quantize<U, false, true>(p, stream);
      else launch_nvfp4_quantize<U, false, false>(p, stream);
    }
  }
  if (input_amax) launch_nvfp4_amax<U>({tiles, options, nullptr, nullptr, input_amax}, false, stream);  // only the amax asked for
}

// The amax pass alone (nvfp4_amax): zeroed accumulators, then the pass over the wanted copies.
template <class U>
void nvfp4_amax_impl(matrix_view<const U> in, const block_format& format, const nvfp4_options& options, float* rowwise_amax,
                     float* columnwise_amax, stream_t stream) {
  mxkit::detail::check_matrix(in, "gpu::nvfp4_amax:");
  for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise})
    mxkit::detail::check_nvfp4_layout(block_layout{format, axis, in.rows, in.cols}, "gpu::nvfp4_amax");
  mxkit::detail::check_nvfp4_options(options, "gpu::nvfp4_amax");
  mxkit::detail::require(rowwise_amax || columnwise_amax, "gpu::nvfp4_amax: no output requested");
  for (const float* a : {rowwise_amax, columnwise_amax})
    mxkit::detail::require(reinterpret_cast<std::uintptr_t>(a) % alignof(float) == 0, "gpu::nvfp4_amax: amax ", static_cast<const void*>(a),
                           " is not aligned for a float");
  const nvfp4_tile_input<U> tiles = make_nvfp4_tile_input(in);
  mxkit::detail::require(tiles.tiles < (std::size_t{1} << 32), "gpu::nvfp4_amax: a ", in.rows, " x ", in.cols,
                         " matrix is 2^32 tiles of 64 x 64 or more (the kernels number tiles in 32 bits)");
  nvfp4_zero_kernel<float><<<1, 1, 0, stream>>>(rowwise_amax, columnwise_amax, nullptr);
  MXKIT_GPU_CHECK_LAUNCH();
  if (in.rows == 0 || in.cols == 0) return;
  launch_nvfp4_amax<U>({tiles, options, reinterpret_cast<unsigned*>(rowwise_amax), reinterpret_cast<unsigned*>(columnwise_amax), nullptr},
                       options.hadamard, stream);
}

// The kernel library's instantiations (gpu/kernel_library.hpp): float, bfloat16 and float16
// inputs, every format, option and output (src/gpu/nvfp4_quantize.cu).
#define MXKIT_GPU_NVFP4_QUANTIZE_INSTANCES(prefix)                                                                         \
  prefix template void quantize_nvfp4_impl<float>(matrix_view<const float>, const block_format&, const nvfp4_options&,        \
                                                  const nvfp4_outputs&, const nvfp4_tensor_scale_source&, stream_t);         \
  prefix template void quantize_nvfp4_impl<bfloat16>(matrix_view<const bfloat16>, const block_format&, const nvfp4_options&,  \
                                                     const nvfp4_outputs&, const nvfp4_tensor_scale_source&, stream_t);      \
  prefix template void quantize_nvfp4_impl<float16>(matrix_view<const float16>, const block_format&, const nvfp4_options&,    \
                                                    const nvfp4_outputs&, const nvfp4_tensor_scale_source&, stream_t);       \
  prefix template void nvfp4_amax_impl<float>(matrix_view<const float>, const block_format&, const nvfp4_options&, float*,    \
                                              float*, stream_t);                                                             \
  prefix template void nvfp4_amax_impl<bfloat16>(matrix_view<const bfloat16>, const block_format&, const nvfp4_options&,      \
                                                 float*, float*, stream_t);                                                  \
  prefix template void nvfp4_amax_impl<float16>(matrix_view<const float16>, const block_format&, const nvfp4_options&, float*, \
                                                float*, stream_t);
#if defined(MXKIT_GPU_LIBRARY_HAS_NVFP4_QUANTIZE) && !defined(MXKIT_GPU_LIBRARY_DEFINES_NVFP4_QUANTIZE)
MXKIT_GPU_NVFP4_QUANTIZE_INSTANCES(extern)
#endif

}  // namespace detail

// Quantizes `in` (device memory) to NVFP4 (`format`: formats::nvfp4 or formats::nvfp4_2d) as
// `options` say, into the copies named in `out` (device memory). Each copy's tensor scale is
// computed from its amax, or as `tensor_scale` says (a given scale for both copies, or the amax of
// a whole tensor of which `in` is a part: nvfp4_tensor_scale_source). Asynchronous on `stream`,
// with no host synchronization. An empty input writes only the tensor scales (1, the given one or
// the given amax's; a copy's data pointer may then be null) and the amax (0). Throws
// std::invalid_argument naming the bad value (format, shape, options, tensor scale, missing or
// misaligned outputs) and gpu::error on a runtime failure.
template <class T>
  requires quantizer_input<T>
void quantize_nvfp4(matrix_view<const T> in, const block_format& format, const nvfp4_options& options, const nvfp4_outputs& out,
                    const nvfp4_tensor_scale_source& tensor_scale = {}, stream_t stream = nullptr) {
  using U = std::remove_const_t<T>;
  detail::quantize_nvfp4_impl<U>({in.data, in.rows, in.cols, in.ld}, format, options, out, tensor_scale, stream);
}

// The amax each wanted copy's tensor scale would be computed from (a null pointer: not wanted):
// the largest finite magnitude among the values the copy quantizes, rotated when `options` rotate
// (block/nvfp4_scale.hpp), as quantize_nvfp4's amax pass finds it; 0 for an empty input. The
// maximum of these over the parts of a tensor is the whole tensor's, for
// nvfp4_tensor_scale_source::from_amax. Asynchronous on `stream`; throws std::invalid_argument as
// quantize_nvfp4 does.
template <class T>
  requires quantizer_input<T>
void nvfp4_amax(matrix_view<const T> in, const block_format& format, const nvfp4_options& options, float* rowwise_amax,
                float* columnwise_amax, stream_t stream = nullptr) {
  using U = std::remove_const_t<T>;
  detail::nvfp4_amax_impl<U>({in.data, in.rows, in.cols, in.ld}, format, options, rowwise_amax, columnwise_amax, stream);
}

// Both copies of `in`, allocated here and filled by one quantize_nvfp4 call (each copy's tensor
// scale its own, or `tensor_scale` for both); amax as in nvfp4_outputs.
template <class T>
  requires quantizer_input<T>
device_nvfp4_pair quantize_nvfp4_both(matrix_view<const T> in, const block_format& format, const nvfp4_options& options = {},
                                      scale_layout scales_layout = scale_layout::row_major, std::optional<float> tensor_scale = std::nullopt,
                                      float* amax = nullptr, stream_t stream = nullptr) {
  const bool from_amax = !tensor_scale;
  device_nvfp4_pair r{device_nvfp4_tensor({format, block_axis::rowwise, in.rows, in.cols}, options, scales_layout, from_amax),
                      device_nvfp4_tensor({format, block_axis::columnwise, in.rows, in.cols}, options, scales_layout, from_amax)};
  quantize_nvfp4(in, format, options,
                 {r.rowwise.data().data(), r.rowwise.scales().data(), scales_layout, r.rowwise.tensor_scale().data(),
                  r.columnwise.data().data(), r.columnwise.scales().data(), scales_layout, r.columnwise.tensor_scale().data(), amax},
                 tensor_scale, stream);
  return r;
}

}  // namespace gpu
MXKIT_END_NAMESPACE
