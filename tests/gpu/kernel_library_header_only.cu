// SPDX-License-Identifier: Apache-2.0
// The header-only half of catch2_test_kernel_library: compiled without the kernel library's
// declarations (the test target links the library, so its macros are undone here) and in an ABI
// namespace of its own, so these launchers and kernels are this file's own instantiations; in
// mxkit::v0 the linker would merge them with the library's and the test would compare the
// library with itself.
#undef MXKIT_GPU_KERNEL_LIBRARY
#undef MXKIT_GPU_LIBRARY_HAS_DEVICE_BACKEND
#undef MXKIT_GPU_LIBRARY_HAS_GEMM
#undef MXKIT_GPU_LIBRARY_HAS_ATTENTION
#undef MXKIT_GPU_LIBRARY_HAS_QUANTIZE
#undef MXKIT_GPU_LIBRARY_HAS_FP8_CAST
#undef MXKIT_GPU_LIBRARY_HAS_NVFP4_QUANTIZE
#define MXKIT_ABI_NAMESPACE v0_header_only
#include <mxkit/gpu/fp8_cast.hpp>
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/quantize_nvfp4.hpp>

#include "kernel_library_header_only.hpp"

namespace header_only {
namespace gpu = mxkit::gpu;

void quantize(const float* in, std::size_t rows, std::size_t cols, int type_index, bool rotate, std::uint8_t* row_data,
              std::uint8_t* row_scales, std::uint8_t* col_data, std::uint8_t* col_scales) {
  mxkit::quantize_options o;
  o.hadamard = rotate;
  gpu::quantize(mxkit::matrix_view<const float>{in, rows, cols}, mxkit::all_mx_types[type_index], o,
                {row_data, row_scales, mxkit::scale_layout::row_major, col_data, col_scales, mxkit::scale_layout::row_major});
  MXKIT_GPU_CHECK(gpu::device_synchronize());
}

void quantize_nvfp4(const float* in, std::size_t rows, std::size_t cols, bool two_d, bool rotate, std::uint8_t* row_data,
                    std::uint8_t* row_scales, float* row_tensor_scale, std::uint8_t* col_data, std::uint8_t* col_scales,
                    float* col_tensor_scale) {
  mxkit::nvfp4_options o;
  o.hadamard = rotate;
  o.hadamard_signs = rotate ? 0x5A3Cu : 0u;
  gpu::quantize_nvfp4(mxkit::matrix_view<const float>{in, rows, cols}, two_d ? mxkit::formats::nvfp4_2d : mxkit::formats::nvfp4, o,
                      {row_data, row_scales, mxkit::scale_layout::row_major, row_tensor_scale, col_data, col_scales,
                       mxkit::scale_layout::row_major, col_tensor_scale});
  MXKIT_GPU_CHECK(gpu::device_synchronize());
}

void cast_fp8(const float* in, std::size_t rows, std::size_t cols, float scale, std::uint8_t* data, std::uint8_t* transposed) {
  gpu::cast_fp8(mxkit::matrix_view<const float>{in, rows, cols}, mxkit::fp8_type::e4m3, scale, {data, transposed});
  MXKIT_GPU_CHECK(gpu::device_synchronize());
}

void gemm_mxfp8(const std::uint8_t* a_data, const std::uint8_t* a_scales, const std::uint8_t* b_data, const std::uint8_t* b_scales,
                std::size_t p, std::size_t q, std::size_t r, float* d) {
  const mxkit::block_layout la{mxkit::formats::mxfp8_e4m3, mxkit::block_axis::rowwise, p, r}, lb{mxkit::formats::mxfp8_e4m3,
                                                                                             mxkit::block_axis::rowwise, q, r};
  gpu::gemm(mxkit::mx_const_view{la, {}, a_data, a_scales, mxkit::scale_layout::row_major},
            mxkit::mx_const_view{lb, {}, b_data, b_scales, mxkit::scale_layout::row_major}, mxkit::matrix_view<float>{d, p, q});
  MXKIT_GPU_CHECK(gpu::device_synchronize());
}
}  // namespace header_only
