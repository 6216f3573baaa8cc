// SPDX-License-Identifier: Apache-2.0
#pragma once
// Ampere-style warp-level tensor-core MMA (sm_80+, also the fast path on Hopper without wgmma):
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA, "Warp-level matrix multiply-
// accumulate instructions", section 9.7.14). Only where MXKIT_HAS_MMA_SM80 is 1, so the HIP
// compiler never sees the asm; gpu/nn/attention.hpp falls back to a portable emulation.
// Fragment layout (lane = 4 g + t, g in 0..7, t in 0..3), each uint32 two bf16 (low half first):
//   A 16x16 row-major  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B 16x8  (k x n)    b0 (k 2t..2t+1, n g)             b1 (k 2t+8..2t+9, n g)
//   C 16x8  float      c0 c1 (g, 2t, 2t+1)             c2 c3 (g+8, 2t, 2t+1)
#include <cstdint>

#include <mxkit/gpu/platform.hpp>

#if MXKIT_GPU_CUDA && MXKIT_DEVICE_PASS && __CUDA_ARCH__ >= 800
#define MXKIT_HAS_MMA_SM80 1
#else
#define MXKIT_HAS_MMA_SM80 0
#endif

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm80 {

#if MXKIT_HAS_MMA_SM80
// c += a b on the tensor cores, fp32 accumulation.
__device__ inline void mma_bf16_16816(float (&c)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) noexcept {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

}  // namespace sm80
}  // namespace gpu
MXKIT_END_NAMESPACE
