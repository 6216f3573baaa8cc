// SPDX-License-Identifier: Apache-2.0
// Per-layer recipes: the bf16 first and last layers of a low-precision recipe (recipe.hpp's
// bf16_first_layers / bf16_last_layers, layer_recipe).
#include <vector>

#include <mxkit/nn/recipe.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;

namespace {
bool all_bf16(const recipe& r) {
  for (const gemm_spec* g : {&r.fprop, &r.dgrad, &r.wgrad})
    if (g->a.kind() != precision::bf16 || g->b.kind() != precision::bf16 || g->hadamard) return false;
  return true;
}
bool same(const recipe& a, const recipe& b) {
  return a.name == b.name && a.fprop == b.fprop && a.dgrad == b.dgrad && a.wgrad == b.wgrad && a.high == b.high;
}
model_config three_layers() {
  model_config c = tiny_model();
  c.n_layers = 3;
  return c;
}
}  // namespace

TEST_CASE("recipe: layer_recipe keeps the first and last layers in bf16", "[nn][recipe]") {
  recipe r = recipes::mxfp4_amd();
  CHECK(same(layer_recipe(r, 0, 3), r));  // no edges: every layer as given
  r.bf16_first_layers = 1;
  r.bf16_last_layers = 2;
  CHECK(all_bf16(layer_recipe(r, 0, 5)));
  CHECK(same(layer_recipe(r, 1, 5), r));
  CHECK(same(layer_recipe(r, 2, 5), r));
  CHECK(all_bf16(layer_recipe(r, 3, 5)));
  CHECK(all_bf16(layer_recipe(r, 4, 5)));
  CHECK(layer_recipe(r, 4, 5).high == r.high);
  CHECK(layer_recipe(r, 4, 5).activations == r.activations);
  CHECK_THROWS_AS(layer_recipe(r, 5, 5), std::invalid_argument);
}

TEST_CASE("recipe: a model's edge layers train in bf16, the middle in the recipe", "[nn][recipe]") {
  host_backend be;
  recipe r = recipes::mxfp4_amd();
  r.bf16_first_layers = r.bf16_last_layers = 1;
  model m(be, three_layers(), r, 3);
  CHECK(all_bf16(m.layers()[0].qkv().current_recipe()));
  CHECK(same(m.layers()[1].qkv().current_recipe(), r));
  CHECK(all_bf16(m.layers()[2].down().current_recipe()));
  // set_recipe keeps the edges (here to FP8: its scaling table still has rows for every layer).
  recipe f = recipes::fp8_delayed();
  f.bf16_last_layers = 1;
  m.set_recipe(f);
  CHECK(same(m.layers()[0].out().current_recipe(), f));
  CHECK(all_bf16(m.layers()[2].gate_up().current_recipe()));

  // Every layer an edge: the same losses as the bf16 recipe, step for step; one edge fewer: not.
  const std::vector<std::int32_t> tokens{1, 5, 9, 200, 7, 7, 3, 64, 2, 8, 100, 31, 4, 4, 90, 17};
  std::vector<std::int32_t> targets(tokens.begin() + 1, tokens.end());
  targets.push_back(0);
  const batch_shape b{1, 16};
  recipe edges = recipes::mxfp4_amd();
  edges.bf16_first_layers = 2;
  edges.bf16_last_layers = 1;
  model all_edges(be, three_layers(), edges, 9), plain(be, three_layers(), recipes::bf16(), 9);
  CHECK(all_edges.forward(tokens, targets, b, false) == plain.forward(tokens, targets, b, false));
  edges.bf16_first_layers = 1;
  model middle_fp4(be, three_layers(), edges, 9);
  CHECK(middle_fp4.forward(tokens, targets, b, false) != plain.forward(tokens, targets, b, false));
}
