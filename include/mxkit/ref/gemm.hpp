#pragma once
// Host reference GEMMs, the oracle every device kernel is checked against.
//   D[P,Q] = alpha * A . B^T + beta * D, A stored [P,R], B stored [Q,R]: both operands have the
//   reduction axis R contiguous, which is how the quantizer stores every copy (mx_tensor.hpp).
// MX operands: each 32-block pair's dot product is formed exactly (in double: exact for FP4,
// FP6, FP8 E4M3 and INT8 blocks; E5M2 products can span more than 53 bits in extreme blocks),
// multiplied by the two power-of-two scales, rounded to float and added to an fp32 accumulator
// in block order. A device kernel that sums in another order differs by fp32 accumulation error
// only: |d - d_ref| <= ~R/32 * 2^-24 * sum_k |a_k b_k| (each block's rounding plus the adds).
// The training products name their operands so a block axis cannot meet the wrong reduction:
//   fprop  Y[M,N]  = X[M,K] . W[N,K]^T   X rowwise,     W rowwise
//   dgrad  dX[M,K] = dY[M,N] . W[N,K]    dY rowwise,    W columnwise
//   wgrad  dW[N,K] = dY[M,N]^T . X[M,K]  dY columnwise, X columnwise
#include <cstddef>
#include <vector>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/error.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE

namespace detail {
// Element values (unscaled) of a stored MX copy as [lines, padded_length] doubles, plus the
// block scales as doubles (NaN for a NaN scale).
struct decoded_mx {
  std::size_t lines = 0, length = 0, blocks = 0;
  std::vector<double> values;
  std::vector<double> scales;
};
inline decoded_mx decode_mx(mx_const_view t) {
  const mx_layout& l = t.layout;
  decoded_mx d{l.lines(), l.padded_length(), l.blocks_per_line(), {}, {}};
  d.values.resize(d.lines * d.length);
  d.scales.resize(d.lines * d.blocks);
  visit_mx_type(l.type, [&](auto fmt) {
    using E = typename decltype(fmt)::element_type;
    for (std::size_t line = 0; line < d.lines; ++line) {
      for (std::size_t p = 0; p < d.length; ++p) d.values[line * d.length + p] = E::from_bits(t.code(line, p)).to_float();
      for (std::size_t b = 0; b < d.blocks; ++b) d.scales[line * d.blocks + b] = e8m0::from_bits(t.scale(line, b)).to_float();
    }
  });
  return d;
}

inline void check_output(const matrix_view<float>& d, std::size_t p, std::size_t q, const char* what) {
  require(d.rows == p && d.cols == q, what, ": output is ", d.rows, "x", d.cols, ", expected ", p, "x", q);
  require(p == 0 || q == 0 || d.data != nullptr, what, ": null output");
  require(d.ld == 0 || d.ld >= d.cols, what, ": output leading dimension ", d.ld, " is smaller than cols ", d.cols);
}

inline void store(const matrix_view<float>& d, std::size_t i, std::size_t j, float acc, float alpha, float beta) {
  d(i, j) = beta == 0.0f ? alpha * acc : alpha * acc + beta * d(i, j);  // beta 0 ignores NaN in D
}
}  // namespace detail

// D = alpha * A.B^T + beta * D for two MX copies (any element types; same rotation on both).
inline void gemm_reference(mx_const_view a, mx_const_view b, matrix_view<float> d, float alpha = 1.0f, float beta = 0.0f) {
  const mx_layout &la = a.layout, &lb = b.layout;
  detail::require(la.line_length() == lb.line_length(), "gemm: reduction lengths differ: A has ", la.line_length(),
                  " (", name_of(la.axis), " ", la.rows, "x", la.cols, "), B has ", lb.line_length(), " (", name_of(lb.axis), " ",
                  lb.rows, "x", lb.cols, ")");
  detail::require(la.line_length() % mx_block_size == 0, "gemm: reduction length K=", la.line_length(),
                  " is not a multiple of the MX block size 32");
  detail::require(a.options.hadamard == b.options.hadamard && a.options.sign_mask() == b.options.sign_mask(),
                  "gemm: operands were rotated differently (Hadamard ", a.options.hadamard, " vs ", b.options.hadamard,
                  "); the rotation cancels only when both sides use the same one");
  detail::check_output(d, la.lines(), lb.lines(), "gemm");
  const detail::decoded_mx A = detail::decode_mx(a), B = detail::decode_mx(b);
  for (std::size_t i = 0; i < A.lines; ++i)
    for (std::size_t j = 0; j < B.lines; ++j) {
      float acc = 0.0f;
      for (std::size_t k = 0; k < A.blocks; ++k) {
        const double* x = &A.values[i * A.length + k * mx_block_size];
        const double* y = &B.values[j * B.length + k * mx_block_size];
        double dot = 0.0;
        for (int e = 0; e < mx_block_size; ++e) dot += x[e] * y[e];
        acc += static_cast<float>(dot * A.scales[i * A.blocks + k] * B.scales[j * B.blocks + k]);
      }
      detail::store(d, i, j, acc, alpha, beta);
    }
}

inline std::vector<float> gemm_reference(const mx_tensor& a, const mx_tensor& b) {
  std::vector<float> out(a.layout().lines() * b.layout().lines());
  gemm_reference(a.view(), b.view(), matrix_view<float>{out.data(), a.layout().lines(), b.layout().lines()});
  return out;
}

// Per-tensor scaled FP8 (delayed scaling): D = alpha * (A.B^T) / (scale_a * scale_b) + beta * D,
// A [P,R], B [Q,R] codes; products are exact in fp32, accumulated in order.
inline void gemm_reference(const fp8_tensor& a, const fp8_tensor& b, matrix_view<float> d, float alpha = 1.0f, float beta = 0.0f) {
  detail::require(a.cols == b.cols, "gemm: reduction lengths differ: A is ", a.rows, "x", a.cols, ", B is ", b.rows, "x", b.cols);
  detail::check_output(d, a.rows, b.rows, "gemm");
  std::vector<float> av(a.data.size()), bv(b.data.size());
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = fp8_decode(a.data[i], a.type);
  for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = fp8_decode(b.data[i], b.type);
  const float descale = a.scale_inv() * b.scale_inv();
  for (std::size_t i = 0; i < a.rows; ++i)
    for (std::size_t j = 0; j < b.rows; ++j) {
      float acc = 0.0f;
      for (std::size_t k = 0; k < a.cols; ++k) acc += av[i * a.cols + k] * bv[j * b.cols + k];
      detail::store(d, i, j, acc * descale, alpha, beta);
    }
}

// High-precision operands (float, bf16 or fp16 storage), fp32 accumulation in order.
template <class TA, class TB>
  requires quantizer_input<TA> && quantizer_input<TB>
void gemm_reference(matrix_view<TA> a, matrix_view<TB> b, matrix_view<float> d, float alpha = 1.0f, float beta = 0.0f) {
  detail::require(a.cols == b.cols, "gemm: reduction lengths differ: A is ", a.rows, "x", a.cols, ", B is ", b.rows, "x", b.cols);
  detail::check_output(d, a.rows, b.rows, "gemm");
  for (std::size_t i = 0; i < a.rows; ++i)
    for (std::size_t j = 0; j < b.rows; ++j) {
      float acc = 0.0f;
      for (std::size_t k = 0; k < a.cols; ++k) acc += load_float(a(i, k)) * load_float(b(j, k));
      detail::store(d, i, j, acc, alpha, beta);
    }
}

namespace detail {
inline void require_axis(const mx_tensor& t, block_axis want, const char* product, const char* operand) {
  require(t.axis() == want, product, ": ", operand, " must be the ", name_of(want), " copy, got the ", name_of(t.axis()), " copy");
}
}  // namespace detail

// Y[M,N] = X[M,K] . W[N,K]^T
inline std::vector<float> fprop_reference(const mx_tensor& x_rowwise, const mx_tensor& w_rowwise) {
  detail::require_axis(x_rowwise, block_axis::rowwise, "fprop", "X");
  detail::require_axis(w_rowwise, block_axis::rowwise, "fprop", "W");
  detail::require(x_rowwise.cols() == w_rowwise.cols(), "fprop: X is ", x_rowwise.rows(), "x", x_rowwise.cols(), " but W is ",
                  w_rowwise.rows(), "x", w_rowwise.cols(), " (K must match)");
  return gemm_reference(x_rowwise, w_rowwise);
}
// dX[M,K] = dY[M,N] . W[N,K]
inline std::vector<float> dgrad_reference(const mx_tensor& dy_rowwise, const mx_tensor& w_columnwise) {
  detail::require_axis(dy_rowwise, block_axis::rowwise, "dgrad", "dY");
  detail::require_axis(w_columnwise, block_axis::columnwise, "dgrad", "W");
  detail::require(dy_rowwise.cols() == w_columnwise.rows(), "dgrad: dY is ", dy_rowwise.rows(), "x", dy_rowwise.cols(), " but W is ",
                  w_columnwise.rows(), "x", w_columnwise.cols(), " (N must match)");
  return gemm_reference(dy_rowwise, w_columnwise);
}
// dW[N,K] = dY[M,N]^T . X[M,K]
inline std::vector<float> wgrad_reference(const mx_tensor& dy_columnwise, const mx_tensor& x_columnwise) {
  detail::require_axis(dy_columnwise, block_axis::columnwise, "wgrad", "dY");
  detail::require_axis(x_columnwise, block_axis::columnwise, "wgrad", "X");
  detail::require(dy_columnwise.rows() == x_columnwise.rows(), "wgrad: dY is ", dy_columnwise.rows(), "x", dy_columnwise.cols(),
                  " but X is ", x_columnwise.rows(), "x", x_columnwise.cols(), " (M must match)");
  return gemm_reference(dy_columnwise, x_columnwise);
}

MXKIT_END_NAMESPACE
