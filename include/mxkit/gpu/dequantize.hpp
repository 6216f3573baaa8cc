// SPDX-License-Identifier: Apache-2.0
#pragma once
// MX copy in device memory back to a [rows, cols] float, bfloat16 or float16 matrix (device),
// rotation undone: dequantize_block on every block, then T::from_float (nearest even) for 16-bit
// outputs, the same functions as the host's ref/quantize.hpp dequantize. One thread a block.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline constexpr int dequantize_threads = 256;

template <class T>
MXKIT_HD constexpr T store_float(float v) noexcept {
  if constexpr (std::is_same_v<T, float>) return v;
  else return T::from_float(v, rounding::nearest_even, overflow::propagate);  // a plain cast: Inf stays Inf
}

template <class Fmt, class T>
MXKIT_GLOBAL void __launch_bounds__(dequantize_threads) dequantize_kernel(const mx_const_view in, T* out, std::size_t ld) {
  using E = typename Fmt::element_type;
  const block_layout& l = in.layout;
  const std::size_t blocks = l.blocks_per_line(), total = l.lines() * blocks;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * dequantize_threads;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * dequantize_threads + threadIdx.x; i < total; i += stride) {
    const std::size_t line = i / blocks, blk = i % blocks;
    mx_block<Fmt> b{};
    b.scale = e8m0::from_bits(in.scale(line, blk));
    constexpr int n = Fmt::block_size;
    for (int k = 0; k < n; ++k)
      b.elements[k] = E::from_bits(load_code(in.data + line * l.line_bytes(), blk * n + static_cast<std::size_t>(k), Fmt::storage_bits));
    float v[n];
    dequantize_block<Fmt>(b, v, in.options);
    for (int k = 0; k < n; ++k) {
      const std::size_t p = blk * n + static_cast<std::size_t>(k);
      if (p >= l.line_length()) break;
      const std::size_t r = l.axis == block_axis::rowwise ? line : p, c = l.axis == block_axis::rowwise ? p : line;
      out[r * ld + c] = store_float<T>(v[k]);
    }
  }
}

}  // namespace detail

// out (device, [rows, cols] with its leading dimension) = the values of `in`, rotation undone.
// Asynchronous on `stream`.
template <class T>
  requires quantizer_input<T> && (!std::is_const_v<T>)
void dequantize(const mx_const_view& in, matrix_view<T> out, stream_t stream = nullptr) {
  mxkit::detail::check_mx_layout(in.layout, "gpu::dequantize");  // known type and axis, sizes that fit
  mxkit::detail::require(out.rows == in.layout.rows && out.cols == in.layout.cols, "gpu::dequantize: output is ", out.rows, "x",
                         out.cols, ", the copy is ", in.layout.rows, "x", in.layout.cols);
  mxkit::detail::check_matrix(out, "gpu::dequantize: output");
  const std::size_t total = in.layout.lines() * in.layout.blocks_per_line();
  if (total == 0) return;
  mxkit::detail::require(in.data && in.scales && out.data, "gpu::dequantize: null pointer");
  visit_mx_type(in.layout.mx(), [&](auto fmt) {
    using Fmt = decltype(fmt);
    const std::size_t tiles = (total + detail::dequantize_threads - 1) / detail::dequantize_threads;
    const int grid = detail::persistent_grid<detail::dequantize_kernel<Fmt, T>>(detail::dequantize_threads, tiles);
    detail::dequantize_kernel<Fmt, T><<<grid, detail::dequantize_threads, 0, stream>>>(in, out.data, out.stride());
    MXKIT_GPU_CHECK_LAUNCH();
  });
}

}  // namespace gpu
MXKIT_END_NAMESPACE
