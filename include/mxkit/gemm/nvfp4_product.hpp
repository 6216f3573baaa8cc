// SPDX-License-Identifier: Apache-2.0
#pragma once
// The argument checks of a GEMM over two NVFP4 copies (formats::nvfp4 or formats::nvfp4_2d,
// tensor/nvfp4_tensor.hpp), shared by the host reference (ref/nvfp4_gemm.hpp) and the device
// entry points (gpu/gemm/nvfp4.hpp), so both refuse the same calls with the same words. The
// operand roles are the MX ones (gemm/product.hpp): every copy is stored with its block axis
// contiguous, so fprop takes X and W rowwise, dgrad dY rowwise and W columnwise, wgrad dY and X
// columnwise, and the reduction axis is the block axis of both.
//
// A 16 x 16 copy (weights, arXiv 2509.25149's 2-D scaling) stores one scale per (line, 16
// elements along the line) like a 1 x 16 one (the 16 lines of a tile hold the same byte), so
// the two block shapes mix freely: the GEMM sees one E4M3 scale per 16 along K on each side.
#include <cstddef>
#include <cstdint>
#include <ios>

#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/error.hpp>
#include <mxkit/gemm/product.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {

// Both layouts are NVFP4 copies a GEMM can read (check_nvfp4_layout), their reduction lengths
// agree and are whole 16-element blocks: the padding of a ragged K would be read as the zeros
// the quantizer stores there, but a copy made elsewhere need not hold zeros, so a ragged K is
// refused as the MX GEMMs refuse one (check_mx_gemm).
inline gemm_shape check_nvfp4_gemm(const block_layout& la, const block_layout& lb, const char* what) {
  check_nvfp4_layout(la, what, ": A");
  check_nvfp4_layout(lb, what, ": B");
  require(la.line_length() == lb.line_length(), what, ": reduction lengths differ: A has ", la.line_length(), " (", name_of(la.axis),
          " ", la.rows, "x", la.cols, "), B has ", lb.line_length(), " (", name_of(lb.axis), " ", lb.rows, "x", lb.cols, ")");
  require(la.line_length() % nvfp4_block_size == 0, what, ": reduction length K=", la.line_length(),
          " is not a multiple of the NVFP4 block size ", nvfp4_block_size);
  return {la.lines(), lb.lines(), la.line_length()};
}

// The two copies were rotated alike (the 16-point Hadamard after the same sign vector D:
// (H D)^T (H D) = I only for one D), or neither was.
inline void check_nvfp4_rotation(const nvfp4_options& a, const nvfp4_options& b, const char* what) {
  const std::uint32_t sa = a.hadamard ? a.hadamard_signs & 0xFFFFu : 0u, sb = b.hadamard ? b.hadamard_signs & 0xFFFFu : 0u;
  if (a.hadamard == b.hadamard && sa == sb) return;
  fail(what, ": operands were rotated differently: A ", a.hadamard ? "with" : "without", " Hadamard (signs 0x", std::hex, sa,
       "), B ", b.hadamard ? "with" : "without", " Hadamard (signs 0x", sb, std::dec,
       "); the rotation cancels only when both sides use the same one");
}

// The named training products over NVFP4 copies (check_product_axes), then the TN shape.
inline gemm_shape check_nvfp4_product(gemm_product p, const block_layout& a, const block_layout& b) {
  check_product_axes(p, a, b);
  return check_nvfp4_gemm(a, b, name_of(p));
}

// Data and scales present for a copy with elements (an empty operand may have neither), and
// scales in a layout the readers know.
template <class Byte>
void check_nvfp4_operand(const nvfp4_basic_view<Byte>& v, std::size_t reduction, const char* what, const char* name) {
  check_enum(v.scales_layout, scale_layout::aiter_shuffle, "scale_layout", what, ": ", name);
  require(v.layout.lines() == 0 || reduction == 0 || (v.data && v.scales), what, ": ", name, " has null data or scales (data ",
          v.data ? "set" : "null", ", scales ", v.scales ? "set" : "null", ") for a ", v.layout.lines(), "x", reduction, " ",
          nvfp4_format_name(v.layout.format), " copy");
}

}  // namespace detail
MXKIT_END_NAMESPACE
