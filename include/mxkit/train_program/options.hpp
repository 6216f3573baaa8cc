// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training program's command line (mxkit/train_program/program.hpp): its options, the one table of
// flags that both the parser and --help read, and the checks that need no file, data or device.
// Parsing trains nothing and touches no file, so it can be called (and fuzzed:
// tests/fuzz/fuzz_train_options.cpp) on its own. A new flag is one entry of detail::flags() (and a
// field of options, and a check in check_options where it constrains others).
#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <mxkit/config.hpp>
#include <mxkit/parallel/data_parallel.hpp>
#include <mxkit/nn/lora.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/nn/rope_frequencies.hpp>
#include <mxkit/nn/transformer_layer.hpp>
#include <mxkit/io/safetensors.hpp>
#include <mxkit/train/adamw.hpp>
#include <mxkit/train_program/mlperf_llama31_8b.hpp>
#include <mxkit/train_program/flag_values.hpp>
#include <mxkit/train_program/models.hpp>
#include <mxkit/train_program/usage_error.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {

namespace fs = std::filesystem;
namespace nn = ::mxkit::nn;

struct options {
  fs::path data;       // empty: the repository's corpora (repository_data.hpp)
  fs::path eval_data;  // empty: hold out a tenth of --data (train_data.hpp)
  std::optional<std::size_t> vocab;  // default: the data's largest token + 1 (text: 256)
  std::string recipe = "bf16";
  nn::dtype activations = nn::dtype::bf16;
  // --model: the preset the model's fields start from (model_presets; empty: "small", these
  // defaults). Its RoPE and norm fields have no flags: the preset sets them.
  std::string model;
  std::size_t layers = 16, d_model = 768, heads = 12, kv_heads = 4, ffn = 2048;
  double rope_theta = 10000.0, norm_eps = 1e-5;
  nn::rope_scaling rope_scale = {};  // off
  std::size_t seq = 1024, batch = 16;
  std::size_t steps = 4000;
  std::optional<std::size_t> stop_after;  // end the run after this step (the schedule spans `steps`)
  std::optional<std::size_t> warmup;  // default: warmup_steps()
  double lr = 6e-4;  // peak; the cosine decays to lr / 10 at the last step
  std::size_t eval_every = 250, eval_batches = 8, log_every = 10;
  fs::path checkpoint, resume, csv;
  std::size_t checkpoint_every = 1000;
  std::uint64_t seed = 1234;           // model init; the data order uses seed + 1
  std::optional<double> peak_tflops;   // overrides device_info::peak_tflops
  bool overwrite = false;          // replace an existing output that is not this program's
  bool resume_any_config = false;  // resume a checkpoint whose recorded run settings differ
  // Interchange (tools/twin): Hugging Face Llama safetensors in and out, the batch order out.
  fs::path init_from, export_path, dump_batches;
  nn::safetensors_dtype export_dtype = nn::safetensors_dtype::f32;
  int ranks = 1;                       // 05_train: rank threads (a GPU program: one process per GPU)
  std::size_t micro_batches = 1;       // per rank and step (gradient accumulation)
  nn::sharding shard = nn::sharding::none;
  bool gather_quantized = true;        // full sharding: gather the quantized weight copies
  bool reshard_after_forward = true;   // full sharding: drop each layer's gathered copies after its forward
  bool overlap_reductions = true;      // full sharding: a layer waits for its own gather only
  nn::dtype reduce_dtype = nn::dtype::f32;  // the gradient reduction's element type (parallel_config::reduce_dtype)
  int comm_sms = 0;                    // GPU programs: NCCL's CTAs and the SMs the GEMMs leave it (0: NCCL's choice)
  bool recompute = false;              // activation recomputation per layer
  bool weight_copies_per_gemm = false; // --weight-copies per-gemm: nn::linear_memory::weight_copies_per_gemm
  bool vendor_gemm = false;            // --gemm vendor: GPU programs, gpu::device_backend::set_vendor_gemm
  bool cuda_graph = true;              // --cuda-graph on|off: nn::train_config::step_graph
  // Healing a pretraining run: from step switch_at (0-based) on, the recipe switch_to.
  std::string switch_to;
  std::size_t switch_at = 0;
  // Evaluation to a target (time_to_train.hpp): the run ends at the first evaluation whose loss
  // is at most this, and reports its time to train as MLPerf Training counts it.
  std::optional<double> target_loss;
  // Sequences per optimizer step over every rank: each rank's micro-batches are derived from it
  // and the ranks when the run starts (resolve_global_batch); the later of --global-batch and
  // --micro-batches decides.
  std::optional<std::size_t> global_batch;
  nn::adamw_config adamw;  // --adam-betas, --adam-eps, --weight-decay, --clip-norm
  std::string preset;      // the last --preset (mlperf_llama31_8b.hpp), for the run's printout
  std::uint64_t export_max_shard = 0;  // --export-max-shard: 0, one file; else a folder of shards
  // LoRA fine-tuning of the --init-from base (train_program/lora.hpp): every base parameter
  // frozen, adapters of rank lora_rank trained; 0: off. Alpha and targets default to
  // nn::lora_config's and nn::lora_targets' (the Llama 2 70B LoRA recipe: alpha 32, QKV and output).
  std::size_t lora_rank = 0;
  std::optional<double> lora_alpha;
  std::optional<nn::lora_targets> lora_targets;

  nn::lora_config lora() const noexcept { return {lora_rank, lora_alpha.value_or(nn::lora_config{}.alpha)}; }

  // 100 steps, or a tenth of a shorter run.
  std::size_t warmup_steps() const noexcept { return warmup ? *warmup : std::min<std::size_t>(100, steps / 10); }
};

// The exit status of a run that trained every --steps without reaching --target-loss (0: reached,
// or no target; 1: an error; 2: a usage error).
inline constexpr int exit_target_not_reached = 3;

// --ranks: the rank threads of 05_train are an int (ref::run_ranks, communicator::size); far
// fewer than int's limit are useful on one host, and each holds a backend and a model.
inline constexpr int max_ranks = 1024;

// --comm-sms: ncclConfig_t's minCTAs and maxCTAs take 1 to 32 (NCCL 2.17, "API: Types");
// 06_train_gpu checks that this is gpu::nccl_communicator::max_ctas.
inline constexpr int max_comm_sms = 32;

// ---- recipes -------------------------------------------------------------------------------------

struct recipe_choice {
  const char* name;
  nn::recipe (*make)(std::size_t n_layers);  // n_layers: the model's (a recipe with bf16 layers by share)
  const char* what;
};
inline constexpr std::array<recipe_choice, 10> recipe_choices{{
    {"bf16", +[](std::size_t) { return nn::recipes::bf16(); }, "bf16 operands, fp32 accumulation (the baseline)"},
    {"fp8", +[](std::size_t) { return nn::recipes::fp8_delayed(); }, "FP8 delayed scaling, HYBRID (E4M3 forward, E5M2 gradients)"},
    {"mxfp8", +[](std::size_t) { return nn::recipes::mxfp8(); }, "MXFP8 E4M3, round-up scale rule"},
    {"mxfp4", +[](std::size_t) { return nn::recipes::mxfp4_amd(); }, "MXFP4, Hadamard on every GEMM (AMD's MLPerf recipe)"},
    {"mxfp4-no-hadamard", +[](std::size_t) { return nn::recipes::mxfp4_no_hadamard(); }, "MXFP4 without the rotation"},
    {"mxfp4-wgrad", +[](std::size_t) { return nn::recipes::mxfp4_primus_turbo(); }, "MXFP4, Hadamard on the wgrad GEMM only (Primus-Turbo)"},
    {"mxfp4-nvidia", +[](std::size_t) { return nn::recipes::mxfp4_nvidia_style(); },
     "MXFP4, random-sign Hadamard on wgrad, stochastic rounding of gradients (NVFP4 placement)"},
    {"mxfp4-wgrad-bf16", +[](std::size_t) {
       nn::recipes::mxfp4_config c;
       c.wgrad_mx = false;
       return nn::recipes::mxfp4(c, "mxfp4 (hadamard fprop/dgrad, wgrad bf16)");
     },
     "MXFP4 fprop and dgrad with Hadamard, the wgrad GEMM in bf16"},
    {"mxfp4-bf16-edges", +[](std::size_t) {
       nn::recipe r = nn::recipes::mxfp4(nn::recipes::mxfp4_config{}, "mxfp4 (hadamard all, first/last layer bf16)");
       r.bf16_first_layers = r.bf16_last_layers = 1;
       return r;
     },
     "MXFP4 with Hadamard on every GEMM, the first and the last layer in bf16"},
    {"nvfp4", +[](std::size_t n_layers) { return nn::recipes::nvfp4(n_layers); },
     "NVFP4 (arXiv 2509.25149): 2-D weight blocks, random Hadamard on wgrad, SR of gradients, 2/62 + 8/62 of layers bf16"},
}};

inline nn::recipe make_recipe(const options& o) {
  for (const recipe_choice& c : recipe_choices)
    if (o.recipe == c.name) {
      nn::recipe r = c.make(o.layers);
      r.activations = o.activations;
      return r;
    }
  throw usage_error("--recipe: unknown recipe '" + o.recipe + "' (see --help)");
}

// ---- models (train_program/models.hpp) ------------------------------------------------------

// The preset's fields into o (not o.model: --model's own setter records the name).
inline void apply_model(options& o, const model_preset& m) {
  o.layers = m.layers;
  o.d_model = m.d_model;
  o.heads = m.heads;
  o.kv_heads = m.kv_heads;
  o.ffn = m.ffn;
  o.vocab = m.vocab ? std::optional<std::size_t>(m.vocab) : std::nullopt;
  o.seq = m.seq;
  o.rope_theta = m.rope_theta;
  o.norm_eps = m.norm_eps;
  o.rope_scale = m.rope_scale;
}

// ---- LoRA targets --------------------------------------------------------------------------------

// --lora-targets' words, in the layer's order (nn::transformer_layer): the fused QKV projection,
// the attention output projection, the fused SwiGLU gate/up projection, the down projection.
inline constexpr std::array<std::pair<const char*, bool nn::lora_targets::*>, 4> lora_target_words{{
    {"qkv", &nn::lora_targets::qkv}, {"out", &nn::lora_targets::out}, {"gate_up", &nn::lora_targets::gate_up}, {"down", &nn::lora_targets::down}}};

// "qkv,out": the targets as --lora-targets spells them.
inline std::string lora_targets_text(const nn::lora_targets& t) {
  std::string out;
  for (const auto& [word, field] : lora_target_words)
    if (t.*field) out += (out.empty() ? "" : ",") + std::string(word);
  return out;
}

// A comma list of lora_target_words, each at most once.
inline nn::lora_targets parse_lora_targets(std::string_view v) {
  nn::lora_targets t{false, false, false, false};
  const std::string whole(v);
  for (std::size_t at = 0;;) {
    const std::size_t comma = std::min(v.find(',', at), v.size());
    const std::string_view word = v.substr(at, comma - at);
    const auto known = std::find_if(lora_target_words.begin(), lora_target_words.end(), [&](const auto& w) { return word == w.first; });
    if (known == lora_target_words.end())
      throw usage_error("--lora-targets: unknown target '" + std::string(word) + "' in '" + whole + "' (expected a comma list of qkv, out, gate_up, down)");
    if (t.*(known->second)) throw usage_error("--lora-targets: '" + std::string(word) + "' given twice in '" + whole + "'");
    t.*(known->second) = true;
    if (comma == v.size()) return t;
    at = comma + 1;
  }
}

// ---- command line --------------------------------------------------------------------------------

namespace detail {

struct flag {
  const char* name;
  const char* value;  // the value's placeholder in --help; nullptr: a switch, which takes no value
  const char* group;  // --help prints a heading where it changes
  std::string help;   // with the default
  std::function<void(options&, std::string_view)> set;
};

inline std::string text_of(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

// The one list of flags: the parser and --help both read it (the help shows the defaults).
inline std::vector<flag> flags() {
  using std::to_string;
  const options d;
  auto count = [](const char* name, std::size_t options::*field, bool zero_ok) {
    return [name, field, zero_ok](options& o, std::string_view v) { o.*field = parse_count(name, v, zero_ok); };
  };
  auto path = [](fs::path options::*field) {
    return [field](options& o, std::string_view v) { o.*field = fs::path(std::string(v)); };
  };
  // A flag of two words, `yes` setting `field` and the other clearing it (on|off,
  // cached|per-gemm, mxkit|vendor); the message names them in the order given.
  auto two_words = [](const char* name, const char* first, const char* second, const char* yes, bool options::*field) {
    return [name, first, second, yes, field](options& o, std::string_view v) {
      if (v == first || v == second) o.*field = v == yes;
      else throw usage_error(std::string(name) + ": expected " + first + " or " + second + ", got '" + std::string(v) + "'");
    };
  };
  auto on_off = [&two_words](const char* name, bool options::*field) { return two_words(name, "on", "off", "on", field); };
  std::string recipes, models;
  for (const recipe_choice& c : recipe_choices) recipes += std::string("\n      ") + c.name + ": " + c.what;
  for (const model_preset& m : model_presets) models += std::string("\n      ") + m.name + ": " + m.what;
  const char* data = "data and recipe";
  using preset = mlperf_llama31_8b;
  return {
      {"--preset", "NAME", "preset", preset::help<options>(),
       [](options& o, std::string_view v) {
         if (v == preset::name) preset::apply(o);
         else throw usage_error("--preset: unknown preset '" + std::string(v) + "' (known: " + preset::name + ")");
       }},
      {"--data", "PATH", data,
       "the training data, its format told from its content (not its name):\n"
       "    - a Megatron-LM/NeMo indexed dataset (.idx + .bin), by its prefix or either file:\n"
       "      samples of --seq + 1 tokens built by Megatron's GPTDataset rule, seeded by --seed + 1\n"
       "    - a packed .npy array [rows, --seq + 1] of integer tokens, with an optional loss mask\n"
       "      NAME.loss_mask.npy beside it (0/1 per token: the loss is the mean over the targets it counts)\n"
       "    - any other file: text, read as bytes (vocabulary 256)\n"
       "    tools/make_dataset.py writes the first two from text with a tokenizer. Without\n"
       "    --eval-data the last 10% (of the bytes, documents or rows) is held out for evaluation\n"
       "    (default: the repository's data/stories.txt and data/qa.txt, each split 90/10)",
       path(&options::data)},
      {"--eval-data", "PATH", data,
       "held-out data for evaluation, any format of --data (tokens with tokens, text with text);\n"
       "    --data is then trained on whole (default: the held-out tenth of --data)",
       path(&options::eval_data)},
      {"--vocab", "N", data,
       "vocabulary size of the model's embedding and head; a token >= N is refused\n"
       "    (default: the data's largest token + 1; 256 for text)",
       [](options& o, std::string_view v) { o.vocab = parse_count("--vocab", v, false); }},
      {"--recipe", "NAME", data, "training recipe (default " + d.recipe + "):" + recipes,
       [](options& o, std::string_view v) { o.recipe = std::string(v); }},
      {"--activations", "f32|bf16", data,
       std::string("storage of activations and their gradients (default ") + mxkit::name_of(d.activations) + ")",
       [](options& o, std::string_view v) { o.activations = parse_f32_or_bf16("--activations", v); }},
      {"--model", "NAME", "model",
       "the model by name: its shape, vocabulary, RoPE (theta, scaling), norm epsilon and --seq\n"
       "    default (default small). --layers, --d-model, --heads, --kv-heads, --ffn, --seq and --vocab,\n"
       "    given too, override the model's, wherever they stand:" + models,
       [](options& o, std::string_view v) {
         if (!o.model.empty()) throw usage_error("--model given twice ('" + o.model + "' and '" + std::string(v) + "')");
         o.model = find_model(v).name;
       }},
      {"--layers", "N", "model", "transformer layers (default " + to_string(d.layers) + ")", count("--layers", &options::layers, false)},
      {"--d-model", "N", "model", "model width (default " + to_string(d.d_model) + ")", count("--d-model", &options::d_model, false)},
      {"--heads", "N", "model", "query heads (default " + to_string(d.heads) + "; head dim = d-model / heads)",
       count("--heads", &options::heads, false)},
      {"--kv-heads", "N", "model", "key/value heads, grouped-query attention (default " + to_string(d.kv_heads) + ")",
       count("--kv-heads", &options::kv_heads, false)},
      {"--ffn", "N", "model", "SwiGLU hidden width (default " + to_string(d.ffn) + ")", count("--ffn", &options::ffn, false)},
      {"--seq", "N", "model", "sequence length in tokens (default " + to_string(d.seq) + ")", count("--seq", &options::seq, false)},
      {"--batch", "N", "model", "sequences per step (default " + to_string(d.batch) + ")", count("--batch", &options::batch, false)},
      {"--steps", "N", "run", "optimizer steps (default " + to_string(d.steps) + ")", count("--steps", &options::steps, false)},
      {"--stop-after", "N", "run",
       "end this run after step N, a multiple of --log-every, with its checkpoint and CSV;\n"
       "    the schedule still spans --steps, and --resume continues the run (default: --steps)",
       [](options& o, std::string_view v) { o.stop_after = parse_count("--stop-after", v, false); }},
      {"--lr", "X", "run", "peak learning rate; linear warmup, cosine decay to lr/10 (default " + text_of(d.lr) + ")",
       [](options& o, std::string_view v) { o.lr = parse_real("--lr", v, false); }},
      {"--warmup", "N", "run", "warmup steps (default 100, or steps / 10 when that is fewer)",
       [](options& o, std::string_view v) { o.warmup = parse_count("--warmup", v, true); }},
      {"--adam-betas", "B1,B2", "run", "AdamW's moment decays, each in [0, 1) (default " + text_of(d.adamw.beta1) + "," +
                                          text_of(d.adamw.beta2) + ")",
       [](options& o, std::string_view v) {
         const std::size_t comma = v.find(',');
         const double b1 = comma == std::string_view::npos ? -1 : parse_real("--adam-betas", v.substr(0, comma), true);
         const double b2 = comma == std::string_view::npos ? -1 : parse_real("--adam-betas", v.substr(comma + 1), true);
         if (!(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1))
           throw usage_error("--adam-betas: expected B1,B2, each in [0, 1), got '" + std::string(v) + "'");
         o.adamw.beta1 = b1;
         o.adamw.beta2 = b2;
       }},
      {"--adam-eps", "X", "run", "AdamW's epsilon (default " + text_of(d.adamw.eps) + ")",
       [](options& o, std::string_view v) { o.adamw.eps = parse_real("--adam-eps", v, false); }},
      {"--weight-decay", "X", "run", "AdamW's decoupled weight decay, on all but norm gains (default " + text_of(d.adamw.weight_decay) + ")",
       [](options& o, std::string_view v) { o.adamw.weight_decay = parse_real("--weight-decay", v, true); }},
      {"--clip-norm", "X", "run", "global gradient-norm clipping; 0: none (default " + text_of(d.adamw.clip_norm) + ")",
       [](options& o, std::string_view v) { o.adamw.clip_norm = parse_real("--clip-norm", v, true); }},
      {"--seed", "N", "run", "model initialization seed; the data order uses seed + 1 (default " + to_string(d.seed) + ")",
       [](options& o, std::string_view v) { o.seed = parse_count("--seed", v, true); }},
      {"--log-every", "N", "output", "print progress (the host reads the loss) every N steps (default " + to_string(d.log_every) + ")",
       count("--log-every", &options::log_every, false)},
      {"--eval-every", "N", "output",
       "evaluate on the held-out data every N steps and at the end; 0: never (default " + to_string(d.eval_every) + ")",
       count("--eval-every", &options::eval_every, true)},
      {"--eval-batches", "N", "output", "at most N batches per evaluation (default " + to_string(d.eval_batches) + ")",
       count("--eval-batches", &options::eval_batches, false)},
      {"--target-loss", "L", "output",
       "end the run at the first evaluation whose loss is at most L (MLPerf's quality target; the\n"
       "    mean cross-entropy in nats is the log perplexity) and report the time to train as MLPerf\n"
       "    Training counts it: from run start (after initialization: model, data, --init-from,\n"
       "    --resume, reported apart) to the end of that evaluation, evaluations and checkpoints\n"
       "    included. A run that ends (--steps) without reaching it says so and exits with status " +
           to_string(exit_target_not_reached) + ";\n    one stopped earlier by --stop-after exits 0. Needs --eval-every > 0",
       [](options& o, std::string_view v) { o.target_loss = parse_real("--target-loss", v, true); }},
      {"--checkpoint", "PATH", "output",
       "write a checkpoint (weights, AdamW state and this run's settings, atomically replaced)\n"
       "    every --checkpoint-every steps and at the end, while the loss and gradient norm are\n"
       "    finite: a run whose loss or gradient norm stops being finite ends with an error and\n"
       "    keeps the last good checkpoint",
       path(&options::checkpoint)},
      {"--checkpoint-every", "N", "output",
       "with --checkpoint; 0: at the end only (default " + to_string(d.checkpoint_every) + "). A checkpoint waits\n"
       "    for the first step from there whose loss is read (--log-every), to know it is finite",
       count("--checkpoint-every", &options::checkpoint_every, true)},
      {"--resume", "PATH", "output",
       "continue from a checkpoint of this program, a file or a folder of shards; the settings it\n"
       "    records (model, --recipe, --activations, --seq, --batch, --steps, --lr, --warmup, --seed\n"
       "    and the data) must be these flags' (see --resume-any-config)",
       path(&options::resume)},
      {"--resume-any-config", nullptr, "output",
       "with --resume: continue even when the checkpoint's recorded settings differ from these\n"
       "    flags (each difference is printed; the model's shape must still match)",
       [](options& o, std::string_view) { o.resume_any_config = true; }},
      {"--csv", "PATH", "output",
       "write step,loss,eval_loss,tokens_per_s,lr,tokens,time_s, a row for each logged or evaluated\n"
       "    step: tokens trained on by its end, and time_s the training time from run start to then\n"
       "    (the clock of --target-loss). Written atomically, with each checkpoint and at the end; on\n"
       "    --resume the file's rows up to the checkpoint's step are kept",
       path(&options::csv)},
      {"--overwrite", nullptr, "output",
       "replace an existing --checkpoint, --csv, --export or --dump-batches file even when it is\n"
       "    not this program's (without it such a file is refused before the first step; outputs\n"
       "    must be distinct regular files, none of them --data, --resume or --init-from, and\n"
       "    writable, in any case)",
       [](options& o, std::string_view) { o.overwrite = true; }},
      {"--peak-tflops", "X", "output",
       "bf16 dense peak of the device for the MFU column; 0: no MFU (default: the device's, where known)",
       [](options& o, std::string_view v) { o.peak_tflops = parse_real("--peak-tflops", v, true); }},
      {"--ranks", "N", "several ranks",
       "05_train: N rank threads of this process, 1 to " + to_string(max_ranks) + " (default 1); a GPU program takes the\n"
       "    ranks from its launcher. --batch is each rank's micro-batch",
       [](options& o, std::string_view v) { o.ranks = parse_int_in("--ranks", v, 1, max_ranks); }},
      {"--micro-batches", "N", "several ranks", "micro-batches per rank and step, gradients accumulated (default 1);\n"
       "    global batch = ranks x N x --batch. --steps x ranks x N x --batch x (--seq + 1), the tokens\n"
       "    the run reads, must stay below 2^64. Replaces an earlier --global-batch",
       [](options& o, std::string_view v) {
         o.micro_batches = parse_count("--micro-batches", v, false);
         o.global_batch.reset();
       }},
      {"--global-batch", "N", "several ranks",
       "sequences per optimizer step over every rank: the run takes N / (ranks x --batch)\n"
       "    micro-batches per rank, which must be a whole number (replaces an earlier --micro-batches)",
       [](options& o, std::string_view v) { o.global_batch = parse_count("--global-batch", v, false); }},
      {"--shard", "none|optimizer|full", "several ranks", "none: every rank holds everything; optimizer: ZeRO-1 (AdamW state and\n"
       "    the weight update sharded); full: weights too, gathered per layer (default none).\n"
       "    optimizer and full need several ranks (05_train: --ranks 2 or more)",
       [](options& o, std::string_view v) {
         if (v == "none") o.shard = nn::sharding::none;
         else if (v == "optimizer") o.shard = nn::sharding::optimizer;
         else if (v == "full") o.shard = nn::sharding::full;
         else throw usage_error("--shard: expected none, optimizer or full, got '" + std::string(v) + "'");
       }},
      {"--gather", "copies|fp32", "several ranks",
       "--shard full: gather the weights that linears quantize as their quantized copies (MXFP4 2 x 17/32\n"
       "    byte an element, MXFP8 2 x 33/32, FP8 1, bf16 2; the same bits) or as fp32 (default copies)",
       [](options& o, std::string_view v) {
         if (v == "copies" || v == "fp32") o.gather_quantized = v == "copies";
         else throw usage_error("--gather: expected copies or fp32, got '" + std::string(v) + "'");
       }},
      {"--reshard-after-forward", "on|off", "several ranks",
       "--shard full: each layer's gathered weights (copies) freed after its forward and gathered\n"
       "    again for its backward: less memory, the gathered bytes twice (default on)",
       on_off("--reshard-after-forward", &options::reshard_after_forward)},
      {"--overlap-reductions", "on|off", "several ranks",
       "--shard full: each layer waits for its own weights' gather only, and the previous layer's\n"
       "    gradient reduction runs behind its backward; off waits for every collective called (default on)",
       on_off("--overlap-reductions", &options::overlap_reductions)},
      {"--reduce-dtype", "f32|bf16", "several ranks",
       "element type of the gradient reduction (reduce-scatter when sharded, all-reduce when not), as\n"
       "    FSDP2's reduce_dtype: bf16 rounds each rank's gradients to bf16 and sums them in bf16 (half the\n"
       "    bytes; docs/training.md states the rounding) (default f32)",
       [](options& o, std::string_view v) { o.reduce_dtype = parse_f32_or_bf16("--reduce-dtype", v); }},
      {"--comm-sms", "N", "several ranks",
       "GPU programs on several GPUs: NCCL's kernels on N CTAs (ncclConfig_t minCTAs = maxCTAs = N),\n"
       "    1 to " + to_string(max_comm_sms) + ", and every GEMM's persistent grid on the device's SMs less N, so a collective\n"
       "    beside the GEMMs starts at once (default 0: NCCL's choice, GEMMs on every SM)",
       [](options& o, std::string_view v) { o.comm_sms = parse_int_in("--comm-sms", v, 1, max_comm_sms); }},
      {"--recompute", "on|off", "several ranks", "recompute each layer's forward in backward, keeping only its input (default off)",
       on_off("--recompute", &options::recompute)},
      {"--weight-copies", "cached|per-gemm", "several ranks",
       "the layers' low-precision (or bf16) weight copies: cached from forward to the optimizer step,\n"
       "    or made where each GEMM reads them and freed after it (no copy held between the passes: the\n"
       "    layers' copies leave the peak, for one more read of each weight in backward, two with\n"
       "    --recompute; the same results, bit for bit) (default cached)",
       two_words("--weight-copies", "cached", "per-gemm", "per-gemm", &options::weight_copies_per_gemm)},
      {"--gemm", "mxkit|vendor", "run",
       "GPU programs: the GEMMs of bf16 and per-tensor FP8 copies on mxkit's own kernels,\n"
       "    or on the platform's BLAS where it loads (cuBLASLt: gpu/gemm/vendor/; MX products always stay\n"
       "    on mxkit's exact kernels) (default mxkit)",
       two_words("--gemm", "mxkit", "vendor", "vendor", &options::vendor_gemm)},
      {"--cuda-graph", "on|off", "run",
       "GPU programs: record the training step once as a CUDA graph (HIP graph on AMD) and replay it,\n"
       "    one launch a step instead of one per operation, the same results bit for bit; it applies with\n"
       "    one rank, one micro-batch, no --switch-to and a recipe without per-step random draws, and the\n"
       "    program says why where it does not (train/step_replay.hpp) (default on)",
       on_off("--cuda-graph", &options::cuda_graph)},
      // Interchange with other tools (tools/twin/twin.py replays a run from these files).
      {"--init-from", "PATH", "interchange",
       "start from Hugging Face Llama weights (F32 or BF16) instead of the random initialization\n"
       "    (before --resume, which overrides it): a safetensors file, or a sharded checkpoint by its\n"
       "    model.safetensors.index.json or its folder, read a tensor at a time (several ranks: each\n"
       "    reads its own shard of each weight)",
       path(&options::init_from)},
      {"--export", "PATH", "interchange",
       "write the final weights as safetensors with Hugging Face Llama names (rank 0; --shard full\n"
       "    gathers them first). Checked before the first step as --checkpoint is (--overwrite)",
       path(&options::export_path)},
      {"--export-max-shard", "SIZE", "interchange",
       "with --export: write a Hugging Face sharded checkpoint, --export naming its folder (made if\n"
       "    missing): model-0000i-of-0000n.safetensors of at most SIZE bytes each (a larger tensor alone\n"
       "    in its shard; 5GB, 500MB, 4GiB or bytes) and model.safetensors.index.json",
       [](options& o, std::string_view v) { o.export_max_shard = parse_bytes("--export-max-shard", v); }},
      {"--export-dtype", "f32|bf16", "interchange", "element type of --export (default f32: the masters, bit-exact)",
       [](options& o, std::string_view v) {
         if (v == "f32") o.export_dtype = nn::safetensors_dtype::f32;
         else if (v == "bf16") o.export_dtype = nn::safetensors_dtype::bf16;
         else throw usage_error("--export-dtype: expected f32 or bf16, got '" + std::string(v) + "'");
       }},
      {"--dump-batches", "PATH", "interchange",
       "before the first step, write the windows every step of --steps trains on, in order:\n"
       "    \"MXBATCH1\" (text: one byte a token) or \"MXBATCH2\" (token datasets: int32 tokens), u64\n"
       "    steps, rows, seq + 1 (little-endian), then steps x rows x (seq + 1) tokens (inputs and the\n"
       "    last target). rows = ranks x --micro-batches x --batch: a step's micro-batches in order,\n"
       "    rank 0's first (rank r's k-th is number r x --micro-batches + k), each --batch rows.\n"
       "    Checked before the first step as --checkpoint is (--overwrite)",
       path(&options::dump_batches)},
      {"--lora", "RANK", "LoRA fine-tuning",
       "freeze every parameter of the --init-from base (embedding, norms, head, every linear) and train\n"
       "    LoRA adapters of this rank only (Hu et al. 2021), with AdamW and the schedule of --lr; --switch-to\n"
       "    then heals as it does a pretraining run. Needs --init-from. A run of one rank, without\n"
       "    --checkpoint, --resume or --export (a checkpoint does not record the adapters' settings, and Hugging\n"
       "    Face Llama weights have no place for them)\n"
       "    (default: off; the Llama 2 70B LoRA recipe: 16)",
       [](options& o, std::string_view v) { o.lora_rank = parse_count("--lora", v, false); }},
      {"--lora-alpha", "A", "LoRA fine-tuning", "with --lora: the adapters' scale is A / RANK (default " + text_of(nn::lora_config{}.alpha) + ")",
       [](options& o, std::string_view v) { o.lora_alpha = parse_real("--lora-alpha", v, false); }},
      {"--lora-targets", "LIST", "LoRA fine-tuning",
       "with --lora: the linears of every layer that get adapters, a comma list of qkv, out, gate_up,\n"
       "    down (default " + lora_targets_text(nn::lora_targets{}) + ": the attention projections, as the MLPerf Llama 2 70B LoRA reference)",
       [](options& o, std::string_view v) { o.lora_targets = parse_lora_targets(v); }},
      {"--switch-to", "NAME", "healing", "from --switch-at on, train with this recipe (healing: e.g. fp8 or bf16)",
       [](options& o, std::string_view v) { o.switch_to = std::string(v); }},
      {"--switch-at", "N", "healing", "the step (0-based) of --switch-to, e.g. 80% of --steps",
       [](options& o, std::string_view v) { o.switch_at = parse_count("--switch-at", v, false); }},
  };
}

}  // namespace detail

// The model's parameter count, in floating point so that nothing wraps (any --layers, --d-model,
// --ffn): the embedding and the head, each layer's two norms, QKV, output, gate/up and down
// projections, and the final norm (nn/model.hpp).
inline double approximate_parameters(const options& o) {
  const double d = static_cast<double>(o.d_model), kv = d / static_cast<double>(o.heads) * static_cast<double>(o.kv_heads);
  const double f = static_cast<double>(o.ffn), vocab = static_cast<double>(o.vocab.value_or(256));  // (the data's, when not given: unknown here)
  const double per_layer = 2 * d + d * (d + 2 * kv) + d * d + 3 * d * f;
  return 2 * vocab * d + d + static_cast<double>(o.layers) * per_layer;
}

// Refuses what the model or the schedule would refuse later, naming the flags.
inline void check_options(const options& o) {
  auto need = [](bool ok, const std::string& why) {
    if (!ok) throw usage_error(why);
  };
  using std::to_string;
  need(o.d_model % o.heads == 0, "--d-model " + to_string(o.d_model) + " is not a multiple of --heads " + to_string(o.heads));
  need(o.heads % o.kv_heads == 0, "--heads " + to_string(o.heads) + " is not a multiple of --kv-heads " + to_string(o.kv_heads));
  need((o.d_model / o.heads) % 2 == 0, "--d-model / --heads = " + to_string(o.d_model / o.heads) + " must be even (RoPE rotates pairs)");
  need(o.warmup_steps() < o.steps, "--warmup " + to_string(o.warmup_steps()) + " must be below --steps " + to_string(o.steps));
  need(!o.stop_after || (*o.stop_after <= o.steps && *o.stop_after % o.log_every == 0),
       "--stop-after " + to_string(o.stop_after.value_or(0)) + " must be at most --steps " + to_string(o.steps) +
           " and a multiple of --log-every " + to_string(o.log_every) + " (the CSV row of the last step needs its loss)");
  need(!o.resume_any_config || !o.resume.empty(), "--resume-any-config needs --resume");
  need(!o.target_loss || o.eval_every > 0, "--target-loss needs evaluations: --eval-every N with N > 0");
  need(!o.global_batch || *o.global_batch % o.batch == 0,
       "--global-batch " + to_string(o.global_batch.value_or(0)) + " is not a multiple of --batch " + to_string(o.batch));
  need(o.export_max_shard == 0 || !o.export_path.empty(), "--export-max-shard needs --export (the folder to write)");
  try {
    nn::check_config(o.adamw);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("--adam-betas, --adam-eps, --weight-decay, --clip-norm: ") + e.what());
  }
  // The model's size: vector::reserve or the allocator would otherwise be the first to notice,
  // with a message that names no flag.
  const double parameters = approximate_parameters(o);
  constexpr double bytes_per_parameter = 16;  // f32 weight, gradient and two AdamW moments
  char count[32];
  std::snprintf(count, sizeof count, "%.3g", parameters);
  need(parameters * bytes_per_parameter < static_cast<double>(std::numeric_limits<std::size_t>::max()),
       "the model is too large: --layers " + to_string(o.layers) + ", --d-model " + to_string(o.d_model) + ", --ffn " +
           to_string(o.ffn) + ", --kv-heads " + to_string(o.kv_heads) + " make " + count +
           " parameters, and their weights, gradients and AdamW moments (16 bytes each) exceed the address space");
  // The tokens the run reads: step s trains the loader's batches s x (ranks x micro-batches) + j
  // (j below that product), and --dump-batches writes every one of them. A product that wrapped
  // would train on other windows (or divide the gradients by 0) instead of being refused.
  {
    constexpr std::uint64_t most = std::numeric_limits<std::uint64_t>::max();
    std::uint64_t tokens = 1;
    bool wraps = o.seq == most;
    for (const std::uint64_t f : {std::uint64_t{o.steps}, static_cast<std::uint64_t>(o.ranks), std::uint64_t{o.micro_batches},
                                  std::uint64_t{o.batch}, std::uint64_t{o.seq} + 1}) {
      wraps = wraps || f > most / tokens;
      if (!wraps) tokens *= f;
    }
    need(!wraps, "--steps " + to_string(o.steps) + " x --ranks " + to_string(o.ranks) + " x --micro-batches " + to_string(o.micro_batches) +
                     " x --batch " + to_string(o.batch) + " x (--seq " + to_string(o.seq) +
                     " + 1) tokens is 2^64 or more: the run's batch numbers would wrap");
  }
  (void)make_recipe(o);  // the recipe name
  need(o.lora_rank > 0 || !o.lora_alpha, "--lora-alpha " + detail::text_of(o.lora_alpha.value_or(0)) + " needs --lora RANK");
  need(o.lora_rank > 0 || !o.lora_targets,
       "--lora-targets " + lora_targets_text(o.lora_targets.value_or(nn::lora_targets{})) + " needs --lora RANK");
  if (o.lora_rank > 0) {
    const std::string lora = "--lora " + to_string(o.lora_rank);
    need(!o.init_from.empty(), lora + " fine-tunes a base model: give its weights with --init-from PATH (adapters on random "
                                      "weights would fine-tune nothing)");
    need(o.checkpoint.empty() && o.resume.empty(), lora + " does not take --checkpoint or --resume: a checkpoint of this "
                                                          "program does not record the adapters' settings (a LoRA run restarts from --init-from)");
    need(o.export_path.empty(), lora + " does not take --export: Hugging Face Llama weights have no place for the adapters "
                                       "(and merging them into the base is not done here)");
    need(o.shard == nn::sharding::none, lora + " trains on one rank: --shard " + std::string(mxkit::name_of(o.shard)) + " is not supported with it");
    // lora_adapter's bound: the rank is at most the smaller side of each adapted linear (QKV and
    // output: d_model; gate/up: d_model and 2 ffn; down: ffn and d_model).
    const nn::lora_targets t = o.lora_targets.value_or(nn::lora_targets{});
    std::size_t most = std::numeric_limits<std::size_t>::max();
    if (t.qkv || t.out) most = std::min(most, o.d_model);
    if (t.gate_up) most = std::min({most, o.d_model, 2 * o.ffn});
    if (t.down) most = std::min({most, o.d_model, o.ffn});
    need(o.lora_rank <= most, lora + " is larger than the smaller side (" + to_string(most) + ") of an adapted linear (--lora-targets " +
                                  lora_targets_text(t) + ", --d-model " + to_string(o.d_model) + ", --ffn " + to_string(o.ffn) + ")");
  }
  need(o.switch_to.empty() == (o.switch_at == 0) && o.switch_at < o.steps,
       "--switch-to and --switch-at go together, with --switch-at below --steps " + to_string(o.steps));
  if (!o.switch_to.empty()) {
    options s = o;
    s.recipe = o.switch_to;
    (void)make_recipe(s);
  }
}

// --global-batch on `ranks` ranks: the micro-batches per rank that make it (mlperf_llama31_8b.hpp's
// scaling rule), checked again as a whole. Without --global-batch, `o` as it is.
inline options resolve_global_batch(options o, std::size_t ranks) {
  if (!o.global_batch) return o;
  const std::size_t per_micro = ranks * o.batch;
  if (*o.global_batch % per_micro != 0)
    throw usage_error("--global-batch " + std::to_string(*o.global_batch) + " is not a multiple of " + std::to_string(ranks) +
                      " ranks x --batch " + std::to_string(o.batch) + ": give a --batch (or a number of ranks) that divides it");
  o.micro_batches = *o.global_batch / per_micro;
  check_options(o);
  return o;
}

namespace detail {
// Every flag of argv[1..] into o, in order; false for --help / -h.
inline bool parse_flags(int argc, char** argv, options& o) {
  const std::vector<detail::flag> flags = detail::flags();
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    std::optional<std::string_view> value;
    if (const std::size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    const auto f = std::find_if(flags.begin(), flags.end(), [&](const detail::flag& x) { return arg == x.name; });
    if (f == flags.end()) throw usage_error("unknown argument '" + std::string(argv[i]) + "' (see --help)");
    if (!f->value) {  // a switch
      if (value) throw usage_error(std::string(f->name) + " takes no value, got '" + std::string(*value) + "'");
      value = std::string_view();
    } else if (!value) {
      if (i + 1 >= argc) throw usage_error(std::string(f->name) + ": missing value " + f->value);
      value = std::string_view(argv[++i]);
    }
    f->set(o, *value);
  }
  return true;
}
}  // namespace detail

// Parses argv[1..]: "--flag value" or "--flag=value". Returns nullopt for --help / -h. --model's
// preset is applied first, wherever it stands, and every other flag after it (so an explicit
// --layers overrides the preset's, before or after --model): the arguments are read twice, the
// first time for --model alone (the same reading: a value that looks like a flag stays a value).
inline std::optional<options> parse_options(int argc, char** argv) {
  options named;
  if (!detail::parse_flags(argc, argv, named)) return std::nullopt;
  options o;
  if (!named.model.empty()) apply_model(o, find_model(named.model));
  detail::parse_flags(argc, argv, o);
  check_options(o);
  return o;
}

inline void print_help(const char* program) {
  std::printf(
      "usage: %s [flags]\n"
      "Trains a Llama-style model from random weights (or --init-from; --lora fine-tunes one) with one mxkit\n"
      "recipe, on text (bytes, vocabulary 256) or token datasets (Megatron-LM indexed, packed .npy; --vocab).\n",
      program);
  const char* group = "";
  for (const detail::flag& f : detail::flags()) {
    if (std::string_view(group) != f.group) std::printf("\n%s:\n", group = f.group);
    std::printf("  %s%s%s\n    %s\n", f.name, f.value ? " " : "", f.value ? f.value : "", f.help.c_str());
  }
  std::printf(
      "\nProgress lines: step, training loss (mean since the previous line), learning rate, gradient norm,\n"
      "tokens/s, model TFLOP/s and MFU (against the device's bf16 dense peak). Model FLOPs per step:\n"
      "  6 x N_linear x tokens                 N_linear: weights of the QKV, output, gate/up and down\n"
      "                                        linears of every layer and of the LM head (not the\n"
      "                                        embedding or the norms)\n"
      "+ layers x 3.5 x 2 x B x H x T^2 x D    causal attention: forward 2 B H T^2 D (QK^T and PV, half\n"
      "                                        masked), backward 2.5 times that (scores recomputed)\n"
      "B batch, H query heads, T sequence, D head dim. Evaluations and checkpoints are not counted. --lora:\n"
      "4 x N_linear x tokens (the frozen weights get no gradient; the adapters' GEMMs are not counted).\n");
}


}  // namespace train_program
MXKIT_END_NAMESPACE
