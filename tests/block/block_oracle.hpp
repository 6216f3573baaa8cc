// SPDX-License-Identifier: Apache-2.0
#pragma once
// The oracle of one MX block (OCP MX v1.0 section 6.3 with mxkit's scale rules and special-block
// policy, block/scale_rule.hpp): scale byte from the block's amax by oracle::scale_byte, then
// every element by the format oracle at that scale, saturating. Built on tests/format/spec_oracle.hpp;
// the Hadamard rotation is not modelled here (callers rotate with the library's tested transform).
#include <array>
#include <cmath>
#include <cstdint>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/random/philox.hpp>

#include "../format/spec_oracle.hpp"

namespace oracle {

// Element model of an MX format: scale-rule facts, encoder and decoder.
struct element_model {
  element_info info;
  const minifloat_spec* spec;  // null for INT8
  const table* values;

  std::uint32_t encode(float x, int scale_exp, rounding r, std::uint32_t random_bits) const {
    if (spec == nullptr) return encode_int8(*values, x, scale_exp, r, random_bits);
    return oracle::encode(*spec, *values, x, scale_exp, r, overflow::saturate, random_bits);
  }
  // Signed value of a code (NaN for NaN codes).
  long double decode(std::uint32_t code) const {
    if (spec == nullptr) return decode_int8(static_cast<std::uint8_t>(code));
    const decoded d = oracle::decode(*spec, code);
    if (d.nan) return std::numeric_limits<long double>::quiet_NaN();
    return d.negative ? -d.magnitude : d.magnitude;
  }
};

inline element_model model_of(mxkit::mx_type t) {
  static const table int8_values = make_int8_table();
  const auto mini = [](const minifloat_spec& s) {
    const table& tb = table_of(s);
    return element_model{{s.name, s.emax_elem, s.man_bits, tb.max()}, &s, &tb};
  };
  switch (t) {
    case mxkit::mx_type::mxfp4: return mini(e2m1_spec);
    case mxkit::mx_type::mxfp6_e2m3: return mini(e2m3_spec);
    case mxkit::mx_type::mxfp6_e3m2: return mini(e3m2_spec);
    case mxkit::mx_type::mxfp8_e4m3: return mini(e4m3_spec);
    case mxkit::mx_type::mxfp8_e5m2: return mini(e5m2_spec);
    case mxkit::mx_type::mxint8: break;
  }
  // INT8: 127/64 = 1.111111b: six fraction bits below the leading one, emax_elem 0 (OCP Table 1).
  return element_model{{"int8", 0, 6, std::ldexp(127.0L, -6)}, nullptr, &int8_values};
}

struct block_codes {
  std::uint8_t scale = 0;
  std::array<std::uint32_t, 32> codes{};
};

// v: the 32 values the scale is taken from (already rotated when the options rotate).
// Stochastic rounding draws word random_bits(seed, stream, first_index + i) for element i.
inline block_codes quantize_block(const element_model& m, const float* v, scale_rule rule, rounding r,
                                  std::uint64_t seed = 0, std::uint32_t stream = 0, std::uint64_t first_index = 0) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) {
    if (std::isnan(v[i])) {
      amax = v[i];
      break;
    }
    amax = std::max(amax, std::fabs(v[i]));
  }
  block_codes b;
  b.scale = scale_byte(amax, rule, m.info);
  if (b.scale == 0xFF) return b;  // non-finite block: all element codes zero by policy
  for (int i = 0; i < 32; ++i) {
    const std::uint32_t w = r == rounding::stochastic ? mxkit::random_bits(seed, stream, first_index + static_cast<std::uint64_t>(i)) : 0u;
    b.codes[static_cast<std::size_t>(i)] = m.encode(v[i], int{b.scale} - 127, r, w);
  }
  return b;
}

}  // namespace oracle
