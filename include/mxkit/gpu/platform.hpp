// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one header that decides the GPU backend and names the vendor runtime API; every other mxkit
// GPU file speaks the neutral vocabulary below (host side here, device side in gpu/device.hpp).
//   HIP   clang or hipcc in HIP mode (__HIP__): the HIP runtime, <hip/hip_runtime.h>.
//   CUDA  nvcc or clang in CUDA mode (__CUDACC__ without __HIP__): the CUDA runtime directly,
//         <cuda_runtime.h> (HIP's NVIDIA headers of HIP 5.2 do not build with CUDA 13).
// Architecture macros are always defined, to 0 or 1 (a typo in `#if MXKIT_...` then fails):
//   MXKIT_GPU_HIP, MXKIT_GPU_CUDA   the backend
//   MXKIT_WARP_SIZE                 threads per warp (CUDA) or wavefront (AMD): 32 or 64
//   MXKIT_ARCH_GFX942, MXKIT_ARCH_GFX950, MXKIT_ARCH_SM90  1 only in that device pass
// Warp size is 64 on gfx942/gfx950 (CDNA3/CDNA4 run wave64 only) and 32 on NVIDIA; device code
// uses warp_size, never a literal 32 (mx_block_size, also 32, is a different quantity).
#include <cstddef>
#include <cstdint>

#include <mxkit/config.hpp>

#if defined(__HIP__)
#include <hip/hip_runtime.h>
#define MXKIT_GPU_HIP 1
#define MXKIT_GPU_CUDA 0
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#define MXKIT_GPU_HIP 0
#define MXKIT_GPU_CUDA 1
#else
#error "mxkit/gpu headers need a GPU compiler: nvcc (CUDA), or clang/hipcc in HIP mode; host code uses mxkit::mxkit only"
#endif

#if MXKIT_GPU_CUDA
#define MXKIT_WARP_SIZE 32
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define MXKIT_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#elif defined(__GFX9__) || !MXKIT_DEVICE_PASS
// gfx9 (gfx942, gfx950) is wave64 only; the host pass sizes launches for those targets.
#define MXKIT_WARP_SIZE 64
#else
#error "mxkit: unknown AMD wavefront size for this target; define __AMDGCN_WAVEFRONT_SIZE"
#endif

#if MXKIT_GPU_HIP && MXKIT_DEVICE_PASS && defined(__gfx942__)
#define MXKIT_ARCH_GFX942 1
#else
#define MXKIT_ARCH_GFX942 0
#endif
#if MXKIT_GPU_HIP && MXKIT_DEVICE_PASS && defined(__gfx950__)
#define MXKIT_ARCH_GFX950 1
#else
#define MXKIT_ARCH_GFX950 0
#endif
#if MXKIT_GPU_CUDA && MXKIT_DEVICE_PASS && __CUDA_ARCH__ >= 900
#define MXKIT_ARCH_SM90 1
#else
#define MXKIT_ARCH_SM90 0
#endif

// Every kernel defined in a header is declared with MXKIT_GLOBAL (or is a template): internal
// linkage, as CUTLASS's CUTLASS_GLOBAL, so any number of translation units of one program can
// include the header (a plain __global__ function defined in a header is one symbol per
// translation unit, and the second one fails to link).
#define MXKIT_GLOBAL __global__ static

MXKIT_BEGIN_NAMESPACE
namespace gpu {

inline constexpr int warp_size = MXKIT_WARP_SIZE;
static_assert(warp_size == 32 || warp_size == 64, "mxkit supports 32- and 64-wide warps");

// --- runtime vocabulary (host) ---------------------------------------------------------------
#if MXKIT_GPU_HIP
using error_t = hipError_t;
using stream_t = hipStream_t;
using event_t = hipEvent_t;
inline constexpr error_t success = hipSuccess;
#else
using error_t = cudaError_t;
using stream_t = cudaStream_t;
using event_t = cudaEvent_t;
inline constexpr error_t success = cudaSuccess;
#endif

enum class copy_kind : std::uint8_t { host_to_device, device_to_host, device_to_device, inferred };

namespace detail {
#if MXKIT_GPU_HIP
inline hipMemcpyKind native(copy_kind k) noexcept {
  switch (k) {
    case copy_kind::host_to_device: return hipMemcpyHostToDevice;
    case copy_kind::device_to_host: return hipMemcpyDeviceToHost;
    case copy_kind::device_to_device: return hipMemcpyDeviceToDevice;
    case copy_kind::inferred: break;
  }
  return hipMemcpyDefault;
}
#else
inline cudaMemcpyKind native(copy_kind k) noexcept {
  switch (k) {
    case copy_kind::host_to_device: return cudaMemcpyHostToDevice;
    case copy_kind::device_to_host: return cudaMemcpyDeviceToHost;
    case copy_kind::device_to_device: return cudaMemcpyDeviceToDevice;
    case copy_kind::inferred: break;
  }
  return cudaMemcpyDefault;
}
#endif
}  // namespace detail

// One-line forwards, so each vendor name appears here once.
#if MXKIT_GPU_HIP
#define MXKIT_GPU_API(cuda_name, hip_name) hip_name
#else
#define MXKIT_GPU_API(cuda_name, hip_name) cuda_name
#endif

inline const char* error_string(error_t e) noexcept { return MXKIT_GPU_API(cudaGetErrorString, hipGetErrorString)(e); }
inline const char* error_name(error_t e) noexcept { return MXKIT_GPU_API(cudaGetErrorName, hipGetErrorName)(e); }
inline error_t get_last_error() noexcept { return MXKIT_GPU_API(cudaGetLastError, hipGetLastError)(); }
inline error_t device_synchronize() noexcept { return MXKIT_GPU_API(cudaDeviceSynchronize, hipDeviceSynchronize)(); }
inline error_t get_device_count(int* n) noexcept { return MXKIT_GPU_API(cudaGetDeviceCount, hipGetDeviceCount)(n); }
inline error_t get_device(int* d) noexcept { return MXKIT_GPU_API(cudaGetDevice, hipGetDevice)(d); }
inline error_t set_device(int d) noexcept { return MXKIT_GPU_API(cudaSetDevice, hipSetDevice)(d); }

inline error_t malloc_device(void** p, std::size_t bytes) noexcept { return MXKIT_GPU_API(cudaMalloc, hipMalloc)(p, bytes); }
inline error_t free_device(void* p) noexcept { return MXKIT_GPU_API(cudaFree, hipFree)(p); }
// Stream-ordered allocation from a memory pool (CUDA 11.2+, HIP 5.2+): the pool keeps freed
// memory for the next allocation instead of returning it to the driver.
using mem_pool_t = MXKIT_GPU_API(cudaMemPool_t, hipMemPool_t);
inline error_t mem_pool_create_on_device(mem_pool_t* pool, int device) noexcept {
  MXKIT_GPU_API(cudaMemPoolProps, hipMemPoolProps) props{};
  props.allocType = MXKIT_GPU_API(cudaMemAllocationTypePinned, hipMemAllocationTypePinned);
  props.location.type = MXKIT_GPU_API(cudaMemLocationTypeDevice, hipMemLocationTypeDevice);
  props.location.id = device;
  return MXKIT_GPU_API(cudaMemPoolCreate, hipMemPoolCreate)(pool, &props);
}
// Memory the pool keeps across synchronizations (the driver's default is 0: everything goes back).
inline error_t mem_pool_set_release_threshold(mem_pool_t pool, std::uint64_t bytes) noexcept {
  return MXKIT_GPU_API(cudaMemPoolSetAttribute, hipMemPoolSetAttribute)(
      pool, MXKIT_GPU_API(cudaMemPoolAttrReleaseThreshold, hipMemPoolAttrReleaseThreshold), &bytes);
}
inline error_t mem_pool_trim_to(mem_pool_t pool, std::size_t keep_bytes) noexcept {
  return MXKIT_GPU_API(cudaMemPoolTrimTo, hipMemPoolTrimTo)(pool, keep_bytes);
}
// Bytes the pool holds from the driver right now (in use or kept): it grows only when an
// allocation could not be served from memory the pool already had.
inline error_t mem_pool_reserved_bytes(mem_pool_t pool, std::uint64_t* bytes) noexcept {
  return MXKIT_GPU_API(cudaMemPoolGetAttribute, hipMemPoolGetAttribute)(
      pool, MXKIT_GPU_API(cudaMemPoolAttrReservedMemCurrent, hipMemPoolAttrReservedMemCurrent), bytes);
}
inline error_t malloc_from_pool_async(void** p, std::size_t bytes, mem_pool_t pool, stream_t s) noexcept {
  return MXKIT_GPU_API(cudaMallocFromPoolAsync, hipMallocFromPoolAsync)(p, bytes, pool, s);
}
inline error_t free_async(void* p, stream_t s) noexcept { return MXKIT_GPU_API(cudaFreeAsync, hipFreeAsync)(p, s); }
inline error_t mem_get_info(std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  return MXKIT_GPU_API(cudaMemGetInfo, hipMemGetInfo)(free_bytes, total_bytes);
}

// Page-locked host memory: copies from and to it run on the copy engines, asynchronously.
inline error_t malloc_host_pinned(void** p, std::size_t bytes) noexcept { return MXKIT_GPU_API(cudaMallocHost, hipHostMalloc)(p, bytes); }
inline error_t free_host_pinned(void* p) noexcept { return MXKIT_GPU_API(cudaFreeHost, hipHostFree)(p); }

inline error_t memcpy_async(void* dst, const void* src, std::size_t bytes, copy_kind k, stream_t s) noexcept {
  return MXKIT_GPU_API(cudaMemcpyAsync, hipMemcpyAsync)(dst, src, bytes, detail::native(k), s);
}
// `height` rows of `width` bytes from src (rows `src_pitch` bytes apart) to dst (`dst_pitch` apart).
inline error_t memcpy_2d_async(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, std::size_t width,
                               std::size_t height, copy_kind k, stream_t s) noexcept {
  return MXKIT_GPU_API(cudaMemcpy2DAsync, hipMemcpy2DAsync)(dst, dst_pitch, src, src_pitch, width, height, detail::native(k), s);
}
inline error_t memset_async(void* dst, int value, std::size_t bytes, stream_t s) noexcept {
  return MXKIT_GPU_API(cudaMemsetAsync, hipMemsetAsync)(dst, value, bytes, s);
}

inline error_t stream_create(stream_t* s) noexcept {
  return MXKIT_GPU_API(cudaStreamCreateWithFlags, hipStreamCreateWithFlags)(s, MXKIT_GPU_API(cudaStreamNonBlocking, hipStreamNonBlocking));
}
inline error_t stream_destroy(stream_t s) noexcept { return MXKIT_GPU_API(cudaStreamDestroy, hipStreamDestroy)(s); }
inline error_t stream_synchronize(stream_t s) noexcept { return MXKIT_GPU_API(cudaStreamSynchronize, hipStreamSynchronize)(s); }

inline error_t event_create(event_t* e) noexcept { return MXKIT_GPU_API(cudaEventCreate, hipEventCreate)(e); }
inline error_t event_destroy(event_t e) noexcept { return MXKIT_GPU_API(cudaEventDestroy, hipEventDestroy)(e); }
inline error_t event_record(event_t e, stream_t s) noexcept { return MXKIT_GPU_API(cudaEventRecord, hipEventRecord)(e, s); }
// success once the work before the event has finished, not_ready before (not an error).
inline constexpr error_t not_ready = MXKIT_GPU_API(cudaErrorNotReady, hipErrorNotReady);
inline error_t event_query(event_t e) noexcept { return MXKIT_GPU_API(cudaEventQuery, hipEventQuery)(e); }
inline error_t event_synchronize(event_t e) noexcept { return MXKIT_GPU_API(cudaEventSynchronize, hipEventSynchronize)(e); }
// Work enqueued on `s` after this call waits for event `e` (recorded on another stream).
inline error_t stream_wait_event(stream_t s, event_t e) noexcept { return MXKIT_GPU_API(cudaStreamWaitEvent, hipStreamWaitEvent)(s, e, 0); }
inline error_t event_create_timing_off(event_t* e) noexcept {
  return MXKIT_GPU_API(cudaEventCreateWithFlags, hipEventCreateWithFlags)(e, MXKIT_GPU_API(cudaEventDisableTiming, hipEventDisableTiming));
}
inline error_t event_elapsed_ms(float* ms, event_t start, event_t stop) noexcept {
  return MXKIT_GPU_API(cudaEventElapsedTime, hipEventElapsedTime)(ms, start, stop);
}

// Graphs by stream capture (CUDA programming guide, "CUDA Graphs" and "Creating a Graph Using
// Stream Capture"; HIP 5.2's hipStreamBeginCapture ... hipGraphLaunch are the same calls): the
// work enqueued on a stream between begin and end is recorded, not run, and the instantiated graph
// runs it again at each launch with the same kernel arguments and addresses.
using graph_t = MXKIT_GPU_API(cudaGraph_t, hipGraph_t);
using graph_exec_t = MXKIT_GPU_API(cudaGraphExec_t, hipGraphExec_t);
// Thread-local mode: a call this thread makes that may not be captured (a synchronization, a
// cudaMalloc, an event query) fails instead of running, so a step that is not capturable reports
// it; other threads (another rank's) are not affected.
inline error_t stream_begin_capture(stream_t s) noexcept {
  return MXKIT_GPU_API(cudaStreamBeginCapture, hipStreamBeginCapture)(
      s, MXKIT_GPU_API(cudaStreamCaptureModeThreadLocal, hipStreamCaptureModeThreadLocal));
}
inline error_t stream_end_capture(stream_t s, graph_t* g) noexcept { return MXKIT_GPU_API(cudaStreamEndCapture, hipStreamEndCapture)(s, g); }
// Whether work enqueued on `s` now would be recorded into a graph instead of run.
inline error_t stream_is_capturing(stream_t s, bool* capturing) noexcept {
  MXKIT_GPU_API(cudaStreamCaptureStatus, hipStreamCaptureStatus) status{};
  const error_t e = MXKIT_GPU_API(cudaStreamIsCapturing, hipStreamIsCapturing)(s, &status);
  *capturing = e == success && status != MXKIT_GPU_API(cudaStreamCaptureStatusNone, hipStreamCaptureStatusNone);
  return e;
}
// Auto-free on launch: memory a graph allocated (a captured stream-ordered allocation: an
// allocation node at a fixed address) and did not free is freed when the graph is launched again,
// so it may stay allocated between launches, read by work after the launch (programming guide,
// "Graph Memory Nodes").
inline error_t graph_instantiate(graph_exec_t* exec, graph_t g) noexcept {
  return MXKIT_GPU_API(cudaGraphInstantiateWithFlags, hipGraphInstantiateWithFlags)(
      exec, g, MXKIT_GPU_API(cudaGraphInstantiateFlagAutoFreeOnLaunch, hipGraphInstantiateFlagAutoFreeOnLaunch));
}
inline error_t graph_launch(graph_exec_t exec, stream_t s) noexcept { return MXKIT_GPU_API(cudaGraphLaunch, hipGraphLaunch)(exec, s); }
inline error_t graph_destroy(graph_t g) noexcept { return MXKIT_GPU_API(cudaGraphDestroy, hipGraphDestroy)(g); }
inline error_t graph_exec_destroy(graph_exec_t exec) noexcept { return MXKIT_GPU_API(cudaGraphExecDestroy, hipGraphExecDestroy)(exec); }

// The few device properties launchers size grids with.
struct device_properties {
  char name[256] = {};
  int multiprocessors = 0;
  int warp_size = 0;
  int max_threads_per_multiprocessor = 0;
  std::size_t shared_memory_per_block = 0;
  std::size_t l2_cache_bytes = 0;
};
inline error_t get_device_properties(device_properties* out, int device) noexcept {
  MXKIT_GPU_API(cudaDeviceProp, hipDeviceProp_t) p{};
  const error_t e = MXKIT_GPU_API(cudaGetDeviceProperties, hipGetDeviceProperties)(&p, device);
  if (e != success) return e;
  for (std::size_t i = 0; i + 1 < sizeof out->name && p.name[i]; ++i) out->name[i] = p.name[i];
  out->multiprocessors = p.multiProcessorCount;
  out->warp_size = p.warpSize;
  out->max_threads_per_multiprocessor = p.maxThreadsPerMultiProcessor;
  out->shared_memory_per_block = p.sharedMemPerBlock;
  out->l2_cache_bytes = static_cast<std::size_t>(p.l2CacheSize);
  return success;
}

// major * 10 + minor (NVIDIA: 90 on Hopper; AMD reports its gfx major and minor, 9 and 5 on gfx950).
inline error_t get_compute_capability(int* capability, int device) noexcept {
  int major = 0, minor = 0;
  error_t e = MXKIT_GPU_API(cudaDeviceGetAttribute, hipDeviceGetAttribute)(
      &major, MXKIT_GPU_API(cudaDevAttrComputeCapabilityMajor, hipDeviceAttributeComputeCapabilityMajor), device);
  if (e == success)
    e = MXKIT_GPU_API(cudaDeviceGetAttribute, hipDeviceGetAttribute)(
        &minor, MXKIT_GPU_API(cudaDevAttrComputeCapabilityMinor, hipDeviceAttributeComputeCapabilityMinor), device);
  *capability = e == success ? major * 10 + minor : 0;
  return e;
}

inline error_t get_multiprocessor_count(int* n, int device) noexcept {
  return MXKIT_GPU_API(cudaDeviceGetAttribute, hipDeviceGetAttribute)(
      n, MXKIT_GPU_API(cudaDevAttrMultiProcessorCount, hipDeviceAttributeMultiprocessorCount), device);
}

// Resident blocks of `kernel` per multiprocessor at `threads` threads and `shared_bytes` dynamic
// shared memory (for persistent grids).
template <class Kernel>
inline error_t max_active_blocks_per_multiprocessor(int* blocks, Kernel kernel, int threads, std::size_t shared_bytes) noexcept {
  return MXKIT_GPU_API(cudaOccupancyMaxActiveBlocksPerMultiprocessor, hipOccupancyMaxActiveBlocksPerMultiprocessor)(
      blocks, kernel, threads, shared_bytes);
}

// Lets `kernel` launch with up to `bytes` of dynamic shared memory (above the 48 KiB default;
// tiles of two operands of 64 x 136 bf16 each need it).
template <class Kernel>
inline error_t set_max_dynamic_shared_bytes(Kernel kernel, int bytes) noexcept {
  return MXKIT_GPU_API(cudaFuncSetAttribute, hipFuncSetAttribute)(
      reinterpret_cast<const void*>(kernel),
      MXKIT_GPU_API(cudaFuncAttributeMaxDynamicSharedMemorySize, hipFuncAttributeMaxDynamicSharedMemorySize), bytes);
}

#undef MXKIT_GPU_API

}  // namespace gpu
MXKIT_END_NAMESPACE
