// SPDX-License-Identifier: Apache-2.0
#pragma once
// The subset of the NCCL C API (RCCL under HIP: the same names, values and layouts) that
// gpu::nccl_communicator calls, declared here and loaded at run time with dlopen:
//   - no link-time dependency: the CUDA and HIP builds compile without an NCCL or RCCL package
//     (Debian has neither), and one build runs wherever the library can be found;
//   - the library is found through $MXKIT_NCCL_LIBRARY (a path), else the path CMake's
//     MXKIT_NCCL_ROOT compiled in (MXKIT_NCCL_DEFAULT_LIBRARY), else the loader's search path
//     (libnccl.so.2 / librccl.so.1).
// The declarations are written from NCCL's documented API (docs.nvidia.com/deeplearning/nccl,
// "API: Types" and "Communicator Creation"); third_party/nccl/README.md says where each value
// was checked. With MXKIT_NCCL_ROOT, tests/gpu/nccl_abi_check.cu compiles them against the real
// nccl.h and static_asserts every value and offset below.
//
// ncclConfig_t is versioned: its first member is the size the caller allocated and the library
// copies min(size, its own) bytes and fills the rest with defaults (init.cc, parseCommConfig).
// We declare the 2.17 layout and say so in `version`, which every NCCL since 2.17 and RCCL accept.
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <dlfcn.h>

#include <mxkit/gpu/platform.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu::nccl {

// ---- types (nccl.h: "Types") ---------------------------------------------------------------------
struct opaque_comm;
using comm_t = opaque_comm*;  // ncclComm_t

inline constexpr std::size_t unique_id_bytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct unique_id {                                   // ncclUniqueId
  char internal[unique_id_bytes];
};

enum result_t : int {  // ncclResult_t
  success = 0,
  unhandled_cuda_error = 1,
  system_error = 2,
  internal_error = 3,
  invalid_argument = 4,
  invalid_usage = 5,
  remote_error = 6,
  in_progress = 7,
};

enum data_type_t : int {  // ncclDataType_t
  int8 = 0,
  uint8 = 1,
  int32 = 2,
  uint32 = 3,
  int64 = 4,
  uint64 = 5,
  float16 = 6,
  float32 = 7,
  float64 = 8,
  bfloat16 = 9,
};

enum red_op_t : int {  // ncclRedOp_t
  sum = 0,
  prod = 1,
  max = 2,
  min = 3,
};

inline constexpr int config_undef_int = -2147483647 - 1;  // NCCL_CONFIG_UNDEF_INT (INT_MIN)
inline constexpr unsigned config_magic = 0xcafebeefu;     // NCCL_API_MAGIC
// NCCL_VERSION(X, Y, Z) for X = 2 and Y > 8.
constexpr unsigned version_code(unsigned major, unsigned minor, unsigned patch) { return major * 10000 + minor * 100 + patch; }

struct config_t {  // ncclConfig_t, the members of NCCL 2.17
  std::size_t size = sizeof(config_t);
  unsigned magic = config_magic;
  unsigned version = version_code(2, 17, 0);
  int blocking = config_undef_int;
  int cga_cluster_size = config_undef_int;
  int min_ctas = config_undef_int;
  int max_ctas = config_undef_int;
  const char* net_name = nullptr;
};

// ---- functions -----------------------------------------------------------------------------------
struct api {
  result_t (*get_version)(int*) = nullptr;
  const char* (*get_error_string)(result_t) = nullptr;
  result_t (*get_unique_id)(unique_id*) = nullptr;
  result_t (*comm_init_rank_config)(comm_t*, int nranks, unique_id, int rank, config_t*) = nullptr;
  result_t (*comm_finalize)(comm_t) = nullptr;
  result_t (*comm_destroy)(comm_t) = nullptr;
  result_t (*comm_abort)(comm_t) = nullptr;
  result_t (*comm_get_async_error)(comm_t, result_t*) = nullptr;
  result_t (*all_reduce)(const void* send, void* recv, std::size_t count, data_type_t, red_op_t, comm_t, stream_t) = nullptr;
  result_t (*reduce_scatter)(const void* send, void* recv, std::size_t recv_count, data_type_t, red_op_t, comm_t,
                             stream_t) = nullptr;
  result_t (*all_gather)(const void* send, void* recv, std::size_t send_count, data_type_t, comm_t, stream_t) = nullptr;
  result_t (*broadcast)(const void* send, void* recv, std::size_t count, data_type_t, int root, comm_t, stream_t) = nullptr;
  result_t (*group_start)() = nullptr;
  result_t (*group_end)() = nullptr;
  std::string library;  // the file that was loaded
  int version = 0;      // its NCCL_VERSION_CODE
};

// The library's default names: NCCL's soname under CUDA, RCCL's under HIP.
inline constexpr const char* default_library_names[] = {
#if MXKIT_GPU_HIP
    "librccl.so.1", "librccl.so",
#else
    "libnccl.so.2", "libnccl.so",
#endif
};
inline constexpr const char* vendor_name = MXKIT_GPU_HIP ? "RCCL" : "NCCL";

namespace detail {
inline api load_api() {
  std::string tried;
  void* handle = nullptr;
  auto try_open = [&](const std::string& path) {
    if (handle || path.empty()) return;
    handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = ::dlerror();
      tried += "\n  " + path + ": " + (why ? why : "not found");
    }
  };
  std::string loaded;
  if (const char* env = std::getenv("MXKIT_NCCL_LIBRARY"); env && *env) {
    try_open(env);
    if (handle) loaded = env;
  }
#if defined(MXKIT_NCCL_DEFAULT_LIBRARY)
  if (!handle) {
    try_open(MXKIT_NCCL_DEFAULT_LIBRARY);
    if (handle) loaded = MXKIT_NCCL_DEFAULT_LIBRARY;
  }
#endif
  for (const char* name : default_library_names)
    if (!handle) {
      try_open(name);
      if (handle) loaded = name;
    }
  if (!handle)
    throw std::runtime_error(std::string("mxkit: cannot load the ") + vendor_name + " library; set MXKIT_NCCL_LIBRARY to its path " +
                             "(PyTorch's wheel: python3 -c \"import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))\"" +
                             " + /lib/libnccl.so.2). Tried:" + tried);
  api a;
  a.library = loaded;
  auto bind = [&](auto& fn, const char* symbol) {
    void* p = ::dlsym(handle, symbol);
    if (!p) throw std::runtime_error(std::string("mxkit: ") + loaded + " has no symbol " + symbol + " (" + vendor_name + " 2.17 or newer needed)");
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  bind(a.get_version, "ncclGetVersion");
  bind(a.get_error_string, "ncclGetErrorString");
  bind(a.get_unique_id, "ncclGetUniqueId");
  bind(a.comm_init_rank_config, "ncclCommInitRankConfig");
  bind(a.comm_finalize, "ncclCommFinalize");
  bind(a.comm_destroy, "ncclCommDestroy");
  bind(a.comm_abort, "ncclCommAbort");
  bind(a.comm_get_async_error, "ncclCommGetAsyncError");
  bind(a.all_reduce, "ncclAllReduce");
  bind(a.reduce_scatter, "ncclReduceScatter");
  bind(a.all_gather, "ncclAllGather");
  bind(a.broadcast, "ncclBroadcast");
  bind(a.group_start, "ncclGroupStart");
  bind(a.group_end, "ncclGroupEnd");
  if (a.get_version(&a.version) != success) a.version = 0;
  // The library stays loaded for the life of the process (never dlclose'd: its threads may outlive us).
  if (a.version != 0 && a.version < static_cast<int>(version_code(2, 17, 0)))
    throw std::runtime_error(std::string("mxkit: ") + loaded + " is " + vendor_name + " version code " + std::to_string(a.version) +
                             "; 2.17 or newer is needed (non-blocking communicators with ncclConfig_t 2.17)");
  return a;
}
}  // namespace detail

// The loaded library, loaded on first use (thread-safe); throws std::runtime_error naming every
// path it tried when none loads.
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

// Whether the library can be loaded here (tests and programs skip themselves when not).
inline bool available() noexcept {
  try {
    (void)library();
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace gpu::nccl
MXKIT_END_NAMESPACE
