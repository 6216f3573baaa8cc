// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by the host GEMM tests and the GPU GEMM tests: random matrices whose blocks span
// many binades (so block scales differ), an fp64 TN oracle on dequantized inputs with the
// magnitude sum S = sum_k |a_k b_k| that error bounds scale with, and the element-wise bound
// check, which is the library's (mxkit::ref::compare_within_bound, what validate_gemm applies).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <mxkit/block/pack.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/validation/validate_gemm.hpp>

namespace gemm_test {

// [rows, cols] row-major floats: N(0,1) times 2^e, e drawn per 8x8 tile from [-spread, spread],
// so neighbouring 32-blocks along either axis get different scales. Every ~97th value is an
// outlier x16 (a block's amax then sits far above its typical element).
inline std::vector<float> random_matrix(std::size_t rows, std::size_t cols, std::uint64_t seed, int spread = 6) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-spread, spread);
  const std::size_t tr = (rows + 7) / 8, tc = (cols + 7) / 8;
  std::vector<int> tile_exp(tr * tc);
  for (int& t : tile_exp) t = e(g);
  std::vector<float> x(rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      float v = std::ldexp(n(g), tile_exp[(r / 8) * tc + c / 8]);
      if ((r * cols + c) % 97 == 13) v *= 16.0f;
      x[r * cols + c] = v;
    }
  return x;
}

// fp64 D[p,q] = sum_r A[p,r] B[q,r] and S[p,q] = sum_r |A[p,r] B[q,r]| (A [p,r], B [q,r]).
struct oracle_result {
  std::vector<double> d, s;
};
inline oracle_result oracle_tn(const std::vector<float>& a, const std::vector<float>& b, std::size_t p, std::size_t q,
                               std::size_t r) {
  oracle_result o{std::vector<double>(p * q), std::vector<double>(p * q)};
  for (std::size_t i = 0; i < p; ++i)
    for (std::size_t j = 0; j < q; ++j) {
      double d = 0, s = 0;
      for (std::size_t k = 0; k < r; ++k) {
        const double t = static_cast<double>(a[i * r + k]) * static_cast<double>(b[j * r + k]);
        d += t;
        s += std::fabs(t);
      }
      o.d[i * q + j] = d;
      o.s[i * q + j] = s;
    }
  return o;
}

// A random [rows, cols] matrix (random_matrix, spread 3) rounded to bf16, and bf16 values as
// floats: the bf16 GEMM tests' operands (host, sm90 and vendor paths).
inline std::vector<mxkit::bfloat16> random_bf16(std::size_t rows, std::size_t cols, std::uint64_t seed) {
  const std::vector<float> x = random_matrix(rows, cols, seed, 3);
  std::vector<mxkit::bfloat16> h(x.size());
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = mxkit::bfloat16::from_float(x[i]);
  return h;
}
inline std::vector<float> as_float(const std::vector<mxkit::bfloat16>& v) {
  std::vector<float> f(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) f[i] = v[i].to_float();
  return f;
}
// A D of either output type as doubles (compare's inputs).
inline std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
inline std::vector<double> as_double(const std::vector<mxkit::bfloat16>& v) {
  std::vector<double> d(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) d[i] = v[i].to_float();
  return d;
}

// Row-major [rows, cols] -> [cols, rows].
template <class T>
std::vector<T> transposed(const std::vector<T>& x, std::size_t rows, std::size_t cols) {
  std::vector<T> t(x.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

// The stored-copy view of a dequantized MX copy as the TN oracle wants it: [lines, line_length].
inline std::vector<float> dequantized_lines(const mxkit::mx_tensor& t) {
  std::vector<float> d = mxkit::ref::dequantize(t);  // logical [rows, cols]
  return t.axis() == mxkit::block_axis::rowwise ? d : transposed(d, t.rows(), t.cols());
}

// Element-wise |got - want| <= rel * s + abs_floor (a NaN must meet a NaN): the library's check
// (mxkit::ref::compare_within_bound, validation/validate_gemm.hpp) on whole vectors of a [n / cols, cols] result.
template <class GotT, class WantT>
mxkit::ref::gemm_validation_report compare(const std::vector<GotT>& got, const std::vector<WantT>& want, const std::vector<double>& s,
                                      double rel, std::size_t cols, double abs_floor = 0) {
  return mxkit::ref::compare_within_bound(got.data(), want.data(), s.data(), want.size(), cols, rel, abs_floor);
}

// A sign-stripped copy of an MX tensor (every code's magnitude, scales kept): the reference GEMM
// on two such copies gives S[i,j] = sum_k |a_k b_k| with the scales applied, the magnitude the
// GEMM tests' error bounds scale with.
inline std::uint8_t abs_code(mxkit::mx_type t, std::uint8_t c) {
  switch (t) {
    case mxkit::mx_type::mxfp4: return c & 0x7;
    case mxkit::mx_type::mxfp6_e2m3:
    case mxkit::mx_type::mxfp6_e3m2: return c & 0x1F;
    case mxkit::mx_type::mxint8: return c == 0x80 ? 0x7F : (c & 0x80 ? static_cast<std::uint8_t>(-static_cast<int>(c)) : c);  // -2 ~ 127/64
    default: return c & 0x7F;
  }
}
inline mxkit::mx_tensor abs_copy(const mxkit::mx_tensor& t) {
  mxkit::mx_tensor a = t;
  const int bits = t.layout().storage_bits();
  for (std::size_t line = 0; line < t.layout().lines(); ++line)
    for (std::size_t p = 0; p < t.layout().padded_length(); ++p) {
      std::uint8_t* row = a.data().data() + line * t.layout().line_bytes();
      mxkit::store_code(row, p, abs_code(t.type(), mxkit::load_code(row, p, bits)), bits);
    }
  return a;
}

}  // namespace gemm_test
