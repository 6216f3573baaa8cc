// SPDX-License-Identifier: Apache-2.0
// Philox4x32-10: the Random123 known-answer vectors, random_bits' documented counter layout,
// determinism, and uniformity sanity checks (chi-square on bytes and on pairs of consecutive
// draws, per-bit frequencies). Every check is deterministic (fixed seeds) but fails for a broken
// generator or a plain counter.
#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include <mxkit/random/philox.hpp>

#include "../catch.hpp"

namespace {
using mxkit::philox4x32;
using mxkit::philox_block;
using mxkit::random_bits;

struct kat {
  std::array<std::uint32_t, 4> ctr;
  std::array<std::uint32_t, 2> key;
  std::array<std::uint32_t, 4> out;
};
// Random123 tests/kat_vectors, the three "philox4x32 10" lines (counter, key, expected).
constexpr kat philox_kat[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

// Pearson chi-square of observed counts against a uniform expectation.
double chi_square(const std::vector<std::uint64_t>& counts, double total) {
  const double expected = total / static_cast<double>(counts.size());
  double chi = 0;
  for (const std::uint64_t c : counts) chi += (static_cast<double>(c) - expected) * (static_cast<double>(c) - expected) / expected;
  return chi;
}
// A chi-square with k degrees of freedom has mean k and standard deviation sqrt(2k); a good
// generator stays within 6 deviations, and so does not fit "too well" either.
bool plausible_chi_square(double chi, double dof) { return std::fabs(chi - dof) <= 6 * std::sqrt(2 * dof); }

}  // namespace

TEST_CASE("philox: Random123 known-answer vectors", "[random]") {
  for (const kat& k : philox_kat) {
    const philox_block r = philox4x32({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    INFO("counter " << std::hex << k.ctr[0]);
    for (int i = 0; i < 4; ++i) CHECK(r.v[i] == k.out[static_cast<std::size_t>(i)]);
  }
}

TEST_CASE("philox: random_bits layout is counter (index/4, stream, \"MXKT\"), key seed, lane index%4", "[random]") {
  // This layout is what GPU kernels must reproduce; changing it changes every stochastic result.
  for (const std::uint64_t seed : {0ull, 1ull, 0x0123456789ABCDEFull})
    for (const std::uint32_t stream : {0u, 5u, 0x80000000u})
      for (const std::uint64_t index : {0ull, 1ull, 2ull, 3ull, 4ull, 1000003ull, 0xFFFFFFFFFull}) {
        const std::uint64_t g = index / 4;
        const philox_block r = philox4x32({{static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(g >> 32), stream, 0x4D584B54u}},
                                          static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
        CHECK(random_bits(seed, stream, index) == r.v[index % 4]);
      }
}

TEST_CASE("philox: deterministic, and seed, stream and index each change the bits", "[random]") {
  std::set<std::uint32_t> seen;
  std::size_t n = 0;
  for (std::uint64_t seed = 0; seed < 4; ++seed)
    for (std::uint32_t stream = 0; stream < 4; ++stream)
      for (std::uint64_t i = 0; i < 1024; ++i) {
        const std::uint32_t a = random_bits(seed, stream, i);
        CHECK(a == random_bits(seed, stream, i));
        seen.insert(a);
        ++n;
      }
  // 16384 draws from 2^32 values: about 0.03 collisions expected; a few would already be suspect.
  CHECK(seen.size() + 2 >= n);
  // The seed's high word and the index's high word matter too.
  CHECK(random_bits(1ull << 32, 0, 0) != random_bits(0, 0, 0));
  CHECK(random_bits(0, 0, 1ull << 34) != random_bits(0, 0, 0));
}

TEST_CASE("philox: uniformity sanity (chi-square on bytes and pairs, bit frequencies)", "[random]") {
  constexpr std::size_t n = 1u << 20;
  std::vector<std::uint64_t> top(256), low(256), pairs(256);
  std::array<std::uint64_t, 32> ones{};
  std::uint32_t prev = random_bits(2024, 3, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t r = random_bits(2024, 3, i);
    ++top[r >> 24];
    ++low[r & 0xFF];
    ++pairs[((prev >> 28) << 4) | (r >> 28)];  // serial correlation of consecutive draws
    for (int b = 0; b < 32; ++b) ones[static_cast<std::size_t>(b)] += (r >> b) & 1u;
    prev = r;
  }
  const double chi_top = chi_square(top, n), chi_low = chi_square(low, n), chi_pairs = chi_square(pairs, n);
  INFO("chi-square (255 dof): top byte " << chi_top << ", low byte " << chi_low << ", consecutive pairs " << chi_pairs);
  CHECK(plausible_chi_square(chi_top, 255));
  CHECK(plausible_chi_square(chi_low, 255));
  CHECK(plausible_chi_square(chi_pairs, 255));
  for (int b = 0; b < 32; ++b) {
    // Binomial(n, 1/2): standard deviation sqrt(n)/2.
    INFO("bit " << b);
    CHECK(std::fabs(static_cast<double>(ones[static_cast<std::size_t>(b)]) - n / 2.0) <= 6 * std::sqrt(static_cast<double>(n)) / 2);
  }
}
