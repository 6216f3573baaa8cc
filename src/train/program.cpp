// SPDX-License-Identifier: Apache-2.0
// The training program's run() (mxkit/train_program/program.hpp says what the program does), compiled once for
// 05_train and 06_train_gpu: everything here talks to an nn::backend only.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <mxkit/nn/backend.hpp>
#include <mxkit/io/checkpoint.hpp>
#include <mxkit/train/data.hpp>
#include <mxkit/file_io.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/io/hf_llama.hpp>
#include <mxkit/io/hf_sharded.hpp>
#include <mxkit/io/sharded_checkpoint.hpp>
#include <mxkit/train/training.hpp>

#include <mxkit/train_program/data.hpp>
#include <mxkit/train_program/files.hpp>
#include <mxkit/train_program/lora.hpp>
#include <mxkit/train_program/program.hpp>
#include <mxkit/train_program/repository_data.hpp>
#include <mxkit/train_program/time_to_train.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {

namespace fs = std::filesystem;

// ---- data ----------------------------------------------------------------------------------------

// data/ with stories.txt and qa.txt (repository_data.hpp says where it looks).
inline fs::path repository_data() {
  const data_search s = search_repository_data();
  if (s.found) return *s.found;
  throw usage_error("no --data given, and the default data (stories.txt and qa.txt) is not in any of: " + s.looked_list() +
                    " (set MXKIT_DATA_DIR to the repository's data/, install it with cmake --install <build> --component "
                    "mxkit_examples, or pass --data FILE)");
}

// The files the run reads as data: --data (every file of a token dataset), or the repository's
// two corpora, and --eval-data.
inline std::vector<flagged_path> data_files(const options& o) {
  std::vector<flagged_path> files;
  if (!o.data.empty()) files = dataset_files("--data", o.data);
  else {
    const fs::path dir = repository_data();
    files = {{"--data (default)", dir / "stories.txt"}, {"--data (default)", dir / "qa.txt"}};
  }
  if (!o.eval_data.empty())
    for (const flagged_path& f : dataset_files("--eval-data", o.eval_data)) files.push_back(f);
  return files;
}

inline training_data load_data(const options& o) {
  return load_data(o, o.data.empty() ? std::optional<fs::path>(repository_data()) : std::nullopt);
}

// ---- the run's settings in its checkpoints -------------------------------------------------------

// What a checkpoint records of the run that saved it, and --resume compares: the model's shape,
// then what decides the rest of the run (the recipe, the batches, the schedule, the seeds, the
// data's bytes). Keys are the flags' names; output flags are left out (a resumed run may log,
// evaluate and save differently).
inline bool is_model_setting(std::string_view key) {
  return key == "layers" || key == "d-model" || key == "heads" || key == "kv-heads" || key == "ffn" || key == "vocab" || key == "rope" ||
         key == "norm-eps";
}

inline std::string exact_text(double x) {  // the shortest text that reads back as x
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, x, std::chars_format::general);
  return std::string(b, r.ptr);
}

// The model's RoPE as a setting: "theta X", and Llama 3.1's scaling when on (--model).
inline std::string rope_setting(const options& o) {
  std::string s = "theta " + exact_text(o.rope_theta);
  if (o.rope_scale.enabled())
    s += ", llama3 scaling " + exact_text(o.rope_scale.factor) + " " + exact_text(o.rope_scale.low_freq_factor) + " " +
         exact_text(o.rope_scale.high_freq_factor) + " " + exact_text(o.rope_scale.original_max_position);
  return s;
}

inline nn::checkpoint_settings run_settings(const options& o, const training_data& data) {
  using std::to_string;
  char checksum[24];
  std::snprintf(checksum, sizeof checksum, "%016llx", static_cast<unsigned long long>(data.checksum));
  return {{"layers", to_string(o.layers)},
          {"d-model", to_string(o.d_model)},
          {"heads", to_string(o.heads)},
          {"kv-heads", to_string(o.kv_heads)},
          {"ffn", to_string(o.ffn)},
          {"vocab", to_string(data.vocab)},
          {"rope", rope_setting(o)},
          {"norm-eps", exact_text(o.norm_eps)},
          {"recipe", o.recipe},
          {"activations", mxkit::name_of(o.activations)},
          {"seq", to_string(o.seq)},
          {"batch", to_string(o.batch)},
          {"steps", to_string(o.steps)},
          {"lr", exact_text(o.lr)},
          {"warmup", to_string(o.warmup_steps())},
          {"adam-betas", exact_text(o.adamw.beta1) + "," + exact_text(o.adamw.beta2)},
          {"adam-eps", exact_text(o.adamw.eps)},
          {"weight-decay", exact_text(o.adamw.weight_decay)},
          {"clip-norm", exact_text(o.adamw.clip_norm)},
          {"seed", to_string(o.seed)},
          {"data", data.description},  // where it was read: shown, not compared (the same bytes may move)
          {"data-bytes", to_string(data.bytes)},
          {"data-checksum", checksum}};
}

// The differences between a checkpoint's settings and this run's, as "--flag saved vs now".
struct settings_differences {
  std::vector<std::string> model, run;
};

inline std::string setting(const nn::checkpoint_settings& settings, std::string_view key) {
  for (const auto& [k, v] : settings)
    if (k == key) return v;
  if (key == "vocab") return "256";  // (checkpoints from before --vocab were byte-level)
  if (key == "rope") return "theta " + exact_text(10000.0);  // (and from before --model, every model's RoPE and norm)
  if (key == "norm-eps") return exact_text(1e-5);
  // Checkpoints from before the AdamW flags trained with nn::adamw_config's defaults.
  const nn::adamw_config d;
  if (key == "adam-betas") return exact_text(d.beta1) + "," + exact_text(d.beta2);
  if (key == "adam-eps") return exact_text(d.eps);
  if (key == "weight-decay") return exact_text(d.weight_decay);
  if (key == "clip-norm") return exact_text(d.clip_norm);
  return "(not recorded)";
}

inline settings_differences compare_settings(const nn::checkpoint_settings& saved, const nn::checkpoint_settings& now) {
  settings_differences out;
  bool data_differs = false;
  for (const auto& [key, value] : now) {
    const std::string was = setting(saved, key);
    if (key == "data" || was == value) continue;
    if (key == "data-bytes" || key == "data-checksum") data_differs = true;
    else if (is_model_setting(key)) out.model.push_back(key + " " + was + " vs " + value);
    else out.run.push_back("--" + key + " " + was + " vs " + value);
  }
  auto data = [](const nn::checkpoint_settings& s) {
    return "'" + setting(s, "data") + "' (" + setting(s, "data-bytes") + " bytes, checksum " + setting(s, "data-checksum") + ")";
  };
  if (data_differs) out.run.push_back("--data " + data(saved) + " vs " + data(now));
  return out;
}

inline std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// --resume: refuses a checkpoint of another model, and of another run unless --resume-any-config;
// warns (when `warn`: rank 0) where the settings cannot be checked (a version 1 file or manifest)
// or differ and are accepted. A single file and a folder of shards record the same settings.
inline void check_resume(const options& o, const nn::checkpoint_info& saved, const nn::checkpoint_settings& now, bool warn) {
  const std::string file = "--resume '" + o.resume.string() + "'";
  if (saved.version < 2) {
    if (warn)
      std::fprintf(stderr,
                   "warning: %s is a format version %u %s, which records no run settings: they cannot be checked "
                   "against these flags (it must come from the same model, data, --steps and --seed)\n",
                   file.c_str(), static_cast<unsigned>(saved.version),
                   fs::is_directory(o.resume) ? "sharded checkpoint (manifest)" : "checkpoint");
    return;
  }
  const settings_differences d = compare_settings(saved.settings, now);
  if (!d.model.empty())
    throw usage_error(file + ": the model differs: " + joined(d.model) + " (the checkpoint's vs these flags)");
  if (d.run.empty()) return;
  if (!o.resume_any_config)
    throw usage_error(file + " comes from a run with other settings (the checkpoint's vs these flags): " + joined(d.run) +
                      "; give its flags, or --resume-any-config to continue it with these");
  if (warn)
    std::fprintf(stderr, "warning: %s: continuing with settings that differ from the checkpoint's (--resume-any-config): %s\n",
                 file.c_str(), joined(d.run).c_str());
}

// ---- the loss CSV --------------------------------------------------------------------------------

// One row per logged or evaluated step. Written whole and atomically (file_io.hpp's replace_file)
// with each checkpoint and at the end, so the file always matches a checkpoint a run can resume.
// tokens: trained on by the end of the step (every rank's); time_s: the training time from run
// start (time_to_train.hpp's clock; a resumed run's rows count from its own start).
class loss_csv {
 public:
  static constexpr std::string_view header = csv_header;

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
    // Empty, replaced by --overwrite (mxkit/train_program/files.hpp), or of the five columns before
    // tokens,time_s: no rows to keep.
    if (text.rfind(header, 0) != 0) return;
    for (std::size_t pos = header.size(); pos < text.size();) {
      const std::size_t end = std::min(text.find('\n', pos), text.size());
      const std::string_view line(text.data() + pos, end - pos);
      std::size_t row_step = 0;
      const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), row_step);
      if (ec == std::errc{} && p != line.data() && row_step <= step) kept_.append(line).append("\n");
      pos = end + 1;
    }
  }
  void train(std::size_t step, double loss, double tokens_per_s, double lr, double tokens, double seconds) {
    row& r = rows_[step];
    r.loss = loss;
    r.tokens_per_s = tokens_per_s;
    r.lr = lr;
    r.tokens = tokens;
    r.seconds = seconds;
  }
  void eval(std::size_t step, double loss, double tokens, double seconds) {
    row& r = rows_[step];
    r.eval_loss = loss;
    r.tokens = tokens;
    r.seconds = seconds;  // (the end of the evaluation: a step's row that has both shows this)
  }
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
      field(r.tokens, "%.0f");
      field(r.seconds, "%.3f");
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
    std::optional<double> loss, eval_loss, tokens_per_s, lr, tokens, seconds;
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
  // --lora: the frozen weights get no gradient, so each linear runs its forward and its dgrad
  // only (print_help's convention; the adapters' GEMMs are not counted).
  const double passes = o.lora_rank > 0 ? 4.0 : 6.0;
  f.per_step = passes * f.linear_weights * B * T + static_cast<double>(o.layers) * 3.5 * 2.0 * B * H * T * T * D;
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
// With several ranks each window also holds the time this rank's compute waited for collectives
// (communicator::take_exposed_seconds: the communication that overlap did not hide), where the
// communicator measures it.
class throughput {
 public:
  using clock = std::chrono::steady_clock;
  struct rate {
    double steps = 0, seconds = 0;
    std::optional<double> exposed_seconds;
    double per_second(double per_step) const { return steps * per_step / seconds; }
    std::optional<double> exposed_fraction() const {
      if (!exposed_seconds || seconds <= 0) return std::nullopt;
      return *exposed_seconds / seconds;
    }
  };
  explicit throughput(nn::communicator* comm) : comm_(comm) {}

  // Starts the first window now (after initialization) at `step` (0, or the resumed step).
  void start(std::size_t step) {
    window_start_ = clock::now();
    paused_ = 0;
    last_step_ = step;
    // Construction's and resumption's collectives are not training: read, and dropped.
    window_exposed_ = exposed_since_last() ? std::optional<double>(0.0) : std::nullopt;
  }
  // Closes the window that ends at `step`; the next one starts now.
  rate close(std::size_t step) {
    const clock::time_point now = clock::now();
    const rate r{static_cast<double>(step - last_step_), std::chrono::duration<double>(now - window_start_).count() - paused_,
                 add(window_exposed_, exposed_since_last())};
    rate& total = windows_++ == 0 ? first_ : rest_;
    total.steps += r.steps;
    total.seconds += r.seconds;
    total.exposed_seconds = add(total.exposed_seconds, r.exposed_seconds);
    window_start_ = now;
    paused_ = 0;
    window_exposed_.reset();
    last_step_ = step;
    return r;
  }
  // Runs `work` outside the measured time. The backend is synchronized first, so that the training
  // work still queued on its stream counts as training; so do the collectives' waits until then,
  // and not those of `work`.
  template <class F>
  void pause(nn::backend& be, F&& work) {
    be.synchronize();
    window_exposed_ = add(window_exposed_, exposed_since_last());
    const clock::time_point t0 = clock::now();
    work();
    paused_ += std::chrono::duration<double>(clock::now() - t0).count();
    be.synchronize();
    (void)exposed_since_last();
  }
  bool past_warmup() const noexcept { return windows_ > 1; }
  rate summary() const noexcept { return past_warmup() ? rest_ : first_; }

 private:
  nn::communicator* comm_;
  clock::time_point window_start_ = clock::now();
  double paused_ = 0;
  std::optional<double> window_exposed_;
  std::size_t last_step_ = 0, windows_ = 0;
  rate first_, rest_;

  std::optional<double> exposed_since_last() { return comm_ ? comm_->take_exposed_seconds() : std::nullopt; }
  static std::optional<double> add(std::optional<double> a, std::optional<double> b) {
    if (!a) return b;
    if (!b) return a;
    return *a + *b;
  }
};

inline nn::model_config model_config_of(const options& o, std::size_t vocab) {
  nn::model_config mc;
  mc.vocab = vocab;
  mc.n_layers = o.layers;
  mc.layer.d_model = o.d_model;
  mc.layer.n_heads = o.heads;
  mc.layer.n_kv_heads = o.kv_heads;
  mc.layer.d_ff = o.ffn;
  mc.layer.rope_theta = o.rope_theta;  // --model's (the defaults: today's 10000, 1e-5, no scaling)
  mc.layer.rope_scale = o.rope_scale;
  mc.layer.norm_eps = o.norm_eps;
  return mc;
}

// make(), with an allocation failure (std::bad_alloc, or std::length_error from a container asked
// for more than it can hold) turned into an error that says what did not fit.
template <class Make>
auto allocating(const std::string& what, Make&& make) {
  try {
    return make();
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(what + " does not fit in memory (std::bad_alloc)");
  } catch (const std::length_error& e) {
    throw std::runtime_error(what + " is too large (std::length_error: " + e.what() + ")");
  }
}

// The name and first non-finite element of the first weight that has one (a host read of every
// weight: before a checkpoint only).
inline std::optional<std::string> non_finite_weight(nn::model& m) {
  for (nn::parameter* p : m.parameters()) {
    if (!p->value.defined()) continue;
    for (double v : m.be().read(p->value))
      if (!std::isfinite(v)) return "'" + p->name + "' (" + exact_text(v) + ")";
  }
  return std::nullopt;
}

// The windows every step of --steps trains on, as the --dump-batches help describes them: step s
// trains the batch source's batches s x (ranks x micro-batches) + j, j = r x micro-batches + k
// for rank r's k-th micro-batch (nn::trainer::step), so the file lists them in that order; one
// byte a token for text (MXBATCH1, what tools/twin reads), int32 for token datasets (MXBATCH2).
inline void dump_batches(const fs::path& path, const nn::batch_source& source, const options& o, std::size_t ranks, bool text) {
  const std::size_t per_step = ranks * o.micro_batches;  // no wrap: check_options bounds steps x this x batch x (seq + 1)
  const int width = text ? 1 : 4;
  std::vector<std::uint8_t> out(batch_dump_magic.begin(), batch_dump_magic.end());
  if (!text) out.back() = '2';
  auto put = [&](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  for (std::uint64_t v : {std::uint64_t{o.steps}, std::uint64_t{per_step * o.batch}, std::uint64_t{o.seq + 1}}) put(v, 8);
  allocating("--dump-batches: " + std::to_string(o.steps) + " steps x " + std::to_string(per_step * o.batch) + " rows x " +
                 std::to_string(o.seq + 1) + " tokens",
             [&] { out.reserve(out.size() + o.steps * per_step * o.batch * (o.seq + 1) * static_cast<std::size_t>(width)); });
  for (std::size_t s = 0; s < o.steps; ++s)
    for (std::size_t j = 0; j < per_step; ++j) {
      const nn::batch b = source.at(std::uint64_t{s} * per_step + j);
      for (std::size_t row = 0; row < o.batch; ++row) {
        for (std::size_t t = 0; t < o.seq; ++t) put(static_cast<std::uint32_t>(b.inputs[row * o.seq + t]), width);
        put(static_cast<std::uint32_t>(b.targets[row * o.seq + o.seq - 1]), width);
      }
    }
  try {
    mxkit::detail::replace_file(path, out.data(), out.size());
  } catch (const std::system_error& e) {
    throw std::runtime_error("--dump-batches '" + path.string() + "': " + e.what());
  }
}

// Trains as `o` says on `be`, as one rank of `comm` when given (every rank calls it; rank 0
// prints). Returns the process exit code; throws on failures.
int run(nn::backend& be, const device_info& device, const options& given, nn::communicator* comm) {
  const auto t_start = std::chrono::steady_clock::now();
  mlperf_clock clock(t_start);  // time_to_train.hpp
  const bool lead = !comm || comm->rank() == 0;
  const std::size_t ranks = comm ? static_cast<std::size_t>(comm->size()) : 1;
  const options o = resolve_global_batch(given, ranks);  // --global-batch: the micro-batches of these ranks
  auto say = [&](const char* fmt, auto... args) {
    if (!lead) return;
    std::printf("[%7.1fs] ", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
    std::printf(fmt, args...);
    std::printf("\n");
    std::fflush(stdout);
  };
  using ull = unsigned long long;

  // Sharding needs ranks to shard over: said here, naming the flags, rather than by data_parallel.
  if (!comm && o.shard != nn::sharding::none)
    throw usage_error(std::string("--shard ") + mxkit::name_of(o.shard) +
                      " needs several ranks: 05_train --ranks N (N >= 2), or a GPU program started by its launcher on several "
                      "GPUs; one rank shards nothing (--shard none)");
  if (!comm && o.reduce_dtype != nn::dtype::f32)
    throw usage_error(std::string("--reduce-dtype ") + mxkit::name_of(o.reduce_dtype) +
                      " needs several ranks: one rank reduces no gradients (--reduce-dtype f32)");
  if (!comm && o.comm_sms > 0)
    throw usage_error("--comm-sms " + std::to_string(o.comm_sms) + " needs several GPUs: one rank runs no collectives");
  if (comm && o.lora_rank > 0)
    throw usage_error("--lora " + std::to_string(o.lora_rank) + " trains on one rank: " + std::to_string(comm->size()) +
                      " ranks are not supported with it");
  // Before anything is loaded or trained: the outputs (mxkit/train_program/files.hpp), then the data and the
  // --resume checkpoint's settings (a single file's header, or a folder of shards' manifest).
  std::vector<flagged_path> inputs = data_files(o);
  if (!o.resume.empty()) inputs.push_back({"--resume", o.resume});
  if (!o.init_from.empty())  // a sharded checkpoint's index and every shard it names
    for (const fs::path& f : nn::hf_checkpoint_files(o.init_from)) inputs.push_back({"--init-from", f});
  check_outputs(o, inputs, comm != nullptr);
  const training_data data = load_data(o);
  options sized = o;  // (the model's size with the data's vocabulary)
  sized.vocab = data.vocab;
  const nn::checkpoint_settings settings = run_settings(o, data);
  if (!o.resume.empty())
    check_resume(o, fs::is_directory(o.resume) ? nn::read_sharded_checkpoint_info(o.resume) : nn::read_checkpoint_info(o.resume),
                 settings, lead);

  const std::vector<nn::batch> eval_batches = allocating("--eval-batches " + std::to_string(o.eval_batches) + " batches of --batch " +
                                                             std::to_string(o.batch) + " x --seq " + std::to_string(o.seq) + " tokens",
                                                         [&] { return evaluation_batches(data, o); });
  // The trainer's batches: a token dataset's samples are built here for the whole run, every
  // rank's micro-batches of every step (train_data.hpp).
  const std::uint64_t run_samples = static_cast<std::uint64_t>(o.steps) * ranks * o.micro_batches * o.batch;
  const std::shared_ptr<const nn::batch_source> train_batches =
      allocating("the training samples of " + std::to_string(run_samples) + " sequences (--steps x global batch)", [&] {
        try {
          return training_batches(data, o, run_samples);
        } catch (const usage_error&) {
          throw;
        } catch (const std::invalid_argument& e) {
          throw usage_error("--data: " + std::string(e.what()));
        }
      });
  const nn::recipe r = make_recipe(o);
  const nn::model_config mc = model_config_of(o, data.vocab);
  char size[32];
  std::snprintf(size, sizeof size, "%.3g", approximate_parameters(sized));
  // Several ranks: the model is built as shapes and initializers, and the trainer's data_parallel
  // allocates and fills what each rank keeps (--shard full: its shard only; nn/model.hpp,
  // defer_memory), so that no rank makes or holds the whole fp32 model; the same values.
  // --init-from is read after that, into what each rank keeps (io/hf_sharded.hpp).
  nn::model_build_hooks build;
  build.defer_memory = comm != nullptr;
  const auto model = allocating(std::string("the model (about ") + size + " parameters: --layers, --d-model, --ffn)",
                                [&] { return std::make_unique<nn::model>(be, mc, r, o.seed, build); });
  nn::model& m = *model;
  if (!o.dump_batches.empty() && lead)
    dump_batches(o.dump_batches, *train_batches, o, ranks, data.kind == nn::dataset_kind::text);
  m.set_recompute(o.recompute);
  m.set_layer_memory({.weight_copies_per_gemm = o.weight_copies_per_gemm});

  std::size_t n_params = 0;
  for (nn::parameter* p : m.parameters()) n_params += p->value.size();
  // --lora: the base frozen and the adapters added before the trainer holds state for them.
  const lora_setup lora = o.lora_rank > 0 ? apply_lora(m, o) : lora_setup{};
  // FLOPs and tokens of the global batch; MFU per rank divides by the ranks.
  const double global_micro = static_cast<double>(ranks * o.micro_batches);
  step_flops flops = count_flops(m, o);
  flops.per_step *= global_micro;
  const double tokens_per_step = static_cast<double>(o.batch * o.seq) * global_micro;
  const double peak = o.peak_tflops.value_or(device.peak_tflops) * static_cast<double>(ranks);  // every rank's device
  if (lead) {
    std::printf("device: %s (backend %s); bf16 peak %s\n", device.name.c_str(), be.name(),
                peak > 0 ? (detail::text_of(peak / static_cast<double>(ranks)) + " TFLOP/s").c_str() : "unknown (no MFU)");
    std::printf("model: layers %zu, d_model %zu, heads %zu (kv %zu, head dim %zu), SwiGLU %zu, vocab %zu: %s parameters "
                "(%s in linears)\n",
                o.layers, o.d_model, o.heads, o.kv_heads, o.d_model / o.heads, o.ffn, mc.vocab,
                millions(static_cast<double>(n_params)).c_str(), millions(flops.linear_weights).c_str());
    if (!o.model.empty()) std::printf("--model %s: RoPE %s, norm eps %g\n", o.model.c_str(), rope_setting(o).c_str(), o.norm_eps);
    if (m.loss_chunks().chunked(o.batch * o.seq))
      std::printf("head and loss: %zu tokens at a time of a micro-batch's %zu (the logits are never held whole)\n", m.loss_chunks().chunk(),
                  o.batch * o.seq);
    std::printf("recipe: %s, %s activations; batch %zu x %zu = %.0f tokens/step; %.3g TFLOP/step (--help: convention)\n",
                r.name.c_str(), mxkit::name_of(o.activations), o.batch, o.seq, tokens_per_step, flops.per_step / 1e12);
    if (o.lora_rank > 0)
      std::printf("LoRA: rank %zu, alpha %g (scale %g), adapters on %s of every layer, seed %llu; trainable %zu parameters "
                  "(the adapters), frozen %zu (the --init-from base)\n",
                  o.lora_rank, o.lora().alpha, o.lora().alpha / static_cast<double>(o.lora_rank),
                  lora_targets_text(o.lora_targets.value_or(nn::lora_targets{})).c_str(), static_cast<ull>(lora_seed(o)),
                  lora.trainable, lora.frozen);
    if (o.weight_copies_per_gemm) std::printf("weight copies: made per GEMM and freed after it (--weight-copies per-gemm)\n");
    const char* unit = data.kind == nn::dataset_kind::text ? "bytes" : "tokens";
    std::printf("data: %s: %llu %s for training, %llu %s (%zu evaluation batches)\n", data.description.c_str(),
                static_cast<ull>(data.train.tokens), unit, static_cast<ull>(data.eval.tokens), o.eval_data.empty() ? "held out" : "to evaluate on",
                eval_batches.size());
    if (data.loss_mask)
      std::printf("loss: the packed data's loss mask applies: each batch's mean over the targets it counts\n");
    std::printf("run: %zu steps, lr %g (warmup %zu, cosine to %g), seed %llu; AdamW betas %g, %g, eps %g, weight decay %g, "
                "clip %g\n",
                o.steps, o.lr, o.warmup_steps(), o.lr / 10, static_cast<ull>(o.seed), o.adamw.beta1, o.adamw.beta2, o.adamw.eps,
                o.adamw.weight_decay, o.adamw.clip_norm);
    if (!o.preset.empty()) {  // the preset's values, those in effect, and the scaling to these ranks
      using preset = mlperf_llama31_8b;
      std::printf("preset %s (mlperf_llama31_8b.hpp cites each source):\n", o.preset.c_str());
      for (const std::string& line : preset::table(&o)) std::printf("  %s\n", line.c_str());
      const std::size_t global = ranks * o.micro_batches * o.batch;
      std::printf("scaling: global batch %zu sequences = %zu rank%s x %zu micro-batch%s x --batch %zu (the reference: %zu GPUs x %zu x %zu); ",
                  global, ranks, ranks == 1 ? "" : "s", o.micro_batches, o.micro_batches == 1 ? "" : "es", o.batch, preset::reference_gpus,
                  preset::global_batch / (preset::reference_gpus * preset::micro_batch), preset::micro_batch);
      if (global == preset::global_batch)
        std::printf("the reference's global batch is kept: --lr, --warmup and --eval-every need no rescaling\n");
      else
        std::printf("not the reference's %zu: --lr, --warmup and --eval-every are kept as given, not rescaled (the rules set no "
                    "learning-rate rule for llama31_8b); evaluation every %zu sequences (the reference: %zu)\n",
                    preset::global_batch, o.eval_every * global, preset::eval_every_sequences);
    }
    if (o.target_loss)
      std::printf("target: held-out loss <= %g, evaluated every %zu steps on %zu batches (%zu sequences)\n", *o.target_loss, o.eval_every,
                  eval_batches.size(), eval_batches.size() * o.batch);
    if (ranks > 1 || o.micro_batches > 1)
      std::printf("ranks: %zu x %zu micro-batches of %zu x %zu; sharding %s%s%s%s; gradients reduced in %s%s (throughput is global, "
                  "MFU per rank)\n",
                  ranks, o.micro_batches, o.batch, o.seq, mxkit::name_of(o.shard),
                  o.shard == nn::sharding::full && o.reshard_after_forward ? ", resharded after forward" : "",
                  o.shard == nn::sharding::full && !o.overlap_reductions ? ", reductions not overlapped" : "",
                  o.recompute ? ", activation recomputation" : "", mxkit::name_of(o.reduce_dtype),
                  o.comm_sms > 0 ? (", communication on " + std::to_string(o.comm_sms) + " SMs").c_str() : "");
    if (device.memory) std::printf("device memory after initialization: %s\n", device.memory().c_str());
    std::fflush(stdout);
  }

  loss_csv csv(lead ? o.csv : fs::path{});
  throughput speed(comm);
  // The first logged step whose loss or gradient norm is not finite ends the run (before any
  // checkpoint), and says so; finite_until is the last logged step that was finite.
  std::optional<std::string> diverged;
  std::size_t finite_until = 0;
  nn::train_config tc;
  tc.steps = o.steps;
  tc.optimizer = o.adamw;
  tc.shape = {o.batch, o.seq};
  tc.schedule = {o.lr, o.lr / 10, o.warmup_steps(), o.steps};
  tc.data_seed = o.seed + 1;
  tc.log_every = o.log_every;
  tc.progress_every = o.log_every;
  tc.parallel = {comm, o.micro_batches, o.shard};
  tc.parallel.gather_quantized = o.gather_quantized;
  tc.parallel.reshard_after_forward = o.reshard_after_forward;
  tc.parallel.overlap_reductions = o.overlap_reductions;
  tc.parallel.reduce_dtype = o.reduce_dtype;
  tc.step_graph = o.cuda_graph;
  tc.on_progress = [&](const nn::train_progress& p) {
    const throughput::rate w = speed.close(p.step);
    const double tokens_per_s = w.per_second(tokens_per_step), tflops = w.per_second(flops.per_step) / 1e12;
    char mfu[32] = "", exposed[40] = "";
    if (peak > 0) std::snprintf(mfu, sizeof mfu, "  MFU %5.1f%%", 100.0 * tflops / peak);
    if (const std::optional<double> f = w.exposed_fraction()) std::snprintf(exposed, sizeof exposed, "  comm exposed %4.1f%%", 100.0 * *f);
    say("step %6zu/%zu  loss %.4f  lr %.2e  gnorm %6.3f  %9.0f tok/s  %7.4g TFLOP/s%s%s", p.step, p.steps, p.loss, p.lr,
        p.grad_norm, tokens_per_s, tflops, mfu, exposed);
    csv.train(p.step, p.loss, tokens_per_s, p.lr, tokens_per_step * static_cast<double>(p.step), clock.elapsed());
    if (diverged) return;
    if (std::isfinite(p.loss) && std::isfinite(p.grad_norm)) {
      finite_until = p.step;
      return;
    }
    const bool exact = finite_until + 1 == p.step;  // every step since the last finite one was read
    const std::string at = std::to_string(p.step), from = std::to_string(finite_until + 1);
    std::vector<std::string> what;
    if (!std::isfinite(p.loss))
      what.push_back((exact ? "the training loss is " : "the mean training loss of steps " + from + "-" + at + " is ") + exact_text(p.loss));
    if (!std::isfinite(p.grad_norm))
      what.push_back((exact ? "the gradient norm is " : "the gradient norm of step " + at + " is ") + exact_text(p.grad_norm));
    diverged = (exact ? "the run diverged at step " + at
                      : "the run diverged between steps " + from + " and " + at + " (the loss is read every --log-every " +
                            std::to_string(o.log_every) + " steps)") +
               ": " + joined(what);
  };
  const auto trainer = allocating("the training state (--batch " + std::to_string(o.batch) + " x --seq " + std::to_string(o.seq) + ")",
                                  [&] { return std::make_unique<nn::trainer>(m, train_batches, tc); });
  nn::trainer& t = *trainer;
  if (t.steps().applies()) say("%s", "step graph: each step recorded once and replayed (--cuda-graph on)");
  else if (t.steps().backend_records()) say("step graph: every step launched operation by operation: %s", t.steps().refusal().c_str());
  // --init-from: each tensor read from its file into the memory this rank keeps (full sharding: its
  // shard of each weight), after the training state has laid the shards out.
  if (!o.init_from.empty()) {
    const nn::hf_import_stats in = nn::import_hf_checkpoint(o.init_from, m, nn::hf_rank_targets(m, t.parallel()));
    say("weights from '%s': %zu tensors in %zu file%s, %s; this rank read %s (%.0f%%)", o.init_from.string().c_str(), in.tensors,
        in.shards, in.shards == 1 ? "" : "s", mib(static_cast<std::size_t>(in.bytes)).c_str(),
        mib(static_cast<std::size_t>(in.bytes_read)).c_str(), in.bytes ? 100.0 * static_cast<double>(in.bytes_read) / static_cast<double>(in.bytes) : 0.0);
  }
  say("training state ready: this rank holds %s of parameters, %s of optimizer state%s%s", mib(be.memory().live(nn::mem_tag::parameter)).c_str(),
      mib(be.memory().live(nn::mem_tag::optimizer)).c_str(), device.memory ? "; device memory: " : "",
      device.memory ? device.memory().c_str() : "");
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
    finite_until = static_cast<std::size_t>(info.steps);
    csv.keep_rows_until(static_cast<std::size_t>(info.steps));
    say("resumed from '%s' at step %llu", o.resume.string().c_str(), static_cast<ull>(info.steps));
  }
  const std::size_t first_step = t.steps_done();
  speed.start(first_step);  // data loading, initialization and resumption are not training time
  clock.start_run();        // MLPerf's run_start (time_to_train.hpp)
  target_state target;
  target.target = o.target_loss;
  const double sequences_per_step = static_cast<double>(o.batch) * global_micro;

  double last_eval = -1;
  // A checkpoint is due every --checkpoint-every steps and saved at the first logged step from
  // there (the same step when --checkpoint-every is a multiple of --log-every), whose loss and
  // gradient norm are then known to be finite, and only if the weights are finite too.
  std::size_t checkpoint_due = o.checkpoint_every > 0 ? (first_step / o.checkpoint_every + 1) * o.checkpoint_every : end;
  std::optional<std::size_t> saved;  // the step of this run's last checkpoint
  bool switched = false;  // (a resumed run past --switch-at switches before its first step)
  while (t.steps_done() < end && !diverged && !target.reached()) {
    if (!switched && !o.switch_to.empty() && t.steps_done() >= o.switch_at) {
      switched = true;
      options sw = o;
      sw.recipe = o.switch_to;
      m.set_recipe(make_recipe(sw));
      say("step %zu: switched to the recipe %s", t.steps_done(), m.current_recipe().name.c_str());
    }
    t.step();
    const std::size_t s = t.steps_done();
    if (diverged) break;
    bool last = s == end;
    const bool logged = s % o.log_every == 0 || s == o.steps;
    if (o.eval_every > 0 && (s % o.eval_every == 0 || last))
      speed.pause(be, [&] {
        last_eval = nn::evaluate(m, eval_batches);
        // Every rank evaluates the same batches on the same weights; the largest of their losses
        // is every rank's, so that all stop at one evaluation even if a device's sums differed.
        if (comm && o.target_loss) {
          nn::tensor x = be.scalar();
          be.write(x, std::vector<double>{last_eval});
          comm->all_reduce(x, nn::reduce_op::max);
          comm->join();
          last_eval = be.read_scalar(x);
        }
        const double tokens = tokens_per_step * static_cast<double>(s), seconds = clock.elapsed();  // run_stop, when reached
        say("eval %6zu/%zu  loss %.4f  (%zu held-out batches)%s", s, o.steps, last_eval, eval_batches.size(),
            target.evaluated(s, last_eval, tokens, sequences_per_step * static_cast<double>(s), seconds) ? "  target reached" : "");
        csv.eval(s, last_eval, tokens, seconds);
      });
    last = last || target.reached();  // the run ends here: its checkpoint and export follow
    if (!o.checkpoint.empty() && ((s >= checkpoint_due && logged) || last))
      speed.pause(be, [&] {
        if (const std::optional<std::string> bad = non_finite_weight(m)) {
          diverged = "the run diverged at step " + std::to_string(s) + ": the weight " + *bad + " is not finite after it";
          return;
        }
        if (sharded_files) nn::save_sharded_checkpoint(o.checkpoint, t, settings);
        else nn::save_checkpoint(o.checkpoint, m, &t.optimizer(), {s, 0, settings});
        saved = s;
        if (o.checkpoint_every > 0) checkpoint_due = (s / o.checkpoint_every + 1) * o.checkpoint_every;
        csv.write();
        say("checkpoint at step %zu: %s", s, o.checkpoint.string().c_str());
      });
  }
  csv.write();  // after a divergence too: its rows show it (a resume keeps the rows up to its checkpoint only)
  if (diverged) {
    std::string kept;
    if (!o.checkpoint.empty())
      kept = saved ? "; the checkpoint '" + o.checkpoint.string() + "' keeps step " + std::to_string(*saved)
                   : "; nothing was saved to --checkpoint '" + o.checkpoint.string() + "'";
    throw std::runtime_error(*diverged + kept + " (a lower --lr, or a longer --warmup, may help)");
  }
  if (!o.export_path.empty()) {
    // Rank 0 writes the whole model; under full sharding every rank's shard is gathered first
    // (a collective: every rank takes part), and released again after.
    t.parallel().gather_all();
    std::exception_ptr failed;
    if (lead) {
      try {
        if (o.export_max_shard > 0) nn::export_hf_sharded(o.export_path, m, o.export_dtype, o.export_max_shard);
        else nn::export_safetensors(o.export_path, m, o.export_dtype);
      } catch (...) {
        failed = std::current_exception();
      }
    }
    t.parallel().release_all(false);
    if (failed) std::rethrow_exception(failed);
  }
  const int status = o.target_loss && !target.reached() && t.steps_done() == o.steps ? exit_target_not_reached : 0;
  if (!lead) return status;

  const throughput::rate total = speed.summary();
  const double tflops = total.per_second(flops.per_step) / 1e12;
  std::printf("\ntrained steps %zu..%zu of %zu: final training loss %.4f", first_step + 1, t.steps_done(), o.steps, t.recent_loss(1));
  if (last_eval >= 0) std::printf(", held-out loss %.4f", last_eval);
  std::printf("\nthroughput%s: %.0f tokens/s, %.4g model TFLOP/s", speed.past_warmup() ? " after the first progress window" : "",
              total.per_second(tokens_per_step), tflops);
  if (peak > 0) std::printf(", MFU %.1f%%", 100.0 * tflops / peak);
  if (const std::optional<double> f = total.exposed_fraction())
    std::printf("\nexposed communication (rank 0): %.2f ms a step, %.2f%% of the step", 1e3 * *total.exposed_seconds / total.steps, 100.0 * *f);
  std::printf("\nskipped optimizer steps (non-finite gradients): %llu; host reads: %llu\n",
              static_cast<ull>(t.optimizer().skipped_steps()), static_cast<ull>(be.counters().host_reads));
  std::printf("backend memory peak: %s (tracked tensors)", mib(be.memory().peak_total()).c_str());
  if (device.memory) std::printf("; device memory now: %s", device.memory().c_str());
  std::printf("\nat the peak:");  // what to cut to lower it
  for (std::size_t i = 0; i < nn::mem_tag_count; ++i)
    if (const std::size_t b = be.memory().live_at_peak(static_cast<nn::mem_tag>(i)))
      std::printf(" %s %s", mxkit::name_of(static_cast<nn::mem_tag>(i)), mib(b).c_str());
  if (csv.enabled()) std::printf("\nloss CSV: %s", o.csv.string().c_str());
  std::printf("\n");
  print_time_to_train(target, clock, first_step, t.steps_done(), t.steps_done() < o.steps);
  if (status == exit_target_not_reached) std::printf("exit status %d: the run ended without reaching --target-loss\n", status);
  return status;
}

}  // namespace train_program
MXKIT_END_NAMESPACE
