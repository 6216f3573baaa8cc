// SPDX-License-Identifier: Apache-2.0
#pragma once
// Device-side vocabulary of every mxkit kernel: lanes, shuffles, ballots, barriers, asynchronous
// global-to-shared copies, transposed shared-memory matrix loads and atomics. Each is one
// function with the instruction choice per vendor and architecture made here (PTX on NVIDIA,
// clang builtins on AMD), so kernels never spell inline assembly for these.
#include <cstdint>

#include <mxkit/gpu/platform.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

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
// The number of lanes set in a ballot's mask, and the lowest one (m != 0).
__device__ inline int lane_count(lane_mask_t m) noexcept {
#if MXKIT_GPU_HIP
  return static_cast<int>(__popcll(m));
#else
  return __popc(m);
#endif
}
__device__ inline int lowest_lane(lane_mask_t m) noexcept {
#if MXKIT_GPU_HIP
  return static_cast<int>(__ffsll(static_cast<unsigned long long>(m))) - 1;
#else
  return __ffs(static_cast<int>(m)) - 1;
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
// Integer atomics: the result does not depend on the order the adds land in (unlike float
// atomics), so kernels that must be deterministic may count with them.
__device__ inline unsigned atomic_add(unsigned* p, unsigned v) noexcept { return atomicAdd(p, v); }

// Maximum over the warp (every lane gets it), log2(warp_size) shuffles.
__device__ inline unsigned warp_max(unsigned v) noexcept {
  for (int m = warp_size / 2; m > 0; m /= 2) {
    const unsigned o = shfl_xor(v, m);
    v = v > o ? v : o;
  }
  return v;
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 (sm_75+): four 8x8 matrices of 16-bit values,
// each lane receiving its column's two elements of every matrix as one word; `row_address` is the
// shared-memory row this lane supplies. Only where MXKIT_HAS_LDMATRIX is 1.
#if MXKIT_GPU_CUDA && MXKIT_DEVICE_PASS && __CUDA_ARCH__ >= 750
#define MXKIT_HAS_LDMATRIX 1
__device__ inline void ldmatrix_x4_trans(const void* row_address, std::uint32_t (&m)[4]) noexcept {
  const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(m[0]), "=r"(m[1]), "=r"(m[2]), "=r"(m[3])
               : "r"(addr));
}
#else
#define MXKIT_HAS_LDMATRIX 0
#endif

}  // namespace gpu
MXKIT_END_NAMESPACE
