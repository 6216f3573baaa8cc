// SPDX-License-Identifier: Apache-2.0
// Hugging Face sharded checkpoints (io/hf_sharded.hpp): export in shards then import is bit-exact
// (F32; BF16 as the single file rounds it), by the index or its folder, in chunks of any size;
// a reader given part of each weight (a rank's shard) reads only those elements, and 2 fully
// sharded rank threads together read the checkpoint exactly once; the index's grammar; and every
// damaged index or shard refused before any weight is written, naming the file and the tensor.
// (tests/io/check_hf_sharded.py checks the reader against shards written by NumPy, through
// 05_train.)
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <mxkit/io/hf_sharded.hpp>
#include <mxkit/parallel/thread_communicator.hpp>

#include "../catch.hpp"
#include "../nn/nn_test_helpers.hpp"
#include "temp_files.hpp"

using namespace nn_test;
namespace fs = std::filesystem;

namespace {

model_config gqa() {
  model_config c = tiny_model();
  c.n_layers = 2;
  c.layer = {32, 4, 2, 48};  // d_model, heads, kv heads (GQA), d_ff
  return c;
}

std::vector<std::vector<float>> weights_of(backend& be, model& m) {
  std::vector<std::vector<float>> out;
  for (parameter* p : m.parameters()) out.push_back(floats(be, p->value));
  return out;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// A checkpoint as data, to damage and write back: each shard's tensors (values as floats) and
// metadata, and the index's entries in order.
struct checkpoint {
  std::map<std::string, std::vector<safetensors_tensor>> shards;
  std::map<std::string, std::map<std::string, std::string>> metadata;
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::optional<std::uint64_t> total_size;  // none: the tensors' bytes, computed

  static checkpoint read(const fs::path& folder) {
    checkpoint c;
    const hf_index x = read_hf_index(folder / hf_index_name);
    c.weight_map = x.weight_map;
    for (const std::string& s : x.shards()) {
      const safetensors_file f = read_safetensors(folder / s);
      c.metadata[s] = f.header.metadata;
      for (const safetensors_entry& e : f.header.tensors) c.shards[s].push_back({e.name, e.shape, f.values(e)});
    }
    return c;
  }
  void write(const fs::path& folder) const {
    fs::create_directories(folder);
    std::uint64_t bytes = 0;
    for (const auto& [name, tensors] : shards) {
      write_safetensors(folder / name, tensors, safetensors_dtype::f32, metadata.count(name) ? metadata.at(name) : std::map<std::string, std::string>{});
      for (const safetensors_tensor& t : tensors) bytes += 4 * t.values.size();
    }
    std::string text = "{\"metadata\": {\"total_size\": " + std::to_string(total_size.value_or(bytes)) + "}, \"weight_map\": {";
    for (std::size_t i = 0; i < weight_map.size(); ++i)
      text += (i ? ", " : "") + json::quoted(weight_map[i].first) + ": " + json::quoted(weight_map[i].second);
    write_text(folder / hf_index_name, text + "}}");
  }
  safetensors_tensor* find(const std::string& name) {
    for (auto& [s, tensors] : shards)
      for (safetensors_tensor& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
  }
  std::string shard_of(const std::string& name) const {
    for (const auto& [t, s] : weight_map)
      if (t == name) return s;
    return "";
  }
};

std::string refusal(const fs::path& p, model& m) {
  try {
    (void)import_hf_checkpoint(p, m);
  } catch (const safetensors_error& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("hf sharded: export in shards then import is bit-exact, by the index or its folder", "[nn][safetensors][hf_sharded]") {
  temp_dir dir;
  host_backend be;
  model a(be, gqa(), recipes::bf16(), 7);
  // 4 kB shards: the embedding and head (256 x 32 x 4 bytes = 32 kB) alone in theirs, the layers'
  // weights packed by the rule, so a weight's q, k and v land in different shards.
  const hf_export_result r = export_hf_sharded(dir.path / "ckpt", a, safetensors_dtype::f32, 4096);
  REQUIRE(r.shards.size() > 4);
  CHECK(r.shards.front() == "model-00001-of-" + std::string(5 - std::to_string(r.shards.size()).size(), '0') + std::to_string(r.shards.size()) +
                                ".safetensors");
  const hf_index x = read_hf_index(dir.path / "ckpt" / hf_index_name);
  CHECK(x.total_size == r.total_size);
  CHECK(x.weight_map.size() == 2 + 2 * 9 + 1);
  std::vector<std::string> listed = x.shards();  // (in the order of the index's sorted names)
  std::sort(listed.begin(), listed.end());
  CHECK(listed == r.shards);
  for (const std::string& s : r.shards) {
    const safetensors_header h = read_safetensors_header(dir.path / "ckpt" / s);
    std::uint64_t bytes = h.data_bytes;
    CHECK((bytes <= 4096 || h.tensors.size() == 1));  // a shard holds at most 4 kB, or one larger tensor alone
    CHECK(h.metadata.at("mxkit.n_layers") == "2");
  }
  for (const fs::path& source : {dir.path / "ckpt", dir.path / "ckpt" / hf_index_name}) {
    model b(be, gqa(), recipes::bf16(), 8);
    const hf_import_stats s = import_hf_checkpoint(source, b);
    CHECK(s.shards == r.shards.size());
    CHECK(s.bytes == r.total_size);
    CHECK(s.bytes_read == r.total_size);
    CHECK(weights_of(be, b) == weights_of(be, a));
  }
  // In chunks of 7 elements: the same bits.
  model c(be, gqa(), recipes::bf16(), 9);
  (void)import_hf_checkpoint(dir.path / "ckpt", c, hf_whole_targets(c), 7);
  CHECK(weights_of(be, c) == weights_of(be, a));
  // A second export with larger shards replaces the first: its old shards are removed.
  const hf_export_result r2 = export_hf_sharded(dir.path / "ckpt", a, safetensors_dtype::f32, 1 << 20);
  CHECK(r2.shards == std::vector<std::string>{"model-00001-of-00001.safetensors"});
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path / "ckpt")) files += e.is_regular_file();
  CHECK(files == 2);
  model d(be, gqa(), recipes::bf16(), 10);
  (void)import_hf_checkpoint(dir.path / "ckpt", d);
  CHECK(weights_of(be, d) == weights_of(be, a));
}

TEST_CASE("hf sharded: shards are cut as huggingface_hub cuts them", "[nn][safetensors][hf_sharded]") {
  // split_state_dict_into_shards_factory: a tensor larger than the maximum becomes a shard of its
  // own at once while the shard being filled stays open. At 3000 bytes: the embedding (32 kB) is
  // shard 1; layer 0's input norm (128 B) opens a shard; q_proj (4 kB) is shard 2; k_proj (2 kB)
  // joins the norm's, which closes as shard 3 when v_proj (2 kB) would pass 3000 bytes.
  temp_dir dir;
  host_backend be;
  model a(be, gqa(), recipes::bf16(), 1);
  const hf_export_result r = export_hf_sharded(dir.path / "ckpt", a, safetensors_dtype::f32, 3000);
  std::map<std::string, std::string> shard_of;
  for (const auto& [t, s] : read_hf_index(dir.path / "ckpt" / hf_index_name).weight_map) shard_of[t] = s;
  const std::string of = "-of-000" + std::to_string(r.shards.size()) + ".safetensors";
  REQUIRE(r.shards.size() >= 10);
  CHECK(shard_of["model.embed_tokens.weight"] == "model-00001" + of);
  CHECK(shard_of["model.layers.0.self_attn.q_proj.weight"] == "model-00002" + of);
  CHECK(shard_of["model.layers.0.input_layernorm.weight"] == "model-00003" + of);
  CHECK(shard_of["model.layers.0.self_attn.k_proj.weight"] == "model-00003" + of);
  CHECK(shard_of["model.layers.0.self_attn.v_proj.weight"] != "model-00003" + of);
  CHECK(shard_of["lm_head.weight"] == r.shards[r.shards.size() - 2]);  // (the open shard, the last one, closes after it)
  CHECK(shard_of["model.norm.weight"] == r.shards.back());
}

TEST_CASE("hf sharded: BF16 shards import as the single BF16 file does", "[nn][safetensors][hf_sharded]") {
  temp_dir dir;
  host_backend be;
  model a(be, gqa(), recipes::bf16(), 3), one(be, gqa(), recipes::bf16(), 4), sharded(be, gqa(), recipes::bf16(), 5);
  export_safetensors(dir.path / "one.safetensors", a, safetensors_dtype::bf16);
  (void)export_hf_sharded(dir.path / "shards", a, safetensors_dtype::bf16, 2000);
  import_safetensors(dir.path / "one.safetensors", one);
  const hf_import_stats s = import_hf_checkpoint(dir.path / "shards", sharded);
  CHECK(weights_of(be, sharded) == weights_of(be, one));
  CHECK(weights_of(be, sharded) != weights_of(be, a));  // (rounded)
  CHECK(s.bytes_read == s.bytes);
  // A single file given by its path, or by a folder holding only model.safetensors, is read the same way.
  fs::create_directories(dir.path / "single");
  fs::copy_file(dir.path / "one.safetensors", dir.path / "single" / "model.safetensors");
  model e(be, gqa(), recipes::bf16(), 6), f(be, gqa(), recipes::bf16(), 6);
  (void)import_hf_checkpoint(dir.path / "one.safetensors", e);
  (void)import_hf_checkpoint(dir.path / "single", f);
  CHECK(weights_of(be, e) == weights_of(be, one));
  CHECK(weights_of(be, f) == weights_of(be, one));
}

TEST_CASE("hf sharded: a reader given part of each weight reads only those elements", "[nn][safetensors][hf_sharded]") {
  temp_dir dir;
  host_backend be;
  model a(be, gqa(), recipes::bf16(), 11), b(be, gqa(), recipes::bf16(), 12);
  (void)export_hf_sharded(dir.path / "ckpt", a, safetensors_dtype::f32, 3000);
  const std::vector<std::vector<float>> before = weights_of(be, b);
  // The middle third of every parameter, into tensors of its own (a rank's shard stands in).
  std::vector<hf_import_target> targets;
  std::uint64_t expected = 0;
  for (parameter* p : b.parameters()) {
    const std::size_t n = p->value.size(), first = n / 3, count = n / 3 + 1;
    targets.push_back({p, be.alloc(1, count, dtype::f32, mem_tag::parameter), first});
    expected += 4 * count;
  }
  const hf_import_stats s = import_hf_checkpoint(dir.path / "ckpt", b, targets, 5);
  CHECK(s.bytes_read == expected);
  CHECK(s.bytes_read < s.bytes / 2);
  const std::vector<std::vector<float>> want = weights_of(be, a);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    INFO(targets[i].whole->name);
    const std::vector<float> got = floats(be, targets[i].values);
    CHECK(std::equal(got.begin(), got.end(), want[i].begin() + static_cast<std::ptrdiff_t>(targets[i].first)));
  }
  CHECK(weights_of(be, b) == before);  // only the targets were written
}

TEST_CASE("hf sharded: fully sharded ranks each read their own elements, together the checkpoint once",
          "[nn][safetensors][hf_sharded][data_parallel]") {
  temp_dir dir;
  std::vector<std::vector<float>> want;
  {
    host_backend be;
    model a(be, gqa(), recipes::bf16(), 13);
    (void)export_hf_sharded(dir.path / "ckpt", a, safetensors_dtype::f32, 5000);
    want = weights_of(be, a);
  }
  std::vector<hf_import_stats> stats(2);
  std::vector<std::vector<std::vector<float>>> gathered(2);
  ref::run_ranks(2, [&](communicator& comm) {
    host_backend be;
    model_build_hooks deferred;
    deferred.defer_memory = true;  // no rank holds the whole model
    model m(be, gqa(), recipes::bf16(), 14, deferred);
    data_parallel dp(m, {&comm, 1, sharding::full});
    const std::size_t r = static_cast<std::size_t>(comm.rank());
    stats[r] = import_hf_checkpoint(dir.path / "ckpt", m, hf_rank_targets(m, dp), 64);
    dp.gather_all();
    gathered[r] = weights_of(be, m);
    dp.release_all(false);
  });
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(stats[r].bytes_read > 0);
    CHECK(stats[r].bytes_read < stats[r].bytes);
    CHECK(gathered[r] == want);
  }
  CHECK(stats[0].bytes_read + stats[1].bytes_read == stats[0].bytes);  // every element read by exactly one rank
}

TEST_CASE("hf sharded: the index's grammar", "[nn][safetensors][hf_sharded]") {
  auto refused = [](const std::string& json) {
    try {
      (void)parse_hf_index(json, "dir/model.safetensors.index.json");
    } catch (const safetensors_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const hf_index x = parse_hf_index(
      R"({"metadata": {"total_size": 12, "format": "pt", "total_parameters": 3}, "weight_map": {"b": "s2.safetensors", "a": "s1.safetensors", "c": "s2.safetensors"}})",
      "dir/model.safetensors.index.json");
  CHECK(x.total_size == 12u);
  CHECK(x.metadata.at("format") == "pt");
  CHECK(x.metadata.at("total_parameters") == "3");
  CHECK(x.folder == fs::path("dir"));
  CHECK(x.shards() == std::vector<std::string>{"s2.safetensors", "s1.safetensors"});
  CHECK(refused(R"({"weight_map": {}})") == "accepted");  // (metadata is optional; the model's check names what is missing)
  const std::string at = "Hugging Face index 'dir/model.safetensors.index.json': ";
  CHECK(refused(R"({"weight_map": {"a": "../up.safetensors"}})") ==
        at + "weight_map maps tensor 'a' to '../up.safetensors', which has a '..' part: it may lead outside the index's folder");
  CHECK_THAT(refused(R"({"weight_map": {"a": "sub/../../x.safetensors"}})"), Catch::Contains("has a '..' part"));
  CHECK_THAT(refused(R"({"weight_map": {"a": "/etc/x.safetensors"}})"), Catch::Contains("an absolute path, outside the index's folder"));
  CHECK_THAT(refused(R"({"weight_map": {"a": ""}})"), Catch::Contains("maps tensor 'a' to '', which is empty"));
  CHECK_THAT(refused(R"({"weight_map": {"a": "x", "a": "y"}})"), Catch::Contains("the key \"a\" appears twice"));
  CHECK_THAT(refused(R"({"weight_map": {"a": 3}})"), Catch::Contains("the shard of tensor 'a' is not a string"));
  CHECK_THAT(refused(R"({"metadata": {"total_size": "12"}, "weight_map": {}})"), Catch::Contains("total_size is a string"));
  CHECK_THAT(refused(R"({"metadata": {"total_size": 1.5}, "weight_map": {}})"), Catch::Contains("index JSON at byte"));
  CHECK_THAT(refused(R"({"metadata": {}})"), Catch::Contains("no \"weight_map\""));
  CHECK_THAT(refused(R"({"weight_map": {}, "shards": 2})"), Catch::Contains("unknown key \"shards\""));
  CHECK_THAT(refused(R"({"weight_map": {}} x)"), Catch::Contains("unexpected bytes after the index object"));
  CHECK_THAT(refused("{\"weight_map\": {\"\xff\": \"x\"}}"), Catch::Contains("not valid UTF-8"));
}

TEST_CASE("hf sharded: damaged checkpoints are refused naming the file and the tensor, and change nothing",
          "[nn][safetensors][hf_sharded]") {
  temp_dir dir;
  host_backend be;
  model a(be, gqa(), recipes::bf16(), 21);
  (void)export_hf_sharded(dir.path / "good", a, safetensors_dtype::f32, 3000);
  const checkpoint good = checkpoint::read(dir.path / "good");
  model b(be, gqa(), recipes::bf16(), 22);
  const std::vector<std::vector<float>> before = weights_of(be, b);
  int n = 0;
  // Writes an edited copy and returns the refusal of importing it.
  auto damaged = [&](auto&& edit) {
    checkpoint c = good;
    const fs::path folder = dir.path / ("damaged" + std::to_string(++n));
    edit(c, folder);
    c.write(folder);
    return refusal(folder, b);
  };
  const std::string q0 = "model.layers.0.self_attn.q_proj.weight", k1 = "model.layers.1.self_attn.k_proj.weight";
  const std::string q0_shard = good.shard_of(q0), k1_shard = good.shard_of(k1);
  REQUIRE(q0_shard != k1_shard);
  const std::string index = "Hugging Face index '";

  SECTION("a shard file missing") {
    good.write(dir.path / "damaged1");
    fs::remove(dir.path / "damaged1" / k1_shard);
    const std::string r = refusal(dir.path / "damaged1", b);
    CHECK_THAT(r, Catch::Contains(index) && Catch::Contains("shard '" + k1_shard + "'") && Catch::Contains("cannot open the file"));
  }
  SECTION("a tensor the index lists, missing from its shard") {
    // A tensor whose shard holds others (so that shard stays listed), mapped to another shard.
    std::map<std::string, int> tensors_in;
    for (const auto& [t, s] : good.weight_map) ++tensors_in[s];
    std::string moved, from;
    for (const auto& [t, s] : good.weight_map)
      if (tensors_in[s] > 1 && s != k1_shard) moved = t, from = s;
    REQUIRE(!moved.empty());
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) {
                 for (auto& [t, s] : c.weight_map)
                   if (t == moved) s = k1_shard;
               }),
               Catch::Contains("tensor '" + moved + "': the index maps it to shard '" + k1_shard +
                               "', which has no such tensor (it is in shard '" + from + "')"));
    // ...and the shard it is in no longer listed at all.
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) {
                 for (auto& [t, s] : c.weight_map)
                   if (t == q0) s = k1_shard;
                 for (auto& [t, s] : c.weight_map)
                   if (s == q0_shard) s = k1_shard;
               }),
               Catch::Contains("tensor '") && Catch::Contains("': the index maps it to shard '" + k1_shard + "', which has no such tensor"));
  }
  SECTION("a tensor in two shards") {
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) { c.shards[k1_shard].push_back(*c.find(q0)); }),
               Catch::Contains("tensor '" + q0 + "' is in two shards, '"));
  }
  SECTION("a shard's tensor the index does not list") {
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) {
                 c.shards[k1_shard].push_back({"model.layers.7.mlp.up_proj.weight", {2}, {1.f, 2.f}});
               }),
               Catch::Contains("shard '" + k1_shard + "' holds tensor 'model.layers.7.mlp.up_proj.weight', which the index's weight_map does not list"));
  }
  SECTION("an extra tensor, listed and present") {
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) {
                 c.shards[k1_shard].push_back({"model.layers.7.mlp.up_proj.weight", {2}, {1.f, 2.f}});
                 c.weight_map.emplace_back("model.layers.7.mlp.up_proj.weight", k1_shard);
               }),
               Catch::Contains("tensor 'model.layers.7.mlp.up_proj.weight' (shard '" + k1_shard +
                               "') is not a weight of this model (a Llama of 2 layers)"));
  }
  SECTION("a weight missing from the checkpoint") {
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) {
                 std::erase_if(c.weight_map, [&](const auto& e) { return e.first == k1; });
                 std::erase_if(c.shards[k1_shard], [&](const safetensors_tensor& t) { return t.name == k1; });
               }),
               Catch::Contains("no tensor '" + k1 + "'"));
  }
  SECTION("a weight_map entry outside the folder") {
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) {
                 for (auto& [t, s] : c.weight_map)
                   if (t == k1) s = "../good/" + k1_shard;
               }),
               Catch::Contains("weight_map maps tensor '" + k1 + "' to '../good/" + k1_shard + "', which has a '..' part"));
  }
  SECTION("total_size that is not the tensors' bytes") {
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) { c.total_size = 12; }), Catch::Contains("metadata total_size is 12, the tensors"));
  }
  SECTION("a shape that is not the model's") {
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) { c.find(k1)->shape = {32, 16}; }),
               Catch::Contains("tensor '" + k1 + "' (shard '" + k1_shard + "') has shape [32, 16], the model needs [16, 32]"));
  }
  SECTION("another model's metadata") {
    CHECK_THAT(damaged([&](checkpoint& c, const fs::path&) { c.metadata[k1_shard]["mxkit.n_heads"] = "2"; }),
               Catch::Contains("shard '" + k1_shard + "': metadata mxkit.n_heads is 2, the model has 4"));
  }
  SECTION("a dtype mxkit does not read, and a truncated shard") {
    good.write(dir.path / "damaged1");
    const fs::path shard = dir.path / "damaged1" / k1_shard;
    std::vector<std::uint8_t> bytes = read_all(shard);
    std::vector<std::uint8_t> cut(bytes.begin(), bytes.end() - 2);
    write_all(shard, cut);
    CHECK_THAT(refusal(dir.path / "damaged1", b), Catch::Contains("shard '" + k1_shard + "': safetensors '") && Catch::Contains("truncated"));
    std::string text(bytes.begin(), bytes.end());
    const std::size_t f32 = text.find("\"F32\"");
    REQUIRE(f32 != std::string::npos);
    text.replace(f32, 5, "\"F16\"");
    write_all(shard, std::vector<std::uint8_t>(text.begin(), text.end()));
    CHECK_THAT(refusal(dir.path / "damaged1", b), Catch::Contains("has dtype \"F16\"; mxkit reads F32 and BF16 only"));
  }
  CHECK(weights_of(be, b) == before);
  CHECK(refusal(dir.path / "good", b) == "accepted");
}
