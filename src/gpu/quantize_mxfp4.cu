// SPDX-License-Identifier: Apache-2.0
// Kernel library (gpu/kernel_library.hpp): gpu::quantize's mxfp4 kernels for float, bfloat16 and
// float16 inputs, compiled once (one file per format, so they build in parallel).
#define MXKIT_GPU_LIBRARY_DEFINES_QUANTIZE
#include <mxkit/gpu/quantize.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu::detail {
MXKIT_GPU_QUANTIZE_INSTANCES(, mxfp4)
}  // namespace gpu::detail
MXKIT_END_NAMESPACE
