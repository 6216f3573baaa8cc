// SPDX-License-Identifier: Apache-2.0
// gpu/gemm/vendor/layout.hpp (plain C++, no GPU): mxkit's row-major D = A . B^T as cuBLASLt's
// column-major D^T = B . A^T. Besides the header's static_asserts, the mapping is executed here
// on the host: a column-major matmul driven only by the blas_problem (op, rows, cols, ld of each
// matrix, as cublasLtMatmul reads them) over mxkit's buffers must give mxkit's product, for
// every storage order, padded leading dimensions and ragged shapes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/gpu/gemm/vendor/layout.hpp>  // host-safe: no vendor header

#include "catch.hpp"

namespace {
namespace vl = mxkit::gpu::vendor;

// Element (i, j) of op(X) for a column-major matrix X described by `m` over `data`.
double op_at(const vl::blas_matrix& m, const std::vector<double>& data, std::uint64_t i, std::uint64_t j) {
  const std::uint64_t r = m.transpose ? j : i, c = m.transpose ? i : j;
  REQUIRE(r < m.rows);
  REQUIRE(c < m.cols);
  return data[c * static_cast<std::uint64_t>(m.ld) + r];
}

// D = op(A) op(B) + C as a column-major BLAS computes it, written into D's buffer.
void blas_matmul(const vl::blas_problem& p, const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& c,
                 std::vector<double>& d) {
  for (std::uint64_t i = 0; i < p.m; ++i)
    for (std::uint64_t j = 0; j < p.n; ++j) {
      double s = 0;
      for (std::uint64_t k = 0; k < p.k; ++k) s += op_at(p.a, a, i, k) * op_at(p.b, b, k, j);
      d[j * static_cast<std::uint64_t>(p.d.ld) + i] = s + c[j * static_cast<std::uint64_t>(p.c.ld) + i];
    }
}

}  // namespace

TEST_CASE("vendor gemm layout: the column-major problem computes mxkit's row-major product", "[gemm][vendor]") {
  struct shape {
    std::size_t p, q, r;
  };
  for (const shape sh : {shape{5, 3, 7}, shape{1, 9, 4}, shape{8, 1, 1}, shape{6, 6, 6}})
    for (int orders = 0; orders < 4; ++orders)
      for (const std::size_t pad : {std::size_t{0}, std::size_t{3}}) {
        const bool mn_a = orders & 2, mn_b = orders & 1;
        INFO(sh.p << "x" << sh.q << "x" << sh.r << " A " << (mn_a ? "MN" : "K") << "-major, B " << (mn_b ? "MN" : "K") << "-major, pad "
                  << pad);
        // Logical A[p][r], B[q][r], C[p][q], with distinct values.
        auto av = [](std::size_t i, std::size_t k) { return 1.0 + static_cast<double>(i) * 0.5 - static_cast<double>(k) * 0.25; };
        auto bv = [](std::size_t j, std::size_t k) { return 2.0 - static_cast<double>(j) * 0.125 + static_cast<double>(k * k) * 0.0625; };
        auto cv = [](std::size_t i, std::size_t j) { return static_cast<double>(i * 100 + j); };
        // mxkit's storage: K-major [lines, r] or MN-major [r, lines], row-major with padded ld.
        const std::size_t lda = (mn_a ? sh.p : sh.r) + pad, ldb = (mn_b ? sh.q : sh.r) + pad, ldd = sh.q + pad, ldc = sh.q + 2 * pad;
        std::vector<double> a((mn_a ? sh.r : sh.p) * lda, -1e300), b((mn_b ? sh.r : sh.q) * ldb, -1e300);
        std::vector<double> c(sh.p * ldc, -1e300), d(sh.p * ldd, -1e300);
        for (std::size_t i = 0; i < sh.p; ++i)
          for (std::size_t k = 0; k < sh.r; ++k) (mn_a ? a[k * lda + i] : a[i * lda + k]) = av(i, k);
        for (std::size_t j = 0; j < sh.q; ++j)
          for (std::size_t k = 0; k < sh.r; ++k) (mn_b ? b[k * ldb + j] : b[j * ldb + k]) = bv(j, k);
        for (std::size_t i = 0; i < sh.p; ++i)
          for (std::size_t j = 0; j < sh.q; ++j) c[i * ldc + j] = cv(i, j);
        const vl::blas_problem prob = vl::to_blas({sh.p, sh.q, sh.r, mn_a, mn_b, static_cast<std::int64_t>(lda), static_cast<std::int64_t>(ldb),
                                                 static_cast<std::int64_t>(ldc), static_cast<std::int64_t>(ldd)});
        REQUIRE(vl::consistent(prob));
        CHECK(vl::is_tn(prob) == (!mn_a && !mn_b));
        // cuBLASLt's A is mxkit's B and its B is mxkit's A (layout.hpp, step 2).
        blas_matmul(prob, b, a, c, d);
        for (std::size_t i = 0; i < sh.p; ++i)
          for (std::size_t j = 0; j < sh.q; ++j) {
            double want = cv(i, j);
            for (std::size_t k = 0; k < sh.r; ++k) want += av(i, k) * bv(j, k);
            INFO("D[" << i << "][" << j << "]");
            CHECK(d[i * ldd + j] == want);
          }
        // D's padding is never written.
        for (std::size_t i = 0; i < sh.p; ++i)
          for (std::size_t j = sh.q; j < ldd; ++j) CHECK(d[i * ldd + j] == -1e300);
      }
}

TEST_CASE("vendor gemm layout: alignments as cuBLASLt's heuristic is told them", "[gemm][vendor]") {
  CHECK(vl::alignment_of(0) == 16);
  CHECK(vl::alignment_of(2) == 2);
  CHECK(vl::alignment_of(24) == 8);
  CHECK(vl::alignment_of(1u << 20) == 16);
  // bf16 D with an odd leading dimension: 2 bytes whatever the pointer.
  CHECK(vl::matrix_alignment(0x7f0000001000u, 329, 2) == 2);
  // FP8 rows of 272 bytes on a 16-byte boundary: 16.
  CHECK(vl::matrix_alignment(0x7f0000001010u, 272, 1) == 16);
  // A pointer 4 bytes past a boundary limits everything to 4.
  CHECK(vl::matrix_alignment(0x7f0000001004u, 256, 4) == 4);
}
