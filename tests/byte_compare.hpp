// SPDX-License-Identifier: Apache-2.0
#pragma once
// Byte-for-byte comparison that names the first differing byte (and its line, for row-major
// buffers): the GPU tests' copies against the host's, a backend's against the oracle's.
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>

namespace mxkit_test {

// "" when equal; else how many bytes differ and the first (line and byte within it when
// row_bytes is given), with `got_name` and `want_name` naming the two sides.
inline std::string first_difference(std::span<const std::uint8_t> got, std::span<const std::uint8_t> want, std::size_t row_bytes = 0,
                                    const char* got_name = "device", const char* want_name = "host") {
  if (got.size() != want.size()) return "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  std::size_t diffs = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && diffs++ == 0) first = i;
  if (diffs == 0) return "";
  std::ostringstream s;
  s << diffs << " of " << got.size() << " bytes differ; first at byte " << first;
  if (row_bytes) s << " (line " << first / row_bytes << ", byte " << first % row_bytes << ")";
  s << ": " << got_name << " 0x" << std::hex << int{got[first]} << ", " << want_name << " 0x" << int{want[first]};
  return s.str();
}

}  // namespace mxkit_test
