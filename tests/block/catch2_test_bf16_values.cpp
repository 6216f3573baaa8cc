// SPDX-License-Identifier: Apache-2.0
// block/bf16_values.hpp, every code against every scale: element_bits is the exact product
// (a double product, rounded nowhere) wherever that product is a finite bf16 value; code_of
// gives the code's value back there; the SWAR NaN test agrees with the formats' own; and the exact range the flag guards is
// +-48 binades. The GPU quantizer's and the expansion's bits are held to element_bits by
// tests/gpu/catch2_test_mxfp8_values.cu and catch2_test_gemm.cu.
#include <mxkit/block/bf16_values.hpp>
#include <mxkit/format/e8m0.hpp>

#include <cmath>
#include <cstdint>

#include "../catch.hpp"

namespace {
using namespace mxkit;

template <bool E4M3>
void check_every_code_and_scale() {
  using elem = bf16_values::element<E4M3>;
  std::size_t exact = 0, inexact = 0;
  for (unsigned s = 0; s < 255; ++s)  // 0xFF is the NaN scale
    for (unsigned c = 0; c < 256; ++c) {
      const elem e = elem::from_bits(static_cast<std::uint8_t>(c));
      const float v = e.to_float();
      if (std::isnan(v)) {
        CHECK(bf16_values::has_nan_code(E4M3, c));
        continue;
      }
      REQUIRE_FALSE(bf16_values::has_nan_code(E4M3, c));
      const double want = static_cast<double>(v) * std::ldexp(1.0, static_cast<int>(s) - 127);
      const std::uint32_t bits = bf16_values::element_bits<E4M3>(c, e8m0::from_bits(static_cast<std::uint8_t>(s)).to_float());
      const float got = bit_cast<float>(bits << 16);
      // A finite product that is a float whose low 16 bits are zero is a bf16 value: 8
      // significant bits, and a multiple of 2^-133 (bf16's least subnormal) where it is small.
      const float f = static_cast<float>(want);
      const bool representable = std::isfinite(f) && static_cast<double>(f) == want && (bit_cast<std::uint32_t>(f) & 0xFFFFu) == 0;
      if (!representable) {
        ++inexact;
        continue;
      }
      ++exact;
      INFO((E4M3 ? "E4M3" : "E5M2") << " code " << c << " scale " << s);
      REQUIRE(static_cast<double>(got) == want);
      REQUIRE(std::signbit(got) == std::signbit(v));
      const std::uint8_t back = bf16_values::code_of<E4M3>(static_cast<std::uint16_t>(bits), s);
      REQUIRE(bit_cast<std::uint32_t>(elem::from_bits(back).to_float()) == bit_cast<std::uint32_t>(v));
    }
  // Most pairs are exact; the rest lie below 2^-133 or overflow: scales the quantizer gives a
  // 16-bit input never pair with those codes (gpu/quantize.hpp).
  CHECK(exact > 50000);
  CHECK(inexact > 0);
}
}  // namespace

TEST_CASE("bf16_values: each code times each scale, and back", "[block]") {
  check_every_code_and_scale<true>();
  check_every_code_and_scale<false>();
}

TEST_CASE("bf16_values: the exact range the GEMM's flag guards", "[block]") {
  // Beyond +-48 binades only a non-zero code counts; signed zeros and NaN scales never do.
  for (int e = -127; e <= 127; ++e) {
    const unsigned s = static_cast<unsigned>(e + 127);
    CHECK(bf16_values::beyond_exact_range(s, 0x00000001u) == (e > 48 || e < -48));
    CHECK_FALSE(bf16_values::beyond_exact_range(s, 0x80808080u));
  }
  CHECK_FALSE(bf16_values::beyond_exact_range(0xFF, 0x7F7F7F7Fu));
  // Under a NaN scale the codes are not needed back.
  CHECK(bf16_values::code_of<true>(0x7FC0, 0xFF) == 0);
}
