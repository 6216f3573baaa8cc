// SPDX-License-Identifier: Apache-2.0
// The quantizer's bytes are pinned: FNV-1a digests of the codes and scales that ref::quantize
// (rowwise and columnwise) and quantize_block_packed (the kernels' block function) write, and of
// the floats ref::dequantize gives back, for every MX format, scale rule and rounding mode, each
// without the rotation, with it, and with it and random signs, over deterministic inputs that
// cover every bf16 bit pattern (each binade, subnormals, Inf, NaN) in order and shuffled, and a
// ragged matrix of random full-mantissa floats at random binades (padding included). The
// digests in quantizer_digests.hpp were recorded from the code before the format model
// (issue #46 section 1) and must not change while the MX formats are instances of it: a change
// to any byte of any case fails the case that holds it, by name.
// MXKIT_PRINT_DIGESTS=1 prints the table in quantizer_digests.hpp's form (to record it anew,
// which only a deliberate change of the MX bits may do).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <mxkit/ref/quantize.hpp>

#include "../catch.hpp"
#include "quantizer_digests.hpp"

// A named namespace: the folder's tests compile as one unity build.
namespace quantizer_digests {
using mxkit::block_axis;
using mxkit::matrix_view;
using mxkit::mx_type;
using mxkit::quantize_options;
using mxkit::rounding;
using mxkit::scale_rule;

// FNV-1a, 64 bits: a change in any byte changes the digest (not a cryptographic claim; these
// guard against accidents, not adversaries).
struct fnv1a {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void add(const std::uint8_t* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  void add_u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      const std::uint8_t b = static_cast<std::uint8_t>(v >> (8 * i));
      add(&b, 1);
    }
  }
  void add_float(float f) { add_u32(mxkit::bit_cast<std::uint32_t>(f)); }
};

// splitmix64: a deterministic generator whose output does not depend on the standard library.
struct splitmix64 {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

struct input_matrix {
  const char* name;
  std::vector<float> x;
  std::size_t rows, cols;
};

// Every bf16 bit pattern as a float: [512, 128], pattern i at i (blocks of neighbouring patterns),
// and the same values in a fixed shuffled order [256, 256] (blocks of mixed binades, specials
// among ordinary values); a ragged [97, 75] of random floats (random sign, 23 random mantissa
// bits, exponent field anywhere from 0 to 254, a few exact zeros).
std::vector<input_matrix> inputs() {
  std::vector<float> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) all[i] = mxkit::bit_cast<float>(i << 16);
  std::vector<float> shuffled = all;
  splitmix64 g{46};
  for (std::size_t i = shuffled.size() - 1; i > 0; --i) std::swap(shuffled[i], shuffled[g.next() % (i + 1)]);
  std::vector<float> ragged(97 * 75);
  for (float& v : ragged) {
    const std::uint64_t r = g.next();
    const std::uint32_t exponent = static_cast<std::uint32_t>((r >> 32) % 255);
    const std::uint32_t bits = (static_cast<std::uint32_t>(r) & 0x807FFFFFu) | (exponent << 23);
    v = (r >> 60) == 0 ? 0.0f : mxkit::bit_cast<float>(bits);
  }
  return {{"bf16 patterns", std::move(all), 512, 128}, {"bf16 shuffled", std::move(shuffled), 256, 256},
          {"ragged random", std::move(ragged), 97, 75}};
}

constexpr rounding all_roundings[] = {rounding::nearest_even, rounding::nearest_away, rounding::toward_zero,
                                      rounding::stochastic};
constexpr scale_rule all_rules[] = {scale_rule::floor, scale_rule::even, scale_rule::round_up, scale_rule::ceil};

// The three rotation settings: none, Hadamard, Hadamard with random signs.
quantize_options options_for(scale_rule rule, rounding round, int rotation) {
  quantize_options o;
  o.rule = rule;
  o.round = round;
  o.hadamard = rotation > 0;
  o.random_signs = rotation > 1;
  o.seed = 0x0123456789ABCDEFull;
  o.stream = 7;
  return o;
}

std::string case_name(mx_type t, scale_rule rule, rounding round) {
  return std::string(mxkit::name_of(t)) + " " + mxkit::name_of(rule) + " " + mxkit::name_of(round);
}

// The digest of one (format, rule, rounding): every input, both axes, three rotation settings.
struct case_digests {
  std::uint64_t tensor = 0;       // ref::quantize: codes and scales
  std::uint64_t packed = 0;       // quantize_block_packed on each 32-block of every input, in order
  std::uint64_t dequantized = 0;  // ref::dequantize of every tensor above
};

case_digests digest_case(const std::vector<input_matrix>& in, mx_type t, scale_rule rule, rounding round) {
  fnv1a tensor, packed, dequantized;
  for (const input_matrix& m : in)
    for (int rotation = 0; rotation < 3; ++rotation) {
      const quantize_options o = options_for(rule, round, rotation);
      for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
        const mxkit::mx_tensor q = mxkit::ref::quantize(matrix_view<const float>{m.x.data(), m.rows, m.cols}, t, axis, o, 1);
        tensor.add(q.data().data(), q.data().size());
        tensor.add(q.scales().data(), q.scales().size());
        for (const float v : mxkit::ref::dequantize(q)) dequantized.add_float(v);
      }
      mxkit::visit_mx_type(t, [&](auto fmt) {
        using Fmt = decltype(fmt);
        std::uint32_t words[mxkit::block_words<Fmt>];
        for (std::size_t first = 0; first + 32 <= m.x.size(); first += 32) {
          const mxkit::e8m0 s = mxkit::quantize_block_packed<Fmt>(m.x.data() + first, o, first, words);
          for (const std::uint32_t w : words) packed.add_u32(w);
          packed.add_u32(s.bits());
        }
      });
    }
  return {tensor.h, packed.h, dequantized.h};
}

}  // namespace quantizer_digests

using namespace quantizer_digests;

TEST_CASE("quantizer digests: the hash sees every byte and every case differs", "[quantizer_digests]") {
  // The check below could not fail if the hash ignored its input or every case hashed alike.
  fnv1a a, b;
  const std::uint8_t x[3] = {1, 2, 3}, y[3] = {1, 2, 7};
  a.add(x, 3);
  b.add(y, 3);
  CHECK(a.h != b.h);
  const std::vector<input_matrix> small = {{"small", {1.0f, 2.5f, -7.0f, 0.1f}, 2, 2}};
  CHECK(digest_case(small, mx_type::mxfp4, scale_rule::floor, rounding::nearest_even).tensor !=
        digest_case(small, mx_type::mxfp8_e4m3, scale_rule::floor, rounding::nearest_even).tensor);
  // One entry per (format, rule, rounding), in the order digest tables are printed.
  CHECK(std::size(recorded_quantizer_digests) == std::size(mxkit::all_mx_types) * std::size(all_rules) * std::size(all_roundings));
}

TEST_CASE("quantizer digests: every MX case has the bits recorded before the format model", "[exhaustive][quantizer_digests]") {
  const std::vector<input_matrix> in = inputs();
  const bool print = std::getenv("MXKIT_PRINT_DIGESTS") != nullptr;
  std::size_t i = 0;
  for (const mx_type t : mxkit::all_mx_types)
    for (const scale_rule rule : all_rules)
      for (const rounding round : all_roundings) {
        const std::string name = case_name(t, rule, round);
        const case_digests d = digest_case(in, t, rule, round);
        if (print)
          std::printf("    {\"%s\", 0x%016llxull, 0x%016llxull, 0x%016llxull},\n", name.c_str(),
                      static_cast<unsigned long long>(d.tensor), static_cast<unsigned long long>(d.packed),
                      static_cast<unsigned long long>(d.dequantized));
        REQUIRE(i < std::size(recorded_quantizer_digests));
        const recorded_digest& r = recorded_quantizer_digests[i++];
        INFO(name);
        CHECK(std::string(r.name) == name);
        CHECK(d.tensor == r.tensor);
        CHECK(d.packed == r.packed);
        CHECK(d.dequantized == r.dequantized);
      }
}
