#pragma once
// The one header that decides the GPU backend; every other mxkit GPU file speaks the neutral
// vocabulary below and never names a vendor API.
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

// A kernel that is not a template is declared MXKIT_GLOBAL (as CUTLASS_GLOBAL does): internal
// linkage, so each translation unit that includes its header gets its own copy and any number of
// them link into one program. A plain __global__ function defined in a header is defined again
// in the second .cu file that includes it, and the link fails. Template kernels need no macro.
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
inline error_t memcpy_async(void* dst, const void* src, std::size_t bytes, copy_kind k, stream_t s) noexcept {
  return MXKIT_GPU_API(cudaMemcpyAsync, hipMemcpyAsync)(dst, src, bytes, detail::native(k), s);
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
inline error_t event_synchronize(event_t e) noexcept { return MXKIT_GPU_API(cudaEventSynchronize, hipEventSynchronize)(e); }
inline error_t event_elapsed_ms(float* ms, event_t start, event_t stop) noexcept {
  return MXKIT_GPU_API(cudaEventElapsedTime, hipEventElapsedTime)(ms, start, stop);
}

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

#undef MXKIT_GPU_API

// --- device vocabulary ------------------------------------------------------------------------
// Full-warp shuffles and ballot: every lane of the warp must take part.
#if MXKIT_GPU_HIP
using lane_mask_t = std::uint64_t;
#else
using lane_mask_t = std::uint32_t;
#endif

__device__ inline int lane_id() noexcept { return static_cast<int>(threadIdx.x) & (warp_size - 1); }

template <class T>
__device__ inline T shfl_xor(T v, int lane_mask) noexcept {
#if MXKIT_GPU_HIP
  return __shfl_xor(v, lane_mask, warp_size);
#else
  return __shfl_xor_sync(0xFFFFFFFFu, v, lane_mask, warp_size);
#endif
}
template <class T>
__device__ inline T shfl(T v, int src_lane) noexcept {
#if MXKIT_GPU_HIP
  return __shfl(v, src_lane, warp_size);
#else
  return __shfl_sync(0xFFFFFFFFu, v, src_lane, warp_size);
#endif
}
__device__ inline lane_mask_t ballot(bool predicate) noexcept {
#if MXKIT_GPU_HIP
  return __ballot(predicate);
#else
  return __ballot_sync(0xFFFFFFFFu, predicate);
#endif
}
__device__ inline void sync_threads() noexcept { __syncthreads(); }

// 16-byte copy from global to shared memory: asynchronous on sm_80+ (cp.async.cg, completion
// tracked by commit groups), a plain load and store elsewhere (then commit and wait are no-ops).
// `src_bytes` < 16 zero-fills the rest (0: the whole chunk is zero, src is not read).
__device__ inline void async_copy16(void* dst_shared, const void* src_global, int src_bytes = 16) noexcept {
#if MXKIT_GPU_CUDA && MXKIT_DEVICE_PASS && __CUDA_ARCH__ >= 800
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src_global), "r"(src_bytes) : "memory");
#else
  uint4 v = make_uint4(0, 0, 0, 0);
  if (src_bytes == 16) v = *static_cast<const uint4*>(src_global);
  else if (src_bytes > 0) {
    unsigned char* b = reinterpret_cast<unsigned char*>(&v);
    for (int i = 0; i < src_bytes; ++i) b[i] = static_cast<const unsigned char*>(src_global)[i];
  }
  *static_cast<uint4*>(dst_shared) = v;
#endif
}
__device__ inline void async_commit() noexcept {
#if MXKIT_GPU_CUDA && MXKIT_DEVICE_PASS && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Waits until at most `Pending` of this thread's committed groups are still in flight.
template <int Pending>
__device__ inline void async_wait() noexcept {
#if MXKIT_GPU_CUDA && MXKIT_DEVICE_PASS && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
#endif
}
// Barrier with shared-memory ordering for a team of 32 lanes: a warp on NVIDIA; on AMD the whole
// wave64 (its two teams run the same uniform loop, so both always arrive).
__device__ inline void team_sync() noexcept {
#if MXKIT_GPU_CUDA
  __syncwarp();
#else
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#endif
}
__device__ inline unsigned atomic_max(unsigned* p, unsigned v) noexcept { return atomicMax(p, v); }

// Maximum over the warp (every lane gets it), log2(warp_size) shuffles.
__device__ inline unsigned warp_max(unsigned v) noexcept {
  for (int m = warp_size / 2; m > 0; m /= 2) {
    const unsigned o = shfl_xor(v, m);
    v = v > o ? v : o;
  }
  return v;
}

}  // namespace gpu
MXKIT_END_NAMESPACE
