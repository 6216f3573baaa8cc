// SPDX-License-Identifier: Apache-2.0
#pragma once
// --lora (options.hpp): the model the training program built becomes a LoRA fine-tune of its
// --init-from base, as examples/03_train_recipes.cpp and nn/lora_base.hpp set one up: every base
// parameter (embedding, norms, head, every linear) frozen, so that it gets no gradient and the
// optimizer never touches it, then adapters (nn/lora.hpp) added to the targeted linears of every
// layer. Called before the trainer is made, so that AdamW holds state for the adapters only; the
// base's values are read in after that (--init-from) and are never written again.
#include <cstddef>
#include <cstdint>

#include <mxkit/config.hpp>
#include <mxkit/nn/model.hpp>

#include <mxkit/train_program/options.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {

// The adapters' seed. --seed initializes the model and seed + 1 orders the data (options.hpp);
// the adapters draw from seed + 2 (model::add_lora: layer i's from that + 16 i, one stream per
// linear), so the runs of one --seed start from the same adapters and read the same batches
// whatever their recipe: they differ in numerics only.
inline std::uint64_t lora_seed(const options& o) noexcept { return o.seed + 2; }

struct lora_setup {
  std::size_t frozen = 0;     // elements of the base's parameters
  std::size_t trainable = 0;  // elements of the adapters
};

// Freezes the base and adds the adapters that `o` asks for (o.lora_rank > 0).
inline lora_setup apply_lora(nn::model& m, const options& o) {
  lora_setup out;
  m.freeze_all();
  for (const nn::parameter* p : m.parameters()) out.frozen += p->value.size();
  m.add_lora(o.lora_targets.value_or(nn::lora_targets{}), o.lora(), lora_seed(o));
  for (const nn::parameter* p : m.trainable_parameters()) out.trainable += p->value.size();
  return out;
}

}  // namespace train_program
MXKIT_END_NAMESPACE
