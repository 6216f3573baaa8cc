// SPDX-License-Identifier: Apache-2.0
// The training program's --model (mxkit/train_program/options.hpp): each preset's fields, explicit
// shape flags overriding the preset wherever they stand, refusals, and --help's list.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/train_program/options.hpp>

#include "../catch.hpp"
#include "parse_options.hpp"

namespace model_presets_test {
using namespace mxkit;
using train_program::options;

std::optional<options> parse(std::vector<std::string> args) { return train_program_test::parse(std::move(args), "05_train"); }


TEST_CASE("--model: Llama 3.1 8B and Llama 2 70B by name, the small model by default", "[train][options]") {
  const options d = *parse({});
  CHECK(d.model.empty());
  CHECK((d.layers == 16 && d.d_model == 768 && d.heads == 12 && d.kv_heads == 4 && d.ffn == 2048 && d.seq == 1024));
  CHECK(!d.vocab);
  CHECK(d.rope_theta == 10000.0);  // today's values: a run without --model is unchanged
  CHECK(d.norm_eps == 1e-5);
  CHECK(!d.rope_scale.enabled());
  const options small = *parse({"--model", "small"});
  CHECK(small.model == "small");
  CHECK((small.layers == d.layers && small.d_model == d.d_model && small.heads == d.heads && small.kv_heads == d.kv_heads &&
         small.ffn == d.ffn && small.seq == d.seq && small.vocab == d.vocab && small.rope_theta == d.rope_theta &&
         small.norm_eps == d.norm_eps && small.rope_scale == d.rope_scale));

  const options l3 = *parse({"--model", "llama3.1-8b"});
  CHECK(l3.model == "llama3.1-8b");
  CHECK((l3.layers == 32 && l3.d_model == 4096 && l3.heads == 32 && l3.kv_heads == 8 && l3.ffn == 14336));
  CHECK(l3.vocab == std::optional<std::size_t>(128256));
  CHECK(l3.seq == 8192);
  CHECK(l3.rope_theta == 500000.0);
  CHECK(l3.norm_eps == 1e-5);
  CHECK(l3.rope_scale == nn::rope_scaling{8.0, 1.0, 4.0, 8192.0});

  const options l2 = *parse({"--model=llama2-70b"});
  CHECK((l2.layers == 80 && l2.d_model == 8192 && l2.heads == 64 && l2.kv_heads == 8 && l2.ffn == 28672));
  CHECK(l2.vocab == std::optional<std::size_t>(32000));
  CHECK(l2.seq == 4096);
  CHECK(l2.rope_theta == 10000.0);
  CHECK(l2.norm_eps == 1e-5);
  CHECK(!l2.rope_scale.enabled());
}

TEST_CASE("--model: explicit shape flags override the preset, before or after it", "[train][options]") {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--model", "llama3.1-8b", "--layers", "2", "--d-model", "64", "--heads", "2", "--kv-heads", "1", "--ffn",
                                 "96", "--seq", "32", "--vocab", "300"},
        std::vector<std::string>{"--layers", "2", "--d-model=64", "--heads", "2", "--kv-heads", "1", "--ffn", "96", "--seq", "32",
                                 "--vocab", "300", "--model", "llama3.1-8b"},
        std::vector<std::string>{"--layers", "2", "--d-model", "64", "--model", "llama3.1-8b", "--heads", "2", "--kv-heads", "1", "--ffn",
                                 "96", "--vocab=300", "--seq", "32"}}) {
    const options o = *parse(args);
    CHECK((o.layers == 2 && o.d_model == 64 && o.heads == 2 && o.kv_heads == 1 && o.ffn == 96 && o.seq == 32));
    CHECK(o.vocab == std::optional<std::size_t>(300));
    CHECK(o.rope_theta == 500000.0);  // what no flag names stays the preset's
    CHECK(o.rope_scale == nn::llama3_1_rope_scaling);
  }
  const options some = *parse({"--layers", "4", "--model", "llama2-70b"});
  CHECK(some.layers == 4);
  CHECK(some.d_model == 8192);
  // A value that looks like the flag is a value, not a second --model.
  const options data = *parse({"--data", "--model", "--model", "llama2-70b"});
  CHECK(data.data == "--model");
  CHECK(data.model == "llama2-70b");
}

TEST_CASE("--model: unknown names and a second --model are refused; --help lists the models", "[train][options]") {
  CHECK_THROWS_WITH(parse({"--model", "llama4"}), mxkit_test::contains("--model: unknown model 'llama4' (known: small, llama3.1-8b, llama2-70b)"));
  CHECK_THROWS_WITH(parse({"--model", "small", "--model=llama2-70b"}), mxkit_test::contains("--model given twice"));
  CHECK_THROWS_WITH(parse({"--model"}), mxkit_test::contains("--model: missing value NAME"));
  // A preset whose shape the explicit flags break is refused as the flags would be.
  CHECK_THROWS_WITH(parse({"--model", "llama3.1-8b", "--heads", "3"}), mxkit_test::contains("--d-model 4096 is not a multiple of --heads 3"));
  CHECK(!parse({"--model", "llama3.1-8b", "--help"}));
  std::string help;
  for (const auto& f : train_program::detail::flags())
    if (std::string(f.name) == "--model") help = f.help;
  for (const train_program::model_preset& m : train_program::model_presets) CHECK(help.find(m.name) != std::string::npos);
}

}  // namespace model_presets_test
