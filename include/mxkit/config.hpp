// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one platform-neutral configuration header: host/device macro, device-pass detection,
// the ABI namespace and a constexpr bit_cast. Includes no GPU header (gpu/platform.hpp does).

// Before anything else: a C++17 compile (nvcc's default) would otherwise fail pages later, inside
// a concept. MSVC reports the standard in _MSVC_LANG (__cplusplus stays 199711L without /Zc).
#if (defined(_MSVC_LANG) ? _MSVC_LANG : __cplusplus) < 202002L
#error "mxkit needs C++20: compile with -std=c++20 (nvcc, g++, clang) or /std:c++20 (MSVC); mxkit::mxkit sets it for CXX, CUDA and HIP"
#endif

#include <cstdint>
#include <mxkit/version.hpp>

// MXKIT_HD marks a function usable on host, in device code and in constant expressions.
// nvcc and clang-CUDA define __CUDACC__; clang and hipcc in HIP mode define __HIP__.
#if defined(__CUDACC__) || defined(__HIP__)
#define MXKIT_GPU_COMPILER 1
#define MXKIT_HD __host__ __device__
#else
#define MXKIT_GPU_COMPILER 0
#define MXKIT_HD
#endif

// 1 only in a device compilation pass (either vendor); always defined so `#if` typos fail.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define MXKIT_DEVICE_PASS 1
#else
#define MXKIT_DEVICE_PASS 0
#endif

// Versioned inline namespace: mixing two mxkit majors in one program fails to link, not silently.
// Predefinable only so one test (tests/gpu/kernel_library_header_only.cu) can hold a second,
// header-only copy of the kernels beside the kernel library's in one program.
#ifndef MXKIT_ABI_NAMESPACE
#define MXKIT_ABI_NAMESPACE v0
#endif
#define MXKIT_BEGIN_NAMESPACE namespace mxkit { inline namespace MXKIT_ABI_NAMESPACE {
#define MXKIT_END_NAMESPACE } }

MXKIT_BEGIN_NAMESPACE

// std::bit_cast is not marked __device__ in libstdc++; the builtin is constexpr on all three
// compilers and needs no --expt-relaxed-constexpr.
template <class To, class From>
MXKIT_HD constexpr To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
  return __builtin_bit_cast(To, from);
}

MXKIT_END_NAMESPACE
