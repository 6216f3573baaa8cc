// SPDX-License-Identifier: Apache-2.0
#pragma once
// The cuBLASLt functions the vendor GEMM path (gemm/vendor/cublaslt.hpp) calls, loaded at run
// time with dlopen, as gpu/parallel/nccl_api.hpp loads NCCL:
//   - no link-time dependency: mxkit::gpu stays header-only and its packaging
//     (cmake/mxkitGpuRuntime.cmake) is unchanged; a program that never runs a bf16 or FP8 GEMM
//     never loads the library (about 540 MB on disk for CUDA 13);
//   - the library is $MXKIT_CUBLASLT_LIBRARY (a path) when set, and then only that: set it to a
//     path that does not exist (`none`) to keep the vendor path off; else the loader's search path
//     finds libcublasLt.so.13, then libcublasLt.so.12 (the toolkit's lib64, or PyTorch's wheel
//     nvidia/cublas/lib on LD_LIBRARY_PATH).
// The types and enums come from the toolkit's <cublasLt.h> (it ships with nvcc; only the
// declarations are used: every function is reached through the pointers below, and the
// declarations give their exact types through decltype). Their values have not changed between
// cuBLAS 12 and 13 for what is used here (cuBLAS documentation, "cuBLASLt Datatypes Reference").
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/gemm/vendor/cublaslt*.hpp is NVIDIA's cuBLASLt: include it only in a CUDA build (gpu/gemm/gemm.hpp does where it applies)"  // and nothing below compiles
#else
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cublasLt.h>  // types and enums only
#include <dlfcn.h>

MXKIT_BEGIN_NAMESPACE
namespace gpu::cublaslt {

struct api {
  decltype(&::cublasLtGetVersion) get_version = nullptr;
  decltype(&::cublasLtGetStatusString) get_status_string = nullptr;
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
  std::string library;       // the file that was loaded
  std::size_t version = 0;   // cublasLtGetVersion(): major * 10000 + minor * 100 + patch
};

inline constexpr const char* default_library_names[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
// cuBLASLt 12.0 is the first with FP8 matmuls and the A/B scale pointers used here.
inline constexpr std::size_t minimum_version = 120000;

namespace detail {
inline api load_api() {
  std::string tried;
  void* handle = nullptr;
  std::string loaded;
  auto try_open = [&](const char* path) {
    if (handle || !path || !*path) return;
    handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      loaded = path;
    } else {
      const char* why = ::dlerror();
      tried += std::string("\n  ") + path + ": " + (why ? why : "not found");
    }
  };
  if (const char* env = std::getenv("MXKIT_CUBLASLT_LIBRARY"); env && *env) {
    try_open(env);  // an explicit choice: no other library is tried
  } else {
    for (const char* name : default_library_names) try_open(name);
  }
  if (!handle) throw std::runtime_error("mxkit: cannot load cuBLASLt (the vendor GEMM path is off). Tried:" + tried);
  api a;
  a.library = loaded;
  auto bind = [&](auto& fn, const char* symbol) {
    void* p = ::dlsym(handle, symbol);
    if (!p) throw std::runtime_error("mxkit: " + loaded + " has no symbol " + symbol);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  bind(a.get_version, "cublasLtGetVersion");
  bind(a.get_status_string, "cublasLtGetStatusString");
  bind(a.create, "cublasLtCreate");
  bind(a.matmul_desc_create, "cublasLtMatmulDescCreate");
  bind(a.matmul_desc_destroy, "cublasLtMatmulDescDestroy");
  bind(a.matmul_desc_set_attribute, "cublasLtMatmulDescSetAttribute");
  bind(a.matrix_layout_create, "cublasLtMatrixLayoutCreate");
  bind(a.matrix_layout_destroy, "cublasLtMatrixLayoutDestroy");
  bind(a.preference_create, "cublasLtMatmulPreferenceCreate");
  bind(a.preference_destroy, "cublasLtMatmulPreferenceDestroy");
  bind(a.preference_set_attribute, "cublasLtMatmulPreferenceSetAttribute");
  bind(a.algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(a.matmul, "cublasLtMatmul");
  a.version = a.get_version();
  if (a.version < minimum_version)
    throw std::runtime_error("mxkit: " + loaded + " is cuBLASLt version " + std::to_string(a.version) + "; 12.0 or newer is needed");
  // Never dlclose'd: handles and their kernels live as long as the process.
  return a;
}
}  // namespace detail

// The loaded library, loaded on first use (thread-safe); throws std::runtime_error naming every
// path it tried when none loads. The outcome is decided once per process.
inline const api& library() {
  static std::once_flag once;
  static api loaded;
  static std::string failure;
  std::call_once(once, [] {
    try {
      loaded = detail::load_api();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  return loaded;
}

// Whether the library can be loaded here (the vendor path reports itself unsupported when not).
inline bool available() noexcept {
  try {
    (void)library();
    return true;
  } catch (...) {
    return false;
  }
}

// Throws std::runtime_error for a failed cuBLASLt call, with the library's own description.
inline void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const char* why = library().get_status_string ? library().get_status_string(status) : nullptr;
  throw std::runtime_error(std::string("mxkit: ") + call + " failed: status " + std::to_string(static_cast<int>(status)) + " (" +
                           (why ? why : "unknown") + ")");
}

}  // namespace gpu::cublaslt
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
