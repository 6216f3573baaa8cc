// SPDX-License-Identifier: Apache-2.0
#pragma once
// Device GEMMs: D[P,Q] = alpha * A[P,R] . B[Q,R]^T + beta * C, fp32 accumulation, fp32 or bf16
// output (C is D's previous contents, read only when beta != 0), on the caller's stream.
// Operands: two MX copies (any element pair; MXFP8 ones may hold bf16 values: mx_values_view),
// two per-tensor FP8 matrices, or two bf16 matrices, all stored with the reduction axis
// contiguous (gemm/gemm.hpp says why and which copy each training product takes); bf16 ones may
// also be stored transposed (MN-major, operand.hpp: major_order), which wgrad uses to read dY
// and X as the forward wrote them.
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
//               MXFP8 x MXFP8  (E4M3/E5M2 mixes) expanded to bf16 with the scales applied, or
//                              taken as the bf16 values the quantizer wrote (mx_values_view)
//               other MX pairs E4M3/E5M2 bytes with per-block scale promotion
//               per-tensor FP8 and bf16 as they are
//             The folded and bf16 routes check their exactness conditions on the device and
//             fall back to per-block promotion where they fail (sm90/dispatch.hpp). Their scratch
//             comes from mxkit's device pool, which keeps its memory (release_gemm_scratch returns it).
//   gfx950    CDNA4 block-scaled MFMA (gemm/gfx950/kernel.hpp), compiled only: never run here
//   vendor    CUDA: cuBLASLt, loaded at run time (gemm/vendor/), for bf16 x bf16 (either storage
//             order) and per-tensor FP8 with host scales (E4M3 x E4M3 / E5M2 mixes, both K-major). First in the CUDA
//             list: `automatic` takes it for those operands wherever cuBLASLt loads and has an
//             algorithm for the output; gemm_options::path = sm90 still forces mxkit's kernel.
//             MX operands never take it. HIP has none yet (hipBLASLt would be the analogue).
// MXINT8 uses the portable kernel.
// Dispatch is by architecture folder, as CUTLASS arranges its collectives: each folder's
// `gemm_arch` says which products it takes on this device and build (supports) and runs them
// (run); the list below holds the folders this build compiles, best first, and ends with the
// portable kernel, which takes everything. A new architecture (sm100, gfx942) is a folder with
// its gemm_arch and one entry in the list.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gemm/product.hpp>
#include <mxkit/gpu/gemm/expand.hpp>
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/gemm/options.hpp>
#include <mxkit/gpu/gemm/portable.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>

#if MXKIT_GPU_CUDA
#include <mxkit/gpu/gemm/sm90/dispatch.hpp>
#include <mxkit/gpu/gemm/vendor/cublaslt.hpp>
#else
#include <mxkit/gpu/gemm/gfx950/dispatch.hpp>
#endif

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

// Whether architecture Arch takes a product: its operands (supports), and, where it has one, its
// check of the output (supports_output: the vendor path asks its library's heuristic). Null `out`:
// the operands alone (automatic_path, which knows no output).
template <class Arch>
bool arch_takes(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc* out) {
  if (!Arch::supports(a, b)) return false;
  if constexpr (requires { Arch::supports_output(a, b, *out); }) {
    if (out) return Arch::supports_output(a, b, *out);
  }
  return true;
}

// Whether architecture Arch multiplies operands of bf16 values as they are (takes_bf16_values,
// where it has one); the others get them back as codes first (run below).
template <class Arch>
bool arch_takes_values(const gemm_operand& a, const gemm_operand& b, const gemm_options& o) {
  if constexpr (requires { Arch::takes_bf16_values(a, b, o); }) return Arch::takes_bf16_values(a, b, o);
  else return false;
}

template <class... Arch>
struct gemm_arch_list {
  // The path `automatic` takes: the first architecture that takes the product (but `skip`).
  static gemm_path automatic(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc* out = nullptr,
                             gemm_path skip = gemm_path::automatic) {
    gemm_path p = gemm_path::portable;
    (void)((Arch::path != skip && arch_takes<Arch>(a, b, out) ? (p = Arch::path, true) : false) || ...);
    return p;
  }
  static bool supports(gemm_path path, const gemm_operand& a, const gemm_operand& b, const gemm_output_desc* out = nullptr) {
    return ((Arch::path == path && arch_takes<Arch>(a, b, out)) || ...);
  }
  static bool takes_bf16_values(gemm_path path, const gemm_operand& a, const gemm_operand& b, const gemm_options& o) {
    return ((Arch::path == path && arch_takes_values<Arch>(a, b, o)) || ...);
  }
  static void run(gemm_path path, const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s,
                  const gemm_options& o) {
    (void)((Arch::path == path ? (Arch::run(a, b, out, s, o), true) : false) || ...);
  }
};
#if MXKIT_GPU_CUDA
using gemm_archs = gemm_arch_list<vendor::gemm_arch, sm90::gemm_arch, portable::gemm_arch>;
#else
using gemm_archs = gemm_arch_list<gfx950::gemm_arch, portable::gemm_arch>;
#endif

inline gemm_path automatic_path_of(const gemm_operand& a, const gemm_operand& b) { return gemm_archs::automatic(a, b); }

// The path a call takes: `automatic`'s choice for these operands and this output, or the one
// forced, which must take them.
inline gemm_path choose_path(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, const gemm_options& o) {
  const gemm_path skip = o.vendor ? gemm_path::automatic : gemm_path::vendor;
  const gemm_path p = o.path == gemm_path::automatic ? gemm_archs::automatic(a, b, &out, skip) : o.path;
  mxkit::detail::require(gemm_archs::supports(p, a, b, &out), "gemm: path ", name_of(p),
                         " cannot take these operands on this device and build (see gpu/gemm/gemm.hpp)");
  return p;
}

template <gemm_output Out>
gemm_output_desc make_output(matrix_view<Out> d, gemm_epilogue e) {
  return {d.data, d.data, d.stride(), d.stride(), std::is_same_v<Out, bfloat16>, e.alpha, e.beta};
}

// The dispatch and the paths' launches: compiled in the kernel library when one is used
// (gpu/kernel_library.hpp); its users see run's declaration.
#if !defined(MXKIT_GPU_LIBRARY_HAS_GEMM) || defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
#if defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
#define MXKIT_GPU_GEMM_ENTRY  // the kernel library's one definition
#else
#define MXKIT_GPU_GEMM_ENTRY inline
#endif
// Runs the product on the chosen path; returns the path taken.
MXKIT_GPU_GEMM_ENTRY gemm_path run(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s, gemm_options o) {
  // An empty D needs no path: nothing is launched, nothing is read (the vendor path would ask
  // its heuristic about a 0 x n problem).
  if (a.lines == 0 || b.lines == 0) {
    const gemm_path p = o.path != gemm_path::automatic ? o.path
                        : gemm_archs::automatic(a, b, nullptr, o.vendor ? gemm_path::automatic : gemm_path::vendor);
    mxkit::detail::require(gemm_archs::supports(p, a, b), "gemm: path ", name_of(p),
                           " cannot take these operands on this device and build (see gpu/gemm/gemm.hpp)");
    return p;
  }
  const gemm_path p = choose_path(a, b, out, o);
  if ((a.bf16_values || b.bf16_values) && !gemm_archs::takes_bf16_values(p, a, b, o)) {
    // A path that reads codes: the values' codes first, into scratch from the device pool.
    const std::size_t bytes_a = (expand::from_bf16::bytes(a) + 255) / 256 * 256, bytes_b = expand::from_bf16::bytes(b);
    auto* scratch = static_cast<std::uint8_t*>(allocate_async(bytes_a + bytes_b, s));
    try {
      if (a.bf16_values) expand::from_bf16::launch(a, scratch, s);
      if (b.bf16_values) expand::from_bf16::launch(b, scratch + bytes_a, s);
      gemm_archs::run(p, a.bf16_values ? expand::from_bf16::as_codes(a, scratch) : a,
                      b.bf16_values ? expand::from_bf16::as_codes(b, scratch + bytes_a) : b, out, s, o);
    } catch (...) {
      deallocate_async(scratch, s);
      throw;
    }
    deallocate_async(scratch, s);
    return p;
  }
  gemm_archs::run(p, a, b, out, s, o);
  return p;
}
#else
gemm_path run(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s, gemm_options o);
#endif

}  // namespace detail

// Returns the memory mxkit's device pool keeps (GEMM scratch among it) on the current device to
// the driver, once the work that used it has finished (gpu/memory.hpp: trim_device_memory).
inline void release_gemm_scratch() { trim_device_memory(0); }

// Which path `automatic` takes for these operands on the current device (for an output every
// path can write; the vendor path also needs its library to have an algorithm for the output).
inline gemm_path automatic_path(mx_const_view a, mx_const_view b) { return detail::automatic_path_of(make_operand(a), make_operand(b)); }

// ---- any TN product ---------------------------------------------------------------------------
namespace detail {
// The checks of one MX side of a product, as codes or as bf16 values ("A" or "B"; `lines`: the
// side's share of D, P or Q).
inline void check_mx_side(const mx_const_view& v, const char* side, std::size_t lines, std::size_t r) {
  // The kernels read scales as [lines, blocks] row-major (tiled vendor layouts are for vendor GEMMs).
  mxkit::detail::require(v.scales_layout == scale_layout::row_major, "gemm: scales must be row_major, got ", side, " ",
                         name_of(v.scales_layout));
  mxkit::detail::require(lines == 0 || r == 0 || (v.data && v.scales), "gemm: ", side, " has null data or scales");
}
inline void check_mx_side(const mx_values_view& v, const char* side, std::size_t lines, std::size_t r) {
  const mx_type t = v.layout.mx();
  mxkit::detail::require(t == mx_type::mxfp8_e4m3 || t == mx_type::mxfp8_e5m2, "gemm: ", side, " holds bf16 values but is ", name_of(t),
                         ", not MXFP8");
  mxkit::detail::require(lines == 0 || r == 0 || (v.values && v.scales && v.beyond_exact_range), "gemm: ", side,
                         " has null values, scales or beyond_exact_range");
}
template <class A, class B, gemm_output Out>
gemm_path checked_mx_gemm(const A& a, const B& b, matrix_view<Out> d, gemm_epilogue e, stream_t s, gemm_options o) {
  const gemm_shape sh = mxkit::detail::check_mx_gemm(a.layout, b.layout, "gemm");
  mxkit::detail::check_rotation(a.options, b.options, "gemm");
  mxkit::detail::check_output(d, sh, "gemm");
  check_mx_side(a, "A", sh.p, sh.r);
  check_mx_side(b, "B", sh.q, sh.r);
  return run(make_operand(a), make_operand(b), make_output(d, e), s, o);
}
}  // namespace detail

template <gemm_output Out>
gemm_path gemm(mx_const_view a, mx_const_view b, matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr,
               gemm_options o = {}) {
  return detail::checked_mx_gemm(a, b, d, e, s, o);
}

// MXFP8 copies that hold their elements as bf16 values (gpu::quantize with values_as_bf16), on
// either side or both: the same product, the same bits as the copies of codes they stand for.
// Hopper's bf16 route reads the values without expanding anything (and expands a side of codes
// as usual); every other path gets the values' codes back first.
template <gemm_output Out>
gemm_path gemm(const mx_values_view& a, const mx_values_view& b, matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr,
               gemm_options o = {}) {
  return detail::checked_mx_gemm(a, b, d, e, s, o);
}
template <gemm_output Out>
gemm_path gemm(const mx_values_view& a, mx_const_view b, matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr,
               gemm_options o = {}) {
  return detail::checked_mx_gemm(a, b, d, e, s, o);
}
template <gemm_output Out>
gemm_path gemm(mx_const_view a, const mx_values_view& b, matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr,
               gemm_options o = {}) {
  return detail::checked_mx_gemm(a, b, d, e, s, o);
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
