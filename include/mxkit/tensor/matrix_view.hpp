// SPDX-License-Identifier: Apache-2.0
#pragma once
// A non-owning row-major [rows, cols] matrix with a leading dimension (elements between rows):
// the high-precision input the quantizer reads. T is float, bfloat16 or float16.
#include <cstddef>
#include <type_traits>

#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/config.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>

MXKIT_BEGIN_NAMESPACE

template <class T>
struct matrix_view {
  T* data = nullptr;
  std::size_t rows = 0, cols = 0;
  std::size_t ld = 0;  // >= cols; 0 means cols

  MXKIT_HD constexpr std::size_t stride() const noexcept { return ld ? ld : cols; }
  MXKIT_HD constexpr T& operator()(std::size_t r, std::size_t c) const noexcept { return data[r * stride() + c]; }
};

template <class T>
matrix_view(T*, std::size_t, std::size_t) -> matrix_view<T>;
template <class T>
matrix_view(T*, std::size_t, std::size_t, std::size_t) -> matrix_view<T>;

template <class T>
concept quantizer_input = std::is_same_v<std::remove_const_t<T>, float> ||
                          std::is_same_v<std::remove_const_t<T>, bfloat16> ||
                          std::is_same_v<std::remove_const_t<T>, float16>;

namespace detail {
// The argument check of every host entry point that takes a matrix view; `prefix` starts the
// message ("quantize:", "gemm: A", ...). Element (r, c) is data[r * ld + c]: rows x ld elements,
// and their bytes, must fit in one object, or r * ld wraps and a row is read from before the
// buffer (ld = 2^64 - 4 makes row 1 start 4 elements before it).
template <class T, class... Prefix>
void check_matrix(const matrix_view<T>& m, const Prefix&... prefix) {
  require(m.rows == 0 || m.cols == 0 || m.data != nullptr, prefix..., " null data for a ", m.rows, "x", m.cols, " matrix");
  require(m.ld == 0 || m.ld >= m.cols, prefix..., " leading dimension ", m.ld, " is smaller than cols ", m.cols);
  if (m.rows == 0 || m.cols == 0) return;  // no element is addressed
  const std::size_t elements = checked_mul({"rows", m.rows}, {"leading dimension", m.stride()}, prefix..., " view");
  checked_bytes({"rows x leading dimension", elements}, sizeof(T), prefix..., " view");
}
}  // namespace detail

template <class T>
MXKIT_HD constexpr float load_float(const T& x) noexcept {
  if constexpr (std::is_same_v<std::remove_const_t<T>, float>) return x;
  else return x.to_float();
}

MXKIT_END_NAMESPACE
