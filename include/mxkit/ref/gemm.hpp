// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host reference GEMMs, the oracle every device kernel is checked against.
//   D[P,Q] = alpha * A . B^T + beta * D, A stored [P,R], B stored [Q,R]: both operands have the
//   reduction axis R contiguous, which is how the quantizer stores every copy (mx_tensor.hpp).
//   D is fp32 or bf16 (rounded to nearest-even once, from the fp32 result); beta == 0 never
//   reads D. Operand kinds: MX x MX (any element pair, e.g. E4M3 x E5M2), per-tensor FP8 x FP8,
//   and float/bf16/fp16 x float/bf16/fp16.
// MX operands: each 32-block pair's dot product is formed exactly (in double: exact for FP4,
// FP6, FP8 E4M3 and INT8 blocks; E5M2 products can span more than 53 bits in extreme blocks),
// multiplied by the two power-of-two scales, rounded to float and added to an fp32 accumulator
// in block order. Per-tensor FP8: products are exact in fp32 and summed in order, then the sum
// is multiplied by 1/(scale_a*scale_b). High precision: fp32 products summed in order.
//
// Tolerance from accumulation order (u = 2^-24, nb = R/32 blocks, S = sum_k |a_k b_k| with the
// scales applied). The reference rounds each block once and adds nb blocks, so
//   |d_ref - d_exact| <= (nb + 1) u S  (+ one rounding each for alpha, beta*C and bf16 output).
// A kernel that sums a block's 32 products in fp32 in another order, then adds blocks, is within
// (32 + nb + 1) u S of exact, hence within about (32 + 2 nb + 2) u S of the reference
// (validate_gemm, validation/validate_gemm.hpp, applies this bound element by element to a foreign output). FP8 tensor
// cores (Hopper's wgmma) do not sum a block in fp32: the products are exact but are aligned and
// added with fewer bits than fp32 (DeepSeek-V3 report, section 3.3.2: about 14 bits). mxkit's
// Hopper kernel therefore starts a fresh tensor-core sum for every 32-block (MX) or every 128
// elements (per-tensor FP8) and promotes it to an fp32 register sum, so the extra error stays
// relative to one block's products; tests/gpu/catch2_test_gemm.cu bounds it by 2^-9 S per
// element (the measured error is in docs/perf/gemm.md). MXFP4 x MXFP4
// block sums are small multiples of 1/4 and are exact on every path, as are blocks of small
// half-integers, which the GPU tests use to hold every path to the fp32 bound above.
// The training products name their operands so a block axis cannot meet the wrong reduction
// (gemm/product.hpp):
//   fprop  Y[M,N]  = X[M,K] . W[N,K]^T   X rowwise,     W rowwise
//   dgrad  dX[M,K] = dY[M,N] . W[N,K]    dY rowwise,    W columnwise
//   wgrad  dW[N,K] = dY[M,N]^T . X[M,K]  dY columnwise, X columnwise
#include <cstddef>
#include <vector>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/error.hpp>
#include <mxkit/gemm/product.hpp>
#include <mxkit/ref/parallel.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE

namespace detail {
// Element values (unscaled) of a stored MX copy as [lines, padded_length] doubles, plus the
// block scales as doubles (NaN for a NaN scale).
struct decoded_mx {
  std::size_t lines = 0, length = 0, blocks = 0, block_size = 0;  // block_size: elements per scale
  std::vector<double> values;
  std::vector<double> scales;
};
inline decoded_mx decode_mx(mx_const_view t, unsigned threads = 0) {
  const block_layout& l = t.layout;
  decoded_mx d{l.lines(), l.padded_length(), l.blocks_per_line(), l.block_size(), {}, {}};
  d.values.resize(d.lines * d.length);
  d.scales.resize(d.lines * d.blocks);
  visit_mx_type(l.mx(), [&](auto fmt) {
    using E = typename decltype(fmt)::element_type;
    double value[256];  // every code's element value (a table: the same values, fewer operations)
    for (int c = 0; c < 256; ++c) value[c] = E::from_bits(static_cast<std::uint8_t>(c)).to_float();
    parallel_chunks(d.lines, host_thread_count(threads, d.lines, static_cast<double>(d.lines * d.length)),
                    [&](std::size_t first, std::size_t last, std::size_t) {
                      for (std::size_t line = first; line < last; ++line) {
                        for (std::size_t p = 0; p < d.length; ++p) d.values[line * d.length + p] = value[t.code(line, p)];
                        for (std::size_t b = 0; b < d.blocks; ++b)
                          d.scales[line * d.blocks + b] = e8m0::from_bits(t.scale(line, b)).to_float();
                      }
                    });
  });
  return d;
}

// The reference's fp32 sums, one output element each (ref::gemm and validate_gemm call these, so
// both produce the same bits). MX: line i of A with line j of B, block dot products exact in
// double, times the two scales, rounded to float and added in block order.
inline float mx_reference_sum(const decoded_mx& a, std::size_t i, const decoded_mx& b, std::size_t j) noexcept {
  float acc = 0.0f;
  for (std::size_t k = 0; k < a.blocks; ++k) {
    const double* x = &a.values[i * a.length + k * a.block_size];
    const double* y = &b.values[j * b.length + k * a.block_size];
    double dot = 0.0;
    for (std::size_t e = 0; e < a.block_size; ++e) dot += x[e] * y[e];
    acc += static_cast<float>(dot * a.scales[i * a.blocks + k] * b.scales[j * b.blocks + k]);
  }
  return acc;
}
// Per-tensor FP8: decoded codes (unscaled), products exact in fp32, summed in order.
inline float fp8_reference_sum(const float* a_row, const float* b_row, std::size_t r) noexcept {
  float acc = 0.0f;
  for (std::size_t k = 0; k < r; ++k) acc += a_row[k] * b_row[k];
  return acc;
}
// High precision: fp32 products summed in order.
template <class TA, class TB>
float hp_reference_sum(const matrix_view<TA>& a, std::size_t i, const matrix_view<TB>& b, std::size_t j) noexcept {
  float acc = 0.0f;
  for (std::size_t k = 0; k < a.cols; ++k) acc += load_float(a(i, k)) * load_float(b(j, k));
  return acc;
}

// alpha*acc + beta*D, then the output type's rounding (bf16: nearest-even, overflow to Inf as
// an IEEE conversion does, NaN stays NaN).
template <gemm_output Out>
void store(const matrix_view<Out>& d, std::size_t i, std::size_t j, float acc, float alpha, float beta) {
  const float v = beta == 0.0f ? alpha * acc : alpha * acc + beta * load_float(d(i, j));  // beta 0 ignores NaN in D
  if constexpr (std::is_same_v<Out, float>) d(i, j) = v;
  else d(i, j) = bfloat16::from_float(v, rounding::nearest_even, overflow::propagate);
}
}  // namespace detail

namespace ref {

// `threads` (every overload): host threads over the output rows (ref/parallel.hpp; 0 = as the
// machine and the size allow). Each output element is summed by one thread in the order above,
// so the result does not depend on it.

// D = alpha * A.B^T + beta * D for two MX copies (any element types; same rotation on both).
template <gemm_output Out>
void gemm(mx_const_view a, mx_const_view b, matrix_view<Out> d, float alpha = 1.0f, float beta = 0.0f, unsigned threads = 0) {
  const gemm_shape s = detail::check_mx_gemm(a.layout, b.layout, "gemm");
  detail::check_rotation(a.options, b.options, "gemm");
  detail::check_output(d, s, "gemm");
  detail::require(s.p == 0 || s.r == 0 || (a.data && a.scales), "gemm: A has null data or scales (data ", a.data ? "set" : "null",
                  ", scales ", a.scales ? "set" : "null", ") for a ", a.layout.lines(), "x", s.r, " ", format_name(a.layout.format), " copy");
  detail::require(s.q == 0 || s.r == 0 || (b.data && b.scales), "gemm: B has null data or scales (data ", b.data ? "set" : "null",
                  ", scales ", b.scales ? "set" : "null", ") for a ", b.layout.lines(), "x", s.r, " ", format_name(b.layout.format), " copy");
  const detail::decoded_mx A = detail::decode_mx(a, threads), B = detail::decode_mx(b, threads);
  detail::parallel_chunks(A.lines, detail::host_thread_count(threads, A.lines, s.flops() / 2),
                          [&](std::size_t first, std::size_t last, std::size_t) {
                            for (std::size_t i = first; i < last; ++i)
                              for (std::size_t j = 0; j < B.lines; ++j)
                                detail::store(d, i, j, detail::mx_reference_sum(A, i, B, j), alpha, beta);
                          });
}

inline std::vector<float> gemm(const mx_tensor& a, const mx_tensor& b) {
  std::vector<float> out(detail::checked_mul({"A lines", a.layout().lines()}, {"B lines", b.layout().lines()}, "gemm"));
  gemm(a.view(), b.view(), matrix_view<float>{out.data(), a.layout().lines(), b.layout().lines()});
  return out;
}

// Per-tensor scaled FP8 (delayed scaling): D = alpha * (A.B^T) / (scale_a * scale_b) + beta * D,
// A [P,R], B [Q,R] codes; products are exact in fp32, accumulated in order.
template <gemm_output Out>
void gemm(fp8_view a, fp8_view b, matrix_view<Out> d, float alpha = 1.0f, float beta = 0.0f, unsigned threads = 0) {
  detail::check_fp8_view(a, "gemm", "A");
  detail::check_fp8_view(b, "gemm", "B");
  const gemm_shape s = detail::check_tn(a.rows, a.cols, b.rows, b.cols, "gemm");
  detail::check_output(d, s, "gemm");
  std::vector<float> av(a.rows * a.cols), bv(b.rows * b.cols);
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = fp8_decode(a.data[i], a.type);
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = fp8_decode(b.data[i], b.type);
  const float descale = a.scale_inv() * b.scale_inv();
  detail::parallel_chunks(a.rows, detail::host_thread_count(threads, a.rows, s.flops() / 2),
                          [&](std::size_t first, std::size_t last, std::size_t) {
                            for (std::size_t i = first; i < last; ++i)
                              for (std::size_t j = 0; j < b.rows; ++j)
                                detail::store(d, i, j, detail::fp8_reference_sum(&av[i * a.cols], &bv[j * b.cols], a.cols) * descale,
                                              alpha, beta);
                          });
}
template <gemm_output Out>
void gemm(const fp8_tensor& a, const fp8_tensor& b, matrix_view<Out> d, float alpha = 1.0f, float beta = 0.0f,
          unsigned threads = 0) {
  detail::check_fp8_tensor(a, "gemm", ": A");
  detail::check_fp8_tensor(b, "gemm", ": B");
  gemm(as_view(a), as_view(b), d, alpha, beta, threads);
}

// High-precision operands (float, bf16 or fp16 storage), fp32 accumulation in order.
template <class TA, class TB, gemm_output Out>
  requires quantizer_input<TA> && quantizer_input<TB>
void gemm(matrix_view<TA> a, matrix_view<TB> b, matrix_view<Out> d, float alpha = 1.0f, float beta = 0.0f,
          unsigned threads = 0) {
  const gemm_shape s = detail::check_tn(a.rows, a.cols, b.rows, b.cols, "gemm");
  detail::require(a.rows == 0 || a.cols == 0 || a.data != nullptr, "gemm: A has null data for a ", a.rows, "x", a.cols, " matrix");
  detail::require(b.rows == 0 || b.cols == 0 || b.data != nullptr, "gemm: B has null data for a ", b.rows, "x", b.cols, " matrix");
  detail::check_matrix(a, "gemm: A");
  detail::check_matrix(b, "gemm: B");
  detail::check_output(d, s, "gemm");
  detail::parallel_chunks(a.rows, detail::host_thread_count(threads, a.rows, s.flops() / 2),
                          [&](std::size_t first, std::size_t last, std::size_t) {
                            for (std::size_t i = first; i < last; ++i)
                              for (std::size_t j = 0; j < b.rows; ++j)
                                detail::store(d, i, j, detail::hp_reference_sum(a, i, b, j), alpha, beta);
                          });
}

// ---- The training products (operand roles and checks: gemm/product.hpp) ----------------------------

// MX copies, output into `d` with the epilogue.
template <gemm_output Out>
void product(gemm_product p, mx_const_view a, mx_const_view b, matrix_view<Out> d, gemm_epilogue e = {}) {
  detail::check_mx_product(p, a.layout, b.layout);
  gemm(a, b, d, e.alpha, e.beta);
}
// Per-tensor FP8: a, b are the row-major copies named by detail::tn_operand_names(p).
template <gemm_output Out>
void product(gemm_product p, fp8_view a, fp8_view b, matrix_view<Out> d, gemm_epilogue e = {}) {
  detail::check_product(p);
  const detail::tn_names n = detail::tn_operand_names(p);
  detail::check_tn(a.rows, a.cols, b.rows, b.cols, name_of(p), n.a, n.b);
  gemm(a, b, d, e.alpha, e.beta);
}
// High precision (bf16, fp16 or float storage), same operand roles as FP8.
template <class TA, class TB, gemm_output Out>
  requires quantizer_input<TA> && quantizer_input<TB>
void product(gemm_product p, matrix_view<TA> a, matrix_view<TB> b, matrix_view<Out> d, gemm_epilogue e = {}) {
  detail::check_product(p);
  const detail::tn_names n = detail::tn_operand_names(p);
  detail::check_tn(a.rows, a.cols, b.rows, b.cols, name_of(p), n.a, n.b);
  gemm(a, b, d, e.alpha, e.beta);
}

// The training products with the signatures of gpu::fprop, gpu::dgrad and gpu::wgrad (host
// pointers), so a device result and its reference are one name apart.
template <gemm_output Out>
void fprop(mx_const_view x_rowwise, mx_const_view w_rowwise, matrix_view<Out> y, gemm_epilogue e = {}) {
  product(gemm_product::fprop, x_rowwise, w_rowwise, y, e);
}
template <gemm_output Out>
void dgrad(mx_const_view dy_rowwise, mx_const_view w_columnwise, matrix_view<Out> dx, gemm_epilogue e = {}) {
  product(gemm_product::dgrad, dy_rowwise, w_columnwise, dx, e);
}
template <gemm_output Out>
void wgrad(mx_const_view dy_columnwise, mx_const_view x_columnwise, matrix_view<Out> dw, gemm_epilogue e = {}) {
  product(gemm_product::wgrad, dy_columnwise, x_columnwise, dw, e);
}

// The same on owning tensors, returning a new fp32 matrix.
// Y[M,N] = X[M,K] . W[N,K]^T
inline std::vector<float> fprop(const mx_tensor& x_rowwise, const mx_tensor& w_rowwise) {
  const gemm_shape s = detail::check_mx_product(gemm_product::fprop, x_rowwise.layout(), w_rowwise.layout());
  std::vector<float> out(detail::checked_mul({"output rows", s.p}, {"output cols", s.q}, "fprop"));
  product(gemm_product::fprop, x_rowwise.view(), w_rowwise.view(), matrix_view<float>{out.data(), s.p, s.q});
  return out;
}
// dX[M,K] = dY[M,N] . W[N,K]
inline std::vector<float> dgrad(const mx_tensor& dy_rowwise, const mx_tensor& w_columnwise) {
  const gemm_shape s = detail::check_mx_product(gemm_product::dgrad, dy_rowwise.layout(), w_columnwise.layout());
  std::vector<float> out(detail::checked_mul({"output rows", s.p}, {"output cols", s.q}, "dgrad"));
  product(gemm_product::dgrad, dy_rowwise.view(), w_columnwise.view(), matrix_view<float>{out.data(), s.p, s.q});
  return out;
}
// dW[N,K] = dY[M,N]^T . X[M,K]
inline std::vector<float> wgrad(const mx_tensor& dy_columnwise, const mx_tensor& x_columnwise) {
  const gemm_shape s = detail::check_mx_product(gemm_product::wgrad, dy_columnwise.layout(), x_columnwise.layout());
  std::vector<float> out(detail::checked_mul({"output rows", s.p}, {"output cols", s.q}, "wgrad"));
  product(gemm_product::wgrad, dy_columnwise.view(), x_columnwise.view(), matrix_view<float>{out.data(), s.p, s.q});
  return out;
}

}  // namespace ref
MXKIT_END_NAMESPACE
