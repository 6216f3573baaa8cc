// SPDX-License-Identifier: Apache-2.0
// quantize_block_packed (what kernels call) writes exactly pack_block(quantize_block(...)) and
// the same scale, for every format, rule, rounding mode and rotation, on ordinary, tied, tiny,
// zero and non-finite blocks; pack_block's layout is pack.hpp's (FP4 element 2i low nibble).
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <mxkit/block/pack.hpp>
#include <mxkit/block/quantize_block.hpp>

#include "../catch.hpp"

namespace {

std::vector<std::array<float, 32>> test_blocks() {
  std::mt19937_64 gen(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 31), expo(-130, 120);
  std::vector<std::array<float, 32>> blocks;
  for (int k = 0; k < 400; ++k) {
    std::array<float, 32> b{};
    const int kind = k % 8, e = expo(gen);
    for (int i = 0; i < 32; ++i) {
      switch (kind) {
        case 0: b[i] = std::ldexp(normal(gen), e); break;
        case 1: b[i] = std::ldexp(static_cast<float>(small(gen) - 16), e);  break;  // grid points and ties
        case 2: b[i] = std::ldexp(static_cast<float>(small(gen)), -149); break;    // subnormals
        case 3: b[i] = 0.0f; break;
        case 4: b[i] = i == 3 ? std::numeric_limits<float>::quiet_NaN() : normal(gen); break;
        case 5: b[i] = i == 7 ? -std::numeric_limits<float>::infinity() : normal(gen); break;
        case 6: b[i] = i == 0 ? 3.0e38f : std::ldexp(normal(gen), -110); break;
        default: b[i] = std::ldexp(normal(gen), e % 20); break;
      }
    }
    blocks.push_back(b);
  }
  return blocks;
}

template <class Fmt>
void check_format() {
  const auto blocks = test_blocks();
  int n = 0;
  for (const mxkit::scale_rule rule : {mxkit::scale_rule::floor, mxkit::scale_rule::even, mxkit::scale_rule::round_up,
                                       mxkit::scale_rule::ceil})
    for (const mxkit::rounding r : {mxkit::rounding::nearest_even, mxkit::rounding::nearest_away, mxkit::rounding::stochastic})
      for (const bool rotate : {false, true}) {
        mxkit::quantize_options o;
        o.rule = rule;
        o.round = r;
        o.hadamard = rotate;
        o.random_signs = rotate && (n % 2 == 0);
        o.seed = 1234 + static_cast<unsigned>(n++);
        for (std::size_t k = 0; k < blocks.size(); ++k) {
          const std::uint64_t first = 32 * k;
          const mxkit::mx_block<Fmt> want = mxkit::quantize_block<Fmt>(blocks[k].data(), o, first);
          std::uint32_t expected[mxkit::block_words<Fmt>], got[mxkit::block_words<Fmt>];
          mxkit::pack_block<Fmt>(want, expected);
          const mxkit::e8m0 s = mxkit::quantize_block_packed<Fmt>(blocks[k].data(), o, mxkit::hadamard_signs{o.sign_mask()}, first, got);
          REQUIRE(s.bits() == want.scale.bits());
          for (int j = 0; j < mxkit::block_words<Fmt>; ++j) REQUIRE(got[j] == expected[j]);
          // The overload without signs takes them from o.sign_mask(): the same words.
          std::uint32_t own[mxkit::block_words<Fmt>];
          REQUIRE(mxkit::quantize_block_packed<Fmt>(blocks[k].data(), o, first, own).bits() == want.scale.bits());
          for (int j = 0; j < mxkit::block_words<Fmt>; ++j) REQUIRE(own[j] == expected[j]);
        }
      }
}

}  // namespace

TEST_CASE("quantize_block_packed: same scale and storage as quantize_block, every format", "[block]") {
  check_format<mxkit::mx_format<mxkit::mx_type::mxfp4>>();
  check_format<mxkit::mx_format<mxkit::mx_type::mxfp6_e2m3>>();
  check_format<mxkit::mx_format<mxkit::mx_type::mxfp6_e3m2>>();
  check_format<mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>>();
  check_format<mxkit::mx_format<mxkit::mx_type::mxfp8_e5m2>>();
  check_format<mxkit::mx_format<mxkit::mx_type::mxint8>>();
}

TEST_CASE("pack_block: the byte layout of pack.hpp", "[block]") {
  mxkit::mx_block<mxkit::mx_format<mxkit::mx_type::mxfp4>> b{};
  for (int i = 0; i < 32; ++i) b.elements[i] = mxkit::e2m1::from_bits(static_cast<std::uint8_t>(i % 16));
  std::uint32_t w[4];
  mxkit::pack_block(b, w);
  std::uint8_t bytes[16];
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<std::uint8_t>(w[i / 4] >> (8 * (i % 4)));
  for (int i = 0; i < 32; ++i) CHECK(mxkit::load_code(bytes, static_cast<std::size_t>(i), 4) == i % 16);
  CHECK(w[0] == 0x76543210u);
  mxkit::mx_block<mxkit::mx_format<mxkit::mx_type::mxfp8_e4m3>> c{};
  for (int i = 0; i < 32; ++i) c.elements[i] = mxkit::e4m3::from_bits(static_cast<std::uint8_t>(i * 7));
  std::uint32_t v[8];
  mxkit::pack_block(c, v);
  CHECK(v[1] == (28u | 35u << 8 | 42u << 16 | 49u << 24));
}
