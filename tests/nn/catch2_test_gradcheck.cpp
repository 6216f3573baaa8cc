// SPDX-License-Identifier: Apache-2.0
// Gradient check: the analytic gradients of the transformer layer and the model against
// central finite differences in fp64, per parameter tensor.
//
// Design: the layer is one code path for every recipe; only the operand format differs.
// Finite differences need a loss that is smooth in the parameters, and rounding to bf16 (or
// FP8/MX) is piecewise constant, so the fp64 check runs the layer with the `native` recipe
// (operands used as they are) in f64 tensors: it checks the backward math of exactly the code
// the bf16 recipe runs. A second check then runs the bf16 recipe in f32 and requires its
// gradients to match the fp64 ones to within bf16 rounding.
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <mxkit/nn/model.hpp>
#include <mxkit/nn/transformer_layer.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;

namespace {

// Compares the analytic gradient of every parameter with central differences on up to
// `samples` entries of it (all entries if fewer). loss() must run a forward pass only.
void finite_difference_check(backend& be, const std::vector<parameter*>& params, const std::vector<std::vector<double>>& analytic,
                             const std::function<double()>& loss, std::size_t samples) {
  for (std::size_t t = 0; t < params.size(); ++t) {
    parameter& p = *params[t];
    const std::vector<double> w = be.read(p.value);
    const std::size_t n = w.size(), stride = n <= samples ? 1 : n / samples;
    double worst = 0.0, scale = 0.0;
    for (double g : analytic[t]) scale = std::max(scale, std::fabs(g));
    for (std::size_t i = 0; i < n; i += stride) {
      const double h = 1e-5 * std::max(1.0, std::fabs(w[i]));
      set_entry(be, p, i, w[i] + h);
      const double up = loss();
      set_entry(be, p, i, w[i] - h);
      const double down = loss();
      set_entry(be, p, i, w[i]);
      const double fd = (up - down) / (2 * h);
      worst = std::max(worst, std::fabs(fd - analytic[t][i]));
    }
    INFO(p.name << ": max |fd - analytic| = " << worst << ", max |grad| = " << scale);
    CHECK(scale > 0.0);  // a zero gradient would check nothing
    CHECK(worst <= 1e-7 * std::max(1.0, scale));
  }
}

layer_config small_layer() {
  layer_config c;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // grouped: two query heads per kv head
  c.d_ff = 48;
  return c;
}

struct layer_fixture {
  host_backend be;
  batch_shape b{2, 5};
  transformer_layer layer;
  tensor x, r;  // input and the loss weights: loss = sum(y * r)

  layer_fixture(const recipe& rc, dtype type, bool lora)
      : layer(be, "layer", small_layer(), 0, rc, type) {
    layer.init(7, 0.2, 1);
    // Non-trivial norm gains and (for LoRA) a non-zero B so that every gradient is exercised.
    be.write(layer.norm1().weight().value, normal_values(32, 3, 1, 0.3));
    be.write(layer.norm2().weight().value, normal_values(32, 3, 2, 0.3));
    if (lora) {
      layer.add_lora({}, {4, 8.0}, 11);
      for (linear* l : {&layer.qkv(), &layer.out()}) be.write(l->lora()->b().value, normal_values(l->lora()->b().value.size(), 5, 3, 0.2));
    }
    shift_gains();  // gains 1 + N(0, 0.3)
    x = random_tensor(be, b.tokens(), 32, 21, 1.0, type);
    r = random_tensor(be, b.tokens(), 32, 22, 1.0, type);
  }
  void shift_gains() {
    for (rmsnorm* n : {&layer.norm1(), &layer.norm2()}) {
      std::vector<double> g = be.read(n->weight().value);
      for (double& v : g) v += 1.0;
      be.write(n->weight().value, g);
    }
  }
  std::vector<parameter*> params() {
    std::vector<parameter*> ps;
    layer.collect(ps);
    return ps;
  }
  double loss() {
    tensor y = be.alloc(b.tokens(), 32, x.type(), mem_tag::activation);
    layer.forward(x, y, b, false);
    double s = 0;
    const auto Y = be.read(y), R = be.read(r);
    for (std::size_t i = 0; i < Y.size(); ++i) s += Y[i] * R[i];
    return s;
  }
  // Analytic gradients of every parameter and of x.
  std::vector<std::vector<double>> gradients(std::vector<double>* dx_out) {
    for (parameter* p : params())
      if (p->trainable) be.fill(p->grad, 0.0);
    tensor y = be.alloc(b.tokens(), 32, x.type(), mem_tag::activation);
    layer.forward(x, y, b, true);
    tensor dx = be.alloc(b.tokens(), 32, x.type(), mem_tag::activation);
    layer.backward(r, &dx, b);
    std::vector<std::vector<double>> g;
    for (parameter* p : params()) g.push_back(p->trainable ? be.read(p->grad) : std::vector<double>(p->value.size(), 0.0));
    if (dx_out) *dx_out = be.read(dx);
    return g;
  }
};

}  // namespace

TEST_CASE("gradient check: transformer layer, fp64, every parameter and the input", "[nn][gradcheck]") {
  layer_fixture f(recipes::native(), dtype::f64, false);
  std::vector<double> dx;
  const auto analytic = f.gradients(&dx);
  finite_difference_check(f.be, f.params(), analytic, [&] { return f.loss(); }, 40);
  // The input gradient, on a sample of entries.
  const std::vector<double> x0 = f.be.read(f.x);
  double worst = 0;
  for (std::size_t i = 0; i < x0.size(); i += 7) {
    std::vector<double> x = x0;
    x[i] = x0[i] + 1e-5;
    f.be.write(f.x, x);
    const double up = f.loss();
    x[i] = x0[i] - 1e-5;
    f.be.write(f.x, x);
    const double down = f.loss();
    worst = std::max(worst, std::fabs((up - down) / 2e-5 - dx[i]));
  }
  f.be.write(f.x, x0);
  CHECK(worst <= 1e-7);
}

TEST_CASE("gradient check: LoRA adapters on a frozen layer, fp64", "[nn][gradcheck][lora]") {
  layer_fixture f(recipes::native(), dtype::f64, true);
  for (parameter* p : f.params())
    if (p->name.find("lora") == std::string::npos) freeze(*p);
  std::vector<parameter*> adapters;
  for (parameter* p : f.params())
    if (p->trainable) adapters.push_back(p);
  REQUIRE(adapters.size() == 4);  // A and B of QKV and output
  std::vector<std::vector<double>> analytic;
  const auto all = f.gradients(nullptr);
  const auto ps = f.params();
  for (std::size_t i = 0; i < ps.size(); ++i)
    if (ps[i]->trainable) analytic.push_back(all[i]);
  finite_difference_check(f.be, adapters, analytic, [&] { return f.loss(); }, 40);
}

TEST_CASE("gradient check: the model (embedding, norm, head, cross-entropy), fp64", "[nn][gradcheck]") {
  host_backend be;
  model_config c;
  c.vocab = 32;
  c.n_layers = 2;
  c.layer = small_layer();
  c.type = dtype::f64;
  c.init_std = 0.3;
  model m(be, c, recipes::native(), 5);
  const batch_shape b{2, 4};
  std::vector<std::int32_t> tokens, targets;
  for (std::size_t i = 0; i < b.tokens(); ++i) {
    tokens.push_back(static_cast<std::int32_t>((7 * i + 3) % c.vocab));
    targets.push_back(static_cast<std::int32_t>((5 * i + 1) % c.vocab));
  }
  m.zero_grad();
  m.forward(tokens, targets, b, true);
  m.backward();
  std::vector<std::vector<double>> analytic;
  for (parameter* p : m.parameters()) analytic.push_back(be.read(p->grad));
  finite_difference_check(be, m.parameters(), analytic, [&] { return m.forward(tokens, targets, b, false); }, 24);
}

TEST_CASE("gradient check: bf16 recipe gradients are the fp64 gradients to bf16 accuracy", "[nn][gradcheck]") {
  layer_fixture exact(recipes::native(), dtype::f64, false);
  layer_fixture bf16(recipes::bf16(), dtype::f32, false);
  const auto want = exact.gradients(nullptr);
  const auto got = bf16.gradients(nullptr);
  const auto names = exact.params();
  for (std::size_t t = 0; t < want.size(); ++t) {
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < want[t].size(); ++i) {
      diff += (got[t][i] - want[t][i]) * (got[t][i] - want[t][i]);
      norm += want[t][i] * want[t][i];
    }
    INFO(names[t]->name << ": relative error " << std::sqrt(diff / norm));
    CHECK(std::sqrt(diff / norm) < 2e-2);  // bf16 keeps 8 significant bits (2^-9 relative per operand)
  }
}
