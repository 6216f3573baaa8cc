#pragma once
// Quantize and dequantize one 32-element MX block (OCP MX v1.0 section 6.3): optional Hadamard
// rotation, amax, shared scale by rule, elements = round(x / scale) saturated. These are the
// functions the host tensors and the GPU kernels both call; all constexpr.
#include <array>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/quantize_options.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/random/philox.hpp>
#include <mxkit/transform/hadamard.hpp>

MXKIT_BEGIN_NAMESPACE

template <mx_format Fmt>
struct mx_block {
  e8m0 scale;
  typename Fmt::element_type elements[mx_block_size];  // C array: usable in device code
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

// Rotates v[0..32) in place as options say (two 16-groups).
MXKIT_HD constexpr void rotate_block(float* v, std::uint32_t sign_mask) noexcept {
  for (int g = 0; g < mx_block_size; g += hadamard_group) rotate_group16(v + g, sign_mask);
}

// `first_index` numbers the block's first element in its tensor so stochastic rounding draws
// distinct, reproducible bits per element (counter = index, key = options.seed).
template <mx_format Fmt>
MXKIT_HD constexpr mx_block<Fmt> quantize_block(const float* in, const quantize_options& o,
                                                std::uint64_t first_index = 0) noexcept {
  using E = typename Fmt::element_type;
  float v[mx_block_size] = {};
  for (int i = 0; i < mx_block_size; ++i) v[i] = in[i];
  if (o.hadamard) rotate_block(v, o.sign_mask());
  std::uint32_t amax = 0;
  for (int i = 0; i < mx_block_size; ++i) amax = amax_bits(amax, v[i]);
  mx_block<Fmt> b{shared_scale<E>(amax, o.rule), {}};
  for (int i = 0; i < mx_block_size; ++i) {
    const std::uint32_t rb = o.round == rounding::stochastic ? random_bits(o.seed, o.stream, first_index + i) : 0u;
    b.elements[i] = quantize_element<E>(v[i], b.scale, o.round, rb);
  }
  return b;
}

template <mx_format Fmt>
constexpr mx_block<Fmt> quantize_block(const std::array<float, mx_block_size>& in, const quantize_options& o = {},
                                       std::uint64_t first_index = 0) noexcept {
  return quantize_block<Fmt>(in.data(), o, first_index);
}

// Block values back to float; undoes the rotation when `rotated` (pass the options used).
template <mx_format Fmt>
MXKIT_HD constexpr void dequantize_block(const mx_block<Fmt>& b, float* out, const quantize_options& o = {}) noexcept {
  for (int i = 0; i < mx_block_size; ++i) out[i] = dequantize_element_value(b.elements[i].to_float(), b.scale);
  if (o.hadamard && !b.scale.is_nan())
    for (int g = 0; g < mx_block_size; g += hadamard_group) unrotate_group16(out + g, o.sign_mask());
}

template <mx_format Fmt>
constexpr std::array<float, mx_block_size> dequantize_block(const mx_block<Fmt>& b, const quantize_options& o = {}) noexcept {
  std::array<float, mx_block_size> out{};
  dequantize_block<Fmt>(b, out.data(), o);
  return out;
}

MXKIT_END_NAMESPACE
