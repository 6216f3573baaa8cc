// SPDX-License-Identifier: Apache-2.0
// Element storage (block/pack.hpp): FP4 two per byte with element 2i in the low nibble, other
// formats one byte per element.
#include <cstdint>
#include <vector>

#include <mxkit/block/pack.hpp>

#include "../catch.hpp"

TEST_CASE("pack: FP4 element 2i is the low nibble, 2i+1 the high nibble", "[block]") {
  for (unsigned even = 0; even < 16; ++even)
    for (unsigned odd = 0; odd < 16; ++odd) {
      const std::uint8_t byte = mxkit::pack_fp4x2(static_cast<std::uint8_t>(even), static_cast<std::uint8_t>(odd));
      CHECK(byte == static_cast<std::uint8_t>(odd * 16 + even));
      CHECK(mxkit::load_code(&byte, 0, 4) == even);
      CHECK(mxkit::load_code(&byte, 1, 4) == odd);
    }
  // Bits above the nibble are ignored.
  CHECK(mxkit::pack_fp4x2(0xF3, 0xA5) == 0x53);
}

TEST_CASE("pack: store_code writes one element and leaves its neighbour alone", "[block]") {
  std::vector<std::uint8_t> buf(16, 0xAB);
  for (std::size_t i = 0; i < 32; ++i) {
    const std::uint8_t code = static_cast<std::uint8_t>((i * 7 + 3) & 0xF);
    mxkit::store_code(buf.data(), i, code, 4);
    CHECK(mxkit::load_code(buf.data(), i, 4) == code);
    if (i % 2 == 0) CHECK((buf[i / 2] >> 4) == 0xA);  // the odd neighbour is still the old 0xA
  }
  for (std::size_t i = 0; i < 32; ++i) CHECK(mxkit::load_code(buf.data(), i, 4) == ((i * 7 + 3) & 0xF));
  CHECK(buf[0] == (3 | (10 << 4)));  // elements 0 (3) and 1 (10)
  // Storing a wide code into a nibble keeps only its low four bits.
  mxkit::store_code(buf.data(), 2, 0xF5, 4);
  CHECK(buf[1] == ((((3 * 7 + 3) & 0xF) << 4) | 0x5));

  std::vector<std::uint8_t> bytes(8, 0);
  for (std::size_t i = 0; i < 8; ++i) mxkit::store_code(bytes.data(), i, static_cast<std::uint8_t>(0x30 + i), 8);
  for (std::size_t i = 0; i < 8; ++i) {
    CHECK(bytes[i] == 0x30 + i);
    CHECK(mxkit::load_code(bytes.data(), i, 8) == 0x30 + i);
  }
}

TEST_CASE("pack: packed_bytes", "[block]") {
  CHECK(mxkit::packed_bytes(0, 4) == 0);
  CHECK(mxkit::packed_bytes(1, 4) == 1);
  CHECK(mxkit::packed_bytes(32, 4) == 16);
  CHECK(mxkit::packed_bytes(33, 4) == 17);
  CHECK(mxkit::packed_bytes(32, 8) == 32);
  CHECK(mxkit::packed_bytes(5, 8) == 5);
}
