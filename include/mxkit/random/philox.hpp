// SPDX-License-Identifier: Apache-2.0
#pragma once
// Philox4x32-10 counter-based generator (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC 2011). Stateless: the same (seed, stream, index) gives the same bits on host,
// device and at compile time, so stochastic rounding is reproducible across backends. A plain
// linear counter is not a substitute: correlated bits bias stochastic rounding.
#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE

struct philox_block {
  std::uint32_t v[4];
};

MXKIT_HD constexpr philox_block philox4x32(philox_block ctr, std::uint32_t key0, std::uint32_t key1) noexcept {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;  // multipliers from the paper
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{m0} * ctr.v[0];
    const std::uint64_t p1 = std::uint64_t{m1} * ctr.v[2];
    ctr = {{static_cast<std::uint32_t>(p1 >> 32) ^ ctr.v[1] ^ key0, static_cast<std::uint32_t>(p1),
            static_cast<std::uint32_t>(p0 >> 32) ^ ctr.v[3] ^ key1, static_cast<std::uint32_t>(p0)}};
    key0 += w0;
    key1 += w1;
  }
  return ctr;
}

// The 32-bit words for indices 4*group .. 4*group+3 of random stream `stream` under `seed`.
MXKIT_HD constexpr philox_block random_bits_x4(std::uint64_t seed, std::uint32_t stream, std::uint64_t group) noexcept {
  return philox4x32({{static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32), stream,
                      0x4D584B54u /* "MXKT" */}},
                    static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// 32 uniform bits for element `index` of random stream `stream` under `seed`. One Philox call
// serves four consecutive indices (random_bits_x4 gives all four at once).
MXKIT_HD constexpr std::uint32_t random_bits(std::uint64_t seed, std::uint32_t stream, std::uint64_t index) noexcept {
  return random_bits_x4(seed, stream, index >> 2).v[index & 3];
}

MXKIT_END_NAMESPACE
