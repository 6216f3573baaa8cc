// SPDX-License-Identifier: Apache-2.0
#pragma once
// Orthonormal Sylvester-Hadamard rotation (H_2n = [[H, H], [H, -H]] / sqrt 2). Applied to each
// 16-element group along the quantization axis before the MX scale is taken, it spreads an
// outlier's energy over its group (QuaRot, Ashkboos et al. 2024; the MXFP4 training recipe in
// shared/reference). Orthonormal and symmetric, so H.H = I: rotating both GEMM operands along the
// reduction axis leaves the product unchanged. The same butterfly order runs on host and device,
// so both give the same floats.
#include <array>
#include <cstddef>

#include <mxkit/config.hpp>
#include <mxkit/random/philox.hpp>

MXKIT_BEGIN_NAMESPACE

inline constexpr int hadamard_group = 16;  // rotation size of the MXFP4 recipe

namespace detail {
MXKIT_HD constexpr bool is_pow2(int n) noexcept { return n > 0 && (n & (n - 1)) == 0; }
// 1/sqrt(n) for a power of two n: a power of two times 1/sqrt(2) when log2(n) is odd.
MXKIT_HD constexpr float inv_sqrt_pow2(int n) noexcept {
  int log2n = 0;
  while ((1 << log2n) < n) ++log2n;
  float s = (log2n & 1) ? 0.70710678118654752440f : 1.0f;
  for (int i = 0; i < log2n / 2; ++i) s *= 0.5f;
  return s;
}
}  // namespace detail

// Entry (i, j) of the orthonormal N x N Sylvester matrix: (-1)^popcount(i & j) / sqrt(N).
template <int N>
constexpr std::array<float, std::size_t{N} * N> hadamard_matrix() noexcept {
  static_assert(detail::is_pow2(N) && N >= 2 && N <= 256, "Hadamard sizes are powers of two in [2, 256]");
  std::array<float, std::size_t{N} * N> h{};
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) {
      int parity = 0;
      for (int b = i & j; b; b >>= 1) parity ^= b & 1;
      h[std::size_t(i) * N + j] = (parity ? -1.0f : 1.0f) * detail::inv_sqrt_pow2(N);
    }
  return h;
}

// The butterflies of the fast Walsh-Hadamard transform, without the normalization: v becomes
// sqrt(N) times the normalized transform (N log N adds).
template <int N>
MXKIT_HD constexpr void hadamard_butterflies(float* v) noexcept {
  static_assert(detail::is_pow2(N) && N >= 2 && N <= 256, "Hadamard sizes are powers of two in [2, 256]");
  for (int h = 1; h < N; h *= 2)
    for (int i = 0; i < N; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
}

// In-place fast Walsh-Hadamard transform of v[0..N), normalized (N log N adds, N multiplies).
template <int N>
MXKIT_HD constexpr void hadamard_transform(float* v) noexcept {
  hadamard_butterflies<N>(v);
  constexpr float scale = detail::inv_sqrt_pow2(N);
  for (int i = 0; i < N; ++i) v[i] *= scale;
}

// The optional random sign vector D of the randomized rotation H.D (bit i set: negate input i).
// Fixed by the seed; the same D must be used on both operands of a GEMM for the rotation to cancel.
MXKIT_HD constexpr std::uint32_t hadamard_sign_mask(std::uint64_t seed) noexcept {
  return random_bits(seed, /*stream=*/0x5349474Eu /* "SIGN" */, 0) & 0xFFFFu;
}

namespace detail {
// v[i] = -v[i] where bit i of sign_mask is set: a sign-bit flip, branch-free so that device code
// keeps v in registers (negation is exactly a sign flip, NaN included).
MXKIT_HD constexpr void apply_signs16(float* v, std::uint32_t sign_mask) noexcept {
  for (int i = 0; i < hadamard_group; ++i)
    v[i] = bit_cast<float>(bit_cast<std::uint32_t>(v[i]) ^ (((sign_mask >> i) & 1u) << 31));
}
}  // namespace detail

// Rotation of one 16-group as the quantizer applies it: signs (if any), then H16.
MXKIT_HD constexpr void rotate_group16(float* v, std::uint32_t sign_mask) noexcept {
  if (sign_mask) detail::apply_signs16(v, sign_mask);
  hadamard_transform<hadamard_group>(v);
}
// Inverse of rotate_group16: (H.D)^-1 = D.H.
MXKIT_HD constexpr void unrotate_group16(float* v, std::uint32_t sign_mask) noexcept {
  hadamard_transform<hadamard_group>(v);
  if (sign_mask) detail::apply_signs16(v, sign_mask);
}

MXKIT_END_NAMESPACE
