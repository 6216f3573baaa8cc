// SPDX-License-Identifier: Apache-2.0
// Compile-time tests: quantizing a std::array<float, 32> to an MX block is a constant expression
// (the same code runs on host, device and in constexpr). The expected scales and codes below were
// worked out by hand from OCP MX v1.0 section 6.3 and the element tables; the one runtime test
// checks that a run-time evaluation gives the same bytes as the compile-time one.
#include <array>
#include <cstdint>
#include <limits>

#include <mxkit/block/pack.hpp>
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/random/philox.hpp>
#include <mxkit/transform/hadamard.hpp>

#include "../catch.hpp"

namespace {
using mxkit::mx_format;
using mxkit::mx_type;
using mxkit::quantize_options;
using mxkit::scale_rule;
using block = std::array<float, 32>;

template <class Fmt>
constexpr std::array<std::uint8_t, 33> bytes_of(const mxkit::mx_block<Fmt>& b) {
  std::array<std::uint8_t, 33> r{};
  r[0] = b.scale.bits();
  for (std::size_t i = 0; i < 32; ++i) r[i + 1] = b.elements[i].bits();
  return r;
}

constexpr quantize_options with_rule(scale_rule r) {
  quantize_options o;
  o.rule = r;
  return o;
}

// ---- MXFP4, values i/4 for i = 0..31 (amax 7.75).
constexpr block quarters = [] {
  block b{};
  for (std::size_t i = 0; i < 32; ++i) b[i] = static_cast<float>(i) * 0.25f;
  return b;
}();

// floor: floor(log2 7.75) - emax(2) = 0, scale 1.0 (byte 127). E2M1 values 0,0.5,1,1.5,2,3,4,6 are
// codes 0..7; ties go to the even code: 0.25->0, 0.75->2, 1.25->2, 1.75->4, 2.5->4, 3.5->6,
// 5->6; 6.25 and above round to 6 or past it and saturate to code 7.
constexpr std::uint8_t fp4_floor_codes[32] = {0, 0, 1, 2, 2, 2, 3, 4, 4, 4, 4, 5, 5, 5, 6, 6,
                                              6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7};
constexpr auto fp4_floor = mxkit::quantize_block<mx_format<mx_type::mxfp4>>(quarters, with_rule(scale_rule::floor));
static_assert(fp4_floor.scale.bits() == 127);
static_assert([] {
  for (std::size_t i = 0; i < 32; ++i)
    if (fp4_floor.elements[i].bits() != fp4_floor_codes[i]) return false;
  return true;
}());

// even: 7.75 = 1.1111b * 4 rounds to 2.0 * 4 at one mantissa bit, so the exponent is 3 - 2 = 1
// (byte 128) and the elements are i/8: 0.25->0 (tie), 0.75->2, 1.25->2, 1.75->4, 2.5->4, 3.5->6.
constexpr std::uint8_t fp4_even_codes[32] = {0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 4, 4,
                                             4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6};
constexpr auto fp4_even = mxkit::quantize_block<mx_format<mx_type::mxfp4>>(quarters, with_rule(scale_rule::even));
static_assert(fp4_even.scale.bits() == 128);
static_assert([] {
  for (std::size_t i = 0; i < 32; ++i)
    if (fp4_even.elements[i].bits() != fp4_even_codes[i]) return false;
  return true;
}());
// round_up: 7.75 / 6 > 1, so 2^1 (byte 128); ceil: ceil(log2 7.75) - 2 = 1.
static_assert(mxkit::quantize_block<mx_format<mx_type::mxfp4>>(quarters, with_rule(scale_rule::round_up)).scale.bits() == 128);
static_assert(mxkit::quantize_block<mx_format<mx_type::mxfp4>>(quarters, with_rule(scale_rule::ceil)).scale.bits() == 128);

// Packing the floor block: bytes are (code 2i) | (code 2i+1) << 4.
static_assert(mxkit::pack_fp4x2(fp4_floor.elements[2].bits(), fp4_floor.elements[3].bits()) == 0x21);
static_assert(mxkit::pack_fp4x2(fp4_floor.elements[30].bits(), fp4_floor.elements[31].bits()) == 0x77);

// Dequantizing: code value times the scale (here 1.0): 0.75 -> 1.0, 6.5 -> 6.
constexpr auto fp4_back = mxkit::dequantize_block<mx_format<mx_type::mxfp4>>(fp4_floor);
static_assert(fp4_back[3] == 1.0f && fp4_back[26] == 6.0f && fp4_back[11] == 3.0f && fp4_back[1] == 0.0f);
constexpr auto fp4_even_back = mxkit::dequantize_block<mx_format<mx_type::mxfp4>>(fp4_even);
static_assert(fp4_even_back[31] == 8.0f && fp4_even_back[3] == 1.0f);  // code 6 (4.0) * 2, code 1 (0.5) * 2

// ---- MXFP8 E4M3, amax 100: floor(log2 100) - emax(8) = -2 (byte 125), elements x * 4.
//   100 -> 400 = 1.1001b * 2^8: tie between 384 (S.1111.100) and 416, even -> 0x7C
//   -1  -> -4 = 2^2: exponent field 9 -> 0xC8
//   3   -> 12 = 1.1b * 2^3: field 10, mantissa 100 -> 0x54
//   2^-11 -> 2^-9, the smallest subnormal -> 0x01
//   3 * 2^-13 -> 3 * 2^-11 = 0.75 subnormal steps -> 1 step -> 0x01
//   2^-12 -> 2^-10 = half a step: tie between 0 and 2^-9, even -> 0x00
constexpr block e4m3_in = [] {
  block b{};
  b[0] = 100.0f;
  b[1] = -1.0f;
  b[2] = 3.0f;
  b[3] = 0x1p-11f;
  b[4] = 3 * 0x1p-13f;
  b[5] = 0x1p-12f;
  return b;
}();
constexpr auto e4m3_q = bytes_of(mxkit::quantize_block<mx_format<mx_type::mxfp8_e4m3>>(e4m3_in));
static_assert(e4m3_q[0] == 125);
static_assert(e4m3_q[1] == 0x7C && e4m3_q[2] == 0xC8 && e4m3_q[3] == 0x54 && e4m3_q[4] == 0x01 && e4m3_q[5] == 0x01 &&
              e4m3_q[6] == 0x00 && e4m3_q[32] == 0x00);
// round_up: 100 / 2^6 = 1.5625 <= 448 / 2^8 = 1.75, so the same scale.
static_assert(bytes_of(mxkit::quantize_block<mx_format<mx_type::mxfp8_e4m3>>(e4m3_in, with_rule(scale_rule::round_up)))[0] == 125);

// ---- MXINT8, amax 1: exponent 0 - emax(0) = 0 (byte 127), codes x * 64:
//   1 -> 64; -0.5 -> -32 = 0xE0; 0.75 -> 48; 1/128 -> 0.5: tie, even -> 0; 3/128 -> 1.5 -> 2.
constexpr block int8_in = [] {
  block b{};
  b[0] = 1.0f;
  b[1] = -0.5f;
  b[2] = 0.75f;
  b[3] = 1.0f / 128;
  b[4] = 3.0f / 128;
  return b;
}();
constexpr auto int8_q = bytes_of(mxkit::quantize_block<mx_format<mx_type::mxint8>>(int8_in));
static_assert(int8_q[0] == 127 && int8_q[1] == 64 && int8_q[2] == 0xE0 && int8_q[3] == 48 && int8_q[4] == 0 && int8_q[5] == 2);

// ---- Special blocks: NaN -> scale 0xFF and zero codes; all zeros -> scale 1.0 (0x7F).
constexpr block nan_in = [] {
  block b{};
  b[0] = 1.0f;
  b[9] = std::numeric_limits<float>::quiet_NaN();
  return b;
}();
constexpr auto nan_q = bytes_of(mxkit::quantize_block<mx_format<mx_type::mxfp8_e5m2>>(nan_in));
static_assert(nan_q[0] == 0xFF && nan_q[1] == 0 && nan_q[10] == 0);
static_assert(mxkit::quantize_block<mx_format<mx_type::mxfp6_e3m2>>(block{}).scale.bits() == 127);

// ---- Hadamard in constant expressions: rotating sixteen equal values concentrates them into one
// element (H16 row 0 is all +1/4): (1,...,1) -> (4, 0, ..., 0).
constexpr std::array<float, 16> rotated_ones = [] {
  std::array<float, 16> v{};
  v.fill(1.0f);
  mxkit::rotate_group16(v.data(), 0);
  return v;
}();
static_assert(rotated_ones[0] == 4.0f && rotated_ones[1] == 0.0f && rotated_ones[15] == 0.0f);
static_assert(mxkit::hadamard_matrix<4>()[5] == -0.5f && mxkit::hadamard_matrix<4>()[0] == 0.5f);

// ---- Philox at compile time: the Random123 known answer for counter 0, key 0.
static_assert(mxkit::philox4x32({{0, 0, 0, 0}}, 0, 0).v[0] == 0x6627e8d5u);
static_assert(mxkit::philox4x32({{0, 0, 0, 0}}, 0, 0).v[3] == 0x9b00dbd8u);

}  // namespace

TEST_CASE("constexpr: the run-time quantizer gives the compile-time bytes", "[static]") {
  // Inputs copied through a volatile so the compiler cannot fold these calls.
  volatile float scale = 1.0f;
  block q = quarters, e = e4m3_in, n = int8_in;
  for (float& x : q) x *= scale;
  for (float& x : e) x *= scale;
  for (float& x : n) x *= scale;
  CHECK(bytes_of(mxkit::quantize_block<mx_format<mx_type::mxfp4>>(q, with_rule(scale_rule::floor))) == bytes_of(fp4_floor));
  CHECK(bytes_of(mxkit::quantize_block<mx_format<mx_type::mxfp4>>(q, with_rule(scale_rule::even))) == bytes_of(fp4_even));
  CHECK(bytes_of(mxkit::quantize_block<mx_format<mx_type::mxfp8_e4m3>>(e)) == e4m3_q);
  CHECK(bytes_of(mxkit::quantize_block<mx_format<mx_type::mxint8>>(n)) == int8_q);
}
