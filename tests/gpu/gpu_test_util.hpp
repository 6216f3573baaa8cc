// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for the quantizer's GPU tests: adversarial inputs, device round trips, and byte
// comparisons that name the first differing byte.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <mxkit/block/scale_rule.hpp>  // amax_bits
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/matrix_view.hpp>

#include "../byte_compare.hpp"

namespace gpu_test {

// A row-major [rows, ld] float matrix whose 32x32 regions are each one kind of trouble, so that
// both the rowwise and the columnwise blocks meet all of them: ordinary values over 40 binades,
// all-zero blocks, float subnormals, magnitudes near FLT_MAX, exact rounding ties of every MX
// grid, a NaN, an Inf, one huge element among tiny ones. Padding columns [cols, ld) hold a NaN
// so that reading them shows.
inline std::vector<float> adversarial_matrix(std::size_t rows, std::size_t cols, std::size_t ld, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind_of(0, 9), small_int(0, 31), exp_of(-20, 20), bit(0, 1);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::size_t region_cols = (cols + 31) / 32;
  std::vector<int> kinds(((rows + 31) / 32) * region_cols), exps(kinds.size());
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    kinds[i] = kind_of(gen);
    exps[i] = exp_of(gen);
  }
  std::vector<float> m(rows * ld, nan);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const std::size_t reg = (r / 32) * region_cols + c / 32;
      const float sign = bit(gen) ? -1.0f : 1.0f;
      float x = 0;
      switch (kinds[reg]) {
        case 0: case 1: case 2: x = std::ldexp(normal(gen), exps[reg]); break;    // ordinary
        case 3: x = 0.0f * sign; break;                                            // zero block, signed zeros
        case 4: x = sign * std::ldexp(static_cast<float>(1 + small_int(gen)), -149 + small_int(gen)); break;  // subnormal
        case 5: x = sign * std::ldexp(1.0f + static_cast<float>(small_int(gen)) / 32.0f, 96 + small_int(gen)); break;  // huge
        case 6: x = sign * std::ldexp(static_cast<float>(small_int(gen)), exps[reg] - 3); break;  // grid points and ties
        case 7: x = (r % 32 == 5 && c % 32 == 7) ? nan : normal(gen); break;
        case 8: x = (r % 32 == 9 && c % 32 == 3) ? sign * inf : normal(gen); break;
        default: x = (r % 32 == 1 && c % 32 == 1) ? 3.0e38f : std::ldexp(normal(gen), -100); break;
      }
      m[r * ld + c] = x;
    }
  return m;
}

// The same values in T (float, bfloat16 or float16), rounded to nearest even.
template <class T>
std::vector<T> convert(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<T> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = T::from_float(x[i]);
    return out;
  }
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, mxkit::bfloat16>) return "bfloat16";
  else return "float16";
}

using mxkit_test::first_difference;  // tests/byte_compare.hpp

// Device buffer of n T filled with a poison byte, so an unwritten output shows: 0xA5 for bytes,
// 0xFF (NaN) for float and bf16.
template <class T = std::uint8_t>
mxkit::gpu::device_buffer<T> poisoned(std::size_t n, std::uint8_t poison = std::is_same_v<T, std::uint8_t> ? 0xA5 : 0xFF) {
  mxkit::gpu::device_buffer<T> b(n);
  b.fill_bytes(poison);
  return b;
}

// A device copy of v.
template <class T>
mxkit::gpu::device_buffer<T> upload(const std::vector<T>& v) {
  return mxkit::gpu::device_buffer<T>{std::span<const T>(v)};
}

// Same size and the same bytes.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// max |x| as the host computes it: the integer max of the float bits of |x|.
template <class T>
float host_amax(const std::vector<T>& m, std::size_t rows, std::size_t cols, std::size_t ld) {
  std::uint32_t a = 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) a = mxkit::amax_bits(a, mxkit::load_float(m[r * ld + c]));
  return mxkit::bit_cast<float>(a);
}

// Equal bits, or both NaN (the payload of a NaN amax is not specified).
// A GEMM's D [rows, cols] at leading dimension ld on the device, poisoned with 0xFF (a NaN in fp32
// and bf16) so that an element left unwritten shows, or holding C: set() takes the logical
// [rows, cols] values (zeros in the padding), set_all() the whole [rows, ld] buffer.
template <class Out>
struct device_out {
  std::size_t rows, cols, ld;
  mxkit::gpu::device_buffer<Out> buf;
  device_out(std::size_t r, std::size_t c, std::size_t ld_) : rows(r), cols(c), ld(ld_), buf(r * ld_) { buf.fill_bytes(0xFF); }
  mxkit::matrix_view<Out> view() { return {buf.data(), rows, cols, ld}; }
  void set_all(const std::vector<Out>& host) { buf.copy_from(std::span<const Out>(host)); }
  void set(const std::vector<Out>& logical) {
    std::vector<Out> all(rows * ld, Out{});
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) all[r * ld + c] = logical[r * cols + c];
    set_all(all);
  }
  std::vector<Out> get() const {  // the logical [rows, cols] part
    const std::vector<Out> all = buf.to_host();
    std::vector<Out> out(rows * cols);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) out[r * cols + c] = all[r * ld + c];
    return out;
  }
};

inline bool same_amax(float got, float want) {
  return (std::isnan(got) && std::isnan(want)) || mxkit::bit_cast<std::uint32_t>(got) == mxkit::bit_cast<std::uint32_t>(want);
}

}  // namespace gpu_test
