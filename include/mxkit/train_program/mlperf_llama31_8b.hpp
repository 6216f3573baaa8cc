// SPDX-License-Identifier: Apache-2.0
#pragma once
// --preset mlperf-llama31-8b: the hyper-parameters of MLPerf Training's small LLM pretraining
// benchmark, Llama 3.1 8B on C4 (llama31_8b, rounds v5.1 and v6.0), each with the file it comes
// from. The values are the reference implementation's run on one node of 8 GPUs:
//   [ref]     github.com/mlcommons/training, small_llm_pretraining/nemo at 46bbcb7c ("add small
//             llm pretraining", the commit the rules link): config_H200_1x8x1_8b.sh (GBS=32, MBS=2,
//             MAX_LR="5e-4", WARMUP_STEPS=512 "# 16384 // GBS", EVAL_EVERY=12288), pretrain_llama31.py
//             (seq_length = 8192; min_lr=max_lr * 0.1; --max_steps 1200000; --eval_tokens 1024,
//             "Evaluate using at least N evaluation sequences"; --target_log_ppl 3.3), README.md
//             ("Model details": 32 layers, 32 heads, 8 KV heads, 4096, FFN 14336, context 8192;
//             "Quality target: Validation log perplexity = 3.3"; evaluation every 12288 sequences,
//             on 1024 sequences)
//   [nemo]    github.com/NVIDIA/NeMo nemo/collections/llm/recipes/optim/adam.py,
//             distributed_fused_adam_with_cosine_annealing, which [ref] calls: adam_beta1=0.9,
//             adam_beta2=0.95, adam_eps=1e-5, weight_decay=0.1, clip_grad=1.0
//   [rules]   github.com/mlcommons/training_policies training_rules.adoc: the llama31_8b rows of
//             the hyper-parameter table (opt_adamw_beta_1 0.9, opt_adamw_beta_2 0.95,
//             opt_adamw_epsilon 1e-5, opt_gradient_clip_norm 1.0, opt_adamw_weight_decay 0.1,
//             sequence_length 8192, max_steps 1200000, opt_end_learning_rate = base x 0.1;
//             global_batch_size, opt_base_learning_rate and warmup "unconstrained"), the closed
//             division's target "3.3 log perplexity", and the evaluation frequency "Every 12288
//             sequences; CEIL(12288 / global_batch_size) * global_batch_size if 12288 is not
//             divisible by GBS"
//   [hf]      huggingface.co/meta-llama/Llama-3.1-8B config.json: vocab_size 128256 (the
//             tokenizer [ref] uses; its README rounds it to "128,000"), rope_theta 500000
//   [amd]     github.com/mlcommons/training_results_v5.1 AMD/benchmarks/llama31_8b/implementations/
//             MI355X_EPYC_9575F_pytorch_llama3_8b/config_MI355X_1x8x1_8b.sh: a submission on 8 GPUs
//             at the same GBS=32, MBS=2 with its own tuning, MAX_LR="8e-4", WARMUP_STEPS=128 (the
//             rules leave both free): shown for comparison, not used.
// The table:
//   setting               value        source
//   model                 llama3.1-8b  [ref] README "Model details" (32 layers, d 4096, 32 heads,
//                                      8 KV heads, SwiGLU 14336), [hf] vocab 128256
//   --seq                 8192         [ref] pretrain_llama31.py seq_length; [rules] sequence_length
//   --global-batch        32           [ref] config_H200_1x8x1_8b.sh GBS (sequences per step)
//   --batch               2            [ref] config_H200_1x8x1_8b.sh MBS (each rank's micro-batch)
//   --lr                  5e-4         [ref] config_H200_1x8x1_8b.sh MAX_LR; end lr = lr / 10 as
//                                      mxkit's cosine always does ([ref] min_lr, [rules] end lr)
//   --warmup              512          [ref] config_H200_1x8x1_8b.sh WARMUP_STEPS (linear)
//   --steps               1200000      [ref] --max_steps, [rules] max_steps: the cosine's span; the
//                                      run ends at the target long before
//   --adam-betas          0.9,0.95     [nemo] adam_beta1, adam_beta2; [rules]
//   --adam-eps            1e-5         [nemo] adam_eps; [rules]
//   --weight-decay        0.1          [nemo] weight_decay; [rules]
//   --clip-norm           1.0          [nemo] clip_grad; [rules]
//   --eval-every          384          [ref] EVAL_EVERY 12288 sequences / GBS 32 steps; [rules]
//   --eval-batches        512          [ref] --eval_tokens 1024 sequences / --batch 2
//   --target-loss         3.3          [ref] --target_log_ppl; [rules] (the mean cross-entropy in
//                                      nats of the evaluation is the log perplexity)
// Not set: the recipe ([ref] trains bf16 with FP8 "hybrid" delayed scaling, amax history 4;
// --recipe picks), the seed ([ref] draws one per run), the data (C4 en 3.0.1 tokenized with the
// Llama 3.1 tokenizer: --data, --eval-data), RoPE's base 500000 and Llama 3.1's RoPE scaling (the
// model shape of --model llama3.1-8b, where it is an option; mxkit's default base is 10000).
//
// Fewer GPUs (the scaling rule, program.cpp): the global batch stays 32 sequences, made of
// ranks x micro-batches x --batch, the micro-batches (gradient accumulation) derived from the
// ranks: 8 ranks x 2 x 2 as [ref], 1 rank x 16 x 2, 2 x 8 x 2, 4 x 4 x 2, 16 x 1 x 2; beyond 16 ranks
// --batch 1. With the global batch kept, the step's gradient is the reference's (the mean over 32
// sequences), so the learning rate, warmup, evaluation interval in steps and the schedule stay as
// they are: no learning-rate rule is needed. (The rules state one for Llama 3.1 405B only, linear
// in the global batch; for 8B they leave the learning rate free.) A run that changes the global
// batch (--global-batch, or --micro-batches after the preset) keeps these values and says so.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {

struct mlperf_llama31_8b {
  static constexpr const char* name = "mlperf-llama31-8b";
  static constexpr const char* model = "llama3.1-8b";
  // The model ([ref] README "Model details", [hf]).
  static constexpr std::size_t layers = 32, d_model = 4096, heads = 32, kv_heads = 8, ffn = 14336, vocab = 128256;
  static constexpr std::size_t seq = 8192;
  static constexpr std::size_t global_batch = 32, micro_batch = 2, reference_gpus = 8;
  static constexpr double lr = 5e-4;
  static constexpr std::size_t warmup = 512, steps = 1'200'000;
  static constexpr double beta1 = 0.9, beta2 = 0.95, eps = 1e-5, weight_decay = 0.1, clip_norm = 1.0;
  static constexpr std::size_t eval_every_sequences = 12288, eval_sequences = 1024;
  static constexpr std::size_t eval_every = eval_every_sequences / global_batch;  // 384 steps
  static constexpr std::size_t eval_batches = eval_sequences / micro_batch;       // 512 batches of 2
  static constexpr double target_loss = 3.3;
  static_assert(eval_every_sequences % global_batch == 0 && eval_sequences % micro_batch == 0);

  // Sets the preset's values on the options (--preset: flags after it override them).
  template <class Options>
  static void apply(Options& o) {
    o.preset = name;
    o.model = model;
    o.layers = layers;
    o.d_model = d_model;
    o.heads = heads;
    o.kv_heads = kv_heads;
    o.ffn = ffn;
    o.vocab = vocab;
    o.seq = seq;
    o.global_batch = global_batch;
    o.batch = micro_batch;
    o.lr = lr;
    o.warmup = warmup;
    o.steps = steps;
    o.adamw.beta1 = beta1;
    o.adamw.beta2 = beta2;
    o.adamw.eps = eps;
    o.adamw.weight_decay = weight_decay;
    o.adamw.clip_norm = clip_norm;
    o.eval_every = eval_every;
    o.eval_batches = eval_batches;
    o.target_loss = target_loss;
  }

  // --preset's --help text.
  template <class Options>
  static std::string help() {
    std::string text = std::string(
                           "set the flags of a published configuration; flags after it override them (the run prints the\n"
                           "    values in effect). ") +
                       name + ": MLPerf Training's Llama 3.1 8B pretraining reference\n"
                              "    (mlcommons/training small_llm_pretraining/nemo; mlperf_llama31_8b.hpp cites each file):";
    for (const std::string& line : table<Options>()) text += "\n      " + line;
    return text + "\n    With fewer ranks than the reference's 8 GPUs the global batch of 32 is kept through\n"
                  "    micro-batches (gradient accumulation), so the learning rate and schedule stay as they are";
  }

  // The table above, one line per setting: the preset's value and its source, and the value in
  // effect where a later flag changed it (--help prints it without options; the run with them).
  template <class Options>
  static std::vector<std::string> table(const Options* o = nullptr) {
    auto num = [](double x) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", x);
      return std::string(b);
    };
    auto z = [](std::size_t x) { return std::to_string(x); };
    struct row {
      const char* flag;
      std::string value, now;
      const char* source;
    };
    const bool h = o != nullptr;
    const std::string shape = z(layers) + " layers, d " + z(d_model) + ", " + z(heads) + " heads, " + z(kv_heads) + " KV, ffn " + z(ffn) +
                              ", vocab " + z(vocab);
    const std::vector<row> rows{
        {"model", std::string(model) + " (" + shape + ")",
         h ? o->model + " (" + z(o->layers) + " layers, d " + z(o->d_model) + ", " + z(o->heads) + " heads, " + z(o->kv_heads) +
                 " KV, ffn " + z(o->ffn) + ", vocab " + (o->vocab ? z(*o->vocab) : std::string("the data's")) + ")"
           : "",
         "MLPerf reference README 'Model details'; vocab: meta-llama/Llama-3.1-8B config.json"},
        {"--seq", z(seq), h ? z(o->seq) : "", "reference pretrain_llama31.py seq_length; rules sequence_length"},
        {"--global-batch", z(global_batch), h ? (o->global_batch ? z(*o->global_batch) : "not set (--micro-batches)") : "",
         "reference config_H200_1x8x1_8b.sh GBS"},
        {"--batch", z(micro_batch), h ? z(o->batch) : "", "reference config_H200_1x8x1_8b.sh MBS"},
        {"--lr", num(lr), h ? num(o->lr) : "", "reference config_H200_1x8x1_8b.sh MAX_LR (end lr / 10: pretrain_llama31.py min_lr)"},
        {"--warmup", z(warmup), h ? (o->warmup ? z(*o->warmup) : "default") : "", "reference config_H200_1x8x1_8b.sh WARMUP_STEPS"},
        {"--steps", z(steps), h ? z(o->steps) : "", "reference pretrain_llama31.py --max_steps; rules max_steps"},
        {"--adam-betas", num(beta1) + "," + num(beta2), h ? num(o->adamw.beta1) + "," + num(o->adamw.beta2) : "",
         "NeMo recipes/optim/adam.py adam_beta1, adam_beta2; rules"},
        {"--adam-eps", num(eps), h ? num(o->adamw.eps) : "", "NeMo recipes/optim/adam.py adam_eps; rules"},
        {"--weight-decay", num(weight_decay), h ? num(o->adamw.weight_decay) : "", "NeMo recipes/optim/adam.py weight_decay; rules"},
        {"--clip-norm", num(clip_norm), h ? num(o->adamw.clip_norm) : "", "NeMo recipes/optim/adam.py clip_grad; rules"},
        {"--eval-every", z(eval_every), h ? z(o->eval_every) : "", "reference EVAL_EVERY 12288 sequences / GBS 32; rules"},
        {"--eval-batches", z(eval_batches), h ? z(o->eval_batches) : "", "reference --eval_tokens 1024 sequences / MBS 2"},
        {"--target-loss", num(target_loss), h ? (o->target_loss ? num(*o->target_loss) : "none") : "",
         "reference --target_log_ppl; rules: 3.3 log perplexity"},
    };
    std::vector<std::string> out;
    for (const row& r : rows) {
      char b[512];
      std::snprintf(b, sizeof b, "%-15s %-12s %s", r.flag, r.value.c_str(), r.source);
      out.push_back(b);
      if (h && r.now != r.value) out.back() += "; now " + r.now + " (a later flag)";
    }
    return out;
  }
};

}  // namespace train_program
MXKIT_END_NAMESPACE
