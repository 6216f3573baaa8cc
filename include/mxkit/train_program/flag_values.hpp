// SPDX-License-Identifier: Apache-2.0
#pragma once
// A flag's text as a value, for the training program's command line (options.hpp): each parser
// takes the whole text or refuses it with a usage_error naming the flag, the range and the text
// (no prefix read as a number, no wrap, no silent default).
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <mxkit/config.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/train_program/usage_error.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {
namespace detail {

inline std::size_t parse_count(std::string_view flag, std::string_view v, bool zero_ok) {
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty() || (!zero_ok && n == 0))
    throw usage_error(std::string(flag) + ": expected " + (zero_ok ? "an integer >= 0" : "a positive integer") + ", got '" +
                      std::string(v) + "'");
  return n;
}

// An int in [lo, hi], for flags whose value is used as an int.
inline int parse_int_in(std::string_view flag, std::string_view v, int lo, int hi) {
  int n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty() || n < lo || n > hi)
    throw usage_error(std::string(flag) + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got '" +
                      std::string(v) + "'");
  return n;
}

inline double parse_real(std::string_view flag, std::string_view v, bool zero_ok) {
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty() || !(x > 0 || (zero_ok && x == 0)) || !(x < 1e300))
    throw usage_error(std::string(flag) + ": expected a finite number " + (zero_ok ? ">= 0" : "> 0") + ", got '" + std::string(v) + "'");
  return x;
}

// An element type given as f32 or bf16 (--activations, --reduce-dtype).
inline nn::dtype parse_f32_or_bf16(std::string_view flag, std::string_view v) {
  if (v == "f32") return nn::dtype::f32;
  if (v == "bf16") return nn::dtype::bf16;
  throw usage_error(std::string(flag) + ": expected f32 or bf16, got '" + std::string(v) + "'");
}

// A byte size: digits, optionally followed by KB, MB, GB (powers of 1000, as huggingface_hub's
// max_shard_size "5GB" reads) or KiB, MiB, GiB (powers of 1024).
inline std::uint64_t parse_bytes(std::string_view flag, std::string_view v) {
  std::size_t digits = 0;
  while (digits < v.size() && v[digits] >= '0' && v[digits] <= '9') ++digits;
  const std::string_view unit = v.substr(digits);
  std::uint64_t scale = 0;
  for (const auto& [name, factor] : {std::pair<std::string_view, std::uint64_t>{"", 1}, {"KB", 1000}, {"MB", 1000'000},
                                     {"GB", 1000'000'000}, {"KiB", 1024}, {"MiB", 1024 * 1024}, {"GiB", 1024 * 1024 * 1024}})
    if (unit == name) scale = factor;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + digits, n);
  if (scale == 0 || digits == 0 || ec != std::errc{} || end != v.data() + digits || n == 0 ||
      n > std::numeric_limits<std::uint64_t>::max() / scale)
    throw usage_error(std::string(flag) + ": expected a positive size in bytes, optionally with KB, MB, GB, KiB, MiB or GiB, got '" +
                      std::string(v) + "'");
  return n * scale;
}

}  // namespace detail
}  // namespace train_program
MXKIT_END_NAMESPACE
