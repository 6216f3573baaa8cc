// SPDX-License-Identifier: Apache-2.0
// Kernel library (gpu/kernel_library.hpp): attention forward and backward, head dims 64 and 128,
// every kernel set (sm90, tensor-core, portable), compiled once.
#define MXKIT_GPU_LIBRARY_DEFINES_ATTENTION
#include <mxkit/gpu/nn/attention.hpp>
