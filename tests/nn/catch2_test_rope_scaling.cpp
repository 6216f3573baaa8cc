// SPDX-License-Identifier: Apache-2.0
// Llama 3.1's RoPE frequency scaling (nn/rope_frequencies.hpp): the rule against an independent
// reading of Hugging Face's _compute_llama3_parameters, the host kernel's angles, the default
// (no scaling) unchanged bit for bit, and the model's plumbing (layer_config::rope_scale).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <vector>

#include <mxkit/ref/nn/rope.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

namespace rope_scaling_test {
using namespace nn_test;

// The rule as transformers writes it (wavelen = 2 pi / inv_freq; where wavelen > low_freq_wavelen
// divide by factor; where neither above nor below the band, blend with the smooth factor).
double hf_llama3(double inv_freq, double factor, double low, double high, double old_context) {
  const double low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  const double wavelen = 2 * std::numbers::pi / inv_freq;
  const double inv_freq_llama = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
  const double smooth = (old_context / wavelen - low) / (high - low);
  const double smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama;
  const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
  return medium ? smoothed : inv_freq_llama;
}

// Usable in constant expressions (the one function the host and the device kernels call).
static_assert(llama3_scaled_frequency(0.25, rope_scaling{}) == 0.25);
static_assert(llama3_scaled_frequency(1.0, llama3_1_rope_scaling) == 1.0);        // wavelength 6.3: high frequency, kept
static_assert(llama3_scaled_frequency(1e-4, llama3_1_rope_scaling) == 1e-4 / 8);  // wavelength 62832: divided by 8


TEST_CASE("rope scaling: Llama 3.1's rule, pair by pair, as Hugging Face computes it", "[nn][rope]") {
  const std::size_t D = 128;
  std::size_t kept = 0, blended = 0, divided = 0;
  for (std::size_t i = 0; i < D / 2; ++i) {
    const double f = std::pow(500000.0, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    const double got = llama3_scaled_frequency(f, llama3_1_rope_scaling), want = hf_llama3(f, 8.0, 1.0, 4.0, 8192.0);
    INFO("pair " << i);
    CHECK(std::fabs(got - want) <= 1e-15 * want);
    kept += got == f;
    divided += got == f / 8;
    blended += got != f && got != f / 8;
    CHECK(llama3_scaled_frequency(f, rope_scaling{}) == f);  // off: f itself
  }
  // The split nn/rope_frequencies.hpp states for Llama 3.1 8B (theta 500000, head dim 128).
  CHECK(kept == 29);
  CHECK(blended == 6);
  CHECK(divided == 29);
}

TEST_CASE("rope scaling: the host kernel turns each pair by t times its scaled frequency", "[nn][rope]") {
  const head_shape s{1, 40, 2, 1, 16};
  const rope_frequencies f{10000.0, {8.0, 1.0, 4.0, 64.0}};  // a 64-token original context: the band within 16 dims
  std::vector<double> x(s.tokens() * s.qkv_dim());
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.37 * static_cast<double>(k)) + 0.1;
  std::vector<double> y = x, plain = x, by_theta = x;
  ref::rope(y.data(), s, f, false);
  ref::rope(plain.data(), s, rope_frequencies{10000.0, {}}, false);
  ref::rope(by_theta.data(), s, 10000.0, false);
  CHECK(plain == by_theta);  // no scaling: the theta overload's bits
  std::size_t scaled = 0;
  for (std::size_t t = 0; t < s.seq; ++t)
    for (std::size_t i = 0; i < s.head_dim / 2; ++i) {
      const double fi = std::pow(10000.0, -2.0 * static_cast<double>(i) / 16.0);
      const double a = static_cast<double>(t) * hf_llama3(fi, 8.0, 1.0, 4.0, 64.0);
      const std::size_t row = t * s.qkv_dim();
      for (std::size_t h = 0; h < s.n_heads + s.n_kv_heads; ++h) {
        const std::size_t p = row + h * s.head_dim + i, q = p + s.head_dim / 2;
        CHECK(std::fabs(y[p] - (x[p] * std::cos(a) - x[q] * std::sin(a))) <= 1e-12);
        CHECK(std::fabs(y[q] - (x[p] * std::sin(a) + x[q] * std::cos(a))) <= 1e-12);
      }
      scaled += t > 0 && hf_llama3(fi, 8.0, 1.0, 4.0, 64.0) != fi;
    }
  CHECK(scaled > 0);
  std::vector<double> back = y;
  ref::rope(back.data(), s, f, true);
  for (std::size_t k = 0; k < x.size(); ++k) CHECK(std::fabs(back[k] - x[k]) <= 1e-12);
}

TEST_CASE("rope scaling: a model's layers rotate by layer_config's frequencies", "[nn][rope]") {
  const batch_shape b{2, 24};
  std::vector<std::int32_t> tokens(b.tokens()), targets(b.tokens());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>((7 * i + 3) % 256);
    targets[i] = static_cast<std::int32_t>((5 * i + 1) % 256);
  }
  auto loss = [&](const rope_scaling& sc) {
    host_backend be;
    model_config c = tiny_model();
    c.layer.rope_scale = sc;
    model m(be, c, recipes::bf16(), 4);
    return m.forward(tokens, targets, b, false);
  };
  const double plain = loss({}), scaled = loss({8.0, 1.0, 4.0, 64.0});
  CHECK(plain != scaled);                  // head dim 16, theta 10000: pairs 1 .. 7 have wavelengths past 16 tokens
  CHECK(loss({}) == plain);                // (deterministic)
  CHECK(loss({1.0, 4.0, 1.0, 0.0}) == plain);  // factor 1: off, whatever the other fields hold
  host_backend be;
  model_config c = tiny_model();
  c.layer.rope_scale = {8.0, 4.0, 1.0, 8192.0};
  CHECK_THROWS_WITH(model(be, c, recipes::bf16(), 4), mxkit_test::contains("low_freq_factor < high_freq_factor"));
  c.layer.rope_scale = {};
  c.layer.rope_theta = 0.0;
  CHECK_THROWS_WITH(model(be, c, recipes::bf16(), 4), mxkit_test::contains("theta must be finite and > 0"));
}

}  // namespace rope_scaling_test
