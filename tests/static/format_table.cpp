// SPDX-License-Identifier: Apache-2.0
// Prints the format table of docs/formats.md from the library's own constants, so the documentation
// cannot drift from the code: ctest static.readme compares this output with the table there. The
// MX formats by their mx_type, then NVFP4 by its value.
// Cells are printed straight to stdout (no std::string building: g++ 12 -O3 reports a false
// -Wrestrict on "literal" + std::string).
#include <cmath>
#include <cstdio>

#include <mxkit/block/block_format.hpp>
#include <mxkit/block/mx_format.hpp>
#include <mxkit/format/e8m0.hpp>

namespace {

// Powers of two far from 1 read better as 2^k; everything else as a short decimal.
void number(float v, const char* suffix = "") {
  int e = 0;
  const float m = std::frexp(v, &e);
  if (m == 0.5f && (e - 1 <= -4 || e - 1 >= 16)) std::printf("2^%d%s", e - 1, suffix);
  else std::printf("%.9g%s", static_cast<double>(v), suffix);
}

// "S.1111.111" for a magnitude code of an E/M encoding.
template <class Enc>
void code(const char* label, std::uint32_t mag) {
  std::printf("%sS.", label);
  for (int i = Enc::exponent_bits + Enc::mantissa_bits - 1; i >= 0; --i) {
    std::putchar(((mag >> i) & 1u) ? '1' : '0');
    if (i == Enc::mantissa_bits && i != 0) std::putchar('.');
  }
}

template <class Fmt>
void row(const char* name) {
  using E = typename Fmt::element_type;
  std::printf("| %s | ", name);
  if constexpr (requires { typename E::encoding_type; }) {
    using Enc = typename E::encoding_type;
    std::printf("E%dM%d | %d | %s | ", Enc::exponent_bits, Enc::mantissa_bits, E::bits_count,
                Fmt::storage_bits == 4 ? "4 (2 per byte)" : (E::bits_count == 8 ? "8" : "8 (low 6 bits)"));
    number(E::max().to_float(), " | ");
    number(E::min_normal().to_float(), " | ");
    number(E::min_subnormal().to_float(), " | ");
    if constexpr (Enc::has_inf) {
      code<Enc>("Inf ", Enc::inf_code);
      code<Enc>(", NaN ", Enc::nan_code);
      std::printf(" (and others)");
    } else if constexpr (Enc::has_nan) {
      code<Enc>("NaN ", Enc::nan_code);
      std::printf(" only, no Inf");
    } else {
      std::printf("none");
    }
  } else {  // MXINT8: two's complement with an implicit 2^-6
    std::printf("INT8 | %d | 8 | ", E::bits_count);
    number(E::max().to_float(), " | - | ");
    number(E::from_bits(1).to_float(), " (step) | none");
  }
  std::printf(" | %.2f |\n", Fmt::storage_bits + 8.0 / Fmt::block_size);
}

}  // namespace

int main() {
  std::printf("| format | element | bits | storage bits | max | min normal | min subnormal | Inf / NaN codes | bits per value with scale |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const mxkit::mx_type t : mxkit::all_mx_types) mxkit::visit_mx_type(t, [](auto fmt) { row<decltype(fmt)>(name_of(decltype(fmt)::type)); });
  std::printf("| scale | E8M0 | 8 | 8 per %d elements | ", mxkit::mx_block_size);
  number(mxkit::e8m0::from_exponent(mxkit::e8m0::max_exponent).to_float(), " | ");
  number(mxkit::e8m0::from_exponent(mxkit::e8m0::min_exponent).to_float(), " | - | ");
  std::printf("NaN 0x%02X, no Inf, no zero, no sign | - |\n", mxkit::e8m0::nan_bits);
  // NVFP4 (block/block_format.hpp formats::nvfp4): E2M1 under an E4M3 scale per 16 and an fp32 per tensor.
  using nvfp4 = mxkit::block_format_desc<mxkit::formats::nvfp4>;
  row<nvfp4>(mxkit::nvfp4_format_name(mxkit::formats::nvfp4));
  using e4m3_enc = mxkit::e4m3::encoding_type;
  std::printf("| scale (nvfp4) | E4M3 | 8 | 8 per %d elements, and an fp32 per tensor | ", nvfp4::block_size);
  number(mxkit::e4m3::max().to_float(), " | ");
  number(mxkit::e4m3::min_normal().to_float(), " | ");
  number(mxkit::e4m3::min_subnormal().to_float(), " | ");
  code<e4m3_enc>("NaN ", e4m3_enc::nan_code);
  std::printf(" only, no Inf (zero: the block decodes to 0) | - |\n");
}
