// SPDX-License-Identifier: Apache-2.0
// mxkit:sm90a (the backend's GEMMs take the sm90 path on an H100/H200, as in bench_lora70b)
// The Llama 2 70B LoRA recipe scaled down, on gpu::device_backend (tests/nn/catch2_test_lora_base.cpp
// is the host version; bench/gpu/bench_lora70b.cu the real size): 3 layers of d_model 128 (2
// heads of 64, 1 KV head, SwiGLU 256), LoRA rank 16 / alpha 32 on QKV and output, bf16
// activations, activation recomputation, lean memory (the FP8 dgrad copy made per GEMM).
//  - the base built layer by layer equals the model built whole and then prepared for healing:
//    the same stash bytes, the same tracked bytes, the same losses bit for bit through healing;
//  - the MXFP4 base is bit-identical after MXFP4 steps; healing switches at its step; the healed
//    FP8 copies are, byte for byte, the host backend's export of the same masters (the base stays
//    bit-identical); no MXFP4 copy or byte remains;
//  - recomputation and the per-GEMM transpose change no bit of the losses.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/nn/lora_base.hpp>
#include <mxkit/train/training.hpp>
#include <mxkit/host/host_backend.hpp>

#include "../catch.hpp"
#include "device_backend_downloads.hpp"

using namespace mxkit;
using namespace mxkit::nn;
using mxkit::gpu::device_backend;
using mxkit::ref::host_backend;

namespace {

model_config small_model() {
  model_config c;
  c.vocab = 256;
  c.n_layers = 3;
  c.layer = {128, 2, 1, 256};
  return c;
}
recipe with_bf16(recipe r) {
  r.activations = dtype::bf16;
  return r;
}
token_buffer corpus() {
  const std::string text = "the quick brown fox jumps over the lazy dog; a lazy dog sleeps in the warm sun. ";
  auto v = std::make_shared<std::vector<std::uint8_t>>();
  for (int i = 0; i < 60; ++i) v->insert(v->end(), text.begin(), text.end());
  return v;
}
train_config lora_run(std::size_t steps, std::size_t heal_step, std::shared_ptr<fp8_weight_stash> stash) {
  train_config c;
  c.steps = steps;
  c.shape = {2, 64};
  c.schedule = {3e-3, 3e-4, 1, steps};
  c.heal_step = heal_step;
  c.heal_recipe = with_bf16(recipes::fp8_healing());
  c.heal_stash = std::move(stash);
  return c;
}

struct run_outcome {
  std::vector<double> losses;
  std::size_t quantized_weight_bytes = 0;
};
run_outcome streamed_run(bool recompute, bool lean) {
  device_backend be;
  lora_base b = build_lora_base(be, small_model(), with_bf16(recipes::mxfp4_amd()), 7);
  b.m->set_recompute(recompute);
  if (lean)
    for (auto& l : b.m->layers()) l.set_memory(linear_memory::lean());
  trainer t(*b.m, corpus(), lora_run(6, 3, std::make_shared<fp8_weight_stash>(std::move(b.stash))));
  t.run();
  run_outcome o{t.losses(), 0};
  for (linear* l : b.m->linears()) o.quantized_weight_bytes += l->cached_rowwise().bytes() + l->cached_columnwise().bytes();
  return o;
}

}  // namespace

TEST_CASE("device lora base: built layer by layer it is the model built whole and prepared, bit for bit", "[gpu][nn][lora_base]") {
  const lora_base_config lc;
  device_backend be_whole, be_streamed;
  model whole(be_whole, small_model(), with_bf16(recipes::mxfp4_amd()), 7);
  whole.freeze_all();
  whole.add_lora(lc.targets, lc.lora, lc.lora_seed);
  auto stash_whole = std::make_shared<fp8_weight_stash>(prepare_healing(whole));
  lora_base b = build_lora_base(be_streamed, small_model(), with_bf16(recipes::mxfp4_amd()), 7, lc);
  REQUIRE(b.stash.entries().size() == stash_whole->entries().size());
  for (std::size_t i = 0; i < b.stash.entries().size(); ++i) {
    const fp8_tensor x = b.stash.entries()[i].copy.to_tensor(), y = stash_whole->entries()[i].copy.to_tensor();
    CHECK(x.data == y.data);
    CHECK(x.scale == y.scale);
  }
  for (mem_tag t : {mem_tag::parameter, mem_tag::gradient, mem_tag::quantized_weight})
    CHECK(be_whole.memory().live(t) == be_streamed.memory().live(t));
  CHECK(b.peak_weight_bytes < be_whole.memory().peak_weight_bytes());
  trainer tw(whole, corpus(), lora_run(6, 3, stash_whole));
  trainer ts(*b.m, corpus(), lora_run(6, 3, std::make_shared<fp8_weight_stash>(std::move(b.stash))));
  tw.run();
  ts.run();
  CHECK(tw.losses() == ts.losses());
  CHECK(std::isfinite(ts.losses().back()));
}

TEST_CASE("device lora base: the MXFP4 base stays bit-identical, healing switches at its step, restores it bit for bit, frees every MXFP4 byte",
          "[gpu][nn][lora_base][healing]") {
  host_backend hb;  // the masters on the host (the same values: the default fill is written from the host)
  model ref(hb, small_model(), with_bf16(recipes::mxfp4_amd()), 11);
  device_backend be;
  lora_base b = build_lora_base(be, small_model(), with_bf16(recipes::mxfp4_amd()), 11);
  model& m = *b.m;
  m.set_recompute(true);
  for (auto& l : m.layers()) l.set_memory(linear_memory::lean());
  // The frozen MXFP4 base as built: training the adapters must not change a bit of it.
  const auto download = [&](const qtensor& q) { return q.defined() ? gpu_test::download_mx(be, q) : mx_tensor{}; };
  const auto same = [](const mx_tensor& x, const mx_tensor& y) {
    return std::ranges::equal(x.data(), y.data()) && std::ranges::equal(x.scales(), y.scales());
  };
  std::vector<mx_tensor> built_rowwise, built_columnwise;
  for (linear* l : m.linears()) {
    built_rowwise.push_back(download(l->cached_rowwise()));
    built_columnwise.push_back(download(l->cached_columnwise()));
  }
  trainer t(m, corpus(), lora_run(6, 3, std::make_shared<fp8_weight_stash>(std::move(b.stash))));
  for (int i = 0; i < 3; ++i) t.step();
  CHECK(m.current_recipe().uses(precision::mx));
  for (std::size_t i = 0; i < m.linears().size(); ++i) {
    INFO(m.linears()[i]->name());
    REQUIRE(m.linears()[i]->cached_rowwise().defined());
    CHECK(same(download(m.linears()[i]->cached_rowwise()), built_rowwise[i]));
    CHECK(same(download(m.linears()[i]->cached_columnwise()), built_columnwise[i]));
  }
  CHECK(be.live_copies(precision::mx) > 0);
  CHECK_FALSE(t.healing().has_value());
  t.step();
  REQUIRE(t.healing().has_value());
  CHECK(be.live_copies(precision::mx) == 0);
  const auto lr = ref.linears(), lm = m.linears();
  std::size_t fp8_bytes = 0;
  for (std::size_t i = 0; i < lm.size(); ++i) {
    INFO(lm[i]->name());
    const std::vector<double> w = hb.read(lr[i]->weight().value);
    double amax = 0;
    for (double v : w) amax = std::max(amax, std::abs(v));
    const fp8_tensor expect = hb.export_fp8(lr[i]->weight().value, fp8_type::e4m3, static_cast<float>(448.0 / amax)).to_tensor();
    const fp8_tensor got = gpu_test::download_fp8(be, lm[i]->cached_rowwise());
    CHECK(got.data == expect.data);
    CHECK(got.scale == expect.scale);
    CHECK_FALSE(lm[i]->cached_columnwise().defined());  // lean: the dgrad copy is made per GEMM
    fp8_bytes += lm[i]->cached_rowwise().bytes();
  }
  const std::size_t head = m.head().cached_rowwise().bytes() + m.head().cached_columnwise().bytes();
  CHECK(be.memory().live(mem_tag::quantized_weight) == fp8_bytes + head);
  CHECK(t.healing()->peak_weight_bytes < t.healing()->co_resident_bytes);
  t.run();
  CHECK(be.live_copies(precision::mx) == 0);
  CHECK(std::isfinite(t.losses().back()));
}

TEST_CASE("device lora base: recomputation and the per-GEMM FP8 transpose change no bit of the losses", "[gpu][nn][lora_base]") {
  const run_outcome plain = streamed_run(false, false), recompute = streamed_run(true, false), lean = streamed_run(true, true);
  CHECK(recompute.losses == plain.losses);
  CHECK(lean.losses == plain.losses);
  CHECK(2 * lean.quantized_weight_bytes == plain.quantized_weight_bytes);
}
