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
// compiles each entry once, in small .cu files (src/gpu/<family>*.cu) that build in parallel, and
// defines for itself and for every target that links it MXKIT_GPU_KERNEL_LIBRARY and, per family
// it holds, MXKIT_GPU_LIBRARY_HAS_<FAMILY>. A translation unit that sees HAS_<FAMILY> gets that
// family's entries as declarations (non-template functions) or explicit instantiation
// declarations (`extern template` of the library's instantiations) and compiles none of their
// kernels; an instantiation the library does not hold still compiles from the header. The one
// library file that defines a family also defines MXKIT_GPU_LIBRARY_DEFINES_<FAMILY>: there the
// non-template entries are defined without `inline` (MXKIT_GPU_<FAMILY>_ENTRY), so the program
// has one definition, and the templates are explicitly instantiated.
//   family          entries                                                     header
//   DEVICE_BACKEND  gpu::device_backend's members that launch kernels            gpu/nn/backend.hpp
//   GEMM            gpu::detail::run, the dispatch to every GEMM path            gpu/gemm/gemm.hpp
//                   and what it launches: sm90::launch_wgmma, gfx950::launch_mfma  gpu/gemm/{sm90,gfx950}/
//                   and the vendor path's run (cuBLASLt's matmul call and its       gpu/gemm/vendor/
//                   dequant-factor kernel; cuBLASLt itself is loaded at run time)
//   ATTENTION       gpu::detail::attention_forward_impl / attention_backward_impl gpu/nn/attention.hpp
//   QUANTIZE        gpu::detail::quantize_format<format, float|bfloat16|float16>  gpu/quantize.hpp
//   NVFP4_QUANTIZE  gpu::detail::quantize_nvfp4_impl<float|bfloat16|float16>      gpu/quantize_nvfp4.hpp
//   FP8_CAST        gpu::detail::launch_fp8_cast of float, bfloat16, float16 matrices  gpu/fp8_cast.hpp
// Both ways compile the same source, so they write the same bits (tests/gpu/
// catch2_test_kernel_library.cu links both and compares). Nothing here is needed to use the
// library: this header only documents the switch (the macros are tested where they are used).
