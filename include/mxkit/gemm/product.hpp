// SPDX-License-Identifier: Apache-2.0
#pragma once
// GEMM descriptors and argument checks shared by the host reference (ref/gemm.hpp) and the device
// entry points (gpu/gemm/gemm.hpp), so both reject the same calls with the same words.
//
// Every product is one "TN" GEMM over operands stored with the reduction axis contiguous:
//   D[P,Q] = alpha * A[P,R] . B[Q,R]^T + beta * C          (fp32 accumulation)
// The quantizer stores every MX copy that way (mx_tensor.hpp: columnwise copies are transposed),
// so the three training products only choose which copies meet:
//   fprop  Y[M,N]  = X[M,K] . W[N,K]^T   A = X rowwise      B = W rowwise      R = K
//   dgrad  dX[M,K] = dY[M,N] . W[N,K]    A = dY rowwise     B = W columnwise   R = N
//   wgrad  dW[N,K] = dY[M,N]^T . X[M,K]  A = dY columnwise  B = X columnwise   R = M
// A block axis is the reduction axis exactly when both copies are the ones named above, which is
// what check_mx_product enforces. Per-tensor FP8 and bf16 operands carry no axis: their named
// products take the row-major copies [P,R] and [Q,R] (the transposed copies for dgrad/wgrad,
// e.g. fp8_tensor's transpose()) and check shapes only.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE

// D[p,q] = A[p,r] . B[q,r]^T
struct gemm_shape {
  std::size_t p = 0, q = 0, r = 0;
  constexpr double flops() const noexcept { return 2.0 * static_cast<double>(p) * static_cast<double>(q) * static_cast<double>(r); }
};

// D = alpha * A.B^T + beta * C. beta == 0 never reads C (so C may hold NaN or be unset).
struct gemm_epilogue {
  float alpha = 1.0f;
  float beta = 0.0f;
};

enum class gemm_product : std::uint8_t { fprop, dgrad, wgrad };

template <>
struct enum_names<gemm_product> {
  static constexpr const char* names[] = {"fprop", "dgrad", "wgrad"};
  static constexpr gemm_product last = gemm_product::wgrad;
};

// Output element types: fp32, or bf16 rounded to nearest-even from the fp32 result.
template <class T>
concept gemm_output = std::is_same_v<T, float> || std::is_same_v<T, bfloat16>;

// Non-owning per-tensor scaled FP8 matrix: row-major [rows, cols] codes, value = code / scale.
// Host or device pointer (fp8_tensor is the owning host form).
struct fp8_view {
  fp8_type type = fp8_type::e4m3;
  std::size_t rows = 0, cols = 0;
  float scale = 1.0f;
  const std::uint8_t* data = nullptr;

  MXKIT_HD constexpr float scale_inv() const noexcept { return 1.0f / scale; }
};

// The view of an owning host FP8 tensor; refuses codes that do not fill rows x cols (the view
// carries no size, so its readers trust the shape).
inline fp8_view as_view(const fp8_tensor& t) {
  detail::check_fp8_tensor(t, "as_view");
  return {t.type, t.rows, t.cols, t.scale, t.data.data()};
}

// Lines [begin, begin+count) of a stored MX copy as a view (no copy). The logical matrix
// shrinks along the line axis: rows for a rowwise copy, cols for a columnwise one.
inline mx_const_view slice_lines(mx_const_view v, std::size_t begin, std::size_t count) {
  // Not begin + count <= lines: that sum can wrap around and let a huge begin through.
  detail::require(begin <= v.layout.lines() && count <= v.layout.lines() - begin, "slice_lines: ", count, " lines from line ", begin,
                  " exceed the ", v.layout.lines(), " lines of the copy");
  // A line range of a tiled scale layout is not a contiguous range of its bytes.
  detail::require(v.scales_layout == scale_layout::row_major, "slice_lines: the copy's scales are stored ", name_of(v.scales_layout),
                  "; slicing needs row_major scales");
  mx_const_view s = v;
  (v.layout.axis == block_axis::rowwise ? s.layout.rows : s.layout.cols) = count;
  s.data = v.data ? v.data + begin * v.layout.line_bytes() : nullptr;
  s.scales = v.scales ? v.scales + begin * v.layout.blocks_per_line() : nullptr;
  return s;
}

// A host copy holding the chosen lines of a host MX copy, in that order (used to check a few
// rows of a large product against the reference).
inline mx_tensor gather_lines(mx_const_view v, const std::vector<std::size_t>& lines) {
  detail::check_mx_layout(v.layout, "gather_lines");
  block_layout l = v.layout;
  (l.axis == block_axis::rowwise ? l.rows : l.cols) = lines.size();
  mx_tensor out(l, v.options);
  const std::size_t lb = l.line_bytes(), nb = l.blocks_per_line();
  detail::require(lines.empty() || ((lb == 0 || v.data) && (nb == 0 || v.scales)), "gather_lines: the copy has null data or scales (data ",
                  v.data ? "set" : "null", ", scales ", v.scales ? "set" : "null", ") for ", l.line_bytes(), " bytes and ", nb,
                  " scales per line");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    detail::require(lines[i] < v.layout.lines(), "gather_lines: line ", lines[i], " is out of range: the copy has ", v.layout.lines(),
                    " lines");
    for (std::size_t b = 0; b < lb; ++b) out.data()[i * lb + b] = v.data[lines[i] * lb + b];
    for (std::size_t b = 0; b < nb; ++b) out.scales()[i * nb + b] = v.scale(lines[i], b);
  }
  return out;
}

namespace detail {

// Both layouts are ones a GEMM can read (known format and axis, sizes that fit: check_mx_layout),
// reduction lengths agree and are whole blocks of one block size (the formats').
inline gemm_shape check_mx_gemm(const block_layout& la, const block_layout& lb, const char* what) {
  check_mx_layout(la, what, ": A");
  check_mx_layout(lb, what, ": B");
  require(la.line_length() == lb.line_length(), what, ": reduction lengths differ: A has ", la.line_length(), " (",
          name_of(la.axis), " ", la.rows, "x", la.cols, "), B has ", lb.line_length(), " (", name_of(lb.axis), " ", lb.rows,
          "x", lb.cols, ")");
  require(la.block_size() == lb.block_size(), what, ": block sizes differ: A (", format_name(la.format), ") has ", la.block_size(),
          ", B (", format_name(lb.format), ") has ", lb.block_size());
  require(la.line_length() % la.block_size() == 0, what, ": reduction length K=", la.line_length(),
          " is not a multiple of the MX block size ", la.block_size());
  return {la.lines(), lb.lines(), la.line_length()};
}

// "with Hadamard and random signs 0x1a2b (seed 7)": the rotation as the check compares it.
inline std::string rotation_text(const quantize_options& o) {
  if (!o.hadamard) return "without rotation";
  if (!o.random_signs) return "with Hadamard and no random signs";
  std::ostringstream s;
  s << "with Hadamard and random signs 0x" << std::hex << std::setw(4) << std::setfill('0') << o.sign_mask() << std::dec
    << " (seed " << o.seed << ")";
  return s.str();
}

// The two copies were rotated alike: the same Hadamard and the same random signs (H.D.D.H = I
// only for one D), so two seeds whose sign masks agree are the same rotation.
inline void check_rotation(const quantize_options& a, const quantize_options& b, const char* what) {
  if (a.hadamard == b.hadamard && a.sign_mask() == b.sign_mask()) return;
  fail(what, ": operands were rotated differently: A ", rotation_text(a), ", B ", rotation_text(b),
       "; the rotation cancels only when both sides use the same one");
}

inline void require_axis(block_axis axis, block_axis want, const char* product, const char* operand) {
  require(axis == want, product, ": ", operand, " must be the ", name_of(want), " copy, got the ", name_of(axis), " copy");
}

// The named training products over block-scaled copies (the layout of an MX copy or an NVFP4 one):
// `a` is X (fprop) or dY, `b` is W or X (see the file comment).
// A product kind cast from an out-of-range integer would pass no axis check (the switch below
// has no case for it) and run as a plain GEMM.
inline void check_product(gemm_product p) { check_enum(p, gemm_product::wgrad, "gemm_product", "product"); }

inline void check_product_axes(gemm_product p, const block_layout& a, const block_layout& b) {
  check_product(p);
  const char* what = name_of(p);
  switch (p) {
    case gemm_product::fprop:
      require_axis(a.axis, block_axis::rowwise, what, "X");
      require_axis(b.axis, block_axis::rowwise, what, "W");
      require(a.cols == b.cols, what, ": X is ", a.rows, "x", a.cols, " but W is ", b.rows, "x", b.cols, " (K must match)");
      break;
    case gemm_product::dgrad:
      require_axis(a.axis, block_axis::rowwise, what, "dY");
      require_axis(b.axis, block_axis::columnwise, what, "W");
      require(a.cols == b.rows, what, ": dY is ", a.rows, "x", a.cols, " but W is ", b.rows, "x", b.cols, " (N must match)");
      break;
    case gemm_product::wgrad:
      require_axis(a.axis, block_axis::columnwise, what, "dY");
      require_axis(b.axis, block_axis::columnwise, what, "X");
      require(a.rows == b.rows, what, ": dY is ", a.rows, "x", a.cols, " but X is ", b.rows, "x", b.cols, " (M must match)");
      break;
  }
}

// MX copies: the axes and shapes above, then the TN shape (check_mx_gemm).
inline gemm_shape check_mx_product(gemm_product p, const block_layout& a, const block_layout& b) {
  check_product_axes(p, a, b);
  return check_mx_gemm(a, b, name_of(p));
}

// Row-major TN operands (per-tensor FP8, bf16): A [p,r], B [q,r]. The named products take the
// copies whose columns are the reduction axis; `a_name`/`b_name` say which in the message.
inline gemm_shape check_tn(std::size_t a_rows, std::size_t a_cols, std::size_t b_rows, std::size_t b_cols, const char* what,
                           const char* a_name = "A", const char* b_name = "B") {
  require(a_cols == b_cols, what, ": reduction lengths differ: ", a_name, " is ", a_rows, "x", a_cols, ", ", b_name, " is ", b_rows,
          "x", b_cols, " (both are stored [rows, R] with the reduction axis R contiguous)");
  return {a_rows, b_rows, a_cols};
}

// Operand names of the row-major named products, e.g. dgrad takes dY [M,N] and W^T [K,N].
struct tn_names {
  const char* a;
  const char* b;
};
constexpr tn_names tn_operand_names(gemm_product p) noexcept {
  return p == gemm_product::fprop   ? tn_names{"X [M,K]", "W [N,K]"}
         : p == gemm_product::dgrad ? tn_names{"dY [M,N]", "W^T [K,N]"}
                                    : tn_names{"dY^T [N,M]", "X^T [K,M]"};
}

template <class T>
void check_output(const matrix_view<T>& d, const gemm_shape& s, const char* what) {
  require(d.rows == s.p && d.cols == s.q, what, ": output is ", d.rows, "x", d.cols, ", expected ", s.p, "x", s.q);
  check_matrix(d, what, ": output");
}

inline void check_fp8_view(const fp8_view& v, const char* what, const char* name) {
  check_enum(v.type, fp8_type::e5m2, "fp8_type", what, ": ", name);
  require(std::isfinite(v.scale) && v.scale > 0.0f, what, ": ", name, " has scale ", v.scale, " (must be finite and positive)");
  checked_mul({"rows", v.rows}, {"cols", v.cols}, what, ": ", name);
  require(v.rows == 0 || v.cols == 0 || v.data != nullptr, what, ": ", name, " has null data");
}

}  // namespace detail

MXKIT_END_NAMESPACE
