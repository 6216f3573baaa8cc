// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Hopper GEMM's device adapter: tensor maps, the operands' wgmma kinds after expansion,
// the configuration and split choice, and the launch (gemm.hpp calls it).
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/gemm/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <atomic>
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/arch/cuda/sm90_runtime.hpp>
#include <mxkit/gpu/gemm/options.hpp>
#include <mxkit/gpu/gemm/sm90/kernel.hpp>
#include <mxkit/gpu/gemm/sm90/split_k.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

// [lines, k] bytes with `line_bytes` between lines, read in boxes of [box_lines, 128] bytes.
inline CUtensorMap make_tensor_map(const std::uint8_t* data, std::size_t lines, std::size_t k, std::size_t line_bytes,
                                   std::uint32_t box_lines) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {k, lines};
  const cuuint64_t strides[1] = {line_bytes};
  const cuuint32_t box[2] = {tile_k, box_lines};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<std::uint8_t*>(data), dims, strides,
                                          box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  mxkit::detail::require(r == CUDA_SUCCESS, "gemm (sm90): cuTensorMapEncodeTiled failed with ", static_cast<int>(r), " for a ",
                         lines, "x", k, " operand");
  return map;
}

// What the launcher needs beyond the operands: each side's wgmma element kind (after any
// expansion) and its byte matrix (the operand itself, or its expanded copy in scratch).
struct mma_operand {
  mma_kind kind = mma_kind::e4m3;
  const std::uint8_t* data = nullptr;
  std::size_t line_bytes = 0;
  const float* line_scale = nullptr;  // expand::fold's line factors (scaling::line)
};

// Can this path take these operands at all (before any expansion)? Types, alignment, sizes.
inline bool wgmma_supports(const gemm_operand& a, const gemm_operand& b) noexcept {
  auto ok = [](const gemm_operand& o) {
    if (o.kind == operand_kind::mx && o.type == mx_type::mxint8) return false;
    if (o.mn_major && o.kind != operand_kind::bf16) return false;
    const bool expanded = o.kind == operand_kind::mx && o.type != mx_type::mxfp8_e4m3 && o.type != mx_type::mxfp8_e5m2;
    if (!expanded && (reinterpret_cast<std::uintptr_t>(o.data) % 16 != 0 || o.line_bytes % 16 != 0)) return false;
    return o.lines < (std::size_t{1} << 31) && o.length < (std::size_t{1} << 31);
  };
  return a.kind == b.kind && ok(a) && ok(b);
}

// The consumer configurations in use. Others that config<> can express were measured slower
// (docs/perf/gemm.md lists them with their figures).
using config_mx = config<128, 256, 64, 2, false>;
using config_fp8 = config<128, 256, 64, 2, false>;

// The tensor map of one side: K-major [lines, K bytes] in boxes of [box_lines, 128 B], or
// MN-major (bf16) [K rows, 2 lines bytes] in boxes of [64 rows, 128 B] (tma_load_stage's panels).
template <bool Mn>
CUtensorMap operand_map(const gemm_operand& o, const mma_operand& f, std::size_t k_bytes, std::uint32_t box_lines) {
  if constexpr (Mn) return make_tensor_map(f.data, o.length, 2 * o.lines, f.line_bytes, 64);
  else return make_tensor_map(f.data, o.lines, k_bytes, f.line_bytes, box_lines);
}

// Does D take the 16-byte epilogue (store_quad_rows)? bf16 rows 16-byte aligned.
inline bool wide_output(const gemm_output_desc& o) noexcept {
  return o.bf16 && o.ldd % 8 == 0 && reinterpret_cast<std::uintptr_t>(o.d) % 16 == 0;
}

template <mma_kind TA, mma_kind TB, scaling S, int G, class Cfg, bool MnA = false, bool MnB = false>
void launch_typed(const gemm_operand& a, const gemm_operand& b, const mma_operand& fa, const mma_operand& fb, params prm,
                  stream_t stream, std::uint32_t reserved_sms) {
  // The 16-byte epilogue is a kernel of its own: compiled into every kernel, it made those with
  // fp32 D (wgrad, split-K partials) 8-60 % slower on the H200 though they never took it
  // (docs/perf/training.md). Block scaling never takes it (ptxas spilled 372 bytes).
  constexpr bool can_widen = S != scaling::block;
  auto kernel = gemm_kernel<TA, TB, S, G, Cfg, MnA, MnB, false>;
  auto wide_kernel = gemm_kernel<TA, TB, S, G, Cfg, MnA, MnB, can_widen>;
  constexpr std::size_t smem = smem_bytes<Cfg::bm, Cfg::bn>;
  // The shared-memory limit is an attribute of the kernel on the current device: a process that
  // drives several GPUs (one thread per rank, tests/gpu/nccl_ranks.hpp) sets it on each, so the
  // devices already set are remembered, one bit each (a device past 63 sets it every launch).
  static std::atomic<std::uint64_t> configured_devices{0};
  int device = 0;
  MXKIT_GPU_CHECK(get_device(&device));
  const std::uint64_t device_bit = device >= 0 && device < 64 ? std::uint64_t{1} << device : 0;
  if (device_bit == 0 || (configured_devices.load(std::memory_order_acquire) & device_bit) == 0) {
    MXKIT_GPU_CHECK(set_max_dynamic_shared_bytes(kernel, static_cast<int>(smem)));
    MXKIT_GPU_CHECK(set_max_dynamic_shared_bytes(wide_kernel, static_cast<int>(smem)));
    configured_devices.fetch_or(device_bit, std::memory_order_release);
  }
  prm.tiles_p = static_cast<std::uint32_t>((a.lines + Cfg::bm - 1) / Cfg::bm);
  prm.tiles_q = static_cast<std::uint32_t>((b.lines + Cfg::bn - 1) / Cfg::bn);
  const std::size_t k_bytes = a.length * (TA == mma_kind::bf16 ? 2 : 1);
  const CUtensorMap ma = operand_map<MnA>(a, fa, k_bytes, Cfg::bm), mb = operand_map<MnB>(b, fb, k_bytes, Cfg::bn);
  const std::uint32_t tiles = prm.tiles_p * prm.tiles_q, k_stages = (prm.k_blocks + blocks_per_stage - 1) / blocks_per_stage;
  const std::uint32_t sms = multiprocessors(device), splits = choose_k_splits(tiles, k_stages, sms);
  if (splits == 1) {  // persistent: one CTA per SM at most, each taking every grid-th tile
    // Its CTAs hold their SMs to the end: all but those left to a collective beside it
    // (gemm_options::reserved_sms). The split choice above stays the whole device's (the same
    // bits); split K's CTAs each end after one tile, so they need no such limit.
    const std::uint32_t grid = std::min(tiles, persistent_grid_sms(sms, reserved_sms));
    (can_widen && wide_output(prm.out) ? wide_kernel : kernel)<<<grid, threads, smem, stream>>>(ma, mb, prm);
    MXKIT_GPU_CHECK_LAUNCH();
    return;
  }
  prm.tile_counter = nullptr;  // split K: every (tile, split) is its own CTA, no order to choose
  prm.stages_per_split = (k_stages + splits - 1) / splits;
  const std::uint32_t used = (k_stages + prm.stages_per_split - 1) / prm.stages_per_split;  // every split has work
  const gemm_output_desc out = prm.out;
  prm.split_stride = static_cast<std::size_t>(prm.p) * prm.q;
  float* partials = static_cast<float*>(allocate_async(used * prm.split_stride * sizeof(float), stream));
  prm.out = {partials, nullptr, prm.q, prm.q, false, out.alpha, 0.0f};
  prm.vector_store = prm.q % 2 == 0;
  kernel<<<dim3(tiles, used), threads, smem, stream>>>(ma, mb, prm);
  MXKIT_GPU_CHECK_LAUNCH();
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((prm.split_stride + 255) / 256, 4u * sms));
  if (out.bf16) split_reduce_kernel<true><<<blocks, 256, 0, stream>>>(partials, used, prm.split_stride, prm.p, prm.q, out, prm.gate);
  else split_reduce_kernel<false><<<blocks, 256, 0, stream>>>(partials, used, prm.split_stride, prm.p, prm.q, out, prm.gate);
  MXKIT_GPU_CHECK_LAUNCH();
  deallocate_async(partials, stream);
}

template <scaling S, int G, class Cfg>
void launch_kinds(const gemm_operand& a, const gemm_operand& b, const mma_operand& fa, const mma_operand& fb, const params& prm,
                  stream_t stream, std::uint32_t reserved_sms) {
  constexpr mma_kind E4 = mma_kind::e4m3, E5 = mma_kind::e5m2;
  switch (static_cast<int>(fa.kind) * 2 + static_cast<int>(fb.kind)) {
    case 0: launch_typed<E4, E4, S, G, Cfg>(a, b, fa, fb, prm, stream, reserved_sms); break;
    case 1: launch_typed<E4, E5, S, G, Cfg>(a, b, fa, fb, prm, stream, reserved_sms); break;
    case 2: launch_typed<E5, E4, S, G, Cfg>(a, b, fa, fb, prm, stream, reserved_sms); break;
    default: launch_typed<E5, E5, S, G, Cfg>(a, b, fa, fb, prm, stream, reserved_sms); break;
  }
}

// Compiled where gemm.hpp's dispatch is (gpu/kernel_library.hpp): a non-template inline function
// instantiates every kernel it names in each file that includes it, called or not, so the kernel
// library's users, who see run's declaration only, do not get it (docs/perf/build.md).
#if !defined(MXKIT_GPU_LIBRARY_HAS_GEMM) || defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
// a, b: the original operands (shape, scales); fa, fb: their FP8 bytes. Line factors on both
// (expand::fold's E5M2 bytes) select scaling::line, whose promotions cover one block
// (exact_block_sums) or four; the kernel runs only if `gate` is open. tile_counter: the dynamic
// tile order's counter (params::tile_counter), or null; reserved_sms: gemm_options::reserved_sms.
inline void launch_wgmma(const gemm_operand& a, const gemm_operand& b, const mma_operand& fa, const mma_operand& fb,
                   const gemm_output_desc& out, stream_t stream, launch_gate gate = {}, bool exact_block_sums = true,
                   std::uint32_t* tile_counter = nullptr, std::uint32_t reserved_sms = 0) {
  if (a.lines == 0 || b.lines == 0) return;
  params prm;
  prm.p = static_cast<std::uint32_t>(a.lines);
  prm.q = static_cast<std::uint32_t>(b.lines);
  const bool mx = a.kind == operand_kind::mx, bf16 = fa.kind == mma_kind::bf16;
  prm.k_blocks = static_cast<std::uint32_t>(((bf16 ? 2 : 1) * a.length + 31) / 32);  // 32-byte K steps
  prm.scale_a = a.scales;
  prm.scale_b = b.scales;
  prm.scale_ld_a = static_cast<std::uint32_t>(a.blocks);
  prm.scale_ld_b = static_cast<std::uint32_t>(b.blocks);
  prm.post_scale = a.kind == operand_kind::mx ? 1.0f : a.scale_inv * b.scale_inv;
  if (a.kind == operand_kind::fp8 && (a.scale || b.scale)) {
    mxkit::detail::require(a.scale && b.scale, "gemm (sm90): both FP8 scales on the device or neither");
    prm.tensor_scale_a = a.scale;
    prm.tensor_scale_b = b.scale;
  }
  if (a.kind == operand_kind::bf16 && (a.decode_scale || b.decode_scale)) {
    mxkit::detail::require(a.decode_scale && b.decode_scale, "gemm (sm90): both bf16 decode scales on the device or neither");
    prm.decode_scale_a = a.decode_scale;
    prm.decode_scale_b = b.decode_scale;
  }
  prm.line_scale_a = fa.line_scale;
  prm.line_scale_b = fb.line_scale;
  prm.gate = gate;
  prm.out = out;
  prm.tile_counter = tile_counter;
  const std::size_t elem = out.bf16 ? 2 : 4;
  prm.vector_store = out.ldd % 2 == 0 && reinterpret_cast<std::uintptr_t>(out.d) % (2 * elem) == 0 &&
                     (out.beta == 0.0f || (out.ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(out.c) % (2 * elem) == 0));
  if (bf16) {
    mxkit::detail::require(fb.kind == mma_kind::bf16, "gemm (sm90): bf16 pairs only with bf16");
    constexpr mma_kind B16 = mma_kind::bf16;
    constexpr int G = blocks_per_stage;
    switch (static_cast<int>(a.mn_major) * 2 + static_cast<int>(b.mn_major)) {
      case 0: launch_typed<B16, B16, scaling::tensor, G, config_fp8, false, false>(a, b, fa, fb, prm, stream, reserved_sms); break;
      case 1: launch_typed<B16, B16, scaling::tensor, G, config_fp8, false, true>(a, b, fa, fb, prm, stream, reserved_sms); break;
      case 2: launch_typed<B16, B16, scaling::tensor, G, config_fp8, true, false>(a, b, fa, fb, prm, stream, reserved_sms); break;
      default: launch_typed<B16, B16, scaling::tensor, G, config_fp8, true, true>(a, b, fa, fb, prm, stream, reserved_sms); break;
    }
  } else if (!mx) {
    launch_kinds<scaling::tensor, blocks_per_stage, config_fp8>(a, b, fa, fb, prm, stream, reserved_sms);
  } else if (fa.line_scale && fb.line_scale) {
    mxkit::detail::require(fa.kind == mma_kind::e5m2 && fb.kind == mma_kind::e5m2, "gemm (sm90): line-scaled operands are E5M2");
    if (exact_block_sums) launch_typed<mma_kind::e5m2, mma_kind::e5m2, scaling::line, 1, config_mx>(a, b, fa, fb, prm, stream, reserved_sms);
    else launch_typed<mma_kind::e5m2, mma_kind::e5m2, scaling::line, blocks_per_stage, config_mx>(a, b, fa, fb, prm, stream, reserved_sms);
  } else {
    launch_kinds<scaling::block, 1, config_mx>(a, b, fa, fb, prm, stream, reserved_sms);
  }
}
#endif

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
