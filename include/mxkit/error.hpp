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
}  // namespace detail
MXKIT_END_NAMESPACE
