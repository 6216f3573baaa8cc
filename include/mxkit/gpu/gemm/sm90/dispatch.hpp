// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Hopper path as an entry of the GEMM's architecture list (gpu/gemm/gemm.hpp walks it): whether
// it takes a product on this device and build (supports), how it runs it (a plan of routes and
// scratch made on the host, then the launches), and the run itself. The routes:
//   MXFP4 x MXFP4  folded into E5M2 with one factor per line (exact block sums)
//   MXFP8 x MXFP8  (E4M3/E5M2 mixes) expanded to bf16 with the scales applied (or held so by the
//                  quantizer: mx_values_view), the bf16 product on mxkit's kernel or, where the
//                  call may take the vendor path, cuBLASLt's
//   other MX pairs E4M3/E5M2 bytes with per-block scale promotion
//   per-tensor FP8 and bf16 as they are
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/gemm/sm90/ is NVIDIA Hopper code: include it only in a CUDA build (gpu/gemm/gemm.hpp does where it applies)"  // and nothing below compiles
#else
#include <mxkit/gpu/gemm/expand.hpp>
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/gemm/options.hpp>
#include <mxkit/gpu/gemm/sm90/launch.hpp>
#include <mxkit/gpu/gemm/vendor/cublaslt.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

// How this path runs a product, decided on the host before anything is enqueued.
enum class route : std::uint8_t {
  direct,          // FP8 bytes (MXFP8 with per-block promotion, per-tensor FP8) or bf16 as they are
  via_bf16,        // MXFP8 x MXFP8 expanded to bf16 with the scales applied; gate: FP8 block-scaled
  fold,            // MXFP4 x MXFP4 folded to E5M2 with line factors; gate: expanded, block-scaled
  expand,          // other MX pairs re-encoded as E4M3/E5M2 bytes, block-scaled
};

// A product's plan: the route and the scratch it needs (laid out as
// [a's bytes | b's bytes | line factors of a, of b | the gate flag]).
struct plan {
  sm90::route route = sm90::route::direct;
  std::size_t scratch_a = 0, scratch_b = 0;  // bytes of each side's re-encoded copy
  std::size_t line_factors = 0;              // floats (fold: a.lines + b.lines)
  bool gate_flag = false;                    // an int the expansions set when the first route is inexact
  bool vendor_product = false;               // via_bf16: the expanded copies' product through cuBLASLt
  std::size_t scratch_bytes() const noexcept {
    return scratch_a + scratch_b + line_factors * sizeof(float) + (gate_flag ? sizeof(int) : 0);
  }
};

// The bf16 operand of an expanded MXFP8 copy at `data` ([lines, length], K-major).
inline gemm_operand expanded_bf16_operand(const gemm_operand& o, const std::uint8_t* data) noexcept {
  return make_operand(matrix_view<const bfloat16>{reinterpret_cast<const bfloat16*>(data), o.lines, o.length});
}

// Where the expanded copies' bf16 product goes to cuBLASLt: a call that may take the vendor path
// (`automatic` with gemm_options::vendor; a forced sm90 stays on mxkit's kernel), an output that
// cuBLASLt takes, and no C aliasing D under beta != 0. The last because the gate's fallback runs
// after the product and reads C: behind mxkit's bf16 kernel, which returns at once when the gate
// is set, C is still the caller's; behind cuBLASLt, which cannot read a device gate and always
// runs, an aliased C would already hold cuBLASLt's D. Both routes multiply the same exact bf16
// values in fp32 and differ only in the order of the fp32 additions (as the NVFP4 product does,
// gemm/nvfp4.hpp). copy_a, copy_b: where the scratch puts the two copies, or a 256-byte aligned
// stand-in before it is allocated (the pool's blocks are 256-byte aligned, and make_plan starts
// B's copy on a 256-byte boundary), so cuBLASLt's heuristic is asked about the alignment the call
// will have.
inline bool vendor_takes_expanded(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, const gemm_options& o,
                                  const std::uint8_t* copy_a, const std::uint8_t* copy_b) {
  if (o.path != gemm_path::automatic || !o.vendor) return false;
  if (out.beta != 0.0f && out.c == out.d) return false;
  const gemm_operand ea = expanded_bf16_operand(a, copy_a), eb = expanded_bf16_operand(b, copy_b);
  return vendor::gemm_arch::supports(ea, eb) && vendor::gemm_arch::supports_output(ea, eb, out);
}

// Does the bf16 route take this pair? MXFP8 copies of codes, or of bf16 values (which it reads as
// they are: the only route that does; gemm.hpp turns values back into codes for the others).
inline bool takes_via_bf16(const gemm_operand& a, const gemm_operand& b, const gemm_options& o) noexcept {
  return o.mxfp8_via_bf16 && expand::to_bf16::applies(a) && expand::to_bf16::applies(b);
}

inline plan make_plan(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, const gemm_options& o) {
  plan p;
  if (takes_via_bf16(a, b, o)) {
    // A side of codes: its bf16 copy. A side of values: its codes, for the fallback.
    auto side = [](const gemm_operand& x) { return x.bf16_values ? expand::from_bf16::bytes(x) : expand::to_bf16::bytes(x); };
    p.route = route::via_bf16;
    p.scratch_a = (side(a) + 255) / 256 * 256;  // B's copy on a 256-byte boundary
    p.scratch_b = side(b);
    p.gate_flag = true;
    const auto* stand_in = reinterpret_cast<const std::uint8_t*>(std::uintptr_t{256});  // a copy the scratch will hold
    p.vendor_product = vendor_takes_expanded(a, b, out, o, a.bf16_values ? a.data : stand_in, b.bf16_values ? b.data : stand_in);
    return p;
  }
  p.scratch_a = expand::bytes(a);  // lines * K with K % 32 == 0: 16-byte multiples
  p.scratch_b = expand::bytes(b);
  if (expand::fold::applies(a) && expand::fold::applies(b)) {
    p.route = route::fold;
    p.line_factors = a.lines + b.lines;
    p.gate_flag = true;
  } else if (p.scratch_a || p.scratch_b) {
    p.route = route::expand;
  }
  return p;
}

// The launches are compiled where the GEMM's dispatch is (gemm.hpp: the kernel library's one
// definition, or every including file when no library is used), as launch_wgmma is.
#if !defined(MXKIT_GPU_LIBRARY_HAS_GEMM) || defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
inline mma_kind mma_kind_of(const gemm_operand& o) {
  if (o.kind == operand_kind::bf16) return mma_kind::bf16;
  if (o.kind == operand_kind::fp8) return o.fp8 == fp8_type::e4m3 ? mma_kind::e4m3 : mma_kind::e5m2;
  return o.type == mx_type::mxfp8_e5m2 ? mma_kind::e5m2 : mma_kind::e4m3;  // expanded types are E4M3
}

// Runs an sm90 plan. The first routes (via_bf16, fold) check their exactness on the device: a
// line or block they cannot make exact sets the gate flag, which closes their GEMM and opens the
// fallback's (the FP8 block-scaled kernel on the original or re-encoded bytes). Both are enqueued
// and the closed kernel returns at once, so the choice needs no host synchronization.
inline void execute(const plan& p, const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s,
                         const gemm_options& o, std::uint8_t* scratch) {
  std::uint8_t* copy_a = scratch;
  std::uint8_t* copy_b = scratch ? scratch + p.scratch_a : nullptr;
  float* line_a = p.line_factors ? reinterpret_cast<float*>(copy_b + p.scratch_b) : nullptr;
  float* line_b = line_a ? line_a + a.lines : nullptr;
  int* unsafe = p.gate_flag ? reinterpret_cast<int*>(scratch + p.scratch_a + p.scratch_b + p.line_factors * sizeof(float)) : nullptr;
  if (unsafe) MXKIT_GPU_CHECK(memset_async(unsafe, 0, sizeof(int), s));
  mma_operand fa{mma_kind_of(a), a.data, a.line_bytes}, fb{mma_kind_of(b), b.data, b.line_bytes};
  launch_gate fallback;
  switch (p.route) {
    case route::via_bf16: {
      // Each side's bf16 values: its own (bf16_values), or its codes expanded into the scratch,
      // which raise `unsafe` where the values' quantizer raised its own flag. The gate is closed
      // when any of them is set.
      const int* flag_a = a.bf16_values ? a.beyond_exact_range : unsafe;
      const int* flag_b = b.bf16_values ? b.beyond_exact_range : unsafe;
      const launch_gate bf16_gate{flag_a, false, flag_b == flag_a ? nullptr : flag_b};
      launch_gate fallback_gate = bf16_gate;
      fallback_gate.run_when_set = true;
      if (!a.bf16_values) expand::to_bf16::launch(a, reinterpret_cast<std::uint16_t*>(copy_a), unsafe, s);
      if (!b.bf16_values) expand::to_bf16::launch(b, reinterpret_cast<std::uint16_t*>(copy_b), unsafe, s);
      const std::uint8_t* values_a = a.bf16_values ? a.data : copy_a;
      const std::uint8_t* values_b = b.bf16_values ? b.data : copy_b;
      if (p.vendor_product) {
        vendor::gemm_arch::run(expanded_bf16_operand(a, values_a), expanded_bf16_operand(b, values_b), out, s, o);
      } else {
        const mma_operand ba{mma_kind::bf16, values_a, 2 * a.length}, bb{mma_kind::bf16, values_b, 2 * b.length};
        launch_wgmma(a, b, ba, bb, out, s, bf16_gate, true, o.tile_counter, o.reserved_sms);
      }
      // The fallback reads codes: a side of values gets them back behind the same gate.
      if (a.bf16_values) {
        expand::from_bf16::launch(a, copy_a, s, fallback_gate);
        fa = {mma_kind_of(a), copy_a, a.length};
      }
      if (b.bf16_values) {
        expand::from_bf16::launch(b, copy_b, s, fallback_gate);
        fb = {mma_kind_of(b), copy_b, b.length};
      }
      launch_wgmma(a, b, fa, fb, out, s, fallback_gate, true, o.tile_counter, o.reserved_sms);
      return;
    }
    case route::fold: {
      expand::fold::launch(a, copy_a, line_a, unsafe, s);
      expand::fold::launch(b, copy_b, line_b, unsafe, s);
      const mma_operand la{mma_kind::e5m2, copy_a, a.length, line_a}, lb{mma_kind::e5m2, copy_b, b.length, line_b};
      launch_wgmma(a, b, la, lb, out, s, launch_gate{unsafe, false}, o.exact_block_sums, o.tile_counter, o.reserved_sms);
      fallback = launch_gate{unsafe, true};
      break;
    }
    case route::expand:
    case route::direct: break;
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
  launch_wgmma(a, b, fa, fb, out, s, fallback, true, o.tile_counter, o.reserved_sms);
}
#endif

struct gemm_arch {
  static constexpr gemm_path path = gemm_path::sm90;
  static bool supports(const gemm_operand& a, const gemm_operand& b) { return a.length > 0 && wgmma_supports(a, b) && available(); }
  static bool takes_bf16_values(const gemm_operand& a, const gemm_operand& b, const gemm_options& o) noexcept {
    return takes_via_bf16(a, b, o);
  }
#if !defined(MXKIT_GPU_LIBRARY_HAS_GEMM) || defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
  // The scratch comes from mxkit's device pool (stream-ordered), which keeps its memory between
  // calls (release_gemm_scratch returns it).
  static void run(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s, const gemm_options& o) {
    const plan p = make_plan(a, b, out, o);
    const std::size_t bytes = p.scratch_bytes();
    auto* scratch = static_cast<std::uint8_t*>(bytes ? allocate_async(bytes, s) : nullptr);
    try {
      execute(p, a, b, out, s, o, scratch);
    } catch (...) {
      deallocate_async(scratch, s);
      throw;
    }
    deallocate_async(scratch, s);
  }
#endif
};

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
