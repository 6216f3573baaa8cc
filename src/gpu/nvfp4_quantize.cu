// SPDX-License-Identifier: Apache-2.0
// Kernel library (gpu/kernel_library.hpp): gpu::quantize_nvfp4's amax, tensor-scale and quantize
// kernels for float, bfloat16 and float16 inputs, compiled once.
#define MXKIT_GPU_LIBRARY_DEFINES_NVFP4_QUANTIZE
#include <mxkit/gpu/quantize_nvfp4.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu::detail {
MXKIT_GPU_NVFP4_QUANTIZE_INSTANCES()
}  // namespace gpu::detail
MXKIT_END_NAMESPACE
