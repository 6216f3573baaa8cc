// SPDX-License-Identifier: Apache-2.0
#pragma once
// The header-only half of catch2_test_kernel_library (kernel_library_header_only.cu): the same
// calls as the test makes through the kernel library, on device pointers, with plain types only
// (the two halves' mxkit types live in different ABI namespaces).
#include <cstddef>
#include <cstdint>

namespace header_only {
// gpu::quantize of a row-major [rows, cols] float matrix to MX format all_mx_types[type_index],
// rowwise and columnwise, row-major scales; rotate: the Hadamard option.
void quantize(const float* in, std::size_t rows, std::size_t cols, int type_index, bool rotate, std::uint8_t* row_data,
              std::uint8_t* row_scales, std::uint8_t* col_data, std::uint8_t* col_scales);
// gpu::quantize_nvfp4 of the same matrix, both copies, row-major scales, each copy's tensor
// scale from its amax: formats::nvfp4_2d if two_d (else formats::nvfp4); rotate: the Hadamard
// option with the sign mask 0x5A3C.
void quantize_nvfp4(const float* in, std::size_t rows, std::size_t cols, bool two_d, bool rotate, std::uint8_t* row_data,
                    std::uint8_t* row_scales, float* row_tensor_scale, std::uint8_t* col_data, std::uint8_t* col_scales,
                    float* col_tensor_scale);
// gpu::cast_fp8 (E4M3, saturating) of the same matrix with `scale`: codes and transposed codes.
void cast_fp8(const float* in, std::size_t rows, std::size_t cols, float scale, std::uint8_t* data, std::uint8_t* transposed);
// gpu::gemm of two MXFP8 (E4M3) rowwise copies made by quantize above: d[p, q] f32.
void gemm_mxfp8(const std::uint8_t* a_data, const std::uint8_t* a_scales, const std::uint8_t* b_data, const std::uint8_t* b_scales,
                std::size_t p, std::size_t q, std::size_t r, float* d);
}  // namespace header_only
