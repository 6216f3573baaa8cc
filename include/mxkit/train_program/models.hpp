// SPDX-License-Identifier: Apache-2.0
#pragma once
// The models the training program knows by name (--model; options.hpp applies one to its
// options): each one's shape, vocabulary, RoPE, norm epsilon and trained sequence length, from the
// model's own published configuration.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include <mxkit/config.hpp>
#include <mxkit/nn/rope_frequencies.hpp>
#include <mxkit/train_program/usage_error.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {

// ---- models--------------------------------------------------------------------------------

// A model by name (--model): its shape, vocabulary, RoPE and norm, and the sequence length it was
// trained at (the --seq default). Values from the Hugging Face config.json of each model:
//   Llama 3.1 8B   huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json: num_hidden_layers 32,
//                  hidden_size 4096, num_attention_heads 32, num_key_value_heads 8,
//                  intermediate_size 14336, vocab_size 128256, rope_theta 500000.0, rms_norm_eps
//                  1e-05, rope_scaling {rope_type llama3, factor 8.0, low_freq_factor 1.0,
//                  high_freq_factor 4.0, original_max_position_embeddings 8192}; 8192 is Llama 3's
//                  pretraining context (max_position_embeddings 131072 is the extended one)
//   Llama 2 70B    huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json: num_hidden_layers 80,
//                  hidden_size 8192, num_attention_heads 64, num_key_value_heads 8,
//                  intermediate_size 28672, vocab_size 32000, max_position_embeddings 4096,
//                  rms_norm_eps 1e-05, rope_scaling null and no rope_theta (transformers'
//                  LlamaConfig default: 10000.0, Llama 2's)
// Both untie the embedding and the head (tie_word_embeddings false), as nn::model does.
struct model_preset {
  const char* name;
  const char* what;
  std::size_t layers, d_model, heads, kv_heads, ffn;
  std::size_t vocab;  // 0: the data's (--vocab's default)
  std::size_t seq;
  double rope_theta, norm_eps;
  nn::rope_scaling rope_scale;
};
inline constexpr std::array<model_preset, 3> model_presets{{
    {"small", "the default: 16 layers, d_model 768, 12 heads (4 KV), SwiGLU 2048, --seq 1024, the data's vocabulary", 16, 768, 12, 4,
     2048, 0, 1024, 10000.0, 1e-5, {}},
    {"llama3.1-8b", "Llama 3.1 8B: 32 layers, 4096, 32 heads (8 KV), 14336, vocab 128256, RoPE 500000 with Llama 3.1's scaling, --seq 8192",
     32, 4096, 32, 8, 14336, 128256, 8192, 500000.0, 1e-5, nn::llama3_1_rope_scaling},
    {"llama2-70b", "Llama 2 70B: 80 layers, 8192, 64 heads (8 KV), 28672, vocab 32000, RoPE 10000, --seq 4096", 80, 8192, 64, 8, 28672,
     32000, 4096, 10000.0, 1e-5, {}},
}};

inline const model_preset& find_model(std::string_view name) {
  for (const model_preset& m : model_presets)
    if (name == m.name) return m;
  std::string known;
  for (const model_preset& m : model_presets) known += std::string(known.empty() ? "" : ", ") + m.name;
  throw usage_error("--model: unknown model '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace train_program
MXKIT_END_NAMESPACE
