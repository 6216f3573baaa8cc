// SPDX-License-Identifier: Apache-2.0
// safetensors: bit-exact F32 round trip of a model under Hugging Face Llama names (fused QKV and
// gate/up split and fused back), BF16 export rounded to nearest even, a file from an independent
// writer (Python json + struct, tools/twin/safetensors_fixture.py), and refusals of malformed
// files, each naming what is wrong.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <mxkit/io/hf_llama.hpp>

#include "../catch.hpp"
#include "../nn/nn_test_helpers.hpp"
#include "temp_files.hpp"

using namespace nn_test;
namespace fs = std::filesystem;

namespace {

// 249 bytes, from tools/twin/safetensors_fixture.py
constexpr unsigned char python_fixture[] = {
    0xd1, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x77, 0x22, 0x3a, 0x20, 0x7b, 0x22,
    0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x20, 0x22, 0x46, 0x33, 0x32, 0x22, 0x2c, 0x20, 0x22,
    0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x20, 0x5b, 0x32, 0x2c, 0x20, 0x33, 0x5d, 0x2c, 0x20,
    0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x20,
    0x5b, 0x38, 0x2c, 0x20, 0x33, 0x32, 0x5d, 0x7d, 0x2c, 0x20, 0x22, 0x67, 0x22, 0x3a, 0x20, 0x7b,
    0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x20, 0x22, 0x42, 0x46, 0x31, 0x36, 0x22, 0x2c,
    0x20, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a, 0x20, 0x5b, 0x34, 0x5d, 0x2c, 0x20, 0x22,
    0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x20, 0x5b,
    0x30, 0x2c, 0x20, 0x38, 0x5d, 0x7d, 0x2c, 0x20, 0x22, 0x5f, 0x5f, 0x6d, 0x65, 0x74, 0x61, 0x64,
    0x61, 0x74, 0x61, 0x5f, 0x5f, 0x22, 0x3a, 0x20, 0x7b, 0x22, 0x77, 0x72, 0x69, 0x74, 0x65, 0x72,
    0x22, 0x3a, 0x20, 0x22, 0x70, 0x79, 0x74, 0x68, 0x6f, 0x6e, 0x20, 0x6a, 0x73, 0x6f, 0x6e, 0x2b,
    0x73, 0x74, 0x72, 0x75, 0x63, 0x74, 0x22, 0x2c, 0x20, 0x22, 0x6e, 0x6f, 0x74, 0x65, 0x22, 0x3a,
    0x20, 0x22, 0x63, 0x61, 0x66, 0x5c, 0x75, 0x30, 0x30, 0x65, 0x39, 0x20, 0x5c, 0x22, 0x71, 0x75,
    0x6f, 0x74, 0x65, 0x64, 0x5c, 0x22, 0x22, 0x7d, 0x7d, 0x80, 0x3f, 0x00, 0xc0, 0x00, 0x3f, 0x70,
    0x40, 0x00, 0x00, 0x00, 0xbf, 0x00, 0x00, 0x80, 0xbe, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80,
    0x3e, 0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x40, 0x3f};

// A file from a header text and a data buffer of n bytes.
std::vector<std::uint8_t> file_of(const std::string& json, std::size_t n) {
  std::vector<std::uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(json.size() >> (8 * i));
  for (const char c : json) out.push_back(static_cast<std::uint8_t>(c));
  out.resize(out.size() + n, 0);
  return out;
}

std::string refusal(const std::vector<std::uint8_t>& file) {
  try {
    (void)parse_safetensors(file.data(), file.size());
  } catch (const safetensors_error& e) {
    return e.what();
  }
  return "accepted";
}

model_config gqa_model() {
  model_config c = tiny_model();
  c.n_layers = 2;
  c.layer = {32, 4, 2, 48};  // d_model, heads, kv heads (GQA), d_ff
  return c;
}

}  // namespace

TEST_CASE("safetensors: F32 export then import is bit-exact, under Hugging Face names", "[nn][safetensors]") {
  temp_dir dir;
  const fs::path file = dir.path / "model.safetensors";
  host_backend be;
  model a(be, gqa_model(), recipes::bf16(), 7), b(be, gqa_model(), recipes::bf16(), 8);
  export_safetensors(file, a);
  import_safetensors(file, b);
  const std::vector<parameter*> pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i]->name);
    CHECK(floats(be, pa[i]->value) == floats(be, pb[i]->value));
  }
  // The split: q, k and v are the fused rows in order, k/v of n_kv_heads * head_dim rows.
  const std::vector<std::uint8_t> bytes = read_all(file);
  const safetensors_header h = parse_safetensors(bytes.data(), bytes.size());
  const std::uint8_t* data = bytes.data() + 8 + h.header_bytes;
  const safetensors_entry* k = h.find("model.layers.1.self_attn.k_proj.weight");
  REQUIRE(k);
  CHECK(k->shape == std::vector<std::uint64_t>{16, 32});  // 2 kv heads of 8
  const std::vector<float> qkv = floats(be, a.layers()[1].qkv().weight().value);
  const std::vector<float> kv = safetensors_values(data, *k);
  CHECK(std::equal(kv.begin(), kv.end(), qkv.begin() + 32 * 32));
  const safetensors_entry* up = h.find("model.layers.0.mlp.up_proj.weight");
  REQUIRE(up);
  const std::vector<float> gu = floats(be, a.layers()[0].gate_up().weight().value), u = safetensors_values(data, *up);
  CHECK(std::equal(u.begin(), u.end(), gu.begin() + 48 * 32));
  CHECK(h.find("model.norm.weight")->shape == std::vector<std::uint64_t>{32});
  CHECK(h.find("lm_head.weight")->shape == std::vector<std::uint64_t>{256, 32});
  CHECK(h.tensors.size() == 2 + 2 * 9 + 1);
  CHECK(h.metadata.at("format") == "pt");
  CHECK(h.metadata.at("mxkit.n_kv_heads") == "2");
  CHECK((8 + h.header_bytes) % 8 == 0);  // the header is padded
}

TEST_CASE("safetensors: BF16 export rounds each weight to nearest even", "[nn][safetensors]") {
  temp_dir dir;
  const fs::path file = dir.path / "bf16.safetensors";
  host_backend be;
  model a(be, gqa_model(), recipes::bf16(), 3), b(be, gqa_model(), recipes::bf16(), 4);
  export_safetensors(file, a, safetensors_dtype::bf16);
  import_safetensors(file, b);
  const std::vector<parameter*> pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const std::vector<float> x = floats(be, pa[i]->value), y = floats(be, pb[i]->value);
    for (std::size_t j = 0; j < x.size(); ++j) {
      // RNE to 8 significant bits, written independently of the library: add half an ulp and the
      // lowest kept bit to the float bits, clear the 16 dropped bits.
      std::uint32_t u;
      std::memcpy(&u, &x[j], 4);
      u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
      float r;
      std::memcpy(&r, &u, 4);
      REQUIRE(y[j] == r);
    }
  }
  std::size_t weights = 0;
  for (parameter* p : pa) weights += p->value.size();
  const std::vector<std::uint8_t> bytes = read_all(file);
  CHECK(parse_safetensors(bytes.data(), bytes.size()).data_bytes == 2 * weights);
}

TEST_CASE("safetensors: a file from an independent writer (Python json + struct)", "[nn][safetensors]") {
  const safetensors_header h = parse_safetensors(python_fixture, sizeof python_fixture);
  REQUIRE(h.tensors.size() == 2);
  CHECK(h.tensors[0].name == "g");  // ordered by offset, not by the JSON's order
  CHECK(h.metadata.at("writer") == "python json+struct");
  CHECK(h.metadata.at("note") == "caf\xc3\xa9 \"quoted\"");
  const std::uint8_t* data = python_fixture + 8 + h.header_bytes;
  CHECK(safetensors_values(data, *h.find("g")) == std::vector<float>{1.0f, -2.0f, 0.5f, 3.75f});
  CHECK(safetensors_values(data, *h.find("w")) == std::vector<float>{-0.5f, -0.25f, 0.0f, 0.25f, 0.5f, 0.75f});
  CHECK(h.find("w")->shape == std::vector<std::uint64_t>{2, 3});
  // mxkit's writer gives the same values back.
  const std::vector<std::uint8_t> again =
      encode_safetensors({{"w", {2, 3}, safetensors_values(data, *h.find("w"))}}, safetensors_dtype::f32, h.metadata);
  const safetensors_header h2 = parse_safetensors(again.data(), again.size());
  CHECK(safetensors_values(again.data() + 8 + h2.header_bytes, h2.tensors[0]) == safetensors_values(data, *h.find("w")));
  CHECK(h2.metadata == h.metadata);
}

TEST_CASE("safetensors: malformed files are refused, naming the problem", "[nn][safetensors]") {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}})";
  CHECK(refusal(file_of(ok, 16)) == "accepted");
  CHECK(refusal(file_of(ok + "   ", 16)) == "accepted");  // trailing spaces pad the header
  CHECK_THAT(refusal(file_of(ok, 15)), Catch::Contains("truncated"));
  CHECK_THAT(refusal(file_of(ok, 17)), Catch::Contains("unexpected bytes after the last tensor"));
  std::vector<std::uint8_t> whole = file_of(ok, 16);
  CHECK_THAT(refusal({whole.begin(), whole.begin() + 5}), Catch::Contains("less than the 8-byte"));
  CHECK_THAT(refusal({whole.begin(), whole.begin() + 40}), Catch::Contains("truncated: the header size"));
  std::vector<std::uint8_t> huge = whole;
  huge[7] = 0x40;  // 2^62
  CHECK_THAT(refusal(huge), Catch::Contains("exceeds the limit"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 8)), Catch::Contains("expected ',' or '}'"));
  CHECK_THAT(refusal(file_of(R"([1])", 0)), Catch::Contains("does not start with '{'"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x)", 8)), Catch::Contains("after the header"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4)), Catch::Contains("dtype \"F16\""));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)), Catch::Contains("need 12 bytes"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
             Catch::Contains("overlapping"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})", 20)),
             Catch::Contains("a hole"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)), Catch::Contains("end before they begin"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16)),
             Catch::Contains("appears twice"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)), Catch::Contains("unsigned integer"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8)), Catch::Contains("not an integer"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})", 0)),
             Catch::Contains("overflows"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2]}})", 0)), Catch::Contains("lacks \"data_offsets\""));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8)), Catch::Contains("unknown field"));
  CHECK_THAT(refusal(file_of(R"({"__metadata__":{"k":1}})", 0)), Catch::Contains("expected a string"));
  CHECK_THAT(refusal(file_of("{\"\xff\":{}}", 0)), Catch::Contains("UTF-8"));
  CHECK_THAT(refusal(file_of(R"({"a\ud800":{}})", 0)), Catch::Contains("surrogate"));
  CHECK_THAT(refusal(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8])", 8)), Catch::Contains("header JSON"));
}

TEST_CASE("safetensors: import refuses files that do not fit the model, and changes nothing", "[nn][safetensors]") {
  temp_dir dir;
  host_backend be;
  model a(be, gqa_model(), recipes::bf16(), 1);
  const fs::path good = dir.path / "good.safetensors";
  export_safetensors(good, a);
  const std::vector<std::uint8_t> bytes = read_all(good);
  const safetensors_header h = parse_safetensors(bytes.data(), bytes.size());
  const std::uint8_t* data = bytes.data() + 8 + h.header_bytes;
  auto rewrite = [&](auto&& edit) {
    std::vector<safetensors_tensor> ts;
    for (const safetensors_entry& e : h.tensors) ts.push_back({e.name, e.shape, safetensors_values(data, e)});
    std::map<std::string, std::string> meta = h.metadata;
    edit(ts, meta);
    const fs::path p = dir.path / "edited.safetensors";
    write_safetensors(p, ts, safetensors_dtype::f32, meta);
    return p;
  };
  model b(be, gqa_model(), recipes::bf16(), 2);
  const std::vector<float> before = floats(be, b.layers()[0].qkv().weight().value);
  auto refused = [&](const fs::path& p) {
    try {
      import_safetensors(p, b);
    } catch (const safetensors_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refused(rewrite([](auto& ts, auto&) { ts.pop_back(); })), Catch::Contains("no tensor 'lm_head.weight'"));
  CHECK_THAT(refused(rewrite([](auto& ts, auto&) { ts.push_back({"model.layers.2.mlp.up_proj.weight", {1}, {0.f}}); })),
             Catch::Contains("not a weight of this model"));
  CHECK_THAT(refused(rewrite([](auto& ts, auto&) {
               for (auto& t : ts)
                 if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {32, 16};
             })),
             Catch::Contains("has shape [32, 16], the model needs [16, 32]"));
  CHECK_THAT(refused(rewrite([](auto&, auto& meta) { meta["mxkit.n_heads"] = "2"; })), Catch::Contains("metadata mxkit.n_heads is 2"));
  CHECK_THAT(refused(dir.path / "missing.safetensors"), Catch::Contains("cannot open"));
  CHECK_THAT(refused(dir.path), Catch::Contains("directory"));
#if defined(__unix__)
  CHECK_THAT(refused("/dev/null"), Catch::Contains("less than the 8-byte"));  // no size to check first
#endif
  std::vector<std::uint8_t> cut(bytes.begin(), bytes.end() - 3);
  write_all(dir.path / "cut.safetensors", cut);
  CHECK_THAT(refused(dir.path / "cut.safetensors"), Catch::Contains("truncated"));
  CHECK(floats(be, b.layers()[0].qkv().weight().value) == before);
  CHECK(refused(good) == "accepted");
}
