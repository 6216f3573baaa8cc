// SPDX-License-Identifier: Apache-2.0
#pragma once
// Device GEMMs: D[P,Q] = alpha * A[P,R] . B[Q,R]^T + beta * C, fp32 accumulation, fp32 or bf16
// output (C is D's previous contents, read only when beta != 0), on the caller's stream.
// Operands: two MX copies (any element pair), two per-tensor FP8 matrices, or two bf16
// matrices, all stored with the reduction axis contiguous (gemm/gemm.hpp says why and which
// copy each training product takes); bf16 ones may also be stored transposed (MN-major,
// operand.hpp: major_order), which wgrad uses to read dY and X as the forward wrote them.
// Host-side checks are the reference's (same messages).
//
//   gpu::gemm(a_view, b_view, d_view, {alpha, beta}, stream)            // any TN product
//   gpu::fprop(x_rowwise, w_rowwise, y, ...), dgrad(...), wgrad(...)    // the named products
//
// Paths (gemm_path), chosen per call by `automatic`, or forced by gemm_options::path:
//   portable  plain CUDA/HIP kernel, every operand kind and shape (portable.hpp)
//   sm90      Hopper tensor cores, TMA + wgmma (gemm/sm90/: config, mainloop, epilogue, kernel, split_k, launch); needs sm_90a device
//             code (build with -gencode arch=compute_90a,code=sm_90a) and 16-byte aligned rows:
//               MXFP4 x MXFP4  folded into E5M2 with one factor per line (exact block sums)
//               MXFP8 x MXFP8  (E4M3/E5M2 mixes) expanded to bf16 with the scales applied
//               other MX pairs E4M3/E5M2 bytes with per-block scale promotion
//               per-tensor FP8 and bf16 as they are
//             The folded and bf16 routes check their exactness conditions on the device and
//             fall back to per-block promotion where they fail (execute_sm90). Their scratch comes
//             from mxkit's device pool, which keeps its memory (release_gemm_scratch returns it).
//   gfx950    CDNA4 block-scaled MFMA (gemm/gfx950/kernel.hpp), compiled only: never run here
// MXINT8 uses the portable kernel.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gemm/product.hpp>
#include <mxkit/gpu/gemm/expand.hpp>
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/gemm/portable.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>

#if MXKIT_GPU_CUDA
#include <mxkit/gpu/gemm/sm90/launch.hpp>
#else
#include <mxkit/gpu/gemm/gfx950/kernel.hpp>
#endif

MXKIT_BEGIN_NAMESPACE
namespace gpu {

enum class gemm_path : std::uint8_t { automatic, portable, sm90, gfx950 };

}  // namespace gpu
template <>
struct enum_names<gpu::gemm_path> {
  static constexpr const char* names[] = {"automatic", "portable", "sm90", "gfx950"};
  static constexpr gpu::gemm_path last = gpu::gemm_path::gfx950;
};
namespace gpu {

struct gemm_options {
  gemm_path path = gemm_path::automatic;
  // sm90, MXFP4 x MXFP4: true sums each 32-block's products exactly and adds them in fp32 (as
  // the reference); false lets the tensor cores accumulate four blocks (128 K) before the fp32
  // add, as DeepGEMM and cuBLASLt's FP8 do: faster, but Hopper keeps only about 14 bits in
  // that accumulation (DeepSeek-V3 report, section 3.3.2).
  bool exact_block_sums = true;
  // sm90, MXFP8 x MXFP8: expand both sides to bf16 with the block scales applied (exact) and
  // run the bf16 tensor cores, which need no per-block promotion; costs 2 bytes of scratch per
  // operand element. Blocks with exponents beyond +-48 fall back to the FP8 block-scaled kernel.
  bool mxfp8_via_bf16 = true;
  // sm90: two zeroed words of device memory that only this stream's GEMMs use (a GEMM leaves them
  // zeroed): the persistent kernel then hands out its tiles dynamically, so a GEMM that overlaps
  // another stream's kernels (a collective's) loses only the SMs they hold, not the tiles queued
  // behind them (sm90/kernel.hpp). Null: the static order. Results are the same bits either way.
  std::uint32_t* tile_counter = nullptr;
};

namespace detail {

// The vendor's tensor-core path of this build: the one place that tells the two apart (the rest
// of the dispatch reads this table).
struct native_path_entry {
  gemm_path path;
  bool (*supports)(const gemm_operand&, const gemm_operand&);  // operand kinds, alignment, sizes, and the device
};
#if MXKIT_GPU_CUDA
inline bool sm90_takes(const gemm_operand& a, const gemm_operand& b) { return a.length > 0 && sm90::wgmma_supports(a, b) && sm90::available(); }
inline constexpr native_path_entry native_path{gemm_path::sm90, sm90_takes};
#else
inline bool gfx950_takes(const gemm_operand& a, const gemm_operand& b) { return gfx950::mfma_supports(a, b) && gfx950::available(); }
inline constexpr native_path_entry native_path{gemm_path::gfx950, gfx950_takes};
#endif

inline bool path_supports(gemm_path path, const gemm_operand& a, const gemm_operand& b) {
  if (path == gemm_path::portable) return true;
  return path == native_path.path && native_path.supports(a, b);
}
inline gemm_path automatic_path_of(const gemm_operand& a, const gemm_operand& b) {
  return native_path.supports(a, b) ? native_path.path : gemm_path::portable;
}

template <gemm_output Out>
gemm_output_desc make_output(matrix_view<Out> d, gemm_epilogue e) {
  return {d.data, d.data, d.stride(), d.stride(), std::is_same_v<Out, bfloat16>, e.alpha, e.beta};
}

// How the sm90 path runs a product, decided on the host before anything is enqueued.
enum class sm90_route : std::uint8_t {
  direct,          // FP8 bytes (MXFP8 with per-block promotion, per-tensor FP8) or bf16 as they are
  via_bf16,        // MXFP8 x MXFP8 expanded to bf16 with the scales applied; gate: FP8 block-scaled
  fold,            // MXFP4 x MXFP4 folded to E5M2 with line factors; gate: expanded, block-scaled
  expand,          // other MX pairs re-encoded as E4M3/E5M2 bytes, block-scaled
};

// A product's plan: the path, the sm90 route and the scratch it needs (laid out as
// [a's bytes | b's bytes | line factors of a, of b | the gate flag]).
struct gemm_plan {
  gemm_path path = gemm_path::portable;
  sm90_route route = sm90_route::direct;
  std::size_t scratch_a = 0, scratch_b = 0;  // bytes of each side's re-encoded copy
  std::size_t line_factors = 0;              // floats (fold: a.lines + b.lines)
  bool gate_flag = false;                    // an int the expansions set when the first route is inexact
  std::size_t scratch_bytes() const noexcept {
    return scratch_a + scratch_b + line_factors * sizeof(float) + (gate_flag ? sizeof(int) : 0);
  }
};

inline gemm_plan plan_gemm(const gemm_operand& a, const gemm_operand& b, const gemm_options& o) {
  gemm_plan p;
  p.path = o.path == gemm_path::automatic ? automatic_path_of(a, b) : o.path;
  mxkit::detail::require(path_supports(p.path, a, b), "gemm: path ", name_of(p.path),
                         " cannot take these operands on this device and build (see gpu/gemm/gemm.hpp)");
#if MXKIT_GPU_CUDA
  if (p.path != gemm_path::sm90) return p;
  if (o.mxfp8_via_bf16 && expand::to_bf16::applies(a) && expand::to_bf16::applies(b)) {
    p.route = sm90_route::via_bf16;
    p.scratch_a = expand::to_bf16::bytes(a);
    p.scratch_b = expand::to_bf16::bytes(b);
    p.gate_flag = true;
    return p;
  }
  p.scratch_a = expand::bytes(a);  // lines * K with K % 32 == 0: 16-byte multiples
  p.scratch_b = expand::bytes(b);
  if (expand::fold::applies(a) && expand::fold::applies(b)) {
    p.route = sm90_route::fold;
    p.line_factors = a.lines + b.lines;
    p.gate_flag = true;
  } else if (p.scratch_a || p.scratch_b) {
    p.route = sm90_route::expand;
  }
#endif
  return p;
}

// The dispatch and the paths' launches: compiled in the kernel library when one is used
// (gpu/kernel_library.hpp); its users see run's declaration.
#if !defined(MXKIT_GPU_LIBRARY_HAS_GEMM) || defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
#if defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
#define MXKIT_GPU_GEMM_ENTRY  // the kernel library's one definition
#else
#define MXKIT_GPU_GEMM_ENTRY inline
#endif
#if MXKIT_GPU_CUDA
inline sm90::mma_kind mma_kind_of(const gemm_operand& o) {
  if (o.kind == operand_kind::bf16) return sm90::mma_kind::bf16;
  if (o.kind == operand_kind::fp8) return o.fp8 == fp8_type::e4m3 ? sm90::mma_kind::e4m3 : sm90::mma_kind::e5m2;
  return o.type == mx_type::mxfp8_e5m2 ? sm90::mma_kind::e5m2 : sm90::mma_kind::e4m3;  // expanded types are E4M3
}

// Runs an sm90 plan. The first routes (via_bf16, fold) check their exactness on the device: a
// line or block they cannot make exact sets the gate flag, which closes their GEMM and opens the
// fallback's (the FP8 block-scaled kernel on the original or re-encoded bytes). Both are enqueued
// and the closed kernel returns at once, so the choice needs no host synchronization.
inline void execute_sm90(const gemm_plan& p, const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s,
                         const gemm_options& o, std::uint8_t* scratch) {
  std::uint8_t* copy_a = scratch;
  std::uint8_t* copy_b = scratch ? scratch + p.scratch_a : nullptr;
  float* line_a = p.line_factors ? reinterpret_cast<float*>(copy_b + p.scratch_b) : nullptr;
  float* line_b = line_a ? line_a + a.lines : nullptr;
  int* unsafe = p.gate_flag ? reinterpret_cast<int*>(scratch + p.scratch_a + p.scratch_b + p.line_factors * sizeof(float)) : nullptr;
  if (unsafe) MXKIT_GPU_CHECK(memset_async(unsafe, 0, sizeof(int), s));
  sm90::mma_operand fa{mma_kind_of(a), a.data, a.line_bytes}, fb{mma_kind_of(b), b.data, b.line_bytes};
  launch_gate fallback;
  switch (p.route) {
    case sm90_route::via_bf16: {
      expand::to_bf16::launch(a, reinterpret_cast<std::uint16_t*>(copy_a), unsafe, s);
      expand::to_bf16::launch(b, reinterpret_cast<std::uint16_t*>(copy_b), unsafe, s);
      const sm90::mma_operand ba{sm90::mma_kind::bf16, copy_a, 2 * a.length}, bb{sm90::mma_kind::bf16, copy_b, 2 * b.length};
      sm90::launch_wgmma(a, b, ba, bb, out, s, launch_gate{unsafe, false}, true, o.tile_counter);
      sm90::launch_wgmma(a, b, fa, fb, out, s, launch_gate{unsafe, true}, true, o.tile_counter);
      return;
    }
    case sm90_route::fold: {
      expand::fold::launch(a, copy_a, line_a, unsafe, s);
      expand::fold::launch(b, copy_b, line_b, unsafe, s);
      const sm90::mma_operand la{sm90::mma_kind::e5m2, copy_a, a.length, line_a}, lb{sm90::mma_kind::e5m2, copy_b, b.length, line_b};
      sm90::launch_wgmma(a, b, la, lb, out, s, launch_gate{unsafe, false}, o.exact_block_sums, o.tile_counter);
      fallback = launch_gate{unsafe, true};
      break;
    }
    case sm90_route::expand:
    case sm90_route::direct: break;
  }
  if (p.scratch_a) {
    expand::launch(a, copy_a, s, fallback);
    fa.data = copy_a;
    fa.line_bytes = a.length;
  }
  if (p.scratch_b) {
    expand::launch(b, copy_b, s, fallback);
    fb.data = copy_b;
    fb.line_bytes = b.length;
  }
  sm90::launch_wgmma(a, b, fa, fb, out, s, fallback, true, o.tile_counter);
}
#endif

// Runs the product on the chosen path; returns the path taken. The sm90 scratch comes from
// mxkit's device pool (stream-ordered), which keeps its memory between calls.
MXKIT_GPU_GEMM_ENTRY gemm_path run(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s, gemm_options o) {
  const gemm_plan p = plan_gemm(a, b, o);
  if (a.lines == 0 || b.lines == 0) return p.path;
  switch (p.path) {
#if MXKIT_GPU_CUDA
    case gemm_path::sm90: {
      const std::size_t bytes = p.scratch_bytes();
      auto* scratch = static_cast<std::uint8_t*>(bytes ? allocate_async(bytes, s) : nullptr);
      try {
        execute_sm90(p, a, b, out, s, o, scratch);
      } catch (...) {
        deallocate_async(scratch, s);
        throw;
      }
      deallocate_async(scratch, s);
      break;
    }
#else
    case gemm_path::gfx950: gfx950::launch_mfma(a, b, out, s); break;
#endif
    default: portable::launch(a, b, out, s); break;
  }
  return p.path;
}
#else
gemm_path run(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s, gemm_options o);
#endif

}  // namespace detail

// Returns the memory mxkit's device pool keeps (GEMM scratch among it) on the current device to
// the driver, once the work that used it has finished (gpu/memory.hpp: trim_device_memory).
inline void release_gemm_scratch() { trim_device_memory(0); }

// Which path `automatic` takes for these operands on the current device.
inline gemm_path automatic_path(mx_const_view a, mx_const_view b) { return detail::automatic_path_of(make_operand(a), make_operand(b)); }

// ---- any TN product ---------------------------------------------------------------------------
template <gemm_output Out>
gemm_path gemm(mx_const_view a, mx_const_view b, matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr,
               gemm_options o = {}) {
  const gemm_shape sh = mxkit::detail::check_mx_gemm(a.layout, b.layout, "gemm");
  mxkit::detail::check_rotation(a.options, b.options, "gemm");
  mxkit::detail::check_output(d, sh, "gemm");
  // The kernels read scales as [lines, blocks] row-major (tiled vendor layouts are for vendor GEMMs).
  mxkit::detail::require(a.scales_layout == scale_layout::row_major && b.scales_layout == scale_layout::row_major,
                         "gemm: scales must be row_major, got A ", name_of(a.scales_layout), " and B ", name_of(b.scales_layout));
  mxkit::detail::require(sh.p == 0 || sh.r == 0 || (a.data && a.scales), "gemm: A has null data or scales");
  mxkit::detail::require(sh.q == 0 || sh.r == 0 || (b.data && b.scales), "gemm: B has null data or scales");
  return detail::run(make_operand(a), make_operand(b), detail::make_output(d, e), s, o);
}

template <gemm_output Out>
gemm_path gemm(fp8_view a, fp8_view b, matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr, gemm_options o = {}) {
  mxkit::detail::check_fp8_view(a, "gemm", "A");
  mxkit::detail::check_fp8_view(b, "gemm", "B");
  const gemm_shape sh = mxkit::detail::check_tn(a.rows, a.cols, b.rows, b.cols, "gemm");
  mxkit::detail::check_output(d, sh, "gemm");
  return detail::run(make_operand(a), make_operand(b), detail::make_output(d, e), s, o);
}

// bf16 operands in either storage order (major_order): a stored [P,R] (k_major) or [R,P]
// (mn_major), b [Q,R] or [R,Q]. wgrad from the forward's own row-major dY [M,N] and X [M,K]:
//   gpu::gemm(dy, major_order::mn_major, x, major_order::mn_major, dw, {1, 1}, s)   // dW += dY^T X
template <gemm_output Out>
gemm_path gemm(matrix_view<const bfloat16> a, major_order order_a, matrix_view<const bfloat16> b, major_order order_b,
               matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr, gemm_options o = {}) {
  const gemm_operand oa = make_operand(a, order_a), ob = make_operand(b, order_b);
  const gemm_shape sh = mxkit::detail::check_tn(oa.lines, oa.length, ob.lines, ob.length, "gemm");
  mxkit::detail::check_matrix(a, "gemm: A");
  mxkit::detail::check_matrix(b, "gemm: B");
  mxkit::detail::check_output(d, sh, "gemm");
  return detail::run(oa, ob, detail::make_output(d, e), s, o);
}
template <gemm_output Out>
gemm_path gemm(matrix_view<const bfloat16> a, matrix_view<const bfloat16> b, matrix_view<Out> d, gemm_epilogue e = {},
               stream_t s = nullptr, gemm_options o = {}) {
  return gemm(a, major_order::k_major, b, major_order::k_major, d, e, s, o);
}

// ---- the training products (operand roles: gemm/product.hpp) -------------------------------------
template <gemm_output Out>
gemm_path product(gemm_product p, mx_const_view a, mx_const_view b, matrix_view<Out> d, gemm_epilogue e = {},
                  stream_t s = nullptr, gemm_options o = {}) {
  mxkit::detail::check_mx_product(p, a.layout, b.layout);
  return gemm(a, b, d, e, s, o);
}
template <gemm_output Out>
gemm_path product(gemm_product p, fp8_view a, fp8_view b, matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr,
                  gemm_options o = {}) {
  const mxkit::detail::tn_names n = mxkit::detail::tn_operand_names(p);
  mxkit::detail::check_tn(a.rows, a.cols, b.rows, b.cols, name_of(p), n.a, n.b);
  return gemm(a, b, d, e, s, o);
}
template <gemm_output Out>
gemm_path product(gemm_product p, matrix_view<const bfloat16> a, matrix_view<const bfloat16> b, matrix_view<Out> d,
                  gemm_epilogue e = {}, stream_t s = nullptr, gemm_options o = {}) {
  const mxkit::detail::tn_names n = mxkit::detail::tn_operand_names(p);
  mxkit::detail::check_tn(a.rows, a.cols, b.rows, b.cols, name_of(p), n.a, n.b);
  return gemm(a, b, d, e, s, o);
}

// Y[M,N] = X[M,K] . W[N,K]^T from the rowwise copies of X and W.
template <gemm_output Out>
gemm_path fprop(mx_const_view x_rowwise, mx_const_view w_rowwise, matrix_view<Out> y, gemm_epilogue e = {}, stream_t s = nullptr,
                gemm_options o = {}) {
  return product(gemm_product::fprop, x_rowwise, w_rowwise, y, e, s, o);
}
// dX[M,K] = dY[M,N] . W[N,K] from dY's rowwise and W's columnwise copies.
template <gemm_output Out>
gemm_path dgrad(mx_const_view dy_rowwise, mx_const_view w_columnwise, matrix_view<Out> dx, gemm_epilogue e = {},
                stream_t s = nullptr, gemm_options o = {}) {
  return product(gemm_product::dgrad, dy_rowwise, w_columnwise, dx, e, s, o);
}
// dW[N,K] = dY[M,N]^T . X[M,K] from the columnwise copies of dY and X.
template <gemm_output Out>
gemm_path wgrad(mx_const_view dy_columnwise, mx_const_view x_columnwise, matrix_view<Out> dw, gemm_epilogue e = {},
                stream_t s = nullptr, gemm_options o = {}) {
  return product(gemm_product::wgrad, dy_columnwise, x_columnwise, dw, e, s, o);
}

}  // namespace gpu
MXKIT_END_NAMESPACE
