// SPDX-License-Identifier: Apache-2.0
// Kernel library (gpu/kernel_library.hpp): the GEMM dispatch gpu::detail::run and every path it
// launches (sm90 wgmma or gfx950 MFMA, the expansions, the portable kernel), compiled once.
#define MXKIT_GPU_LIBRARY_DEFINES_GEMM
#include <mxkit/gpu/gemm/gemm.hpp>
