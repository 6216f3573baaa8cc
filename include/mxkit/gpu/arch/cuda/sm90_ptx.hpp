// SPDX-License-Identifier: Apache-2.0
#pragma once
// Hopper (sm_90a) instruction wrappers for the GEMM and the attention kernels: mbarriers, the
// bulk tensor copy (TMA), warpgroup MMA (wgmma) on FP8 and bf16 operands, register
// reallocation. Inline PTX, one function per instruction (PTX ISA 8.x sections named at each).
// Compiled only where the device pass has the sm_90a features (MXKIT_SM90A); elsewhere these are
// empty and the kernels using them are not launched (sm90_runtime.hpp probes the device code at
// run time).
#include <cstdint>

#include <mxkit/gpu/platform.hpp>

#if MXKIT_GPU_CUDA && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MXKIT_SM90A 1
#else
#define MXKIT_SM90A 0
#endif

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

__device__ inline std::uint32_t smem_addr(const void* p) noexcept {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

#if MXKIT_SM90A
// ---- mbarrier (PTX 9.7.13.15) ----------------------------------------------------------------
__device__ inline void mbar_init(std::uint64_t* bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ inline void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ inline void mbar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Counts one arrival and raises the phase's expected transaction bytes (the TMA's).
__device__ inline void mbar_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ inline bool mbar_try_wait(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// Barrier `id` among `count` threads of the CTA (PTX bar.sync; id 0 is __syncthreads').
__device__ inline void named_barrier_sync(std::uint32_t id, std::uint32_t count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
// Waits until the phase of parity `parity` has completed (a fresh barrier counts parity 1 done).
__device__ inline void mbar_wait(std::uint64_t* bar, std::uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---- TMA: 2-D tile global -> shared, completing on an mbarrier (PTX 9.7.9.25.5.1) ------------
__device__ inline void tma_load_2d(void* dst, const void* tensor_map, std::uint64_t* bar, int c_inner, int c_outer) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(tensor_map)), "r"(smem_addr(bar)), "r"(c_inner), "r"(c_outer)
      : "memory");
}
// The same for a 3-D box (inner, middle, outer coordinates): a tile of one sequence of a batch,
// so rows past the sequence's end are zero-filled rather than read from the next sequence.
__device__ inline void tma_load_3d(void* dst, const void* tensor_map, std::uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(tensor_map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ inline void prefetch_tensor_map(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<std::uint64_t>(tensor_map)) : "memory");
}

// ---- warpgroup MMA (PTX 9.7.15) ---------------------------------------------------------------
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving register accesses across wgmma issue/wait points.
__device__ inline void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <int Regs>
__device__ inline void reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Regs));
}
template <int Regs>
__device__ inline void reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Regs));
}
#endif  // MXKIT_SM90A

// Shared-memory matrix descriptor for a K-major tile written by TMA with 128-byte swizzle: rows of
// 128 bytes, 8-row core groups 1024 bytes apart (PTX 9.7.15.5.1: start address >> 4 in bits
// 0-13, leading byte offset (unused for swizzled K-major, 1) in 16-29, stride byte offset >> 4
// in 32-45, swizzle mode 1 = 128B in 62-63). Split in halves: the high word is the same for every
// tile, the low word is the address, so a K offset of k bytes inside the 128-byte row (or a row
// offset of a multiple of 8 rows) is a plain add of offset/16 to the low word (the swizzle is a
// function of the address bits). Passing only the low word keeps one register per descriptor.
inline constexpr std::uint32_t desc_sw128_hi = (1024u >> 4) | (1u << 30);
__device__ inline std::uint32_t desc_sw128_lo(std::uint32_t smem_byte_addr) {
  return ((smem_byte_addr & 0x3FFFFu) >> 4) | (1u << 16);
}

// The same for an MN-major 16-bit operand (wgmma's imm-trans 1): the tile is a stack of panels,
// each 64 elements of the M/N dimension (128 bytes) wide and as many rows of the K dimension as
// the tile has, 128 bytes a row, written by TMA with the 128-byte swizzle: exactly a K-major tile
// of the matrix's transpose, so one TMA box serves both products that read it. The canonical
// layout (PTX 9.7.15.5.1.2.1.3, MN-major 128B: ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))) puts the
// next 8 K rows at the stride byte offset (1024, as desc_sw128_hi says) and the next 64-element
// panel at the leading byte offset, `panel_bytes`. A K step of 16 rows is a 2048-byte advance of
// the start address.
__device__ inline std::uint32_t desc_sw128_mn_lo(std::uint32_t smem_byte_addr, std::uint32_t panel_bytes) {
  return ((smem_byte_addr & 0x3FFFFu) >> 4) | (((panel_bytes & 0x3FFFFu) >> 4) << 16);
}

// Element types of a wgmma operand: FP8 (32 elements per 32-byte K step) or bf16 (16 per step).
enum class mma_kind : int { e4m3 = 0, e5m2 = 1, bf16 = 2 };

#if MXKIT_SM90A
// D[64x64] (+)= A[64x32] . B[64x32]^T, both K-major FP8 in shared memory (descriptor low words,
// desc_sw128_lo), fp32 accumulators
// in the m64nNk32 fragment layout (PTX 9.7.15.5.1 figure "WGMMA .m64nNk32 D"): thread t of the
// warpgroup holds rows 16*(t/32) + (t%32)/4 (+8) and columns 8*i + 2*(t%4) (+1), i = 0..7.
#define MXKIT_WGMMA_M64N64(K, TA, TB, IMM)                                                                         \
  asm volatile(                                                                                                  \
      "{\n"                                                                                                      \
      ".reg .pred p;\n"                                                                                          \
      ".reg .b64 da, db;\n"                                                                                      \
      "mov.b64 da, {%32, %35};\n"                                                                                \
      "mov.b64 db, {%33, %35};\n"                                                                                \
      "setp.ne.b32 p, %34, 0;\n"                                                                                 \
      "wgmma.mma_async.sync.aligned.m64n64" K ".f32." TA "." TB " "                                              \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                  \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                        \
      "da, db, p, 1, 1" IMM ";\n"                                                                                \
      "}\n"                                                                                                      \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                  \
      : "r"(desc_a_lo), "r"(desc_b_lo), "r"(accumulate), "r"(desc_sw128_hi))

// The same for N = 32: 16 fp32 accumulators, column groups i = 0..3.
#define MXKIT_WGMMA_M64N32(K, TA, TB, IMM)                                                                         \
  asm volatile(                                                                                                  \
      "{\n"                                                                                                      \
      ".reg .pred p;\n"                                                                                          \
      ".reg .b64 da, db;\n"                                                                                      \
      "mov.b64 da, {%16, %19};\n"                                                                                \
      "mov.b64 db, {%17, %19};\n"                                                                                \
      "setp.ne.b32 p, %18, 0;\n"                                                                                 \
      "wgmma.mma_async.sync.aligned.m64n32" K ".f32." TA "." TB " "                                              \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "                                 \
      "da, db, p, 1, 1" IMM ";\n"                                                                                \
      "}\n"                                                                                                      \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                  \
      : "r"(desc_a_lo), "r"(desc_b_lo), "r"(accumulate), "r"(desc_sw128_hi))

// D[64 x N] (+)= A . B^T over one 32-byte K step (k32 FP8 or k16 bf16; both K-major, so bf16
// takes the "no transpose" immediates), for N = 32 or 64.
template <int N, mma_kind A, mma_kind B>
__device__ inline void wgmma_step(float (&d)[N / 2], std::uint32_t desc_a_lo, std::uint32_t desc_b_lo, std::uint32_t accumulate) {
  static_assert(N == 32 || N == 64);
  static_assert((A == mma_kind::bf16) == (B == mma_kind::bf16), "bf16 pairs only with bf16");
  if constexpr (N == 64) {
    if constexpr (A == mma_kind::bf16) MXKIT_WGMMA_M64N64("k16", "bf16", "bf16", ", 0, 0");
    else if constexpr (A == mma_kind::e4m3 && B == mma_kind::e4m3) MXKIT_WGMMA_M64N64("k32", "e4m3", "e4m3", "");
    else if constexpr (A == mma_kind::e4m3 && B == mma_kind::e5m2) MXKIT_WGMMA_M64N64("k32", "e4m3", "e5m2", "");
    else if constexpr (A == mma_kind::e5m2 && B == mma_kind::e4m3) MXKIT_WGMMA_M64N64("k32", "e5m2", "e4m3", "");
    else MXKIT_WGMMA_M64N64("k32", "e5m2", "e5m2", "");
  } else {
    if constexpr (A == mma_kind::bf16) MXKIT_WGMMA_M64N32("k16", "bf16", "bf16", ", 0, 0");
    else if constexpr (A == mma_kind::e4m3 && B == mma_kind::e4m3) MXKIT_WGMMA_M64N32("k32", "e4m3", "e4m3", "");
    else if constexpr (A == mma_kind::e4m3 && B == mma_kind::e5m2) MXKIT_WGMMA_M64N32("k32", "e4m3", "e5m2", "");
    else if constexpr (A == mma_kind::e5m2 && B == mma_kind::e4m3) MXKIT_WGMMA_M64N32("k32", "e5m2", "e4m3", "");
    else MXKIT_WGMMA_M64N32("k32", "e5m2", "e5m2", "");
  }
}
#undef MXKIT_WGMMA_M64N64
#undef MXKIT_WGMMA_M64N32

// D[64x256] += A[64x16] . B[256x16]^T, bf16: a consumer warpgroup's whole tile in one
// instruction, accumulating in the tensor core (bf16 products are exact in fp32 and the
// accumulation keeps fp32 precision, unlike FP8's). d[u] is the m64n64 fragment of columns
// 64u..64u+63, in the same register order (8-column groups) as four m64n64 instructions.
// MnA / MnB: that operand's tile is MN-major (desc_sw128_mn_lo; wgmma's imm-trans 1), else
// K-major (desc_sw128_lo).
template <bool MnA, bool MnB>
__device__ inline void wgmma_m64n256k16_bf16(float (&d)[4][32], std::uint32_t desc_a_lo, std::uint32_t desc_b_lo) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 da, db;\n"
      "mov.b64 da, {%128, %130};\n"
      "mov.b64 db, {%129, %130};\n"
      "setp.ne.b32 p, %131, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
      "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "
      "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
      "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "
      "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, "
      "%101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, "
      "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127 "
      "}, da, db, p, 1, 1, %132, %133;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[0][4]), "+f"(d[0][5]), "+f"(d[0][6]),
        "+f"(d[0][7]), "+f"(d[0][8]), "+f"(d[0][9]), "+f"(d[0][10]), "+f"(d[0][11]), "+f"(d[0][12]), "+f"(d[0][13]),
        "+f"(d[0][14]), "+f"(d[0][15]), "+f"(d[0][16]), "+f"(d[0][17]), "+f"(d[0][18]), "+f"(d[0][19]),
        "+f"(d[0][20]), "+f"(d[0][21]), "+f"(d[0][22]), "+f"(d[0][23]), "+f"(d[0][24]), "+f"(d[0][25]),
        "+f"(d[0][26]), "+f"(d[0][27]), "+f"(d[0][28]), "+f"(d[0][29]), "+f"(d[0][30]), "+f"(d[0][31]), "+f"(d[1][0]),
        "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[1][4]), "+f"(d[1][5]), "+f"(d[1][6]), "+f"(d[1][7]),
        "+f"(d[1][8]), "+f"(d[1][9]), "+f"(d[1][10]), "+f"(d[1][11]), "+f"(d[1][12]), "+f"(d[1][13]), "+f"(d[1][14]),
        "+f"(d[1][15]), "+f"(d[1][16]), "+f"(d[1][17]), "+f"(d[1][18]), "+f"(d[1][19]), "+f"(d[1][20]),
        "+f"(d[1][21]), "+f"(d[1][22]), "+f"(d[1][23]), "+f"(d[1][24]), "+f"(d[1][25]), "+f"(d[1][26]),
        "+f"(d[1][27]), "+f"(d[1][28]), "+f"(d[1][29]), "+f"(d[1][30]), "+f"(d[1][31]), "+f"(d[2][0]), "+f"(d[2][1]),
        "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[2][4]), "+f"(d[2][5]), "+f"(d[2][6]), "+f"(d[2][7]), "+f"(d[2][8]),
        "+f"(d[2][9]), "+f"(d[2][10]), "+f"(d[2][11]), "+f"(d[2][12]), "+f"(d[2][13]), "+f"(d[2][14]), "+f"(d[2][15]),
        "+f"(d[2][16]), "+f"(d[2][17]), "+f"(d[2][18]), "+f"(d[2][19]), "+f"(d[2][20]), "+f"(d[2][21]),
        "+f"(d[2][22]), "+f"(d[2][23]), "+f"(d[2][24]), "+f"(d[2][25]), "+f"(d[2][26]), "+f"(d[2][27]),
        "+f"(d[2][28]), "+f"(d[2][29]), "+f"(d[2][30]), "+f"(d[2][31]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
        "+f"(d[3][3]), "+f"(d[3][4]), "+f"(d[3][5]), "+f"(d[3][6]), "+f"(d[3][7]), "+f"(d[3][8]), "+f"(d[3][9]),
        "+f"(d[3][10]), "+f"(d[3][11]), "+f"(d[3][12]), "+f"(d[3][13]), "+f"(d[3][14]), "+f"(d[3][15]),
        "+f"(d[3][16]), "+f"(d[3][17]), "+f"(d[3][18]), "+f"(d[3][19]), "+f"(d[3][20]), "+f"(d[3][21]),
        "+f"(d[3][22]), "+f"(d[3][23]), "+f"(d[3][24]), "+f"(d[3][25]), "+f"(d[3][26]), "+f"(d[3][27]),
        "+f"(d[3][28]), "+f"(d[3][29]), "+f"(d[3][30]), "+f"(d[3][31])
      : "r"(desc_a_lo), "r"(desc_b_lo), "r"(desc_sw128_hi), "r"(1u), "n"(MnA ? 1 : 0), "n"(MnB ? 1 : 0));
}

// D[64 x 128] (+)= A[64 x 16] . B[128 x 16]^T, bf16, both K-major in shared memory (descriptor low
// words, desc_sw128_lo); accumulate = 0 overwrites D.
__device__ inline void wgmma_bf16_ss_n128(float (&d)[64], std::uint32_t desc_a_lo, std::uint32_t desc_b_lo, std::uint32_t accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 da, db;\n"
      "mov.b64 da, {%64, %67};\n"
      "mov.b64 db, {%65, %67};\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, da, db, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(desc_a_lo), "r"(desc_b_lo), "r"(accumulate), "r"(desc_sw128_hi));
}

// D[64 x 64] (+)= A[64 x 16] . B[16 x 64], bf16, A in registers (the m64k16 A fragment: warp w
// of the warpgroup holds rows 16w.., in the m16n8k16 A layout), B MN-major in shared memory
// (desc_sw128_mn_lo; imm-trans-b 1).
__device__ inline void wgmma_bf16_rs_n64(float (&d)[32], const std::uint32_t (&a)[4], std::uint32_t desc_b_lo, std::uint32_t accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 db;\n"
      "mov.b64 db, {%36, %38};\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, db, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b_lo), "r"(accumulate), "r"(desc_sw128_hi));
}

// D[64 x 128] (+)= A[64 x 16] . B[16 x 128], bf16, A in registers (as above), B MN-major in
// shared memory (desc_sw128_mn_lo over two 64-column panels; imm-trans-b 1).
__device__ inline void wgmma_bf16_rs_n128(float (&d)[64], const std::uint32_t (&a)[4], std::uint32_t desc_b_lo, std::uint32_t accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b64 db;\n"
      "mov.b64 db, {%68, %70};\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, db, p, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(desc_b_lo), "r"(accumulate), "r"(desc_sw128_hi));
}

#endif  // MXKIT_SM90A

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
