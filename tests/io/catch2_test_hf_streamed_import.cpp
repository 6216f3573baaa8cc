// SPDX-License-Identifier: Apache-2.0
// The 70B LoRA base read from a Hugging Face sharded checkpoint while it is built layer by layer
// (io/hf_streamed_import.hpp through nn/lora_base.hpp's load hook), on a small Llama 2 shape
// (GQA, three layers) exported in several shards: every layer's MXFP4 copies and stashed FP8
// copies, the adapters and the embedding, norm and head masters are, bit for bit, those of the
// same model imported whole (import_hf_checkpoint) and then frozen, adapted and prepared for
// healing; F32 and BF16 shards; every tensor read once. A missing tensor, a wrong shape, an extra
// tensor or a dtype other than F32 and BF16 is refused before anything is allocated, naming the
// tensor.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <mxkit/io/hf_streamed_import.hpp>
#include <mxkit/nn/lora_base.hpp>

#include "../catch.hpp"
#include "../nn/nn_test_helpers.hpp"
#include "temp_files.hpp"

using namespace nn_test;
namespace fs = std::filesystem;

namespace {

// Llama 2's shape, small: grouped-query attention (4 heads, 2 KV heads), three layers (the hooks
// run more than once and the layers differ).
model_config llama2_small() {
  model_config c = tiny_model();
  c.n_layers = 3;
  c.layer = {32, 4, 2, 64};  // d_model, heads, KV heads, d_ff
  return c;
}

bool streamed_same_mx(const qtensor& a, const qtensor& b) {
  const mx_tensor &x = host_backend::mx(a), &y = host_backend::mx(b);
  return std::ranges::equal(x.data(), y.data()) && std::ranges::equal(x.scales(), y.scales());
}

bool streamed_same_fp8(const host_fp8& a, const host_fp8& b) {
  const fp8_tensor x = a.to_tensor(), y = b.to_tensor();
  return x.data == y.data && x.scale == y.scale && x.type == y.type;
}

// A source model whose norm gains are not all ones (else a norm never read would pass), exported
// in shards of at most 4 kB: the 32 kB embedding and head each alone, a layer's q, k and v in
// different shards.
hf_export_result write_llama2_checkpoint(const fs::path& folder, safetensors_dtype dtype) {
  host_backend be;
  model src(be, llama2_small(), recipes::mxfp4_amd(), 7);
  double g = 0.5;
  for (parameter* p : src.parameters())
    if (p->name.find("norm") != std::string::npos) {
      std::vector<double> v(p->value.size());
      for (double& x : v) x = (g += 0.015625);
      be.write(p->value, v);
    }
  return export_hf_sharded(folder, src, dtype, 4096);
}

// The streamed build's refusal, with the layers built and the bytes allocated before it.
struct streamed_outcome {
  std::string error;
  std::size_t layers_built = 0;
  std::size_t peak_bytes = 0;
};
streamed_outcome build_streamed(const fs::path& path, const model_config& c) {
  streamed_outcome o;
  host_backend be;
  try {
    hf_streamed_import reader(path, c);
    lora_base_config lc;
    lc.load = [&](parameter& p) { reader.fill(be, p); };
    lc.after_layer = [&](std::size_t) { ++o.layers_built; };
    (void)build_lora_base(be, c, recipes::mxfp4_amd(), 9, lc);
    (void)reader.finish();
    o.error = "accepted";
  } catch (const safetensors_error& e) {
    o.error = e.what();
  }
  o.peak_bytes = be.memory().peak_total();
  return o;
}

// Rewrites one shard with `edit` applied to its tensors, and the index with the tensors listed.
void edit_shard(const fs::path& folder, const std::string& tensor, const std::function<void(std::vector<safetensors_tensor>&)>& edit) {
  const hf_index x = read_hf_index(folder / hf_index_name);
  std::string shard;
  for (const auto& [t, s] : x.weight_map)
    if (t == tensor) shard = s;
  REQUIRE_FALSE(shard.empty());
  const safetensors_file f = read_safetensors(folder / shard);
  std::vector<safetensors_tensor> tensors;
  for (const safetensors_entry& e : f.header.tensors) tensors.push_back({e.name, e.shape, f.values(e)});
  edit(tensors);
  write_safetensors(folder / shard, tensors, safetensors_dtype::f32, f.header.metadata);
  std::map<std::string, std::string> map;
  for (const auto& [t, s] : x.weight_map)
    if (s != shard) map[t] = s;
  for (const safetensors_tensor& t : tensors) map[t.name] = shard;
  std::string text = "{\"weight_map\": {";
  for (const auto& [t, s] : map) text += (text.back() == '{' ? "" : ", ") + json::quoted(t) + ": " + json::quoted(s);
  const std::string index = text + "}}";
  write_all(folder / hf_index_name, std::vector<std::uint8_t>(index.begin(), index.end()));
}

}  // namespace

TEST_CASE("hf streamed import: a LoRA base built layer by layer from a sharded Llama 2 checkpoint is the model imported whole, "
          "then frozen, adapted and prepared, bit for bit",
          "[nn][safetensors][hf_sharded][lora_base]") {
  for (safetensors_dtype dtype : {safetensors_dtype::f32, safetensors_dtype::bf16}) {
    INFO("shards: " << safetensors_dtype_name(dtype));
    temp_dir dir;
    const fs::path ckpt = dir.path / "ckpt";
    const hf_export_result r = write_llama2_checkpoint(ckpt, dtype);
    REQUIRE(r.shards.size() > 4);
    const model_config c = llama2_small();
    const lora_base_config lc;  // rank 16, alpha 32 on QKV and output

    // Whole: another seed's model, its weights replaced by the checkpoint's.
    host_backend be_whole;
    model whole(be_whole, c, recipes::mxfp4_amd(), 8);
    const hf_import_stats whole_stats = import_hf_checkpoint(ckpt, whole);
    std::map<std::string, std::vector<double>> masters;  // the embedding's, the norms' and the head's
    for (parameter* p : whole.parameters())
      if (p->name.find("norm") != std::string::npos || p->name == "embedding.weight" || p->name == "head.weight")
        masters[p->name] = be_whole.read(p->value);
    whole.freeze_all();
    whole.add_lora(lc.targets, lc.lora, lc.lora_seed);
    const fp8_weight_stash stash_whole = prepare_healing(whole);

    // Streamed: the same seed, so that only the base's values could differ; chunks of 7 elements.
    host_backend be;
    hf_streamed_import reader(ckpt, c, 7);
    lora_base_config l = lc;
    l.load = [&](parameter& p) { reader.fill(be, p); };
    lora_base b = build_lora_base(be, c, recipes::mxfp4_amd(), 8, l);
    const hf_import_stats s = reader.finish();
    CHECK(s.shards == r.shards.size());
    CHECK(s.tensors == 2 + 9 * c.n_layers + 1);
    CHECK(s.bytes == r.total_size);
    CHECK(s.bytes_read == r.total_size);  // every byte once
    CHECK(whole_stats.bytes_read == r.total_size);
    model& m = *b.m;

    // The masters the base keeps: the checkpoint's (not the seed's: the norms are not ones).
    for (parameter* p : m.parameters())
      if (masters.count(p->name)) {
        INFO(p->name);
        CHECK(be.read(p->value) == masters.at(p->name));
        CHECK_FALSE(p->trainable);
      }
    CHECK(masters.at("layers.2.norm2.weight") != std::vector<double>(c.layer.d_model, 1.0));
    // The adapters, the FP8 stash and the MXFP4 copies.
    const auto tw = whole.trainable_parameters(), ts = m.trainable_parameters();
    REQUIRE(tw.size() == ts.size());
    REQUIRE(ts.size() == 2 * 2 * c.n_layers);
    for (std::size_t i = 0; i < tw.size(); ++i) {
      CHECK(tw[i]->name == ts[i]->name);
      CHECK(be_whole.read(tw[i]->value) == be.read(ts[i]->value));
    }
    REQUIRE(b.stash.entries().size() == stash_whole.entries().size());
    REQUIRE(b.stash.entries().size() == 4 * c.n_layers);
    for (std::size_t i = 0; i < stash_whole.entries().size(); ++i) {
      INFO(stash_whole.entries()[i].name);
      CHECK(b.stash.entries()[i].name == stash_whole.entries()[i].name);
      CHECK(streamed_same_fp8(b.stash.entries()[i].copy, stash_whole.entries()[i].copy));
    }
    const auto lw = whole.linears(), ls = m.linears();
    REQUIRE(lw.size() == ls.size());
    for (std::size_t i = 0; i < ls.size(); ++i) {
      INFO(ls[i]->name());
      CHECK_FALSE(ls[i]->has_master());
      CHECK(streamed_same_mx(lw[i]->cached_rowwise(), ls[i]->cached_rowwise()));
      CHECK(streamed_same_mx(lw[i]->cached_columnwise(), ls[i]->cached_columnwise()));
    }
    for (mem_tag t : {mem_tag::parameter, mem_tag::gradient, mem_tag::quantized_weight})
      CHECK(be_whole.memory().live(t) == be.memory().live(t));
  }
}

TEST_CASE("hf streamed import: a missing tensor, a wrong shape, an extra tensor or another dtype is refused before anything "
          "is allocated, naming the tensor",
          "[nn][safetensors][hf_sharded][lora_base]") {
  temp_dir dir;
  const fs::path good = dir.path / "good";
  (void)write_llama2_checkpoint(good, safetensors_dtype::f32);
  const model_config c = llama2_small();
  REQUIRE(build_streamed(good, c).error == "accepted");
  REQUIRE(build_streamed(good / hf_index_name, c).layers_built == c.n_layers);

  struct damage {
    std::string what, tensor, expect;
    std::function<void(const fs::path&)> apply;
  };
  const std::string k1 = "model.layers.1.self_attn.k_proj.weight", down2 = "model.layers.2.mlp.down_proj.weight";
  const std::vector<damage> cases = {
      {"missing", k1, "no tensor '" + k1 + "'",
       [&](const fs::path& f) {
         edit_shard(f, k1, [&](std::vector<safetensors_tensor>& ts) { std::erase_if(ts, [&](const auto& t) { return t.name == k1; }); });
       }},
      {"wrong shape", down2, "has shape [32, 63], the model needs [32, 64]",
       [&](const fs::path& f) {
         edit_shard(f, down2, [&](std::vector<safetensors_tensor>& ts) {
           for (safetensors_tensor& t : ts)
             if (t.name == down2) {
               t.shape = {32, 63};
               t.values.resize(32 * 63);
             }
         });
       }},
      {"extra", "model.layers.3.mlp.down_proj.weight", "is not a weight of this model (a Llama of 3 layers)",
       [&](const fs::path& f) {
         edit_shard(f, down2, [&](std::vector<safetensors_tensor>& ts) {
           ts.push_back({"model.layers.3.mlp.down_proj.weight", {32, 64}, std::vector<float>(32 * 64, 0.25f)});
         });
       }},
      {"F16", k1, "has dtype \"F16\"; mxkit reads F32 and BF16 only",
       [&](const fs::path& f) {
         // The same header length with F16 for F32: refused by its dtype, not by its size.
         const hf_index x = read_hf_index(f / hf_index_name);
         for (const auto& [t, s] : x.weight_map)
           if (t == k1) {
             std::vector<std::uint8_t> bytes = read_all(f / s);
             const std::string from = json::quoted(k1) + ":{\"dtype\":\"F32\"";
             std::string text(bytes.begin(), bytes.end());
             const std::size_t at = text.find(from);
             REQUIRE(at != std::string::npos);
             bytes[at + from.size() - 3] = '1';  // (from ends F32")
             bytes[at + from.size() - 2] = '6';
             write_all(f / s, bytes);
           }
       }},
  };
  for (const damage& d : cases) {
    INFO(d.what);
    const fs::path f = dir.path / ("bad_" + std::to_string(&d - cases.data()));
    fs::copy(good, f);
    d.apply(f);
    const streamed_outcome o = build_streamed(f, c);
    CHECK_THAT(o.error, mxkit_test::contains("tensor '" + d.tensor + "'"));
    CHECK_THAT(o.error, mxkit_test::contains(d.expect));
    CHECK_THAT(o.error, mxkit_test::contains(f.string()));  // the index or shard file
    CHECK(o.layers_built == 0);
    CHECK(o.peak_bytes == 0);  // refused before the first parameter was allocated
  }
  // The model's shape must be the checkpoint's: two layers of a checkpoint of three.
  model_config two = c;
  two.n_layers = 2;
  const streamed_outcome o = build_streamed(good, two);
  CHECK_THAT(o.error, mxkit_test::contains("metadata mxkit.n_layers is 3, the model has 2"));
  CHECK(o.layers_built == 0);
  // A reader whose tensors were never read (a build that skipped them) fails its final check.
  hf_streamed_import unread(good, c);
  CHECK_THROWS_WITH(unread.finish(), mxkit_test::contains("tensor 'lm_head.weight' (shard '") &&
                                         mxkit_test::contains("was never read"));
}
