// SPDX-License-Identifier: Apache-2.0
// Kernel library (gpu/kernel_library.hpp): gpu::device_backend's members, compiled once. The GEMM,
// attention, quantizer and FP8-cast entries it calls are other files' (declarations here).
#define MXKIT_GPU_LIBRARY_DEFINES_DEVICE_BACKEND
#include <mxkit/gpu/nn/backend.hpp>
