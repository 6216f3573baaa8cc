// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host reference GEMM over two NVFP4 copies (formats::nvfp4, formats::nvfp4_2d), the oracle
// of the device NVFP4 GEMM (gpu/gemm/nvfp4.hpp):
//   D[P,Q] = alpha * (A . B^T) + beta * D,  A stored [P,R], B stored [Q,R] (block axis = R)
// with the operand roles, checks and output rounding of the MX reference (ref/gemm.hpp,
// gemm/product.hpp; the NVFP4 checks: gemm/nvfp4_product.hpp).
//
// A value of an NVFP4 copy is e2m1 x e4m3 x t (block/nvfp4_scale.hpp; arXiv 2509.25149). The
// tensor scales are common to every product, so they multiply the sum once:
//   acc    = the MX reference's sum (detail::mx_reference_sum) over 16-element blocks: each
//            block pair's dot product of E2M1 values formed exactly in double (|sum| <= 16 x 36,
//            multiples of 1/4), times the two E4M3 scales (4 significant bits each: still exact),
//            rounded to float once and added to an fp32 accumulator in block order;
//   D      = alpha * (acc * fl(t_a * t_b)) + beta * D, then the output type's rounding, as the
//            device paths' epilogues order it (the per-tensor FP8 descale's place).
// The elements and scales are decoded by the format types themselves (e2m1, e4m3: the decode of
// block/nvfp4_scale.hpp, nvfp4_decode, without its last factor t): a NaN scale (0x7F, 0xFF)
// makes its block NaN, a zero scale its block zero. fl(t_a * t_b) is one fp32 product: for tensor
// scales whose product leaves fp32's range (both below about 2^-63, or above 2^63) it flushes or
// overflows, as it does on the device; quantizer-made scales (amax / 2688) are far from that.
// The error of another summation order (the device's fp32 tensor-core sums) is bounded as for
// MX (ref/gemm.hpp) with 16-element blocks: every product is exact, so a device sum over all K
// in fp32 lies within about (K + 2 R/16 + 2) u S of this one (u = 2^-24, S = sum |a b| t_a t_b).
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/gemm/nvfp4_product.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/parallel.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

MXKIT_BEGIN_NAMESPACE

namespace detail {
static_assert(!(e4m3::quiet_nan().to_float() == e4m3::quiet_nan().to_float()), "a NaN scale decodes to NaN (nvfp4_decode)");

// An NVFP4 copy as the MX reference sum reads one: E2M1 element values [lines, padded_length]
// and E4M3 scale values [lines, blocks] (any stored scale layout), blocks of 16.
template <class Byte>
decoded_mx decode_nvfp4(const nvfp4_basic_view<Byte>& t, unsigned threads = 0) {
  const block_layout& l = t.layout;
  decoded_mx d{l.lines(), l.padded_length(), l.blocks_per_line(), l.block_size(), {}, {}};
  d.values.resize(d.lines * d.length);
  d.scales.resize(d.lines * d.blocks);
  double value[16];  // every code's element value
  for (int c = 0; c < 16; ++c) value[c] = e2m1::from_bits(static_cast<std::uint8_t>(c)).to_float();
  parallel_chunks(d.lines, host_thread_count(threads, d.lines, static_cast<double>(d.lines * d.length)),
                  [&](std::size_t first, std::size_t last, std::size_t) {
                    for (std::size_t line = first; line < last; ++line) {
                      for (std::size_t p = 0; p < d.length; ++p) d.values[line * d.length + p] = value[t.code(line, p)];
                      for (std::size_t b = 0; b < d.blocks; ++b) d.scales[line * d.blocks + b] = e4m3::from_bits(t.scale(line, b)).to_float();
                    }
                  });
  return d;
}

// The checks of one NVFP4 GEMM on host copies: shapes, rotation, output, operands, tensor scales.
template <class Byte, class Out>
gemm_shape check_nvfp4_host_gemm(const nvfp4_basic_view<Byte>& a, const nvfp4_basic_view<Byte>& b, const matrix_view<Out>& d,
                                 const char* what) {
  const gemm_shape s = check_nvfp4_gemm(a.layout, b.layout, what);
  check_nvfp4_rotation(a.options, b.options, what);
  check_output(d, s, what);
  check_nvfp4_operand(a, s.r, what, "A");
  check_nvfp4_operand(b, s.r, what, "B");
  check_tensor_scale(a.tensor_scale, what, ": A");
  check_tensor_scale(b.tensor_scale, what, ": B");
  return s;
}
}  // namespace detail

namespace ref {

// D = alpha * A.B^T + beta * D for two NVFP4 copies (host pointers; any block shape and scale
// layout on either side; the same rotation on both). threads: as ref::gemm's.
template <gemm_output Out>
void gemm(nvfp4_const_view a, nvfp4_const_view b, matrix_view<Out> d, float alpha = 1.0f, float beta = 0.0f, unsigned threads = 0) {
  detail::check_nvfp4_host_gemm(a, b, d, "gemm");
  const detail::decoded_mx A = detail::decode_nvfp4(a, threads), B = detail::decode_nvfp4(b, threads);
  const float descale = a.tensor_scale * b.tensor_scale;
  detail::parallel_chunks(A.lines, detail::host_thread_count(threads, A.lines, 2.0 * static_cast<double>(A.lines * B.lines * A.length)),
                          [&](std::size_t first, std::size_t last, std::size_t) {
                            for (std::size_t i = first; i < last; ++i)
                              for (std::size_t j = 0; j < B.lines; ++j)
                                detail::store(d, i, j, detail::mx_reference_sum(A, i, B, j) * descale, alpha, beta);
                          });
}

inline std::vector<float> gemm(const nvfp4_tensor& a, const nvfp4_tensor& b) {
  std::vector<float> out(detail::checked_mul({"A lines", a.layout().lines()}, {"B lines", b.layout().lines()}, "gemm"));
  gemm(a.view(), b.view(), matrix_view<float>{out.data(), a.layout().lines(), b.layout().lines()});
  return out;
}

// The training products (operand roles: gemm/product.hpp), with the signatures of the device
// ones (gpu/gemm/nvfp4.hpp).
template <gemm_output Out>
void product(gemm_product p, nvfp4_const_view a, nvfp4_const_view b, matrix_view<Out> d, gemm_epilogue e = {}) {
  detail::check_nvfp4_product(p, a.layout, b.layout);
  gemm(a, b, d, e.alpha, e.beta);
}
// Y[M,N] = X[M,K] . W[N,K]^T
template <gemm_output Out>
void fprop(nvfp4_const_view x_rowwise, nvfp4_const_view w_rowwise, matrix_view<Out> y, gemm_epilogue e = {}) {
  product(gemm_product::fprop, x_rowwise, w_rowwise, y, e);
}
// dX[M,K] = dY[M,N] . W[N,K]
template <gemm_output Out>
void dgrad(nvfp4_const_view dy_rowwise, nvfp4_const_view w_columnwise, matrix_view<Out> dx, gemm_epilogue e = {}) {
  product(gemm_product::dgrad, dy_rowwise, w_columnwise, dx, e);
}
// dW[N,K] = dY[M,N]^T . X[M,K]
template <gemm_output Out>
void wgrad(nvfp4_const_view dy_columnwise, nvfp4_const_view x_columnwise, matrix_view<Out> dw, gemm_epilogue e = {}) {
  product(gemm_product::wgrad, dy_columnwise, x_columnwise, dw, e);
}

// A product on owning copies, as a new fp32 [P, Q] matrix.
inline std::vector<float> product(gemm_product p, const nvfp4_tensor& a, const nvfp4_tensor& b) {
  const gemm_shape s = detail::check_nvfp4_product(p, a.layout(), b.layout());
  std::vector<float> out(detail::checked_mul({"output rows", s.p}, {"output cols", s.q}, name_of(p)));
  product(p, a.view(), b.view(), matrix_view<float>{out.data(), s.p, s.q});
  return out;
}

}  // namespace ref
MXKIT_END_NAMESPACE
