// SPDX-License-Identifier: Apache-2.0
// Kernel library (gpu/kernel_library.hpp): the FP8 casts of stored float, bfloat16 and float16
// matrices (gpu::cast_fp8, gpu::cast_fp8_delayed), both FP8 types, compiled once.
#define MXKIT_GPU_LIBRARY_DEFINES_FP8_CAST
#include <mxkit/gpu/fp8_cast.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu::detail {
MXKIT_GPU_FP8_CAST_INSTANCES()
}  // namespace gpu::detail
MXKIT_END_NAMESPACE
