// SPDX-License-Identifier: Apache-2.0
#pragma once
// A trainable (or frozen) tensor of the model with its gradient and a version counter. The
// optimizer bumps `version` whenever it writes `value`: a quantized copy made from an older
// version is stale (linear.hpp caches weight copies per version).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/random/philox.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct parameter {
  std::string name;
  tensor value;                // fp32 master weights (f64 in the gradient check)
  tensor grad;                 // same shape; allocated only while trainable
  std::uint64_t version = 0;   // bumped by every optimizer update of `value`
  bool trainable = true;
  bool decay = true;           // AdamW weight decay applies (not to norm gains)
  // zero_grad's mark: `grad` reads as zeros but was not written. The first product that adds to
  // it then overwrites it instead (grad_beta), so a step writes each weight gradient once, where
  // a fill followed by accumulating GEMMs writes it twice and reads it once (torch's
  // zero_grad(set_to_none=True) saves the same passes). Whatever else reads or adds to `grad`
  // calls materialize_grad first; code that writes `grad` itself after zero_grad clears the mark.
  bool grad_is_zero = false;

  std::size_t rows() const noexcept { return value.rows(); }
  std::size_t cols() const noexcept { return value.cols(); }
};

// The beta of a GEMM that adds its product to p.grad: 0 (overwrite) while p.grad only reads as
// zeros, else 1. Either way p.grad holds written values afterwards.
inline float grad_beta(parameter& p) noexcept {
  const float beta = p.grad_is_zero ? 0.0f : 1.0f;
  p.grad_is_zero = false;
  return beta;
}

// Writes the zeros zero_grad left pending, before an operation that reads p.grad or adds to it
// in place (the optimizer, the norm and embedding gradients).
inline void materialize_grad(backend& be, parameter& p) {
  if (!p.grad_is_zero) return;
  be.fill(p.grad, 0.0);
  p.grad_is_zero = false;
}

// zero_grad for a set of parameters: marks every trainable gradient as zeros (nothing is written).
inline void mark_grads_zero(const std::vector<parameter*>& params) noexcept {
  for (parameter* p : params)
    if (p->trainable) p->grad_is_zero = true;
}

inline parameter make_parameter(backend& be, std::string name, std::size_t rows, std::size_t cols, dtype type, bool decay = true) {
  parameter p;
  p.name = std::move(name);
  p.value = be.alloc(rows, cols, type, mem_tag::parameter);
  p.grad = be.alloc(rows, cols, type, mem_tag::gradient);
  p.decay = decay;
  return p;
}

// Frozen parameters get no gradient and are never touched by the optimizer.
inline void freeze(parameter& p) noexcept {
  p.trainable = false;
  p.grad_is_zero = false;
  p.grad.reset();
}

// n normal(0, stddev) values, deterministic in (seed, stream): Box-Muller on Philox bits.
inline std::vector<double> normal_values(std::size_t n, std::uint64_t seed, std::uint32_t stream, double stddev) {
  detail::require(stddev >= 0 && std::isfinite(stddev), "normal_values: stddev must be finite and >= 0, got ", stddev);
  std::vector<double> out(n);
  constexpr double two_pi = 6.283185307179586476925;
  for (std::size_t i = 0; i < n; i += 2) {
    // 53-bit uniforms in (0, 1]: never log(0).
    auto uniform = [&](std::uint64_t k) {
      const std::uint64_t bits = (std::uint64_t{random_bits(seed, stream, 2 * k)} << 21) ^ random_bits(seed, stream, 2 * k + 1);
      return (static_cast<double>(bits & ((std::uint64_t{1} << 53) - 1)) + 1.0) * 0x1p-53;
    };
    const double r = std::sqrt(-2.0 * std::log(uniform(i))), a = two_pi * uniform(i + 1);
    out[i] = stddev * r * std::cos(a);
    if (i + 1 < n) out[i + 1] = stddev * r * std::sin(a);
  }
  return out;
}

inline std::vector<double> uniform_values(std::size_t n, std::uint64_t seed, std::uint32_t stream, double bound) {
  detail::require(bound >= 0 && std::isfinite(bound), "uniform_values: bound must be finite and >= 0, got ", bound);
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = bound * (2.0 * (random_bits(seed, stream, i) * 0x1p-32) - 1.0);
  return out;
}

// A 32-bit Philox stream from small integers (layer id, purpose, counter).
constexpr std::uint32_t mix_stream(std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0) noexcept {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c * 0x94D049BB133111EBull;
  z ^= z >> 31;
  z *= 0xD6E8FEB86659FD93ull;
  z ^= z >> 32;
  return static_cast<std::uint32_t>(z);
}

}  // namespace nn
MXKIT_END_NAMESPACE
