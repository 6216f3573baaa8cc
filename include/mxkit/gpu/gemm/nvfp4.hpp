// SPDX-License-Identifier: Apache-2.0
#pragma once
// Device GEMMs over two NVFP4 copies (issue #46, section 2): D[P,Q] = alpha * A[P,R] . B[Q,R]^T +
// beta * C, A and B NVFP4 (formats::nvfp4 or formats::nvfp4_2d: E2M1 elements, an E4M3 scale
// per 16 along the reduction axis, an fp32 tensor scale; arXiv 2509.25149), fp32 accumulation,
// fp32 or bf16 D, on the caller's stream with no host synchronization. The operand roles are the
// MX ones (gemm/product.hpp): every copy is stored with its block axis contiguous, so
//
//   gpu::fprop(x.rowwise, w.rowwise, y)      Y  = X . W^T   (device_nvfp4_tensor or nvfp4_operand)
//   gpu::dgrad(dy.rowwise, w.columnwise, dx) dX = dY . W
//   gpu::wgrad(dy.columnwise, x.columnwise, dw) dW = dY^T . X
//   gpu::gemm(a, b, d, {alpha, beta}, stream, options)   any TN product
//
// The oracle is ref/nvfp4_gemm.hpp; the checks (shapes, axes, K a multiple of 16, rotations)
// are gemm/nvfp4_product.hpp's, the same words on host and device.
//
// How: expand both operands to bf16 with the block scales folded in (gpu/gemm/nvfp4_expand.hpp,
// one pass each, into scratch from mxkit's device pool as the sm90 routes take theirs), run
// mxkit's bf16 GEMM on them (gpu::gemm's dispatch: cuBLASLt where `automatic` takes it, the sm90
// wgmma kernel, or the portable one; gemm_options choose as for bf16 operands), and multiply the
// sums by the two tensor scales in the epilogue.
//
// Why this is exact as the MX paths are (only the fp32 sums round):
//  - an E2M1 value {0, 0.5, 1, 1.5, 2, 3, 4, 6} has at most 2 significant bits and an E4M3 scale
//    at most 4, so element x scale has at most 6 and its magnitude lies in [2^-10, 2688]: inside
//    bf16's normal range with 8 significant bits, so the expanded copy holds the exact values;
//  - a bf16 x bf16 product (at most 12 bits here, in [2^-20, 2^23]) is exact in fp32, and the
//    tensor cores (and cuBLASLt's CUBLAS_COMPUTE_32F) add them in fp32: the device differs from
//    the reference only in the order of fp32 adds, as every MX path does (ref/gemm.hpp's bound,
//    with the K products of a dot product exact);
//  - the tensor scales are common to all products: the epilogue forms alpha * (acc * (t_a t_b))
//    as the reference does (the per-tensor FP8 descale's place: sm90 and the portable kernel
//    read t_a, t_b from device memory; cuBLASLt takes alpha t_a t_b from device memory,
//    CUBLASLT_POINTER_MODE_DEVICE, the same bits for alpha = 1).
// No value can underflow or overflow on the way: products are at least 2^-20 and a sum of R of
// them stays below 2^23 R (the tensor scales' product aside, one fp32 product as in the
// reference: ref/nvfp4_gemm.hpp says where it leaves fp32's range).
//
// Why bf16 and not the FP8 tensor cores the issue suggested: E2M1 x E4M3 has up to 6 significant
// bits, which no FP8 format holds, so an FP8 route must keep the codes and the scales apart (the
// codes are exact E4M3 bytes, expand.hpp) and promote every block pair's sum with its two scales
// in fp32, as the MX block-scaled kernel does. Hopper's FP8 wgmma reduces K = 32 per instruction
// (PTX ISA, wgmma.mma_async shapes), two NVFP4 blocks with different scales: an exact promotion
// per block needs the other half of each instruction zeroed, i.e. half the FP8 rate, which is the
// bf16 rate (K = 16 per instruction, one NVFP4 block), plus the promotions, whose scale loads
// and FMAs already bound the MX block-scaled kernel (docs/perf/gemm.md). And Hopper's FP8 sums
// keep about 14 bits (DeepSeek-V3 report, section 3.3.2), so every block would need its own
// promotion anyway. The bf16 route needs none: the scales ride in the operands, and the GEMM is
// the plain bf16 one. Its cost over a bf16 GEMM of the same shape is the two expansion passes
// (4.5 bits read and 16 written per element) and 2 bytes of scratch per operand element. Blackwell's block-scaled tensor cores (tcgen05 with NVFP4 scale vectors)
// would take the codes and scales directly; that is a gemm/sm100/ route, not this one.
//
// Tensor scales: each operand's in device memory (device_nvfp4_tensor::tensor_scale(), where
// gpu::quantize_nvfp4 writes it; no host round trip between quantizing and multiplying), or both
// as the host views' values. A 16 x 16 (weight) copy stores a scale per line and block as a
// 1 x 16 one does, so the two shapes mix freely. HIP: the same code; the bf16 GEMM there is the
// portable kernel (gfx950's path takes MX operands only).
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/gemm/nvfp4_product.hpp>
#include <mxkit/gpu/device_nvfp4_tensor.hpp>
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/gemm/nvfp4_expand.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// One NVFP4 operand in device memory: the copy (data, scales in any scale layout) and its tensor
// scale, in device memory when `tensor_scale` is set, else the view's value.
struct nvfp4_operand {
  nvfp4_const_view copy;
  const float* tensor_scale = nullptr;

  nvfp4_operand(nvfp4_const_view v, const float* device_tensor_scale = nullptr) : copy(v), tensor_scale(device_tensor_scale) {}
  nvfp4_operand(nvfp4_view v, const float* device_tensor_scale = nullptr)
      : nvfp4_operand(nvfp4_const_view{v.layout, v.options, v.data, v.scales, v.scales_layout, v.tensor_scale, v.tensor_scale_from_amax},
                      device_tensor_scale) {}
  nvfp4_operand(const device_nvfp4_tensor& t)  // NOLINT(google-explicit-constructor): the usual argument
      : copy{t.layout(), t.options(), t.data().data(), t.scales().data(), t.scales_layout(), 1.0f, t.tensor_scale_from_amax()},
        tensor_scale(t.tensor_scale().data()) {}
};

namespace detail {

// The host checks of one device NVFP4 GEMM (the reference's, gemm/nvfp4_product.hpp, then the
// device's own: tensor scales both on the device or both on the host, aligned pointers).
template <gemm_output Out>
gemm_shape check_nvfp4_device_gemm(const nvfp4_operand& a, const nvfp4_operand& b, const matrix_view<Out>& d, const char* what) {
  const gemm_shape s = mxkit::detail::check_nvfp4_gemm(a.copy.layout, b.copy.layout, what);
  mxkit::detail::check_nvfp4_rotation(a.copy.options, b.copy.options, what);
  mxkit::detail::check_output(d, s, what);
  mxkit::detail::check_nvfp4_operand(a.copy, s.r, what, "A");
  mxkit::detail::check_nvfp4_operand(b.copy, s.r, what, "B");
  mxkit::detail::require((a.tensor_scale == nullptr) == (b.tensor_scale == nullptr), what,
                         ": tensor scales must both be in device memory or both host values (A's ",
                         a.tensor_scale ? "on the device" : "a host value", ", B's ", b.tensor_scale ? "on the device" : "a host value", ")");
  for (const nvfp4_operand* o : {&a, &b}) {
    const char* name = o == &a ? ": A" : ": B";
    if (o->tensor_scale)
      mxkit::detail::require(reinterpret_cast<std::uintptr_t>(o->tensor_scale) % alignof(float) == 0, what, name, ": tensor scale ",
                             static_cast<const void*>(o->tensor_scale), " is not aligned for a float");
    else
      mxkit::detail::check_tensor_scale(o->copy.tensor_scale, what, name);
    if (o->copy.layout.lines() && s.r)
      mxkit::detail::require(reinterpret_cast<std::uintptr_t>(o->copy.data) % 8 == 0, what, name, ": data ",
                             static_cast<const void*>(o->copy.data), " must be 8-byte aligned (the quantizer's is)");
  }
  return s;
}

// The bf16 operand of an expanded copy [lines, k] with its tensor scale as its factor.
inline gemm_operand nvfp4_bf16_operand(const nvfp4_operand& o, const std::uint16_t* expanded, std::size_t k) {
  gemm_operand r = make_operand(matrix_view<const bfloat16>{reinterpret_cast<const bfloat16*>(expanded), o.copy.layout.lines(), k});
  if (o.tensor_scale) r.decode_scale = o.tensor_scale;
  else r.scale_inv = o.copy.tensor_scale;
  return r;
}

}  // namespace detail

namespace detail {
// The expansion and the bf16 GEMM of a checked product (R: the reduction length) into `out` (C
// read where out says: the training backend's separate C), on stream s; scratch from the pool.
inline gemm_path run_nvfp4(const nvfp4_operand& a, const nvfp4_operand& b, std::size_t r, const gemm_output_desc& out, stream_t s,
                           gemm_options o) {
  // Scratch: [A as bf16 | B as bf16], B's part 256-byte aligned (as the pool's blocks are).
  const std::size_t bytes_a = (nvfp4_expand::bytes(a.copy) + 255) / 256 * 256, bytes_b = nvfp4_expand::bytes(b.copy);
  auto* scratch = static_cast<std::uint8_t*>(bytes_a + bytes_b ? allocate_async(bytes_a + bytes_b, s) : nullptr);
  gemm_path path = gemm_path::automatic;
  try {
    auto* xa = reinterpret_cast<std::uint16_t*>(scratch);
    auto* xb = reinterpret_cast<std::uint16_t*>(scratch ? scratch + bytes_a : nullptr);
    nvfp4_expand::launch(a.copy, xa, s);
    nvfp4_expand::launch(b.copy, xb, s);
    path = run(nvfp4_bf16_operand(a, xa, r), nvfp4_bf16_operand(b, xb, r), out, s, o);
  } catch (...) {
    deallocate_async(scratch, s);
    throw;
  }
  deallocate_async(scratch, s);
  return path;
}
}  // namespace detail

// ---- any TN product ---------------------------------------------------------------------------
// Returns the path the bf16 GEMM took. Throws std::invalid_argument naming the bad value (shapes,
// K not a multiple of 16, rotations, null or misaligned pointers, a bad host tensor scale) and
// gpu::error on a runtime failure.
template <gemm_output Out>
gemm_path gemm(nvfp4_operand a, nvfp4_operand b, matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr, gemm_options o = {}) {
  const gemm_shape sh = detail::check_nvfp4_device_gemm(a, b, d, "gemm");
  return detail::run_nvfp4(a, b, sh.r, detail::make_output(d, e), s, o);
}

// ---- the training products (operand roles: gemm/product.hpp) -------------------------------------
template <gemm_output Out>
gemm_path product(gemm_product p, nvfp4_operand a, nvfp4_operand b, matrix_view<Out> d, gemm_epilogue e = {}, stream_t s = nullptr,
                  gemm_options o = {}) {
  mxkit::detail::check_nvfp4_product(p, a.copy.layout, b.copy.layout);
  return gemm(a, b, d, e, s, o);
}
// Y[M,N] = X[M,K] . W[N,K]^T from the rowwise copies of X and W.
template <gemm_output Out>
gemm_path fprop(nvfp4_operand x_rowwise, nvfp4_operand w_rowwise, matrix_view<Out> y, gemm_epilogue e = {}, stream_t s = nullptr,
                gemm_options o = {}) {
  return product(gemm_product::fprop, x_rowwise, w_rowwise, y, e, s, o);
}
// dX[M,K] = dY[M,N] . W[N,K] from dY's rowwise and W's columnwise copies.
template <gemm_output Out>
gemm_path dgrad(nvfp4_operand dy_rowwise, nvfp4_operand w_columnwise, matrix_view<Out> dx, gemm_epilogue e = {}, stream_t s = nullptr,
                gemm_options o = {}) {
  return product(gemm_product::dgrad, dy_rowwise, w_columnwise, dx, e, s, o);
}
// dW[N,K] = dY[M,N]^T . X[M,K] from the columnwise copies of dY and X.
template <gemm_output Out>
gemm_path wgrad(nvfp4_operand dy_columnwise, nvfp4_operand x_columnwise, matrix_view<Out> dw, gemm_epilogue e = {}, stream_t s = nullptr,
                gemm_options o = {}) {
  return product(gemm_product::wgrad, dy_columnwise, x_columnwise, dw, e, s, o);
}

}  // namespace gpu
MXKIT_END_NAMESPACE
