// SPDX-License-Identifier: Apache-2.0
#pragma once
// Header-only or compiled kernel library: the switch (issue 29).
//
// Header-only (the default, nothing defined): every entry point below is an inline function or a
// template defined in its header, so a translation unit that calls it compiles its kernels. Right
// for a kernel of one's own that embeds mxkit's device functions; costly for a program that calls
// the big entries (device_backend, the sm90 GEMM, attention, all six quantizer formats) from
// several files: each file compiles them again.
//
// Kernel library (CMake target mxkit::gpu_kernels, option MXKIT_BUILD_KERNEL_LIBRARY): the target
// compiles each entry once, in small .cu files (src/gpu/), and defines MXKIT_GPU_KERNEL_LIBRARY
// for itself and for every target that links it. Such a translation unit then sees the entries
// below as declarations (non-template functions) or explicit instantiation declarations
// (`extern template`, templates at the instantiations the library holds) and compiles none of
// their kernels. Other instantiations (another element type, say) still compile from the header.
// The entries:
//   gpu::device_backend               every member that launches a kernel (nn/backend.hpp)
//   gpu::detail::run                  the GEMM dispatch, every path (gemm/gemm.hpp)
//   gpu::detail::attention_*_impl     attention forward and backward, head dims 64 and 128
//   gpu::quantize                     float, bfloat16 and float16 inputs, every MX format
//   gpu::quantize_as<Fmt>             one format per call (no other format's kernels)
//   gpu::cast_fp8 / cast_fp8_delayed  float and bfloat16 inputs
// In the library's own build each .cu file defines MXKIT_GPU_LIBRARY_DEFINES_<ENTRY> for the
// entries it defines (non-inline there: one definition in the program); both ways give the same
// kernels from the same source, so the bits are the same (tests/gpu/catch2_test_kernel_library.cu).
//
// MXKIT_GPU_LIBRARY_INLINE prefixes the definitions of non-template entries: `inline` header-only,
// nothing in the library's own definition.
#if defined(MXKIT_GPU_KERNEL_LIBRARY)
#define MXKIT_GPU_LIBRARY_INLINE
#else
#define MXKIT_GPU_LIBRARY_INLINE inline
#endif
