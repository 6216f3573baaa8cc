// SPDX-License-Identifier: Apache-2.0
// The training program's --lora (mxkit/train_program/options.hpp, lora.hpp): its defaults and
// refusals, and the model apply_lora makes: only the adapters trainable, the adapters the same
// for one --seed whatever the recipe, and a short run that lowers the loss and leaves every base
// parameter as it was, bit for bit. (examples/train_program_test.cmake's lora case runs the
// program itself: pretrain, --export, --lora --init-from.)
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/train/training.hpp>
#include <mxkit/train_program/lora.hpp>
#include <mxkit/train_program/options.hpp>

#include "../catch.hpp"
#include "../nn/nn_test_helpers.hpp"
#include "parse_options.hpp"

namespace lora_program_test {
using namespace nn_test;
using mxkit::train_program::options;
namespace tp = mxkit::train_program;

std::optional<options> parse(std::vector<std::string> args) { return train_program_test::parse(std::move(args), "05_train"); }

// The usage error's text, or "" when the arguments parse.
std::string refusal(std::vector<std::string> args) {
  try {
    (void)parse(std::move(args));
  } catch (const tp::usage_error& e) {
    return e.what();
  }
  return "";
}

bool is_adapter(const parameter& p) {
  const auto ends = [&](const std::string& s) { return p.name.size() > s.size() && p.name.compare(p.name.size() - s.size(), s.size(), s) == 0; };
  return ends(".lora_a") || ends(".lora_b");
}

// The options of a LoRA run of nn_test::tiny_model's shape.
options tiny_lora(std::vector<std::string> more = {}) {
  std::vector<std::string> args{"--layers", "1", "--d-model", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "64", "--init-from", "base"};
  args.insert(args.end(), more.begin(), more.end());
  return *parse(args);
}

TEST_CASE("--lora: off by default; rank 16, alpha 32, QKV and output as the Llama 2 70B LoRA recipe", "[train][options][lora]") {
  CHECK(parse({})->lora_rank == 0);
  const options o = *parse({"--lora", "16", "--init-from", "base.safetensors"});
  CHECK(o.lora_rank == 16);
  CHECK(o.lora().rank == 16);
  CHECK(o.lora().alpha == 32.0);
  CHECK(tp::lora_targets_text(o.lora_targets.value_or(nn::lora_targets{})) == "qkv,out");
  const options p = *parse({"--lora", "8", "--lora-alpha", "4", "--lora-targets", "down,qkv,gate_up", "--init-from", "b"});
  CHECK(p.lora().alpha == 4.0);
  REQUIRE(p.lora_targets);
  CHECK((p.lora_targets->qkv && !p.lora_targets->out && p.lora_targets->gate_up && p.lora_targets->down));
  CHECK(tp::lora_targets_text(*p.lora_targets) == "qkv,gate_up,down");
}

TEST_CASE("--lora: refusals name the flag and the value", "[train][options][lora]") {
  CHECK(refusal({"--lora", "0", "--init-from", "b"}) == "--lora: expected a positive integer, got '0'");
  CHECK(refusal({"--lora", "16"}) ==
        "--lora 16 fine-tunes a base model: give its weights with --init-from PATH (adapters on random weights would fine-tune nothing)");
  CHECK(refusal({"--lora-alpha", "8"}) == "--lora-alpha 8 needs --lora RANK");
  CHECK(refusal({"--lora-targets", "qkv"}) == "--lora-targets qkv needs --lora RANK");
  CHECK(refusal({"--lora", "4", "--init-from", "b", "--lora-alpha", "0"}) == "--lora-alpha: expected a finite number > 0, got '0'");
  CHECK(refusal({"--lora", "4", "--init-from", "b", "--lora-targets", "qkv,mlp"}) ==
        "--lora-targets: unknown target 'mlp' in 'qkv,mlp' (expected a comma list of qkv, out, gate_up, down)");
  CHECK(refusal({"--lora", "4", "--init-from", "b", "--lora-targets", ""}) ==
        "--lora-targets: unknown target '' in '' (expected a comma list of qkv, out, gate_up, down)");
  CHECK(refusal({"--lora", "4", "--init-from", "b", "--lora-targets", "out,out"}) == "--lora-targets: 'out' given twice in 'out,out'");
  CHECK(refusal({"--lora", "4", "--init-from", "b", "--checkpoint", "c"}).rfind("--lora 4 does not take --checkpoint or --resume", 0) == 0);
  CHECK(refusal({"--lora", "4", "--init-from", "b", "--resume", "c"}).rfind("--lora 4 does not take --checkpoint or --resume", 0) == 0);
  CHECK(refusal({"--lora", "4", "--init-from", "b", "--export", "e"}).rfind("--lora 4 does not take --export", 0) == 0);
  CHECK(refusal({"--lora", "4", "--init-from", "b", "--shard", "optimizer"}) ==
        "--lora 4 trains on one rank: --shard optimizer is not supported with it");
  CHECK(refusal({"--lora", "769", "--init-from", "b"}) ==
        "--lora 769 is larger than the smaller side (768) of an adapted linear (--lora-targets qkv,out, --d-model 768, --ffn 2048)");
  CHECK(refusal({"--lora", "100", "--init-from", "b", "--d-model", "256", "--heads", "4", "--ffn", "64", "--lora-targets", "down"}) ==
        "--lora 100 is larger than the smaller side (64) of an adapted linear (--lora-targets down, --d-model 256, --ffn 64)");
  CHECK(refusal({"--lora", "64", "--init-from", "b", "--d-model", "256", "--heads", "4", "--ffn", "64", "--lora-targets", "down"}).empty());
}

TEST_CASE("--lora: apply_lora makes the adapters the only trainable parameters, the same ones for a seed whatever the recipe",
          "[train][lora]") {
  host_backend be;
  const options o = tiny_lora({"--lora", "4", "--seed", "5"});
  model m(be, tiny_model(), recipes::bf16(), o.seed);
  std::size_t base = 0;
  for (const parameter* p : m.parameters()) base += p->value.size();
  const tp::lora_setup s = tp::apply_lora(m, o);
  CHECK(s.frozen == base);
  // QKV (32 -> 64) and output (32 -> 32) of the one layer: A (4, 32) and B (out, 4) each.
  CHECK(s.trainable == 4 * 32 + 64 * 4 + 4 * 32 + 32 * 4);
  std::size_t adapters = 0;
  for (const parameter* p : m.parameters()) {
    INFO(p->name);
    CHECK(p->trainable == is_adapter(*p));
    adapters += is_adapter(*p);
  }
  CHECK(adapters == 4);

  host_backend be2;
  model other(be2, tiny_model(), recipes::mxfp4_amd(), o.seed);
  (void)tp::apply_lora(other, o);
  const std::vector<parameter*> a = m.trainable_parameters(), b = other.trainable_parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(be.read(a[i]->value) == be2.read(b[i]->value));

  const options all = tiny_lora({"--lora", "2", "--lora-targets", "qkv,out,gate_up,down"});
  host_backend be3;
  model wide(be3, tiny_model(), recipes::bf16(), all.seed);
  CHECK(tp::apply_lora(wide, all).trainable == 2 * 32 + 64 * 2 + 2 * 32 + 32 * 2 + 2 * 32 + 128 * 2 + 2 * 64 + 32 * 2);
}

TEST_CASE("--lora: a short run lowers the loss and leaves the base as it was, bit for bit", "[train][lora]") {
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 17);
  {
    train_config pre;  // a base worth fine-tuning
    pre.steps = 20;
    pre.shape = {2, 32};
    pre.schedule = {1e-2, 1e-3, 3, pre.steps};
    trainer t(m, text_tokens(), pre);
    t.run();
  }
  const options o = tiny_lora({"--lora", "4"});
  m.set_recipe(recipes::mxfp4_amd());
  (void)tp::apply_lora(m, o);
  std::vector<std::vector<double>> before;
  for (parameter* p : m.parameters()) before.push_back(be.read(p->value));
  train_config c;
  c.steps = 16;
  c.shape = {2, 32};
  c.schedule = {1e-2, 1e-3, 2, c.steps};
  c.data_seed = 3;
  trainer t(m, text_tokens(), c);
  t.run();
  const std::vector<double>& losses = t.losses();
  REQUIRE(losses.size() == 16);
  CHECK(std::isfinite(losses.back()));
  CHECK((losses[13] + losses[14] + losses[15]) / 3 < (losses[0] + losses[1] + losses[2]) / 3);
  std::size_t i = 0, changed = 0;
  for (parameter* p : m.parameters()) {
    INFO(p->name);
    const std::vector<double> now = be.read(p->value);
    if (is_adapter(*p)) changed += now != before.at(i++);  // B from zero, A from its seeded draw
    else CHECK(now == before.at(i++));
  }
  CHECK(i == before.size());
  CHECK(changed == 4);
}

}  // namespace lora_program_test
