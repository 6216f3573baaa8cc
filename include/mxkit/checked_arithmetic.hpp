// SPDX-License-Identifier: Apache-2.0
#pragma once
// Size arithmetic on shapes that come from a caller (host only). A product or round-up of
// std::size_t values wraps around modulo 2^64, and a wrapped size allocates a buffer that is
// too small, which the next loop writes past, or turns a pointer check off (a size of 0 needs
// no pointer). Every size mxkit computes from a caller's shape goes through these functions
// first; each returns the exact result or throws std::invalid_argument naming the operands with
// their values (never the wrapped result) and the limit, e.g.
//   "mxkit: quantize: rows 1099511627776 x padded cols 1099511627776 exceeds the largest
//    std::size_t 18446744073709551615".
// `where...` is the message prefix, in parts like every check of error.hpp ("gemm", ": A").
// The MXKIT_HD accessors (block_layout::data_bytes, scale_storage_size, ...) stay unchecked and
// noexcept for device code; host entry points check the shape once with these, and from then on
// every accessor's arithmetic is known not to wrap.
#include <cstddef>
#include <limits>

#include <mxkit/config.hpp>
#include <mxkit/error.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {

// One operand of a size computation: what it is ("rows", "padded cols") and its value.
struct size_operand {
  const char* name;
  std::size_t value;
};

inline constexpr std::size_t max_size_value = std::numeric_limits<std::size_t>::max();
// No object, and so no buffer a view may span, is larger than PTRDIFF_MAX bytes: pointer
// arithmetic and differences across it must fit in std::ptrdiff_t (C++ [expr.add]).
inline constexpr std::size_t max_object_bytes = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());

// a.value * b.value.
template <class... Where>
std::size_t checked_mul(size_operand a, size_operand b, const Where&... where) {
  require(a.value == 0 || b.value <= max_size_value / a.value, where..., ": ", a.name, " ", a.value, " x ", b.name, " ", b.value,
          " exceeds the largest std::size_t ", max_size_value);
  return a.value * b.value;
}

// a.value + b.value.
template <class... Where>
std::size_t checked_add(size_operand a, size_operand b, const Where&... where) {
  require(b.value <= max_size_value - a.value, where..., ": ", a.name, " ", a.value, " + ", b.name, " ", b.value,
          " exceeds the largest std::size_t ", max_size_value);
  return a.value + b.value;
}

// n.value rounded up to a multiple of `multiple` (> 0): what (n + m - 1) / m * m computes when
// it does not wrap.
template <class... Where>
std::size_t checked_round_up(size_operand n, std::size_t multiple, const Where&... where) {
  require(multiple > 0, where..., ": ", n.name, " ", n.value, " cannot be rounded up to a multiple of 0");
  const std::size_t rest = n.value % multiple;
  require(rest == 0 || n.value <= max_size_value - (multiple - rest), where..., ": ", n.name, " ", n.value,
          " rounded up to a multiple of ", multiple, " exceeds the largest std::size_t ", max_size_value);
  return rest == 0 ? n.value : n.value + (multiple - rest);
}

// count.value elements of element_bytes each, as a byte count no larger than one object.
template <class... Where>
std::size_t checked_bytes(size_operand count, std::size_t element_bytes, const Where&... where) {
  require(element_bytes == 0 || count.value <= max_object_bytes / element_bytes, where..., ": ", count.name, " ", count.value,
          " x ", element_bytes, " bytes exceeds the largest object size ", max_object_bytes, " bytes");
  return count.value * element_bytes;
}

}  // namespace detail
MXKIT_END_NAMESPACE
