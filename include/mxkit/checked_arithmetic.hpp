// SPDX-License-Identifier: Apache-2.0
#pragma once
// Size arithmetic that refuses to wrap. std::size_t arithmetic is modulo 2^N (C++20
// [basic.fundamental]), so a product of two valid dimensions can wrap to a small, valid-looking
// size: the allocation then succeeds and the loops that trust the dimensions write past its end.
// These helpers throw std::invalid_argument naming the quantity, the operands and the limit
// instead.
#include <cstddef>
#include <limits>

#include <mxkit/config.hpp>
#include <mxkit/error.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {

// a * b, or std::invalid_argument "<what>: a x b exceeds the largest std::size_t (max)".
inline std::size_t checked_mul(std::size_t a, std::size_t b, const char* what) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  if (b != 0 && a > max / b) fail(what, ": ", a, " x ", b, " exceeds the largest std::size_t (", max, ")");
  return a * b;
}

// a + b, or std::invalid_argument "<what>: a + b exceeds the largest std::size_t (max)".
inline std::size_t checked_add(std::size_t a, std::size_t b, const char* what) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  if (a > max - b) fail(what, ": ", a, " + ", b, " exceeds the largest std::size_t (", max, ")");
  return a + b;
}

}  // namespace detail
MXKIT_END_NAMESPACE
