// SPDX-License-Identifier: Apache-2.0
#pragma once
// Quantize and dequantize one block of a block-scaled format with E8M0 scales (OCP MX v1.0
// section 6.3; the MX formats' blocks are 32 elements): optional Hadamard rotation of each
// 16-element group, amax, shared scale by rule, elements = round(x / scale) saturated. The block
// size is the format's (Fmt::block_size, a multiple of the 16-point rotation's group). These are
// the functions the host tensors and the GPU kernels both call; all constexpr.
#include <array>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/block/element_encoder.hpp>
#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/quantize_options.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/random/philox.hpp>
#include <mxkit/transform/hadamard.hpp>

MXKIT_BEGIN_NAMESPACE

template <mx_format_descriptor Fmt>
struct mx_block {
  e8m0 scale;
  typename Fmt::element_type elements[Fmt::block_size];  // C array: usable in device code
};

// One element under a block scale. A NaN scale marks a non-finite block: its element codes are
// all zero bits by policy (they carry no information, OCP MX section 6.3).
template <class Element>
MXKIT_HD constexpr Element quantize_element(float x, e8m0 scale, rounding r, std::uint32_t random_bits = 0) noexcept {
  if (scale.is_nan()) return Element::from_bits(0);
  return Element::from_float_scaled(x, scale.exponent(), r, overflow::saturate, random_bits);
}

MXKIT_HD constexpr float dequantize_element_value(float element, e8m0 scale) noexcept {
  return element * scale.to_float();  // exact unless the product is a float subnormal
}

// Rotates v[0..BlockSize) in place, group by 16-group (an MX block: two groups).
template <int BlockSize = mx_block_size>
MXKIT_HD constexpr void rotate_block(float* v, std::uint32_t sign_mask) noexcept {
  static_assert(BlockSize % hadamard_group == 0, "the rotation works on whole 16-element groups");
  for (int g = 0; g < BlockSize; g += hadamard_group) rotate_group16(v + g, sign_mask);
}

namespace detail {
// Block amax as the float bits of max |v[i]| (see amax_bits); with a NaN among the v[i] the
// result is some NaN, which is all shared_scale distinguishes. A balanced tree, so the
// BlockSize - 1 maxima are not one serial chain; one NaN-propagating float max each where that
// is one instruction (hw::max_nan), else an integer max of the magnitudes' bits.
template <int BlockSize>
MXKIT_HD constexpr std::uint32_t block_amax_bits(const float* v) noexcept {
  static_assert(BlockSize >= 4 && (BlockSize & (BlockSize - 1)) == 0, "the tree halves a power of two");
  if constexpr (hw::has_max_nan) {
    if (!__builtin_is_constant_evaluated()) {
      float m[BlockSize / 2];
      for (int i = 0; i < BlockSize / 2; ++i) m[i] = hw::max_nan(hw::abs_float(v[2 * i]), hw::abs_float(v[2 * i + 1]));
      for (int n = BlockSize / 4; n > 0; n /= 2)
        for (int i = 0; i < n; ++i) m[i] = hw::max_nan(m[i], m[i + n]);
      return bit_cast<std::uint32_t>(m[0]);
    }
  }
  std::uint32_t m[BlockSize / 2] = {};
  for (int i = 0; i < BlockSize / 2; ++i) m[i] = amax_bits(abs_bits(v[2 * i]), v[2 * i + 1]);
  for (int n = BlockSize / 4; n > 0; n /= 2)
    for (int i = 0; i < n; ++i) m[i] = m[i] > m[i + n] ? m[i] : m[i + n];
  return m[0];
}

// Blocks with a smaller nonzero amax take the integer path: under their scale a float-subnormal
// element could reach half the element's least step, and a flush-to-zero build (nvcc
// --use_fast_math, host -ffast-math) would zero it in the float path. Above it, an element that
// is a float subnormal scales to less than half the least step, so flushing it changes nothing.
// Bits of 2^(emax - 125 - log2(least step)): 2^-122 (E2M1) ... 2^-94 (E5M2).
template <class Element>
MXKIT_HD constexpr std::uint32_t float_path_min_amax() noexcept {
  int least_step_exp = 0;
  if constexpr (requires { Element::emin; }) least_step_exp = Element::emin - Element::mantissa_bits;
  else least_step_exp = -Element::fraction_bits;  // int8_fixed
  return static_cast<std::uint32_t>(Element::emax - 125 - least_step_exp + 127) << 23;
}

// quantize_element under nearest-even for an element of a block whose scale is finite (so no
// element is NaN or Inf, and |x| * 2^-scale < 2^(emax+1)), with 2^-scale hoisted out of the loop:
// the element's block_element_encoder where it has one (block/element_encoder.hpp).
template <class Element>
MXKIT_HD constexpr Element quantize_non_nan_element_rne(float x, e8m0 scale, float scale_inv) noexcept {
  if constexpr (block_element_encoder<Element>::specialized)
    return block_element_encoder<Element>::encode(x, scale_inv);
  else
    return quantize_element<Element>(x, scale, rounding::nearest_even);
}
// The same code plus element_code_bias<Element>, as a word: a packer removes a whole word's
// biases with one subtraction (E2M1's encoder leaves each code on top of a float's bits).
template <class Element>
inline constexpr std::uint32_t element_code_bias = block_element_encoder<Element>::bias;
template <class Element>
MXKIT_HD constexpr std::uint32_t quantize_non_nan_element_rne_biased(float x, e8m0 scale, float scale_inv) noexcept {
  if constexpr (block_element_encoder<Element>::specialized)
    return block_element_encoder<Element>::encode_biased(x, scale_inv);
  else
    return quantize_non_nan_element_rne<Element>(x, scale, scale_inv).bits();
}
// Largest element-scale exponent of the float path (scale_inv = 2^-E stays a normal float, and
// whatever else the element's encoder needs: block_element_encoder<Element>::max_exponent).
template <class Element>
inline constexpr int float_path_max_exponent = block_element_encoder<Element>::max_exponent;
}  // namespace detail

// The random signs of the Hadamard rotation, passed in when the caller computed them once (a
// kernel quantizing many blocks: hadamard_signs{o.sign_mask()}); quantize_block(in, o) and
// quantize_block_packed(in, o, first_index, words) take them from o.sign_mask() themselves.
// Default-constructed: no signs, which is what o.sign_mask() gives unless o.random_signs is set.
struct hadamard_signs {
  std::uint32_t mask = 0;
};

namespace detail {
// Rounding modes other than nearest-even, and NaN blocks: the element loop with per-element
// random bits. Out of line in device code, taking the values by value, so that its indexing
// cannot push the fast path's arrays out of registers.
template <int BlockSize>
struct block_values {
  float v[BlockSize];
};
template <mx_format_descriptor Fmt>
#if MXKIT_GPU_COMPILER
__attribute__((noinline))
#endif
MXKIT_HD constexpr mx_block<Fmt> quantize_elements_general(block_values<Fmt::block_size> in, e8m0 scale, const quantize_options& o,
                                                           std::uint64_t first_index) noexcept {
  using E = typename Fmt::element_type;
  mx_block<Fmt> b{scale, {}};
  if (o.round == rounding::stochastic && first_index % 4 == 0) {
    for (int g = 0; g < Fmt::block_size; g += 4) {  // one Philox call per four elements
      const philox_block r = random_bits_x4(o.seed, o.stream, (first_index + static_cast<std::uint64_t>(g)) / 4);
      for (int j = 0; j < 4; ++j) b.elements[g + j] = quantize_element<E>(in.v[g + j], scale, o.round, r.v[j]);
    }
  } else {
    for (int i = 0; i < Fmt::block_size; ++i) {
      const std::uint32_t rb = o.round == rounding::stochastic ? random_bits(o.seed, o.stream, first_index + i) : 0u;
      b.elements[i] = quantize_element<E>(in.v[i], scale, o.round, rb);
    }
  }
  return b;
}

// The part of a block quantization before the elements: the values, the scale, and whether the
// float path applies (nearest even, finite scale, amax not tiny, see float_path_min_amax).
// With the rotation, x holds 4 times the rotated values v (the butterflies without H16's 1/4,
// value_exp = 2), and the float path folds that 1/4, exactly, into the elements' power-of-two
// scale: every element is the same float (x * 2^-(scale + 2) = v * 2^-scale, both exact, or
// both below half the least step where v would be a float subnormal, as float_path_min_amax
// guarantees). Off the float path x is normalized first, as rotate_block does.
template <int BlockSize>
struct block_front {
  block_values<BlockSize> x;
  e8m0 scale;
  int value_exp;  // x = v * 2^value_exp
  bool float_path;
};

// Step one of a block, in place: x becomes the values block_front holds (rotated when o.hadamard)
// and the result is the bits of max |x| (x as held, before any normalization). No branches, so
// a kernel can interleave two blocks' arithmetic.
// The butterfly sums are up to 16 |x|: they cannot overflow while every |x| <= 2^123. A group
// whose sums do pass FLT_MAX (some |x| > 2^123) returns an Inf or NaN amax and the block is
// flagged NaN, as an Inf input is (README "NaN and Inf"). Scaling by 1/4 before the sums would
// only move the bound (the normalized rotation of 16 values of FLT_MAX is 4 FLT_MAX); 1/16 with
// the exponent carried in value_exp would remove it, but either costs every block a multiply per
// element on the device's hot path and rounds tiny inputs differently (x / 4 is inexact below
// 2^-124), so ordinary blocks would change bits. The bound is the defined behaviour instead.
template <int BlockSize>
MXKIT_HD constexpr std::uint32_t transform_block(float* x, const quantize_options& o, hadamard_signs signs) noexcept {
  static_assert(BlockSize % hadamard_group == 0, "the rotation works on whole 16-element groups");
  if (o.hadamard)
    for (int g = 0; g < BlockSize; g += hadamard_group) {
      if (signs.mask) apply_signs16(x + g, signs.mask);
      hadamard_butterflies<hadamard_group>(x + g);
    }
  return block_amax_bits<BlockSize>(x);
}
MXKIT_HD constexpr int block_value_exp(const quantize_options& o) noexcept { return o.hadamard ? 2 : 0; }

// The block's amax (of v, the normalized values) from transform_block's: max |v| = max |x| / 4
// with the rotation (rotate_block's normalization). Rounding is monotone, so the max of the
// normalized values is the normalized max (also where it is a float subnormal or a
// flush-to-zero build flushes it); exactly 2 off the exponent while a normal stays normal.
MXKIT_HD constexpr std::uint32_t block_amax(std::uint32_t x_amax, const quantize_options& o) noexcept {
  if (!o.hadamard) return x_amax;
  constexpr std::uint32_t two_exp = 2u << 23;  // 1/4 = 1 / sqrt(16): exponent minus 2
  return x_amax >= 3u << 23 && x_amax < 0x7F800000u ? x_amax - two_exp : amax_bits(0u, bit_cast<float>(x_amax) * 0.25f);
}

// Step two, the float path's test and element scale, in a few integer instructions on
// transform_block's amax: for a zero amax, or one whose normalized amax is a normal float from
// float_path_min_amax up to where the element scale would pass float_path_max_exponent, the
// scale is shared_scale's normal case, a carry added to the amax bits (scale_rule_carry), and
// the element scale (block scale + value_exp) is that of x's amax. A kernel computes the bounds
// once.
struct float_path_bounds {
  std::uint32_t carry = 0;  // scale_rule_carry
  std::uint32_t low = 1;    // first x amax on the path (1 with span 0: none, the rounding is not nearest-even)
  std::uint32_t span = 0;   // x amax - low < span: on the float path (unsigned)
  int exponent_offset = 0;  // element scale exponent = ((x amax + carry) >> 23) - exponent_offset
};
template <class Element>
MXKIT_HD constexpr float_path_bounds float_path_bounds_for(const quantize_options& o) noexcept {
  float_path_bounds b;
  const std::uint32_t shift = static_cast<std::uint32_t>(block_value_exp(o)) << 23;  // x amax - amax, where normal
  b.carry = scale_rule_carry<Element>(o.rule);
  b.exponent_offset = 127 + Element::emax;
  if (o.round != rounding::nearest_even) return b;
  b.low = float_path_min_amax<Element>() + shift;  // a normal amax: exactly shifted
  // scale + value_exp <= max  <=>  (x amax + carry) >> 23 <= max + 127 + emax
  const std::uint32_t top = static_cast<std::uint32_t>(float_path_max_exponent<Element> + 128 + Element::emax) << 23;
  const std::uint32_t high = top - b.carry < 0x7F800000u ? top - b.carry : 0x7F800000u;  // first x amax off the path
  b.span = high > b.low ? high - b.low : 0u;
  return b;
}
// A zero amax counts as `low` (on the path whenever any amax is): one select and one compare,
// no branch.
MXKIT_HD constexpr bool on_float_path(std::uint32_t x_amax, const float_path_bounds& b) noexcept {
  return (x_amax == 0 ? b.low : x_amax) - b.low < b.span;
}
// The element scale exponent (block scale exponent + value_exp) of a block on the float path.
MXKIT_HD constexpr int float_path_element_exponent(std::uint32_t x_amax, const quantize_options& o,
                                                   const float_path_bounds& b) noexcept {
  return x_amax == 0 ? block_value_exp(o) : static_cast<int>((x_amax + b.carry) >> 23) - b.exponent_offset;
}

// The front of a block whose values x went through transform_block, which returned x_amax.
template <mx_format_descriptor Fmt>
MXKIT_HD constexpr block_front<Fmt::block_size> make_front(const float* x, std::uint32_t x_amax, const quantize_options& o) noexcept {
  using Element = typename Fmt::element_type;
  block_front<Fmt::block_size> f{};
  for (int i = 0; i < Fmt::block_size; ++i) f.x.v[i] = x[i];
  f.value_exp = block_value_exp(o);
  f.scale = shared_scale<Element>(float_bits{block_amax(x_amax, o)}, o.rule);
  f.float_path = on_float_path(x_amax, float_path_bounds_for<Element>(o));
  return f;
}

template <mx_format_descriptor Fmt>
MXKIT_HD constexpr block_front<Fmt::block_size> prepare_block(const float* in, const quantize_options& o, hadamard_signs signs) noexcept {
  float x[Fmt::block_size];
  for (int i = 0; i < Fmt::block_size; ++i) x[i] = in[i];
  const std::uint32_t amax = transform_block<Fmt::block_size>(x, o, signs);
  return make_front<Fmt>(x, amax, o);
}

// Elements of a block off the float path: x normalized first, then the general loop.
template <mx_format_descriptor Fmt>
MXKIT_HD constexpr mx_block<Fmt> quantize_elements_off_float_path(block_front<Fmt::block_size> f, const quantize_options& o,
                                                                  std::uint64_t first_index) noexcept {
  if (f.value_exp)
    for (int i = 0; i < Fmt::block_size; ++i) f.x.v[i] *= 0.25f;
  return quantize_elements_general<Fmt>(f.x, f.scale, o, first_index);
}

// The element scale of the float path: the block's, times 2^value_exp.
template <int BlockSize>
MXKIT_HD constexpr e8m0 element_scale(const block_front<BlockSize>& f) noexcept {
  return f.value_exp ? e8m0::from_exponent(f.scale.exponent() + f.value_exp) : f.scale;
}
}  // namespace detail

// `first_index` numbers the block's first element in its tensor so stochastic rounding draws
// distinct, reproducible bits per element (counter = index, key = options.seed).
template <mx_format_descriptor Fmt>
MXKIT_HD constexpr mx_block<Fmt> quantize_block(const float* in, const quantize_options& o, hadamard_signs signs,
                                                std::uint64_t first_index = 0) noexcept {
  using E = typename Fmt::element_type;
  const detail::block_front<Fmt::block_size> f = detail::prepare_block<Fmt>(in, o, signs);
  if (!f.float_path) return detail::quantize_elements_off_float_path<Fmt>(f, o, first_index);
  mx_block<Fmt> b{f.scale, {}};
  const e8m0 es = detail::element_scale(f);
  const float scale_inv = detail::exp2i(-es.exponent());
  for (int i = 0; i < Fmt::block_size; ++i) b.elements[i] = detail::quantize_non_nan_element_rne<E>(f.x.v[i], es, scale_inv);
  return b;
}

// A block's storage (pack.hpp) as little-endian 32-bit words: for a 32-block, 4 words for FP4
// (element 8j+i in bits 4i..4i+3 of word j, i.e. element 2k in the low nibble of byte k), 8 words
// for the byte-per-element formats (element 4j+i in byte i of word j).
template <mx_format_descriptor Fmt>
inline constexpr int block_words = Fmt::block_size * Fmt::storage_bits / 32;

template <mx_format_descriptor Fmt>
MXKIT_HD constexpr void pack_block(const mx_block<Fmt>& b, std::uint32_t* words) noexcept {
  constexpr int per_word = 32 / Fmt::storage_bits;
  for (int j = 0; j < block_words<Fmt>; ++j) {
    std::uint32_t w = 0;
    for (int i = per_word - 1; i >= 0; --i) w = w * (1u << Fmt::storage_bits) + b.elements[per_word * j + i].bits();
    words[j] = w;
  }
}

namespace detail {
// The float path's elements straight to storage words: x as block_front holds it, under element
// scale 2^element_exp (float_path_element_exponent). Each code is packed as it is made, so a
// kernel never holds the block's codes as separate bytes.
template <mx_format_descriptor Fmt>
MXKIT_HD constexpr void encode_float_path_packed(const float* x, int element_exp, std::uint32_t* words) noexcept {
  using E = typename Fmt::element_type;
  constexpr int per_word = 32 / Fmt::storage_bits;
  // Each code arrives plus a constant bias; sum_i bias * 2^(bits * i), mod 2^32, leaves at the end.
  constexpr std::uint32_t word_bias = [] {
    std::uint32_t b = 0;
    for (int i = 0; i < per_word; ++i) b = b * (1u << Fmt::storage_bits) + element_code_bias<E>;
    return b;
  }();
  const e8m0 es = e8m0::from_exponent(element_exp);
  const float scale_inv = exp2i(-element_exp);
  for (int j = 0; j < block_words<Fmt>; ++j) {
    std::uint32_t w = 0;
    for (int i = per_word - 1; i >= 0; --i) {  // fields do not overlap: + is |, and one IMAD per code
      const float v = x[per_word * j + i];
      if constexpr (requires { block_element_encoder<E>::encode_magnitude_biased(v, scale_inv); }) {
        // The sign is the field's top bit: w * 16 + 8 * sign + m = (2w + sign) * 8 + m, and
        // 2w + sign is one funnel shift of (w, v's bits).
        w = (w << 1) | (bit_cast<std::uint32_t>(v) >> 31);
        w = w * (1u << (Fmt::storage_bits - 1)) + block_element_encoder<E>::encode_magnitude_biased(v, scale_inv);
      } else {
        w = w * (1u << Fmt::storage_bits) + quantize_non_nan_element_rne_biased<E>(v, es, scale_inv);
      }
    }
    words[j] = w - word_bias;
  }
}

// A prepared block to storage words, on or off the float path; returns the scale.
template <mx_format_descriptor Fmt>
MXKIT_HD constexpr e8m0 encode_block_packed(const block_front<Fmt::block_size>& f, const quantize_options& o, std::uint64_t first_index,
                                            std::uint32_t* words) noexcept {
  if (f.float_path) encode_float_path_packed<Fmt>(f.x.v, element_scale(f).exponent(), words);
  else pack_block<Fmt>(quantize_elements_off_float_path<Fmt>(f, o, first_index), words);
  return f.scale;
}
}  // namespace detail

// quantize_block straight to its storage words (pack_block of the same codes) and the scale:
// what a kernel writes.
template <mx_format_descriptor Fmt>
MXKIT_HD constexpr e8m0 quantize_block_packed(const float* in, const quantize_options& o, hadamard_signs signs,
                                              std::uint64_t first_index, std::uint32_t* words) noexcept {
  return detail::encode_block_packed<Fmt>(detail::prepare_block<Fmt>(in, o, signs), o, first_index, words);
}

// The same with the signs from o.sign_mask() (computed per call: a kernel quantizing many blocks
// with random signs passes hadamard_signs{o.sign_mask()}, computed once, to the overload above).
template <mx_format_descriptor Fmt>
MXKIT_HD constexpr e8m0 quantize_block_packed(const float* in, const quantize_options& o, std::uint64_t first_index,
                                              std::uint32_t* words) noexcept {
  return quantize_block_packed<Fmt>(in, o, hadamard_signs{o.sign_mask()}, first_index, words);
}

template <mx_format_descriptor Fmt>
MXKIT_HD constexpr mx_block<Fmt> quantize_block(const float* in, const quantize_options& o,
                                                std::uint64_t first_index = 0) noexcept {
  return quantize_block<Fmt>(in, o, hadamard_signs{o.sign_mask()}, first_index);
}

template <mx_format_descriptor Fmt>
constexpr mx_block<Fmt> quantize_block(const std::array<float, Fmt::block_size>& in, const quantize_options& o = {},
                                       std::uint64_t first_index = 0) noexcept {
  return quantize_block<Fmt>(in.data(), o, first_index);
}

namespace detail {
// Scale exponents above this unrotate 2^-32 lower (dequantize_block). Below it the butterflies
// cannot overflow: |element| < 2^16 (E5M2's 57344 is the largest), 16 terms, 2^(16+4+64) <<
// FLT_MAX. Above it every nonzero element x 2^(scale-32) is a normal float (>= 2^-16 x 2^33),
// so the shifted arithmetic is the unshifted one exactly, 2^-32 lower, wherever the unshifted
// one stays finite: the same bits.
inline constexpr int unrotate_shift_above = 64;
inline constexpr int unrotate_shift = 32;
}  // namespace detail

// Block values back to float; undoes the rotation when o.hadamard (pass the options used).
// A rotated block's values are each a quarter of a sum of 16: an outlier near FLT_MAX rotates to
// 16 values of a quarter of it, and their float butterfly sums would overflow to Inf (and Inf -
// Inf to NaN) although the block holds a finite value. High-scale blocks are therefore
// unrotated 2^-32 lower and scaled back by one exact multiply: every output is the float
// result of the exact unrotation (up to the butterflies' rounding), +-Inf only where that value
// itself is beyond the float range (an IEEE overflow, as element x scale is without the
// rotation), never NaN for a finite block. Other blocks take the unshifted path, unchanged.
template <mx_format_descriptor Fmt>
MXKIT_HD constexpr void dequantize_block(const mx_block<Fmt>& b, float* out, const quantize_options& o = {}) noexcept {
  const bool unrotate = o.hadamard && !b.scale.is_nan();
  if (unrotate && b.scale.exponent() > detail::unrotate_shift_above) {
    const float shifted_scale = detail::exp2i(b.scale.exponent() - detail::unrotate_shift);
    for (int i = 0; i < Fmt::block_size; ++i) out[i] = b.elements[i].to_float() * shifted_scale;  // exact: see above
    for (int g = 0; g < Fmt::block_size; g += hadamard_group) unrotate_group16(out + g, o.sign_mask());
    constexpr float back = detail::exp2i(detail::unrotate_shift);
    for (int i = 0; i < Fmt::block_size; ++i) out[i] *= back;
    return;
  }
  for (int i = 0; i < Fmt::block_size; ++i) out[i] = dequantize_element_value(b.elements[i].to_float(), b.scale);
  if (unrotate)
    for (int g = 0; g < Fmt::block_size; g += hadamard_group) unrotate_group16(out + g, o.sign_mask());
}

template <mx_format_descriptor Fmt>
constexpr std::array<float, Fmt::block_size> dequantize_block(const mx_block<Fmt>& b, const quantize_options& o = {}) noexcept {
  std::array<float, Fmt::block_size> out{};
  dequantize_block<Fmt>(b, out.data(), o);
  return out;
}

MXKIT_END_NAMESPACE
