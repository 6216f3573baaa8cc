// SPDX-License-Identifier: Apache-2.0
// The Llama 2 70B LoRA recipe scaled down (nn/lora_base.hpp + healing.hpp): a base built layer by
// layer is the model built whole and then prepared for healing, bit for bit; the build never
// holds more than one layer's masters; healing switches at its step, leaves no MXFP4 memory and
// restores the base bit for bit; the FP8 dgrad copy made per GEMM gives the same losses at half
// the bytes; the adapters' gradients agree between 1 and N rank threads, and only they are reduced.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <mxkit/nn/lora_base.hpp>
#include <mxkit/train/training.hpp>
#include <mxkit/parallel/thread_communicator.hpp>

#include "../catch.hpp"
#include "../parallel/counting_communicator.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;

namespace {

// Three layers of the tiny shape: the hooks run more than once, the layers differ.
model_config small_model() {
  model_config c = tiny_model();
  c.n_layers = 3;
  return c;
}

train_config lora_run(std::size_t steps, std::size_t heal_step) {
  train_config c;
  c.steps = steps;
  c.shape = {1, 32};
  c.schedule = {5e-3, 5e-4, 1, steps};
  c.heal_step = heal_step;
  return c;
}

bool same_mx(const qtensor& a, const qtensor& b) {
  const mx_tensor &x = host_backend::mx(a), &y = host_backend::mx(b);
  return std::ranges::equal(x.data(), y.data()) && std::ranges::equal(x.scales(), y.scales());
}

bool same_fp8(const host_fp8& a, const host_fp8& b) {
  const fp8_tensor x = a.to_tensor(), y = b.to_tensor();
  return x.data == y.data && x.scale == y.scale && x.type == y.type;
}

}  // namespace

TEST_CASE("lora base: built layer by layer it is the model built whole, then frozen, adapted and prepared", "[nn][lora_base]") {
  const lora_base_config lc;  // rank 16, alpha 32 on QKV and output
  host_backend be_whole, be_streamed;
  model whole(be_whole, small_model(), recipes::mxfp4_amd(), 7);
  whole.freeze_all();
  whole.add_lora(lc.targets, lc.lora, lc.lora_seed);
  const fp8_weight_stash stash_whole = prepare_healing(whole);
  // Parameter bytes after each layer's hook: they grow by the layer's norms and adapters only (no
  // master stays behind).
  std::vector<std::size_t> params_after;
  lora_base_config lc_probe = lc;
  lc_probe.after_layer = [&](std::size_t) { params_after.push_back(be_streamed.memory().live(mem_tag::parameter)); };
  lora_base streamed = build_lora_base(be_streamed, small_model(), recipes::mxfp4_amd(), 7, lc_probe);
  model& m = *streamed.m;

  // The same parameters train, with the same values (the adapters' seeds).
  const auto tw = whole.trainable_parameters(), ts = m.trainable_parameters();
  REQUIRE(tw.size() == ts.size());
  REQUIRE(ts.size() == 2 * 2 * small_model().n_layers);  // A and B of QKV and output, per layer
  for (std::size_t i = 0; i < tw.size(); ++i) {
    CHECK(tw[i]->name == ts[i]->name);
    CHECK(be_whole.read(tw[i]->value) == be_streamed.read(ts[i]->value));
  }
  // The same FP8 stash and the same MXFP4 copies, no master left.
  REQUIRE(streamed.stash.entries().size() == stash_whole.entries().size());
  for (std::size_t i = 0; i < stash_whole.entries().size(); ++i) {
    CHECK(streamed.stash.entries()[i].name == stash_whole.entries()[i].name);
    CHECK(same_fp8(streamed.stash.entries()[i].copy, stash_whole.entries()[i].copy));
  }
  const auto lw = whole.linears(), ls = m.linears();
  for (std::size_t i = 0; i < ls.size(); ++i) {
    CHECK_FALSE(ls[i]->has_master());
    CHECK(same_mx(lw[i]->cached_rowwise(), ls[i]->cached_rowwise()));
    CHECK(same_mx(lw[i]->cached_columnwise(), ls[i]->cached_columnwise()));
  }
  // The same resident bytes, tag by tag.
  for (mem_tag t : {mem_tag::parameter, mem_tag::gradient, mem_tag::quantized_weight})
    CHECK(be_whole.memory().live(t) == be_streamed.memory().live(t));

  // The build's weight peak: everything it ends with plus one layer's fp32 masters at most, far
  // below the whole model's masters.
  const layer_config& lcfg = small_model().layer;
  const std::size_t layer_master_bytes =
      4 * lcfg.d_model * (lcfg.qkv_dim() + lcfg.n_heads * lcfg.head_dim() + 3 * lcfg.d_ff);  // f32
  CHECK(streamed.peak_weight_bytes <= be_streamed.memory().weight_bytes() + layer_master_bytes);
  CHECK(streamed.peak_weight_bytes < be_whole.memory().peak_weight_bytes());
  REQUIRE(params_after.size() == small_model().n_layers);
  const std::size_t per_layer = params_after[1] - params_after[0];
  const std::size_t adapters = 4 * lc.lora.rank * (lcfg.d_model + lcfg.qkv_dim() + lcfg.n_heads * lcfg.head_dim() + lcfg.d_model);
  CHECK(per_layer == adapters + 4 * 2 * lcfg.d_model);  // A and B of QKV and output; two norm gains
  CHECK(params_after[2] - params_after[1] == per_layer);
  CHECK(params_after[0] == 4 * small_model().vocab * lcfg.d_model + per_layer);  // the embedding table before them

  // Trained through a healing step, the two give the same losses, bit for bit.
  const train_config c = lora_run(6, 3);
  trainer t_whole(whole, text_tokens(), [&] {
    train_config w = c;
    w.heal_stash = std::make_shared<fp8_weight_stash>(stash_whole);
    return w;
  }());
  train_config cs = c;
  cs.heal_stash = std::make_shared<fp8_weight_stash>(std::move(streamed.stash));
  trainer t_streamed(m, text_tokens(), cs);
  t_whole.run();
  t_streamed.run();
  CHECK(t_whole.losses() == t_streamed.losses());
  CHECK(t_streamed.healing().has_value());
}

TEST_CASE("lora base: the MXFP4 base stays bit-identical while the adapters train; healing switches at its step, restores "
          "the base bit for bit and leaves no MXFP4 memory",
          "[nn][lora_base]") {
  // The original masters, kept: their FP8 export is what the healed layers must hold.
  host_backend be_ref;
  model ref(be_ref, small_model(), recipes::mxfp4_amd(), 11);
  host_backend be;
  lora_base b = build_lora_base(be, small_model(), recipes::mxfp4_amd(), 11);
  model& m = *b.m;
  train_config c = lora_run(7, 4);
  c.heal_stash = std::make_shared<fp8_weight_stash>(std::move(b.stash));
  // The frozen MXFP4 base as built: training the adapters must not change a bit of it.
  std::vector<mx_tensor> built_rowwise, built_columnwise;
  for (linear* l : m.linears()) {
    built_rowwise.push_back(host_backend::mx(l->cached_rowwise()));
    built_columnwise.push_back(host_backend::mx(l->cached_columnwise()));
  }
  trainer t(m, text_tokens(), c);
  for (int i = 0; i < 4; ++i) t.step();
  CHECK(m.current_recipe().uses(precision::mx));
  for (std::size_t i = 0; i < m.linears().size(); ++i) {
    INFO(m.linears()[i]->name());
    const mx_tensor &row = host_backend::mx(m.linears()[i]->cached_rowwise()), &col = host_backend::mx(m.linears()[i]->cached_columnwise());
    CHECK((std::ranges::equal(row.data(), built_rowwise[i].data()) && std::ranges::equal(row.scales(), built_rowwise[i].scales())));
    CHECK((std::ranges::equal(col.data(), built_columnwise[i].data()) && std::ranges::equal(col.scales(), built_columnwise[i].scales())));
  }
  CHECK_FALSE(t.healing().has_value());
  CHECK(be.live_copies(precision::mx) > 0);
  t.step();  // step 4: the switch, then an FP8 step
  REQUIRE(t.healing().has_value());
  CHECK_FALSE(m.current_recipe().uses(precision::mx));
  CHECK(be.live_copies(precision::mx) == 0);
  const auto lr = ref.linears(), lm = m.linears();
  std::size_t fp8_bytes = 0;
  for (std::size_t i = 0; i < lm.size(); ++i) {
    INFO(lm[i]->name());
    const std::vector<double> w = be_ref.read(lr[i]->weight().value);
    double amax = 0;
    for (double v : w) amax = std::max(amax, std::abs(v));
    const host_fp8 expect = be_ref.export_fp8(lr[i]->weight().value, fp8_type::e4m3, static_cast<float>(448.0 / amax));
    const fp8_tensor got = host_backend::fp8(lm[i]->cached_rowwise());
    CHECK(got.data == expect.to_tensor().data);
    CHECK(got.scale == expect.to_tensor().scale);
    fp8_bytes += lm[i]->cached_rowwise().bytes() + lm[i]->cached_columnwise().bytes();
  }
  // The tracker's quantized weights are the FP8 copies and the head's bf16 copies, nothing else
  // (no MXFP4 bytes remain).
  const std::size_t head_bytes = m.head().cached_rowwise().bytes() + m.head().cached_columnwise().bytes();
  CHECK(m.head().cached_rowwise().kind() == precision::bf16);
  CHECK(be.memory().live(mem_tag::quantized_weight) == fp8_bytes + head_bytes);
  CHECK(t.healing()->weight_bytes_dropped + fp8_bytes == t.healing()->weight_bytes_after);
  CHECK(t.healing()->peak_weight_bytes < t.healing()->co_resident_bytes);
  t.run();
  CHECK(t.losses().size() == 7);
  CHECK(be.live_copies(precision::mx) == 0);
}

TEST_CASE("lora base: the FP8 dgrad copy made per GEMM gives the same losses with half the weight bytes", "[nn][lora_base]") {
  std::vector<double> losses[2];
  std::size_t bytes[2] = {0, 0};
  for (int lean = 0; lean < 2; ++lean) {
    host_backend be;
    lora_base b = build_lora_base(be, small_model(), recipes::mxfp4_amd(), 5);
    if (lean)
      for (auto& layer : b.m->layers()) layer.set_memory(linear_memory::lean());
    train_config c = lora_run(5, 2);
    c.heal_stash = std::make_shared<fp8_weight_stash>(std::move(b.stash));
    trainer t(*b.m, text_tokens(), c);
    t.run();
    losses[lean] = t.losses();
    bytes[lean] = be.memory().live(mem_tag::quantized_weight) - b.m->head().cached_rowwise().bytes() -
                  b.m->head().cached_columnwise().bytes();
    for (linear* l : b.m->linears()) {
      CHECK(l->cached_rowwise().kind() == precision::fp8);
      CHECK(l->cached_columnwise().defined() == !lean);
    }
  }
  CHECK(losses[0] == losses[1]);
  CHECK(2 * bytes[1] == bytes[0]);
}

TEST_CASE("lora base: the adapters' gradients agree between 1 and N rank threads, with recomputation, across healing; only "
          "the adapters' gradients are reduced",
          "[nn][lora_base]") {
  constexpr std::size_t steps = 4;
  struct outcome {
    std::vector<double> losses;
    std::vector<std::vector<double>> grads;
    std::size_t adapter_elements = 0, frozen_with_gradient = 0, reduced_elements = 0, reductions = 0;
    std::size_t group_elements = 0;  // per step: each group's trainable members as data_parallel lays them out for N ranks
    std::size_t frozen_elements = 0;
  };
  const auto run = [](communicator* comm, std::size_t micro) {
    host_backend be;
    lora_base b = build_lora_base(be, small_model(), recipes::mxfp4_amd(), 9);
    b.m->set_recompute(true);
    std::unique_ptr<counting_communicator> counted;
    if (comm) counted = std::make_unique<counting_communicator>(*comm);
    train_config c = lora_run(steps, 2);
    c.parallel = {counted.get(), micro, sharding::none};
    c.heal_stash = std::make_shared<fp8_weight_stash>(std::move(b.stash));
    trainer t(*b.m, text_tokens(), c);
    t.run();
    outcome o{t.losses(), {}};
    for (parameter* p : b.m->trainable_parameters()) {
      o.grads.push_back(be.read(p->grad));
      o.adapter_elements += p->value.size();
    }
    for (parameter* p : b.m->parameters())
      if (!p->trainable && p->grad.defined()) ++o.frozen_with_gradient;
    // What reducing the adapters alone moves: per gradient group, its trainable members padded
    // to the shard alignment, the total split in N equal aligned chunks (data_parallel.hpp).
    const std::size_t n = comm ? static_cast<std::size_t>(comm->size()) : 1;
    for (const std::vector<parameter*>& members : b.m->gradient_groups()) {
      std::size_t total = 0;
      for (const parameter* p : members)
        if (p->trainable) total += round_up(p->value.size(), shard_alignment);
      if (total) o.group_elements += n * round_up((total + n - 1) / n, shard_alignment);
    }
    for (linear* l : b.m->linears()) o.frozen_elements += l->cached_rowwise().rows() * l->cached_rowwise().cols();
    if (counted) {
      o.reduced_elements = counted->gradient_elements;
      o.reductions = counted->gradient_reductions;
    }
    return o;
  };
  for (int n : {2, 3}) {
    INFO("ranks: " << n);
    const outcome one = run(nullptr, static_cast<std::size_t>(n));
    CHECK(one.frozen_with_gradient == 0);
    std::vector<outcome> ranks(static_cast<std::size_t>(n));
    ref::run_ranks(n, [&](communicator& comm) { ranks[static_cast<std::size_t>(comm.rank())] = run(&comm, 1); });
    for (const outcome& r : ranks) {
      CHECK(r.losses == one.losses);
      REQUIRE(r.grads.size() == one.grads.size());
      // Adapter gradients are GEMM products added one micro-batch at a time on one rank and in rank
      // order on N (data_parallel.hpp): the same sums in the same order, the same bits.
      for (std::size_t p = 0; p < one.grads.size(); ++p) CHECK(r.grads[p] == one.grads[p]);
      // Each step reduces every adapter's gradient once and nothing else: the frozen base (the
      // MXFP4 or FP8 copies, the embedding, the norms, the head) has no gradient to reduce.
      CHECK(r.frozen_with_gradient == 0);
      CHECK(r.reductions > 0);
      CHECK(r.group_elements >= r.adapter_elements);
      CHECK(r.reduced_elements == steps * r.group_elements);
      CHECK(r.group_elements < r.frozen_elements);
    }
  }
}
