// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a GEMM kernel needs to know about one operand, in one trivially copyable struct that is
// passed by value to kernels: the element encoding, the bytes, the block scales, and the shape
// of the stored copy [lines, length] with the reduction axis contiguous (gemm/product.hpp).
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/mx_format.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/format/e8m0.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/gemm/product.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/mx_values_view.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

enum class operand_kind : std::uint8_t {
  mx,    // MX copy: element codes + one E8M0 scale per 32-block, [lines, blocks] row-major
  fp8,   // per-tensor scaled FP8 codes; value = code * scale_inv
  bf16,  // bfloat16 values
};

// How a bf16 operand lies in memory. k_major: [lines, length] row-major, the reduction axis
// contiguous, as every other operand kind. mn_major: [length, lines] row-major, the matrix whose
// transpose is the operand, e.g. wgrad's dY [tokens, N] and X [tokens, K] as the forward wrote
// them. Hopper's bf16 tensor cores read either (wgmma's transpose bits exist for 16-bit types
// only; PTX ISA 9.7.15.5.1), so wgrad needs no transposed copies.
enum class major_order : std::uint8_t { k_major, mn_major };

// Kernel parameters, not a view: the public views (mx_const_view, fp8_view, bf16 matrix_view)
// become this flat struct in make_operand, so every kernel reads any operand kind the same way.
struct gemm_operand {
  operand_kind kind = operand_kind::mx;
  mx_type type = mx_type::mxfp8_e4m3;  // kind == mx
  fp8_type fp8 = fp8_type::e4m3;       // kind == fp8
  const std::uint8_t* data = nullptr;  // line l starts at data + l * line_bytes (mn_major: see below)
  const std::uint8_t* scales = nullptr;  // kind == mx: [lines, blocks]
  std::size_t lines = 0;       // P (A) or Q (B)
  std::size_t length = 0;      // R: the reduction length (a multiple of 32 for MX)
  std::size_t line_bytes = 0;  // bytes between consecutive lines; mn_major: between consecutive reduction rows
  std::size_t blocks = 0;      // kind == mx: scales per line
  float scale_inv = 1.0f;      // kind == fp8: value = code * scale_inv; kind == bf16: value = stored * scale_inv (1 but where
                               // a caller scales the operand: gpu/gemm/nvfp4.hpp's NVFP4 tensor scale)
  // kind == fp8 with delayed scaling: the scale in device memory (the kernel uses 1 / *scale in
  // place of scale_inv), so the descale needs no host round trip; null: scale_inv.
  const float* scale = nullptr;
  // kind == bf16 only: element (l, r) at data + r * line_bytes + 2 l (major_order::mn_major).
  bool mn_major = false;
  // kind == bf16 only: the factor of every value in device memory (used in place of scale_inv),
  // applied to the sums like the FP8 descale: the NVFP4 tensor scale the device quantizer wrote
  // (gpu/gemm/nvfp4.hpp), read without a host round trip. Null: scale_inv.
  const float* decode_scale = nullptr;
  // kind == mx, MXFP8 only: the elements held as their bf16 values (mx_values_view: 2 bytes an
  // element, line_bytes = 2 x the padded length), and the quantizer's flag in device memory
  // (non-zero: a block the bf16 product cannot take exactly). Hopper's bf16 route multiplies the
  // values as they are; every other route first turns them back into codes (expand::from_bf16).
  bool bf16_values = false;
  const int* beyond_exact_range = nullptr;

  MXKIT_HD constexpr int storage_bits() const noexcept { return kind == operand_kind::mx ? storage_bits_of_type(type) : (kind == operand_kind::bf16 ? 16 : 8); }
  MXKIT_HD static constexpr int storage_bits_of_type(mx_type t) noexcept { return storage_bits_of(t); }
};

inline gemm_operand make_operand(mx_const_view v) noexcept {
  const block_layout& l = v.layout;
  return {operand_kind::mx, l.mx(), fp8_type::e4m3, v.data, v.scales, l.lines(), l.line_length(), l.line_bytes(), l.blocks_per_line(), 1.0f, nullptr};
}
inline gemm_operand make_operand(const mx_values_view& v) noexcept {
  const block_layout& l = v.layout;
  gemm_operand o{operand_kind::mx, l.mx(), fp8_type::e4m3, reinterpret_cast<const std::uint8_t*>(v.values), v.scales, l.lines(),
                 l.line_length(), 2 * l.padded_length(), l.blocks_per_line(), 1.0f, nullptr};
  o.bf16_values = true;
  o.beyond_exact_range = v.beyond_exact_range;
  return o;
}
inline gemm_operand make_operand(fp8_view v) noexcept {
  return {operand_kind::fp8, mx_type::mxfp8_e4m3, v.type, v.data, nullptr, v.rows, v.cols, v.cols, 0, v.scale_inv(), nullptr};
}
// `stored` as it lies in memory: [P or Q, R] when k_major, [R, P or Q] when mn_major.
inline gemm_operand make_operand(matrix_view<const bfloat16> stored, major_order order = major_order::k_major) noexcept {
  const bool mn = order == major_order::mn_major;
  return {operand_kind::bf16, mx_type::mxfp8_e4m3, fp8_type::e4m3, reinterpret_cast<const std::uint8_t*>(stored.data), nullptr,
          mn ? stored.cols : stored.rows, mn ? stored.rows : stored.cols, stored.stride() * sizeof(bfloat16), 0, 1.0f, nullptr, mn};
}

// The per-tensor FP8 descale 1 / (scale_a scale_b), formed as the host reference forms it
// (a.scale_inv() * b.scale_inv()), from the host values or the device scales.
__device__ inline float fp8_descale(const gemm_operand& a, const gemm_operand& b) noexcept {
  const float ia = a.scale ? 1.0f / *a.scale : a.scale_inv, ib = b.scale ? 1.0f / *b.scale : b.scale_inv;
  return ia * ib;
}

// The factor the sums of a per-tensor pair are multiplied by: the FP8 descale, or the bf16
// operands' factors (decode_scale or scale_inv: 1 x 1 for plain bf16), as the reference forms it.
__device__ inline float tensor_factor(const gemm_operand& a, const gemm_operand& b) noexcept {
  if (a.kind == operand_kind::fp8) return fp8_descale(a, b);
  const float fa = a.decode_scale ? *a.decode_scale : a.scale_inv, fb = b.decode_scale ? *b.decode_scale : b.scale_inv;
  return fa * fb;
}

// Value of element code `c` (unscaled) for an MX element type; the one decode table every kernel
// builds in shared memory (FP4 uses the first 16 entries).
MXKIT_HD constexpr float decode_mx_element(mx_type t, std::uint8_t c) noexcept {
  return visit_mx_type(t, [c](auto fmt) { return decltype(fmt)::element_type::from_bits(c).to_float(); });
}
MXKIT_HD constexpr float decode_operand_code(const gemm_operand& o, std::uint8_t c) noexcept {
  return o.kind == operand_kind::fp8 ? fp8_decode(c, o.fp8) : decode_mx_element(o.type, c);
}

// fp32 to bf16 bits as the reference's bf16 output rounds them (ref/gemm.hpp): nearest-even,
// overflow to Inf, NaN stays NaN.
MXKIT_HD constexpr std::uint16_t bf16_output_bits(float v) noexcept {
  return bfloat16::from_float(v, rounding::nearest_even, overflow::propagate).bits();
}

// A kernel launched behind a gate runs only when `flag` is null or its set/clear state is
// `run_when_set`. A fast path and its fallback are both launched, in stream order, behind the
// same device flag (set by a preparation kernel when the fast path cannot be exact), so the
// choice needs no host synchronization; the losing kernel returns at once.
// A second flag (flag2) is ORed with the first: the route of two operands whose quantizers each
// wrote one (mx_values_view) is closed when either is set.
struct launch_gate {
  const int* flag = nullptr;
  bool run_when_set = false;
  const int* flag2 = nullptr;
  __device__ bool closed() const noexcept {
    if (flag == nullptr && flag2 == nullptr) return false;
    const bool set = (flag != nullptr && *flag != 0) || (flag2 != nullptr && *flag2 != 0);
    return set != run_when_set;
  }
};

// Output of a GEMM kernel: fp32 or bf16, row-major with a leading dimension in elements. C (read
// when beta != 0) has the same type and may alias D.
struct gemm_output_desc {
  void* d = nullptr;
  const void* c = nullptr;
  std::size_t ldd = 0, ldc = 0;
  bool bf16 = false;
  float alpha = 1.0f, beta = 0.0f;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
