// SPDX-License-Identifier: Apache-2.0
#pragma once
// The launch parameters of the MX quantize kernels (gpu/quantize/kernel.hpp, the tiled kernel;
// gpu/quantize/rowwise_kernel.hpp, the rowwise copy alone), filled by gpu/quantize.hpp's
// make_quantize_params.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

template <class T>
struct quantize_params {
  const T* in;  // [rows, ld]
  std::size_t rows, cols, ld;
  bool vector_loads;  // in and every row start are 16-byte aligned
  quantize_options row_options, col_options;  // stream already set per copy (stochastic_stream)
  std::uint32_t sign_mask;
  std::uint8_t *row_data, *row_scales, *col_data, *col_scales;
  scale_layout row_layout, col_layout;
  unsigned* amax;  // float bits, atomicMax
  // MXFP8: each element written as its bf16 value instead of its code (quantize_outputs::
  // values_as_bf16); beyond_exact_range: set by a block that leaves the bf16 product's exact range.
  bool values_bf16;
  int* beyond_exact_range;
  // Set by launch_quantize_kernel: the format picks the tile height and the float-path bounds.
  std::size_t tiles_m, tiles_k;
  mxkit::detail::float_path_bounds bounds;  // of row_options (the copies differ only in their stochastic stream)
};

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
