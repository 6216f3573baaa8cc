// SPDX-License-Identifier: Apache-2.0
#pragma once
// How mxkit's GEMM maps onto a column-major BLAS matmul (cuBLASLt's cublasLtMatmul; hipBLASLt's
// hipblasLtMatmul is the same model): pure arithmetic, no vendor header, so host tests check it
// (tests/catch2_test_vendor_gemm_layout.cpp) and the static_asserts below pin the cases.
//
// mxkit computes D[P,Q] = alpha * A[P,R] . B[Q,R]^T + beta * C, D row-major with ld = ldd.
// cuBLASLt computes D_lt[m,n] = alpha * op(A_lt)[m,k] . op(B_lt)[k,n] + beta * C_lt, every
// matrix column-major (cuBLAS documentation, "cublasLtMatmul()" and "Data layout").
//
//   1. A row-major [rows, cols] matrix with leading dimension ld is the column-major
//      [cols, rows] matrix with the same ld: its transpose, for free.
//   2. So mxkit's D (row-major P x Q, ldd) is column-major D^T [Q, P] with ld = ldd, and
//      D^T = (A . B^T)^T = B . A^T: m = Q, n = P, k = R, op(A_lt) = B [Q,R], op(B_lt) = A^T [R,P].
//      cuBLASLt's A is mxkit's B and cuBLASLt's B is mxkit's A.
//   3. mxkit's B, K-major: stored [Q,R] row-major (ld_b) = column-major [R,Q]; op(A_lt) must
//      be [Q,R], its transpose: transa = T, A_lt described as R rows x Q columns, ld_b.
//      MN-major (bf16): stored [R,Q] row-major = column-major [Q,R] already: transa = N,
//      Q rows x R columns, ld_b.
//   4. mxkit's A, K-major: stored [P,R] row-major (ld_a) = column-major [R,P] = A^T already:
//      transb = N, R rows x P columns, ld_a. MN-major: stored [R,P] row-major = column-major
//      [P,R] = A: transb = T, P rows x R columns, ld_a.
//   5. C and D: Q rows x P columns, ldc and ldd.
// Both operands K-major is cuBLASLt's "TN" (transa = T, transb = N), the one layout its FP8
// kernels take ("cublasLtMatmul()": "A must be transposed and B non-transposed").
// Leading dimensions are in elements, as cublasLtMatrixLayoutCreate takes them.
#include <cstdint>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu::vendor {

// One matrix as cublasLtMatrixLayoutCreate describes it (column-major), and its op.
struct blas_matrix {
  bool transpose = false;  // CUBLAS_OP_T when set, else CUBLAS_OP_N (A_lt and B_lt only)
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
  constexpr bool operator==(const blas_matrix&) const = default;
};

struct blas_problem {
  std::uint64_t m = 0, n = 0, k = 0;
  blas_matrix a, b, c, d;  // cuBLASLt's A (mxkit's B), B (mxkit's A), C, D
  constexpr bool operator==(const blas_problem&) const = default;
};

// mxkit's side of one product: shape, each operand's storage order and leading dimension
// (elements between consecutive stored rows: lines when K-major, reduction rows when MN-major),
// and C's and D's.
struct tn_product {
  std::uint64_t p = 0, q = 0, r = 0;
  bool a_mn_major = false, b_mn_major = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
};

// The column-major problem that computes mxkit's product (steps 2-5 above).
constexpr blas_problem to_blas(const tn_product& t) noexcept {
  blas_problem b;
  b.m = t.q;
  b.n = t.p;
  b.k = t.r;
  b.a = t.b_mn_major ? blas_matrix{false, t.q, t.r, t.ldb} : blas_matrix{true, t.r, t.q, t.ldb};
  b.b = t.a_mn_major ? blas_matrix{true, t.p, t.r, t.lda} : blas_matrix{false, t.r, t.p, t.lda};
  b.c = blas_matrix{false, t.q, t.p, t.ldc};
  b.d = blas_matrix{false, t.q, t.p, t.ldd};
  return b;
}

// The shape op() gives a matrix: [rows, cols], or [cols, rows] when transposed.
constexpr std::uint64_t op_rows(const blas_matrix& x) noexcept { return x.transpose ? x.cols : x.rows; }
constexpr std::uint64_t op_cols(const blas_matrix& x) noexcept { return x.transpose ? x.rows : x.cols; }

// The problem is consistent: op(A_lt) is m x k, op(B_lt) k x n, C and D m x n, and every ld
// covers its matrix's rows (column-major: ld >= rows), as cublasLtMatrixLayoutCreate requires.
constexpr bool consistent(const blas_problem& b) noexcept {
  return op_rows(b.a) == b.m && op_cols(b.a) == b.k && op_rows(b.b) == b.k && op_cols(b.b) == b.n && b.c.rows == b.m &&
         b.c.cols == b.n && b.d.rows == b.m && b.d.cols == b.n && b.a.ld >= static_cast<std::int64_t>(b.a.rows) &&
         b.b.ld >= static_cast<std::int64_t>(b.b.rows) && b.c.ld >= static_cast<std::int64_t>(b.c.rows) &&
         b.d.ld >= static_cast<std::int64_t>(b.d.rows);
}

// cuBLASLt's FP8 layout: op(A_lt) transposed, op(B_lt) not ("TN"), i.e. both mxkit operands K-major.
constexpr bool is_tn(const blas_problem& b) noexcept { return b.a.transpose && !b.b.transpose; }

// The largest power of two, up to 16, that divides x (0: 16). cuBLASLt's heuristic takes each
// matrix's alignment in bytes (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES). 16 is the most any
// of its kernels asks (128-bit loads, TMA's 16-byte rule) and the cap keeps the algorithm choice,
// hence the bits, the same for buffers whose addresses differ above 16 bytes (an arena's
// sub-allocations, a pool's blocks), run to run.
inline constexpr std::uint32_t max_alignment = 16;
constexpr std::uint32_t alignment_of(std::uint64_t x) noexcept {
  std::uint32_t a = 1;
  while (a < max_alignment && x % (2 * a) == 0) a *= 2;
  return a;
}
// A matrix's alignment: its address's and its leading dimension's in bytes, the smaller.
constexpr std::uint32_t matrix_alignment(std::uint64_t address, std::int64_t ld, std::uint32_t element_bytes) noexcept {
  const std::uint32_t pa = alignment_of(address), la = alignment_of(static_cast<std::uint64_t>(ld) * element_bytes);
  return pa < la ? pa : la;
}

// The examples: all four orders of a 200 x 136 x 264 product, D with ld 140.
static_assert(to_blas({200, 136, 264, false, false, 264, 264, 140, 140}) ==
              blas_problem{136, 200, 264, {true, 264, 136, 264}, {false, 264, 200, 264}, {false, 136, 200, 140}, {false, 136, 200, 140}});
static_assert(to_blas({200, 136, 264, true, true, 200, 136, 136, 136}) ==
              blas_problem{136, 200, 264, {false, 136, 264, 136}, {true, 200, 264, 200}, {false, 136, 200, 136}, {false, 136, 200, 136}});
static_assert(consistent(to_blas({200, 136, 264, false, false, 264, 264, 136, 136})) &&
              consistent(to_blas({200, 136, 264, true, false, 200, 264, 136, 136})) &&
              consistent(to_blas({200, 136, 264, false, true, 264, 136, 136, 136})) &&
              consistent(to_blas({200, 136, 264, true, true, 200, 136, 136, 136})));
static_assert(is_tn(to_blas({16, 16, 16, false, false, 16, 16, 16, 16})) && !is_tn(to_blas({16, 16, 16, true, false, 16, 16, 16, 16})) &&
              !is_tn(to_blas({16, 16, 16, false, true, 16, 16, 16, 16})));
static_assert(alignment_of(0) == 16 && alignment_of(1) == 1 && alignment_of(12) == 4 && alignment_of(48) == 16 && alignment_of(4096) == 16 &&
              matrix_alignment(0x1000, 329, 2) == 2 && matrix_alignment(0x1008, 336, 2) == 8 && matrix_alignment(0x1100, 64, 1) == 16);

}  // namespace gpu::vendor
MXKIT_END_NAMESPACE
