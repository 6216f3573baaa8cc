// SPDX-License-Identifier: Apache-2.0
#pragma once
// A model's weights in safetensors files (io/safetensors.hpp) under the Hugging Face Llama names;
// a checkpoint of several files with an index (model.safetensors.index.json) is io/hf_sharded.hpp.
// Hugging Face Llama names (transformers' LlamaForCausalLM): mxkit's fused projections are split
// on export and fused on import; both store linear weights [out, in] (torch.nn.Linear's layout,
// mxkit's W[N, K]), so rows are copied as they are:
//   embedding.weight             model.embed_tokens.weight                       [V, C]
//   layers.i.norm1.weight        model.layers.i.input_layernorm.weight           [C]  (mxkit (1, C))
//   layers.i.qkv.weight          model.layers.i.self_attn.{q,k,v}_proj.weight    rows [q | k | v]
//   layers.i.out.weight          model.layers.i.self_attn.o_proj.weight
//   layers.i.norm2.weight        model.layers.i.post_attention_layernorm.weight  [C]
//   layers.i.gate_up.weight      model.layers.i.mlp.{gate,up}_proj.weight        rows [gate | up]
//   layers.i.down.weight         model.layers.i.mlp.down_proj.weight
//   final_norm.weight            model.norm.weight                               [C]
//   head.weight                  lm_head.weight                                  [V, C]
// RoPE: mxkit rotates the halves (v[i], v[i + D/2]) of each head (nn/rope.hpp), which is
// transformers' rotate_half convention, so q and k rows need no permutation (the permutation in
// transformers' convert_llama_weights_to_hf.py maps Meta's interleaved pairs to halves).
// Export writes __metadata__ {"format": "pt"} (what transformers' loader expects) and the model's
// shape as "mxkit.*" entries; import checks those entries against the model where present.
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <mxkit/config.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/io/safetensors.hpp>
#include <mxkit/nn/model.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// One Hugging Face tensor: rows [row0, row0 + rows) of the mxkit parameter named `param` (`p`
// where a model is at hand) of `cols` columns; `vector`: stored 1-D. The shapes come from the
// model's configuration, so that the layout is known where a parameter's memory is not (a fully
// sharded rank: io/hf_sharded.hpp) or where the model is not built yet (a base read layer by
// layer: io/hf_streamed_import.hpp).
struct hf_llama_tensor {
  std::string name;
  std::string param;
  parameter* p;
  std::size_t row0, rows;
  bool vector;
  std::size_t cols;
};

// The layout of a configuration, every `p` null, in the model's order (embedding, layers, final
// norm, head).
inline std::vector<hf_llama_tensor> hf_llama_layout_of(const model_config& mc) {
  const layer_config& c = mc.layer;
  const std::size_t C = c.d_model, q = c.n_heads * c.head_dim(), kv = c.n_kv_heads * c.head_dim(), F = c.d_ff, V = mc.vocab;
  std::vector<hf_llama_tensor> out;
  out.push_back({"model.embed_tokens.weight", "embedding.weight", nullptr, 0, V, false, C});
  for (std::size_t i = 0; i < mc.n_layers; ++i) {
    const std::string pre = "model.layers." + std::to_string(i) + ".", own = "layers." + std::to_string(i) + ".";
    out.push_back({pre + "input_layernorm.weight", own + "norm1.weight", nullptr, 0, 1, true, C});
    out.push_back({pre + "self_attn.q_proj.weight", own + "qkv.weight", nullptr, 0, q, false, C});
    out.push_back({pre + "self_attn.k_proj.weight", own + "qkv.weight", nullptr, q, kv, false, C});
    out.push_back({pre + "self_attn.v_proj.weight", own + "qkv.weight", nullptr, q + kv, kv, false, C});
    out.push_back({pre + "self_attn.o_proj.weight", own + "out.weight", nullptr, 0, C, false, q});
    out.push_back({pre + "post_attention_layernorm.weight", own + "norm2.weight", nullptr, 0, 1, true, C});
    out.push_back({pre + "mlp.gate_proj.weight", own + "gate_up.weight", nullptr, 0, F, false, C});
    out.push_back({pre + "mlp.up_proj.weight", own + "gate_up.weight", nullptr, F, F, false, C});
    out.push_back({pre + "mlp.down_proj.weight", own + "down.weight", nullptr, 0, C, false, F});
  }
  out.push_back({"model.norm.weight", "final_norm.weight", nullptr, 0, 1, true, C});
  out.push_back({"lm_head.weight", "head.weight", nullptr, 0, V, false, C});
  return out;
}

// The layout by shape only (a parameter may hold no memory here).
inline std::vector<hf_llama_tensor> hf_llama_layout_shapes(model& m) {
  std::map<std::string, parameter*> by_name;
  for (parameter* p : m.parameters()) by_name[p->name] = p;
  std::vector<hf_llama_tensor> out = hf_llama_layout_of(m.config());
  for (hf_llama_tensor& t : out) {
    const auto it = by_name.find(t.param);
    detail::require(it != by_name.end(), "safetensors: the model has no parameter '", t.param, "'");
    t.p = it->second;
  }
  return out;
}

// The layout of a model whose parameters hold their masters (export, the single-file import).
inline std::vector<hf_llama_tensor> hf_llama_layout(model& m) {
  std::vector<hf_llama_tensor> out = hf_llama_layout_shapes(m);
  for (const hf_llama_tensor& t : out) {
    detail::require(t.p->value.defined(), "safetensors: parameter '", t.p->name, "' has no master copy (a quantized-only weight)");
    detail::require(t.p->value.size() >= (t.row0 + t.rows) * t.cols && t.p->cols() == t.cols, "safetensors: parameter '", t.p->name,
                    "' is ", t.p->rows(), "x", t.p->cols(), ", not the configuration's shape");
  }
  return out;
}

// The model's shape as __metadata__ entries ("mxkit.<field>": decimal text).
inline std::map<std::string, std::string> hf_llama_metadata(const model_config& c) {
  auto text = [](double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%.17g", x);
    return std::string(b);
  };
  std::map<std::string, std::string> out{{"format", "pt"},
                                         {"mxkit.vocab", std::to_string(c.vocab)},
                                         {"mxkit.n_layers", std::to_string(c.n_layers)},
                                         {"mxkit.d_model", std::to_string(c.layer.d_model)},
                                         {"mxkit.n_heads", std::to_string(c.layer.n_heads)},
                                         {"mxkit.n_kv_heads", std::to_string(c.layer.n_kv_heads)},
                                         {"mxkit.d_ff", std::to_string(c.layer.d_ff)},
                                         {"mxkit.rope_theta", text(c.layer.rope_theta)},
                                         {"mxkit.norm_eps", text(c.layer.norm_eps)}};
  // Only where it is on, so that the files of every model without it stay as they were.
  if (const rope_scaling& r = c.layer.rope_scale; r.enabled())
    out["mxkit.rope_scaling"] = "llama3 " + text(r.factor) + " " + text(r.low_freq_factor) + " " + text(r.high_freq_factor) + " " +
                                text(r.original_max_position);
  return out;
}

inline std::map<std::string, std::string> hf_llama_metadata(const model& m) { return hf_llama_metadata(m.config()); }

// The model's weights (master copies) under Hugging Face Llama names, F32 (bit-exact) or BF16
// (rounded to nearest even).
inline void export_safetensors(const std::filesystem::path& path, model& m, safetensors_dtype dtype = safetensors_dtype::f32) {
  std::vector<safetensors_tensor> tensors;
  std::map<parameter*, std::vector<double>> values;
  for (const hf_llama_tensor& t : hf_llama_layout(m)) {
    auto it = values.find(t.p);
    if (it == values.end()) it = values.emplace(t.p, m.be().read(t.p->value)).first;
    const std::size_t cols = t.p->cols();
    safetensors_tensor s{t.name, {}, {}};
    s.shape = t.vector ? std::vector<std::uint64_t>{cols} : std::vector<std::uint64_t>{t.rows, cols};
    s.values.assign(it->second.begin() + static_cast<std::ptrdiff_t>(t.row0 * cols),
                    it->second.begin() + static_cast<std::ptrdiff_t>((t.row0 + t.rows) * cols));
    tensors.push_back(std::move(s));
  }
  write_safetensors(path, tensors, dtype, hf_llama_metadata(m));
}

// Loads the model's weights from a Hugging Face Llama safetensors file (F32 or BF16). Every
// tensor of the model must be present with its shape and no other tensor may be; "mxkit.*"
// metadata, where present, must match the model. Nothing is written unless all of it checks.
// Optimizer state is not part of the file (start a fresh AdamW). Throws safetensors_error.
inline void import_safetensors(const std::filesystem::path& path, model& m) {
  const safetensors_file f = read_safetensors(path);
  const std::string prefix = "safetensors '" + path.string() + "': ";
  auto bad = [&](const std::string& why) { throw safetensors_error(prefix + why); };
  for (const auto& [key, value] : hf_llama_metadata(m))
    if (key.rfind("mxkit.", 0) == 0)
      if (auto it = f.header.metadata.find(key); it != f.header.metadata.end() && it->second != value)
        bad("metadata " + key + " is " + it->second + ", the model has " + value);
  const std::vector<hf_llama_tensor> layout = hf_llama_layout(m);
  for (const safetensors_entry& e : f.header.tensors)
    if (std::none_of(layout.begin(), layout.end(), [&](const hf_llama_tensor& t) { return t.name == e.name; }))
      bad("tensor '" + e.name + "' is not a weight of this model (a Llama of " + std::to_string(m.config().n_layers) + " layers)");
  std::map<parameter*, std::vector<double>> values;
  for (const hf_llama_tensor& t : layout) {
    const safetensors_entry* e = f.header.find(t.name);
    if (!e) bad("no tensor '" + t.name + "'");
    const std::size_t cols = t.p->cols();
    const std::vector<std::uint64_t> want = t.vector ? std::vector<std::uint64_t>{cols} : std::vector<std::uint64_t>{t.rows, cols};
    if (e->shape != want) {
      auto text = [](const std::vector<std::uint64_t>& s) {
        std::string r = "[";
        for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
      };
      bad("tensor '" + t.name + "' has shape " + text(e->shape) + ", the model needs " + text(want));
    }
    std::vector<double>& v = values[t.p];
    v.resize(t.p->value.size());
    const std::vector<float> x = f.values(*e);
    std::copy(x.begin(), x.end(), v.begin() + static_cast<std::ptrdiff_t>(t.row0 * cols));
  }
  for (auto& [p, v] : values) {
    m.be().write(p->value, v);
    ++p->version;  // every quantized copy is stale now
  }
}

}  // namespace nn
MXKIT_END_NAMESPACE
