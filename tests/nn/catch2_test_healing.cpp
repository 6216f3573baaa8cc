// SPDX-License-Identifier: Apache-2.0
// The MXFP4 -> FP8 healing transition: FP8 copies stashed at the start, MXFP4 state gone after
// the switch, the two weight sets never co-resident, training continues.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <mxkit/nn/healing.hpp>
#include <mxkit/train/training.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;

namespace {

token_buffer synthetic_tokens(std::size_t n) {
  auto v = std::make_shared<std::vector<std::uint8_t>>(n);
  for (std::size_t i = 0; i < n; ++i) (*v)[i] = static_cast<std::uint8_t>("the quick brown fox jumps over the lazy dog. "[i % 45]);
  return v;
}

struct lora_model {
  host_backend be;
  model m;
  lora_model() : m(be, tiny_model(), recipes::mxfp4_amd(), 3) {
    m.freeze_all();
    m.add_lora({}, {8, 16.0}, 5);
  }
};

}  // namespace

TEST_CASE("healing: the stash holds an FP8 E4M3 copy of every linear weight", "[nn][healing]") {
  lora_model f;
  std::vector<std::vector<double>> masters;
  for (linear* l : f.m.linears()) masters.push_back(f.be.read(l->weight().value));
  const fp8_weight_stash stash = prepare_healing(f.m);
  const auto ls = f.m.linears();
  REQUIRE(stash.entries().size() == ls.size());
  for (std::size_t i = 0; i < ls.size(); ++i) {
    const fp8_tensor c = stash.find(ls[i]->name()).to_tensor();
    CHECK(c.type == fp8_type::e4m3);
    double amax = 0;
    for (double v : masters[i]) amax = std::max(amax, std::fabs(v));
    CHECK(c.scale == static_cast<float>(448.0 / amax));
    std::vector<float> w(masters[i].begin(), masters[i].end());
    CHECK(c.data == quantize_fp8(matrix_view<const float>{w.data(), ls[i]->out_features(), ls[i]->in_features()}, fp8_type::e4m3, c.scale).data);
    // Pre-quantized: the layer now holds its MXFP4 copies only.
    CHECK_FALSE(ls[i]->has_master());
    CHECK(ls[i]->cached_rowwise().kind() == precision::mx);
    CHECK(ls[i]->cached_columnwise().kind() == precision::mx);
  }
}

TEST_CASE("healing: the switch leaves no MXFP4 state and never holds both weight sets", "[nn][healing]") {
  lora_model f;
  const fp8_weight_stash stash = prepare_healing(f.m);
  // Train a few MXFP4 steps so that saved operands and caches exist.
  train_config c;
  c.steps = 3;
  c.shape = {2, 32};
  c.schedule = {1e-3, 1e-4, 1, 3};
  trainer t(f.m, synthetic_tokens(4096), c);
  t.run();
  CHECK(f.be.live_copies(precision::mx) > 0);
  std::size_t mx_weight_bytes = 0;
  for (linear* l : f.m.linears()) mx_weight_bytes += l->cached_rowwise().bytes() + l->cached_columnwise().bytes();
  CHECK(mx_weight_bytes > 0);

  const healing_report h = heal(f.m, stash, recipes::fp8_healing());
  CHECK(f.be.live_copies(precision::mx) == 0);  // no MXFP4 copy left anywhere
  for (linear* l : f.m.linears()) {
    CHECK_FALSE(l->holds(precision::mx));
    CHECK(l->cached_rowwise().kind() == precision::fp8);
    CHECK(l->cached_columnwise().kind() == precision::fp8);
    CHECK(l->current_recipe().name == recipes::fp8_healing().name);
    CHECK(read_scale(f.be, l->x_scaling()) == 1.0f);  // FP8 scaling starts fresh
    CHECK(l->x_scaling().table->config().history_length == 4);
    CHECK(l->x_scaling().table->config().algorithm == amax_algorithm::most_recent);
    CHECK(l->x_scaling().table == f.m.scaling().get());  // one table for the model
    // The restored copy is the stashed one, byte for byte.
    CHECK(host_backend::fp8(l->cached_rowwise()).data == stash.find(l->name()).to_tensor().data);
  }
  CHECK_FALSE(f.m.current_recipe().uses(precision::mx));
  CHECK(h.restored_linears == f.m.linears().size());
  // Memory: MXFP4 freed before FP8 arrives, so the peak is the larger phase, not the sum.
  CHECK(h.weight_bytes_dropped == h.weight_bytes_before - mx_weight_bytes);
  CHECK(h.peak_weight_bytes == std::max(h.weight_bytes_before, h.weight_bytes_after));
  CHECK(h.peak_weight_bytes < h.co_resident_bytes);
  CHECK(h.co_resident_bytes == h.weight_bytes_before + (h.weight_bytes_after - h.weight_bytes_dropped));

  // Training continues in FP8 and stays free of MXFP4.
  const std::size_t weight_copies_before = f.be.counters().copies(operand_use::fprop_w);
  trainer t2(f.m, synthetic_tokens(4096), c);
  t2.run();
  CHECK(std::isfinite(t2.losses().back()));
  CHECK(f.be.live_copies(precision::mx) == 0);
  CHECK(f.be.counters().copies(operand_use::fprop_w) == weight_copies_before);  // frozen FP8 weights: never re-quantized
  CHECK(f.be.counters().copies(operand_use::wgrad_x) == 0);
}

TEST_CASE("healing: a trainer switches at the chosen step", "[nn][healing]") {
  lora_model f;
  train_config c;
  c.steps = 8;
  c.shape = {2, 32};
  c.schedule = {2e-3, 2e-4, 2, 8};
  c.heal_step = 5;
  trainer t(f.m, synthetic_tokens(4096), c);
  for (int i = 0; i < 5; ++i) t.step();
  CHECK(f.m.current_recipe().uses(precision::mx));
  CHECK_FALSE(t.healing().has_value());
  t.step();
  REQUIRE(t.healing().has_value());
  CHECK_FALSE(f.m.current_recipe().uses(precision::mx));
  CHECK(f.m.current_recipe().uses(precision::fp8));
  t.run();
  CHECK(t.losses().size() == 8);
  CHECK(f.be.live_copies(precision::mx) == 0);
}

TEST_CASE("healing: refused for trainable weights and for a missing stash entry", "[nn][healing]") {
  host_backend be;
  model m(be, tiny_model(), recipes::mxfp4_amd(), 3);
  CHECK_THROWS_WITH(prepare_healing(m), mxkit_test::contains("is trainable"));
  fp8_weight_stash empty;
  m.freeze_all();
  for (linear* l : m.linears()) l->release_master();
  CHECK_THROWS_WITH(heal(m, empty, recipes::fp8_healing()), mxkit_test::contains("no copy of"));
  // A released weight cannot be used until it is restored.
  CHECK_THROWS_WITH(m.forward(std::vector<std::int32_t>(32, 1), std::vector<std::int32_t>(32, 2), {1, 32}, false),
                    mxkit_test::contains("no master copy and no quantized copy"));
}

TEST_CASE("healing: a weight too small for a float scale is stashed with the largest float scale", "[nn][healing]") {
  lora_model f;
  linear* l = f.m.linears().front();
  // 448 / 1e-40 is about 4.5e42, beyond float: the scale clamps as delayed scaling's does.
  f.be.write(l->weight().value, std::vector<double>(l->weight().value.size(), 1e-40));
  ++l->weight().version;
  const fp8_weight_stash stash = prepare_healing(f.m);
  const fp8_tensor c = stash.find(l->name()).to_tensor();
  CHECK(c.scale == std::numeric_limits<float>::max());
  const std::vector<float> w(c.data.size(), static_cast<float>(1e-40));
  CHECK(c.data == quantize_fp8(matrix_view<const float>{w.data(), l->out_features(), l->in_features()}, fp8_type::e4m3, c.scale).data);
  CHECK(fp8_decode(c.data[0], c.type) > 0.0f);  // the values survive instead of flushing to zero
}
