// SPDX-License-Identifier: Apache-2.0
#pragma once
// A LoRA model on a frozen quantized base, built one layer at a time (the Llama 2 70B LoRA recipe
// at its real size: healing.hpp has the recipe). Building the model and then preparing healing
// would hold every fp32 master at once (280 GB at 70B); here, as soon as layer i is created and
// initialized and before layer i + 1 is allocated (model_build_hooks::after_layer):
//   1. its parameters are frozen (their gradients freed) and LoRA adapters are added to the
//      targeted linears;
//   2. each linear's FP8 copy is stashed in host memory (page-locked on a GPU backend), its
//      MXFP4 copies are made and its master is freed (stash_and_release, healing.hpp).
// Device memory then grows by one layer's quantized copies per layer, on top of one layer's fp32
// master and gradient at a time. The result is the same model, bit for bit, as
//   model m(be, c, r, seed); m.freeze_all(); m.add_lora(targets, lora, lora_seed);
//   fp8_weight_stash s = prepare_healing(m);
// (the same adapters' seeds, the same masters quantized and stashed in the same order:
// tests/nn/catch2_test_lora_base.cpp).
//
// Which linears are adapted: the MLPerf Training Llama 2 70B LoRA reference (NVIDIA NeMo /
// Megatron, rank 16, alpha 32) adapts the attention projections only, the fused QKV projection
// (linear_qkv) and the output projection (linear_proj); lora_targets' default is exactly those.
// The MLP linears (gate/up, down) carry two thirds of the base's weights and no adapter, so the
// adapters stay small (rank 16: 0.2 % of the parameters at 70B).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/healing.hpp>
#include <mxkit/nn/model.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct lora_base_config {
  lora_targets targets;      // default: QKV and output projection (the MLPerf reference)
  lora_config lora;          // default: rank 16, alpha 32
  std::uint64_t lora_seed = 1;  // layer i's adapters draw from lora_seed + 16 i (model::add_lora's)
  bool stash_fp8 = true;     // false: no healing planned; the masters are quantized and freed all the same
  fp8_type stash_type = fp8_type::e4m3;
  // Replaces the default N(0, std) fill of every weight (model_build_hooks::init): a device-side
  // generator for a benchmark, a checkpoint reader for a real base. Empty: the default fill.
  std::function<void(parameter&, double)> init;
  // Every base parameter's values from elsewhere, the norm gains included (a checkpoint:
  // io/hf_streamed_import.hpp), where init sees only the weights with a random fill: called for
  // each weight as it is created, in place of its fill, and for each layer's norm gains and the
  // final norm's after their default fill of ones, before anything of theirs is frozen or
  // quantized. Not with init.
  std::function<void(parameter&)> load;
  // Runs after each layer is quantized and released (a benchmark reads the device's memory there).
  std::function<void(std::size_t index)> after_layer;
};

struct lora_base {
  std::unique_ptr<model> m;
  fp8_weight_stash stash;  // empty unless stash_fp8
  std::size_t peak_weight_bytes = 0;  // backend weight bytes (memory_tracker) at their highest while building
};

// The model (recipe r: the MXFP4 phase's) with every parameter frozen but the adapters and every
// layer's linears quantized under r with their masters released. The embedding, norms and head
// stay in their own precision (frozen masters, as in the recipe: they are not "linear weights").
inline lora_base build_lora_base(backend& be, const model_config& c, const recipe& r, std::uint64_t seed, const lora_base_config& lc = {}) {
  lora_base out;
  be.memory().reset_peak();
  detail::require(!(lc.init && lc.load), "build_lora_base: init and load both given (load writes every parameter)");
  model_build_hooks hooks;
  hooks.init = lc.init;
  if (lc.load) hooks.init = [&](parameter& p, double) { lc.load(p); };
  hooks.after_layer = [&](std::size_t i, transformer_layer& layer) {
    if (lc.load) {
      lc.load(layer.norm1().weight());
      lc.load(layer.norm2().weight());
    }
    std::vector<parameter*> ps;
    layer.collect(ps);
    for (parameter* p : ps) freeze(*p);
    layer.add_lora(lc.targets, lc.lora, lc.lora_seed + 16 * i);
    for (linear* l : layer.linears()) {
      if (lc.stash_fp8) {
        stash_and_release(be, *l, out.stash, lc.stash_type);
      } else {
        l->release_master();
      }
    }
    if (lc.after_layer) lc.after_layer(i);
  };
  out.m = std::make_unique<model>(be, c, r, seed, hooks);
  if (lc.load) lc.load(out.m->final_norm().weight());
  // The embedding, the final norm and the head (freeze_all would freeze the adapters too).
  freeze(out.m->token_embedding().table());
  freeze(out.m->final_norm().weight());
  out.m->head().freeze();
  out.peak_weight_bytes = be.memory().peak_weight_bytes();
  return out;
}

}  // namespace nn
MXKIT_END_NAMESPACE
