// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host-side argument checks: bad input raises std::invalid_argument naming the value, never UB.
#include <sstream>
#include <stdexcept>
#include <string>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {
template <class... Parts>
[[noreturn]] inline void fail(const Parts&... parts) {
  std::ostringstream s;
  s << "mxkit: ";
  (s << ... << parts);
  throw std::invalid_argument(s.str());
}
template <class... Parts>
inline void require(bool ok, const Parts&... parts) {
  if (!ok) fail(parts...);
}
// An enum value cast from an integer past the last enumerator (a corrupt file, a C caller, a
// bad cast) is refused by name instead of being decoded as a neighbour: every switch over the
// enum would otherwise fall to its default. The enumerators run from 0 to `last`.
template <class E, class... Where>
void check_enum(E value, E last, const char* type_name, const Where&... where) {
  const auto v = static_cast<unsigned long long>(value), l = static_cast<unsigned long long>(last);
  require(v <= l, where..., ": unknown ", type_name, " value ", v, " (valid: 0 to ", l, ", ", name_of(E{}), " to ", name_of(last), ")");
}
}  // namespace detail
MXKIT_END_NAMESPACE
