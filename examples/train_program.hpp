// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training program behind examples 05_train (host reference backend) and 06_train_gpu (the
// GPU backend): a Llama-style byte-level model from random weights, any recipe, any file read as
// bytes, with progress, evaluation, checkpoints, resumption and a CSV of the losses. Everything
// here talks to an nn::backend only, so the host build runs (and ctest checks) exactly the code
// the GPU runs; the two mains differ only in the backend they construct and what they know about
// the device (device_info).
//
// Host reads: the trainer reads the loss (and the gradient norm) at --log-every steps only, so a
// device backend runs the steps in between without waiting for the host. Evaluations and
// checkpoints synchronize first and are timed apart: tokens/s and TFLOP/s count training only.
//
// The default configuration (about 100 M parameters: 16 layers, d_model 768, 12 heads, 4 KV
// heads, SwiGLU 2048, sequence 1024, batch 16) is sized for one GPU; --steps is to be calibrated
// to about five minutes on an H200. On the host, pass a small model (05_train's header comment).
//
// Several ranks: run() takes the rank's nn::communicator (05_train: --ranks N host threads; a GPU
// program: its NCCL/RCCL communicator). --batch is then each rank's micro-batch, the global batch
// ranks x --micro-batches x --batch; rank 0 prints (global tokens/s, MFU per rank) and writes the
// CSV; --checkpoint and --resume name a directory of shards (nn/sharded_checkpoint.hpp), which
// resumes on another number of ranks too.
#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/checkpoint.hpp>
#include <mxkit/nn/data.hpp>
#include <mxkit/nn/file_io.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/nn/sharded_checkpoint.hpp>
#include <mxkit/nn/training.hpp>

#include "repository_data.hpp"

namespace train_program {

namespace fs = std::filesystem;
namespace nn = mxkit::nn;

// What the program knows about the machine besides its backend.
struct device_info {
  std::string name;                     // printed in the header line
  double peak_tflops = 0;               // bf16 dense peak in TFLOP/s for MFU; 0: unknown (no MFU column)
  std::function<std::string()> memory;  // optional: one line on the device's memory (GPU: free / total)
};

struct options {
  fs::path data;  // empty: the repository's corpora (repository_data.hpp)
  std::string recipe = "bf16";
  nn::dtype activations = nn::dtype::bf16;
  std::size_t layers = 16, d_model = 768, heads = 12, kv_heads = 4, ffn = 2048;
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
  std::size_t ranks = 1;               // 05_train: rank threads (a GPU program: one process per GPU)
  std::size_t micro_batches = 1;       // per rank and step (gradient accumulation)
  nn::sharding shard = nn::sharding::none;
  bool recompute = false;              // activation recomputation per layer

  // 100 steps, or a tenth of a shorter run.
  std::size_t warmup_steps() const noexcept { return warmup ? *warmup : std::min<std::size_t>(100, steps / 10); }
};

// A bad command line: what() names the flag and the value.
class usage_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// ---- recipes -------------------------------------------------------------------------------------

struct recipe_choice {
  const char* name;
  nn::recipe (*make)();
  const char* what;
};
inline constexpr std::array<recipe_choice, 7> recipe_choices{{
    {"bf16", +[] { return nn::recipes::bf16(); }, "bf16 operands, fp32 accumulation (the baseline)"},
    {"fp8", +[] { return nn::recipes::fp8_delayed(); }, "FP8 delayed scaling, HYBRID (E4M3 forward, E5M2 gradients)"},
    {"mxfp8", +[] { return nn::recipes::mxfp8(); }, "MXFP8 E4M3, round-up scale rule"},
    {"mxfp4", +[] { return nn::recipes::mxfp4_amd(); }, "MXFP4, Hadamard on every GEMM (AMD's MLPerf recipe)"},
    {"mxfp4-no-hadamard", +[] { return nn::recipes::mxfp4_no_hadamard(); }, "MXFP4 without the rotation"},
    {"mxfp4-wgrad", +[] { return nn::recipes::mxfp4_primus_turbo(); }, "MXFP4, Hadamard on the wgrad GEMM only (Primus-Turbo)"},
    {"mxfp4-nvidia", +[] { return nn::recipes::mxfp4_nvidia_style(); },
     "MXFP4, random-sign Hadamard on wgrad, stochastic rounding of gradients (NVFP4 placement)"},
}};

inline nn::recipe make_recipe(const options& o) {
  for (const recipe_choice& c : recipe_choices)
    if (o.recipe == c.name) {
      nn::recipe r = c.make();
      r.activations = o.activations;
      return r;
    }
  throw usage_error("--recipe: unknown recipe '" + o.recipe + "' (see --help)");
}

// ---- command line --------------------------------------------------------------------------------

namespace detail {

inline std::size_t parse_count(std::string_view flag, std::string_view v, bool zero_ok) {
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty() || (!zero_ok && n == 0))
    throw usage_error(std::string(flag) + ": expected " + (zero_ok ? "an integer >= 0" : "a positive integer") + ", got '" +
                      std::string(v) + "'");
  return n;
}

inline double parse_real(std::string_view flag, std::string_view v, bool zero_ok) {
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc{} || end != v.data() + v.size() || v.empty() || !(x > 0 || (zero_ok && x == 0)) || !(x < 1e300))
    throw usage_error(std::string(flag) + ": expected a finite number " + (zero_ok ? ">= 0" : "> 0") + ", got '" + std::string(v) + "'");
  return x;
}

struct flag {
  const char* name;
  const char* value;  // the value's placeholder in --help
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
  std::string recipes;
  for (const recipe_choice& c : recipe_choices) recipes += std::string("\n      ") + c.name + ": " + c.what;
  const char* data = "data and recipe";
  return {
      {"--data", "PATH", data,
       "any file, read as bytes (vocabulary 256); the last 10% is held out for evaluation\n"
       "    (default: the repository's data/stories.txt and data/qa.txt, each split 90/10)",
       path(&options::data)},
      {"--recipe", "NAME", data, "training recipe (default " + d.recipe + "):" + recipes,
       [](options& o, std::string_view v) { o.recipe = std::string(v); }},
      {"--activations", "f32|bf16", data,
       std::string("storage of activations and their gradients (default ") + mxkit::name_of(d.activations) + ")",
       [](options& o, std::string_view v) {
         if (v == "f32") o.activations = nn::dtype::f32;
         else if (v == "bf16") o.activations = nn::dtype::bf16;
         else throw usage_error("--activations: expected f32 or bf16, got '" + std::string(v) + "'");
       }},
      {"--layers", "N", "model", "transformer layers (default " + to_string(d.layers) + ")", count("--layers", &options::layers, false)},
      {"--d-model", "N", "model", "model width (default " + to_string(d.d_model) + ")", count("--d-model", &options::d_model, false)},
      {"--heads", "N", "model", "query heads (default " + to_string(d.heads) + "; head dim = d-model / heads)",
       count("--heads", &options::heads, false)},
      {"--kv-heads", "N", "model", "key/value heads, grouped-query attention (default " + to_string(d.kv_heads) + ")",
       count("--kv-heads", &options::kv_heads, false)},
      {"--ffn", "N", "model", "SwiGLU hidden width (default " + to_string(d.ffn) + ")", count("--ffn", &options::ffn, false)},
      {"--seq", "N", "model", "sequence length in bytes (default " + to_string(d.seq) + ")", count("--seq", &options::seq, false)},
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
      {"--seed", "N", "run", "model initialization seed; the data order uses seed + 1 (default " + to_string(d.seed) + ")",
       [](options& o, std::string_view v) { o.seed = parse_count("--seed", v, true); }},
      {"--log-every", "N", "output", "print progress (the host reads the loss) every N steps (default " + to_string(d.log_every) + ")",
       count("--log-every", &options::log_every, false)},
      {"--eval-every", "N", "output",
       "evaluate on the held-out data every N steps and at the end; 0: never (default " + to_string(d.eval_every) + ")",
       count("--eval-every", &options::eval_every, true)},
      {"--eval-batches", "N", "output", "at most N batches per evaluation (default " + to_string(d.eval_batches) + ")",
       count("--eval-batches", &options::eval_batches, false)},
      {"--checkpoint", "PATH", "output",
       "write a checkpoint (weights and AdamW state, atomically replaced) every\n"
       "    --checkpoint-every steps and at the end",
       path(&options::checkpoint)},
      {"--checkpoint-every", "N", "output", "with --checkpoint; 0: at the end only (default " + to_string(d.checkpoint_every) + ")",
       count("--checkpoint-every", &options::checkpoint_every, true)},
      {"--resume", "PATH", "output", "continue from a checkpoint of this program, given the same model, data, --steps and --seed",
       path(&options::resume)},
      {"--csv", "PATH", "output",
       "write step,loss,eval_loss,tokens_per_s,lr (atomically, with each checkpoint and at the end;\n"
       "    on --resume the file's rows up to the checkpoint's step are kept)",
       path(&options::csv)},
      {"--peak-tflops", "X", "output",
       "bf16 dense peak of the device for the MFU column; 0: no MFU (default: the device's, where known)",
       [](options& o, std::string_view v) { o.peak_tflops = parse_real("--peak-tflops", v, true); }},
      {"--ranks", "N", "several ranks", "05_train: N rank threads of this process (default 1); a GPU program takes the\n"
       "    ranks from its launcher. --batch is each rank's micro-batch", count("--ranks", &options::ranks, false)},
      {"--micro-batches", "N", "several ranks", "micro-batches per rank and step, gradients accumulated (default 1);\n"
       "    global batch = ranks x N x --batch", count("--micro-batches", &options::micro_batches, false)},
      {"--shard", "none|optimizer|full", "several ranks", "none: every rank holds everything; optimizer: ZeRO-1 (AdamW state and\n"
       "    the weight update sharded); full: weights too, gathered per layer (default none)",
       [](options& o, std::string_view v) {
         if (v == "none") o.shard = nn::sharding::none;
         else if (v == "optimizer") o.shard = nn::sharding::optimizer;
         else if (v == "full") o.shard = nn::sharding::full;
         else throw usage_error("--shard: expected none, optimizer or full, got '" + std::string(v) + "'");
       }},
      {"--recompute", "on|off", "several ranks", "recompute each layer's forward in backward, keeping only its input (default off)",
       [](options& o, std::string_view v) {
         if (v == "on" || v == "off") o.recompute = v == "on";
         else throw usage_error("--recompute: expected on or off, got '" + std::string(v) + "'");
       }},
  };
}

}  // namespace detail

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
  (void)make_recipe(o);  // the recipe name
}

// Parses argv[1..]: "--flag value" or "--flag=value". Returns nullopt for --help / -h.
inline std::optional<options> parse_options(int argc, char** argv) {
  options o;
  const std::vector<detail::flag> flags = detail::flags();
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") return std::nullopt;
    std::optional<std::string_view> value;
    if (const std::size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    const auto f = std::find_if(flags.begin(), flags.end(), [&](const detail::flag& x) { return arg == x.name; });
    if (f == flags.end()) throw usage_error("unknown argument '" + std::string(argv[i]) + "' (see --help)");
    if (!value) {
      if (i + 1 >= argc) throw usage_error(std::string(f->name) + ": missing value " + f->value);
      value = std::string_view(argv[++i]);
    }
    f->set(o, *value);
  }
  check_options(o);
  return o;
}

inline void print_help(const char* program) {
  std::printf(
      "usage: %s [flags]\n"
      "Trains a Llama-style byte-level model (vocabulary 256) from random weights with one mxkit recipe.\n",
      program);
  const char* group = "";
  for (const detail::flag& f : detail::flags()) {
    if (std::string_view(group) != f.group) std::printf("\n%s:\n", group = f.group);
    std::printf("  %s %s\n    %s\n", f.name, f.value, f.help.c_str());
  }
  std::printf(
      "\nProgress lines: step, training loss (mean since the previous line), learning rate, gradient norm,\n"
      "tokens/s, model TFLOP/s and MFU (against the device's bf16 dense peak). Model FLOPs per step:\n"
      "  6 x N_linear x tokens                 N_linear: weights of the QKV, output, gate/up and down\n"
      "                                        linears of every layer and of the LM head (not the\n"
      "                                        embedding or the norms)\n"
      "+ layers x 3.5 x 2 x B x H x T^2 x D    causal attention: forward 2 B H T^2 D (QK^T and PV, half\n"
      "                                        masked), backward 2.5 times that (scores recomputed)\n"
      "B batch, H query heads, T sequence, D head dim. Evaluations and checkpoints are not counted.\n");
}

// ---- data ----------------------------------------------------------------------------------------

// data/ with stories.txt and qa.txt (repository_data.hpp says where it looks).
inline fs::path repository_data() {
  const data_search s = search_repository_data();
  if (s.found) return *s.found;
  throw usage_error("no --data given, and the default data (stories.txt and qa.txt) is not in any of: " + s.looked_list() +
                    " (set MXKIT_DATA_DIR to the repository's data/, install it with cmake --install <build> --component "
                    "mxkit_examples, or pass --data FILE)");
}

struct training_data {
  std::string description;
  nn::corpus_split split;
};

inline training_data load_data(const options& o) {
  if (!o.data.empty()) return {o.data.string(), nn::load_corpus(o.data, 0.1)};
  // Both corpora, each split apart, so that the held-out tail has text of both.
  const fs::path dir = repository_data();
  std::vector<std::uint8_t> train, validation;
  for (const char* name : {"stories.txt", "qa.txt"}) {
    const nn::corpus_split s = nn::load_corpus(dir / name, 0.1);
    train.insert(train.end(), s.train->begin(), s.train->end());
    validation.insert(validation.end(), s.validation->begin(), s.validation->end());
  }
  return {(dir / "stories.txt").string() + " + qa.txt",
          {std::make_shared<const std::vector<std::uint8_t>>(std::move(train)),
           std::make_shared<const std::vector<std::uint8_t>>(std::move(validation))}};
}

// ---- the loss CSV --------------------------------------------------------------------------------

// One row per logged or evaluated step. Written whole and atomically (file_io.hpp's replace_file)
// with each checkpoint and at the end, so the file always matches a checkpoint a run can resume.
class loss_csv {
 public:
  static constexpr std::string_view header = "step,loss,eval_loss,tokens_per_s,lr\n";

  explicit loss_csv(fs::path path) : path_(std::move(path)) {}
  bool enabled() const noexcept { return !path_.empty(); }

  // A resumed run continues the file: its rows up to `step` (the checkpoint's) are kept as they are.
  void keep_rows_until(std::size_t step) {
    if (!enabled() || !fs::exists(path_)) return;
    std::string text;
    try {
      mxkit::detail::input_file in(path_);
      char buf[1 << 16];
      for (std::size_t got = sizeof buf; got == sizeof buf;) {
        got = in.read(buf, sizeof buf);
        text.append(buf, got);
      }
    } catch (const std::system_error& e) {
      throw std::runtime_error("--csv '" + path_.string() + "': " + e.what());
    }
    if (text.rfind(header, 0) != 0)
      throw usage_error("--csv '" + path_.string() + "' exists but is not this program's CSV (first line is not '" +
                        std::string(header.substr(0, header.size() - 1)) + "'); not overwriting it on --resume");
    for (std::size_t pos = header.size(); pos < text.size();) {
      const std::size_t end = std::min(text.find('\n', pos), text.size());
      const std::string_view line(text.data() + pos, end - pos);
      std::size_t row_step = 0;
      const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), row_step);
      if (ec == std::errc{} && p != line.data() && row_step <= step) kept_.append(line).append("\n");
      pos = end + 1;
    }
  }
  void train(std::size_t step, double loss, double tokens_per_s, double lr) {
    row& r = rows_[step];
    r.loss = loss;
    r.tokens_per_s = tokens_per_s;
    r.lr = lr;
  }
  void eval(std::size_t step, double loss) { rows_[step].eval_loss = loss; }
  void write() const {
    if (!enabled()) return;
    std::string out(header);
    out += kept_;
    char b[64];
    auto field = [&](const std::optional<double>& x, const char* fmt) {
      out += ',';
      if (!x) return;
      std::snprintf(b, sizeof b, fmt, *x);
      out += b;
    };
    for (const auto& [step, r] : rows_) {
      out += std::to_string(step);
      field(r.loss, "%.6f");
      field(r.eval_loss, "%.6f");
      field(r.tokens_per_s, "%.1f");
      field(r.lr, "%.6e");
      out += '\n';
    }
    try {
      mxkit::detail::replace_file(path_, out.data(), out.size());
    } catch (const std::system_error& e) {
      throw std::runtime_error("--csv '" + path_.string() + "': " + e.what());
    }
  }

 private:
  struct row {
    std::optional<double> loss, eval_loss, tokens_per_s, lr;
  };
  fs::path path_;
  std::string kept_;
  std::map<std::size_t, row> rows_;
};

// ---- the run -------------------------------------------------------------------------------------

// Model FLOPs of one training step, by the convention print_help states.
struct step_flops {
  double linear_weights = 0;  // N_linear
  double per_step = 0;
};
inline step_flops count_flops(nn::model& m, const options& o) {
  step_flops f;
  for (nn::linear* l : m.linears()) f.linear_weights += static_cast<double>(l->in_features() * l->out_features());
  f.linear_weights += static_cast<double>(m.head().in_features() * m.head().out_features());
  const double B = static_cast<double>(o.batch), T = static_cast<double>(o.seq), H = static_cast<double>(o.heads);
  const double D = static_cast<double>(o.d_model / o.heads);
  f.per_step = 6.0 * f.linear_weights * B * T + static_cast<double>(o.layers) * 3.5 * 2.0 * B * H * T * T * D;
  return f;
}

inline std::string millions(double n) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f M", n / 1e6);
  return b;
}
inline std::string mib(std::size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return b;
}

// Training throughput: per progress window (the steps since the previous progress line), and for
// the summary over the run without its first window, which holds the warm-up (first-use
// allocations, caches), where there is more than one. Evaluations and checkpoints are paused out.
class throughput {
 public:
  using clock = std::chrono::steady_clock;
  struct rate {
    double steps = 0, seconds = 0;
    double per_second(double per_step) const { return steps * per_step / seconds; }
  };

  // Starts the first window now (after initialization) at `step` (0, or the resumed step).
  void start(std::size_t step) {
    window_start_ = clock::now();
    paused_ = 0;
    last_step_ = step;
  }
  // Closes the window that ends at `step`; the next one starts now.
  rate close(std::size_t step) {
    const clock::time_point now = clock::now();
    const rate r{static_cast<double>(step - last_step_), std::chrono::duration<double>(now - window_start_).count() - paused_};
    rate& total = windows_++ == 0 ? first_ : rest_;
    total.steps += r.steps;
    total.seconds += r.seconds;
    window_start_ = now;
    paused_ = 0;
    last_step_ = step;
    return r;
  }
  // Runs `work` outside the measured time. The backend is synchronized first, so that the training
  // work still queued on its stream counts as training.
  template <class F>
  void pause(nn::backend& be, F&& work) {
    be.synchronize();
    const clock::time_point t0 = clock::now();
    work();
    paused_ += std::chrono::duration<double>(clock::now() - t0).count();
  }
  bool past_warmup() const noexcept { return windows_ > 1; }
  rate summary() const noexcept { return past_warmup() ? rest_ : first_; }

 private:
  clock::time_point window_start_ = clock::now();
  double paused_ = 0;
  std::size_t last_step_ = 0, windows_ = 0;
  rate first_, rest_;
};

inline nn::model_config model_config_of(const options& o) {
  nn::model_config mc;
  mc.vocab = nn::byte_tokenizer::vocab;
  mc.n_layers = o.layers;
  mc.layer.d_model = o.d_model;
  mc.layer.n_heads = o.heads;
  mc.layer.n_kv_heads = o.kv_heads;
  mc.layer.d_ff = o.ffn;
  return mc;
}

// Up to --eval-batches consecutive batches of the held-out tail (none without evaluations).
inline std::vector<nn::batch> evaluation_batches(const training_data& data, const options& o) {
  if (o.eval_every == 0) return {};
  const nn::batch_shape shape{o.batch, o.seq};
  if (data.split.validation->size() <= shape.tokens())
    throw usage_error("--data: the held-out tail (" + std::to_string(data.split.validation->size()) +
                      " bytes) cannot fill one evaluation batch of " + std::to_string(o.batch) + " x " + std::to_string(o.seq) +
                      " tokens; use a larger file, a smaller --batch or --seq, or --eval-every 0");
  return nn::sequential_batches(data.split.validation, shape, o.eval_batches);
}

// Trains as `o` says on `be`, as one rank of `comm` when given (every rank calls it; rank 0
// prints). Returns the process exit code; throws on failures.
inline int run(nn::backend& be, const device_info& device, const options& o, nn::communicator* comm = nullptr) {
  const auto t_start = std::chrono::steady_clock::now();
  const bool lead = !comm || comm->rank() == 0;
  const std::size_t ranks = comm ? static_cast<std::size_t>(comm->size()) : 1;
  auto say = [&](const char* fmt, auto... args) {
    if (!lead) return;
    std::printf("[%7.1fs] ", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
    std::printf(fmt, args...);
    std::printf("\n");
    std::fflush(stdout);
  };
  using ull = unsigned long long;

  const training_data data = load_data(o);
  const std::vector<nn::batch> eval_batches = evaluation_batches(data, o);
  const nn::recipe r = make_recipe(o);
  const nn::model_config mc = model_config_of(o);
  nn::model m(be, mc, r, o.seed);
  m.set_recompute(o.recompute);

  std::size_t n_params = 0;
  for (nn::parameter* p : m.parameters()) n_params += p->value.size();
  // FLOPs and tokens of the global batch; MFU per rank divides by the ranks.
  const double global_micro = static_cast<double>(ranks * o.micro_batches);
  step_flops flops = count_flops(m, o);
  flops.per_step *= global_micro;
  const double tokens_per_step = static_cast<double>(o.batch * o.seq) * global_micro;
  const double peak = o.peak_tflops.value_or(device.peak_tflops) * static_cast<double>(ranks);
  if (lead) {
  std::printf("device: %s (backend %s); bf16 peak %s\n", device.name.c_str(), be.name(),
              peak > 0 ? (detail::text_of(peak) + " TFLOP/s").c_str() : "unknown (no MFU)");
  std::printf("model: layers %zu, d_model %zu, heads %zu (kv %zu, head dim %zu), SwiGLU %zu, vocab %zu: %s parameters "
              "(%s in linears)\n",
              o.layers, o.d_model, o.heads, o.kv_heads, o.d_model / o.heads, o.ffn, mc.vocab,
              millions(static_cast<double>(n_params)).c_str(), millions(flops.linear_weights).c_str());
  std::printf("recipe: %s, %s activations; batch %zu x %zu = %.0f tokens/step; %.3g TFLOP/step (--help: convention)\n",
              r.name.c_str(), mxkit::name_of(o.activations), o.batch, o.seq, tokens_per_step, flops.per_step / 1e12);
  std::printf("data: %s: %zu bytes for training, %zu held out (%zu evaluation batches)\n", data.description.c_str(),
              data.split.train->size(), data.split.validation->size(), eval_batches.size());
  std::printf("run: %zu steps, lr %g (warmup %zu, cosine to %g), seed %llu\n", o.steps, o.lr, o.warmup_steps(), o.lr / 10,
              static_cast<ull>(o.seed));
  if (ranks > 1 || o.micro_batches > 1)
    std::printf("ranks: %zu x %zu micro-batches of %zu x %zu; sharding %s%s (throughput is global, MFU per rank)\n", ranks,
                o.micro_batches, o.batch, o.seq, mxkit::name_of(o.shard), o.recompute ? ", activation recomputation" : "");
  if (device.memory) std::printf("device memory after initialization: %s\n", device.memory().c_str());
  std::fflush(stdout);
  }

  loss_csv csv(lead ? o.csv : fs::path{});
  throughput speed;
  nn::train_config tc;
  tc.steps = o.steps;
  tc.shape = {o.batch, o.seq};
  tc.schedule = {o.lr, o.lr / 10, o.warmup_steps(), o.steps};
  tc.data_seed = o.seed + 1;
  tc.log_every = o.log_every;
  tc.progress_every = o.log_every;
  tc.parallel = {comm, o.micro_batches, o.shard};
  tc.on_progress = [&](const nn::train_progress& p) {
    const throughput::rate w = speed.close(p.step);
    const double tokens_per_s = w.per_second(tokens_per_step), tflops = w.per_second(flops.per_step) / 1e12;
    char mfu[32] = "";
    if (peak > 0) std::snprintf(mfu, sizeof mfu, "  MFU %5.1f%%", 100.0 * tflops / peak);
    say("step %6zu/%zu  loss %.4f  lr %.2e  gnorm %6.3f  %9.0f tok/s  %7.4g TFLOP/s%s", p.step, p.steps, p.loss, p.lr,
        p.grad_norm, tokens_per_s, tflops, mfu);
    csv.train(p.step, p.loss, tokens_per_s, p.lr);
  };
  nn::trainer t(m, data.split.train, tc);
  const std::size_t end = o.stop_after.value_or(o.steps);

  // Several ranks: checkpoints are directories of shards (a directory resumes on any number).
  const bool sharded_files = comm != nullptr;
  if (!o.resume.empty()) {
    const nn::checkpoint_info info = fs::is_directory(o.resume) ? nn::load_sharded_checkpoint(o.resume, t)
                                     : sharded_files          ? throw usage_error("--resume '" + o.resume.string() +
                                                                         "' is a single-rank checkpoint file; several ranks resume from a directory of shards")
                                                              : nn::load_checkpoint(o.resume, m, &t.optimizer());
    if (info.steps >= end) {
      say("checkpoint '%s' is at step %llu: nothing left to train (--steps %zu, --stop-after %zu)", o.resume.string().c_str(),
          static_cast<ull>(info.steps), o.steps, end);
      return 0;
    }
    t.seek(static_cast<std::size_t>(info.steps));
    csv.keep_rows_until(static_cast<std::size_t>(info.steps));
    say("resumed from '%s' at step %llu", o.resume.string().c_str(), static_cast<ull>(info.steps));
  }
  const std::size_t first_step = t.steps_done();
  speed.start(first_step);  // data loading, initialization and resumption are not training time

  double last_eval = -1;
  while (t.steps_done() < end) {
    t.step();
    const std::size_t s = t.steps_done();
    const bool last = s == end;
    if (o.eval_every > 0 && (s % o.eval_every == 0 || last))
      speed.pause(be, [&] {
        last_eval = nn::evaluate(m, eval_batches);
        say("eval %6zu/%zu  loss %.4f  (%zu held-out batches)", s, o.steps, last_eval, eval_batches.size());
        csv.eval(s, last_eval);
      });
    if (!o.checkpoint.empty() && ((o.checkpoint_every > 0 && s % o.checkpoint_every == 0) || last))
      speed.pause(be, [&] {
        if (sharded_files) nn::save_sharded_checkpoint(o.checkpoint, t);
        else nn::save_checkpoint(o.checkpoint, m, &t.optimizer(), {s, 0});
        csv.write();
        say("checkpoint at step %zu: %s", s, o.checkpoint.string().c_str());
      });
  }
  csv.write();
  if (!lead) return 0;

  const throughput::rate total = speed.summary();
  const double tflops = total.per_second(flops.per_step) / 1e12;
  std::printf("\ntrained steps %zu..%zu of %zu: final training loss %.4f", first_step + 1, end, o.steps, t.recent_loss(1));
  if (last_eval >= 0) std::printf(", held-out loss %.4f", last_eval);
  std::printf("\nthroughput%s: %.0f tokens/s, %.4g model TFLOP/s", speed.past_warmup() ? " after the first progress window" : "",
              total.per_second(tokens_per_step), tflops);
  if (peak > 0) std::printf(", MFU %.1f%%", 100.0 * tflops / peak);
  std::printf("\nskipped optimizer steps (non-finite gradients): %llu; host reads: %llu\n",
              static_cast<ull>(t.optimizer().skipped_steps()), static_cast<ull>(be.counters().host_reads));
  std::printf("backend memory peak: %s (tracked tensors)", mib(be.memory().peak_total()).c_str());
  if (device.memory) std::printf("; device memory now: %s", device.memory().c_str());
  if (csv.enabled()) std::printf("\nloss CSV: %s", o.csv.string().c_str());
  std::printf("\n");
  return 0;
}

// A program's main: parses, prints --help or a usage error (exit 2), else runs `train(options)`
// and turns an exception into a message and exit 1.
template <class Train>
int main(int argc, char** argv, const char* program, Train&& train) {
  std::optional<options> o;
  try {
    o = parse_options(argc, argv);
    if (!o) {
      print_help(program);
      return 0;
    }
    return train(*o);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace train_program
