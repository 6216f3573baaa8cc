// SPDX-License-Identifier: Apache-2.0
// Trains a tiny Llama-style model from random weights with each training recipe on the host
// reference path, then LoRA-fine-tunes the bf16 result on a second corpus with the MXFP4 -> FP8
// healing recipe, and prints one table (docs/training.md explains how to read it).
//
//   03_train_recipes [data_dir] [--quick] [--help]
//
// data_dir holds stories.txt and qa.txt (default: the repository's data/, found in
// $MXKIT_DATA_DIR, ./data or <this program's folder>/../share/mxkit/data: repository_data.hpp).
// --quick runs a few steps of each run (a smoke test). Runs go to $MXKIT_DEMO_THREADS worker threads (default 2);
// each run is single-threaded and seeded, so the table does not depend on the thread count.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <mxkit/io/checkpoint.hpp>
#include <mxkit/train/data.hpp>
#include <mxkit/host/host_backend.hpp>
#include <mxkit/nn/model.hpp>
#include <mxkit/train/training.hpp>


#include <mxkit/train_program/repository_data.hpp>
namespace fs = std::filesystem;
using namespace mxkit::nn;
using mxkit::ref::host_backend;
namespace rc = mxkit::nn::recipes;

namespace {

std::mutex print_mutex;
const auto t_start = std::chrono::steady_clock::now();

double elapsed() { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(); }

template <class... Args>
void say(const char* fmt, Args... args) {
  std::lock_guard<std::mutex> lock(print_mutex);
  std::printf("[%6.1fs] ", elapsed());
  std::printf(fmt, args...);
  std::printf("\n");
  std::fflush(stdout);
}

constexpr const char* usage =
    "usage: 03_train_recipes [data_dir] [--quick] [--help]\n"
    "Trains a 2-layer width-64 model on stories.txt with each recipe (bf16, FP8 delayed, MXFP8, MXFP4 with\n"
    "and without Hadamard), LoRA-fine-tunes on qa.txt with and without MXFP4 -> FP8 healing, and prints one\n"
    "table (docs/training.md). About 70 s on 2 idle cores.\n"
    "  data_dir  holds stories.txt and qa.txt (default: $MXKIT_DATA_DIR, ./data, <program>/../share/mxkit/data)\n"
    "  --quick   a few steps of each run (a smoke test)\n"
    "  --help    this text (also -h)\n";

struct arguments {
  bool help = false, quick = false;
  std::vector<fs::path> data;  // at most one
};

// --help / -h wins over everything else; an unknown flag or a second data_dir is a usage error.
arguments parse_arguments(int argc, char** argv) {
  arguments a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (arg == "--quick") {
      a.quick = true;
    } else if (arg.rfind("-", 0) == 0 || !a.data.empty()) {
      std::fprintf(stderr, "03_train_recipes: unexpected argument '%s'\n%s", argv[i], usage);
      std::exit(2);
    } else {
      a.data.emplace_back(arg);
    }
  }
  return a;
}

fs::path find_data_dir(const std::vector<fs::path>& given) {
  const mxkit::train_program::data_search s = mxkit::train_program::search_repository_data(given);
  if (s.found) return *s.found;
  std::fprintf(stderr, "03_train_recipes: stories.txt and qa.txt are not in any of: %s; pass the data directory\n",
               s.looked_list().c_str());
  std::exit(2);
}

struct run_spec {
  std::string label;
  recipe r;
  bool lora = false;       // fine-tune the bf16-pretrained base on qa.txt
  std::size_t heal = 0;    // LoRA: healing step (0: none)
  bool save_base = false;  // save the result as the LoRA runs' base
};

struct run_result {
  std::string label;
  std::size_t steps = 0;
  double train_loss = 0, val_loss = 0, seconds = 0;
  std::optional<healing_report> healing;
};

struct demo_config {
  model_config model;
  batch_shape shape{4, 64};
  std::size_t pretrain_steps = 400, finetune_steps = 240, val_batches = 32, loss_window = 20;
  std::uint64_t model_seed = 1234, data_seed = 42;
};

run_result run_one(const run_spec& spec, const demo_config& dc, const corpus_split& corpus, const fs::path& base_ckpt) {
  const auto t0 = std::chrono::steady_clock::now();
  host_backend be;
  model m(be, dc.model, spec.r, dc.model_seed);
  train_config tc;
  tc.shape = dc.shape;
  tc.data_seed = dc.data_seed;
  tc.log_every = dc.loss_window;  // the host reads the loss once per window (the train loss column)
  tc.progress_every = 40;
  if (!spec.lora) {
    tc.steps = dc.pretrain_steps;
    tc.schedule = {3e-3, 3e-4, std::min<std::size_t>(20, tc.steps / 4), tc.steps};
  } else {
    load_checkpoint(base_ckpt, m, nullptr);
    m.freeze_all();
    m.add_lora({}, {16, 32.0}, dc.model_seed + 7);  // the Llama 2 70B recipe: rank 16, alpha 32, QKV + output
    tc.steps = dc.finetune_steps;
    tc.schedule = {2e-3, 2e-4, std::min<std::size_t>(10, tc.steps / 4), tc.steps};
    tc.optimizer.weight_decay = 0.0;
    tc.heal_step = spec.heal;
  }
  const std::string label = spec.label;
  tc.on_progress = [&label](const train_progress& p) {
    say("%-28s step %4zu/%zu  loss %.4f  lr %.2e  (%s)", label.c_str(), p.step, p.steps, p.loss, p.lr, p.recipe);
  };
  trainer t(m, corpus.train, tc);
  t.run();
  run_result out;
  out.label = spec.label;
  out.steps = tc.steps;
  out.train_loss = t.recent_loss(1);  // the mean of the last log_every steps
  out.val_loss = evaluate(m, sequential_batches(corpus.validation, dc.shape, dc.val_batches));
  out.healing = t.healing();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  say("%-28s done: train %.4f  val %.4f  (%.1f s)", label.c_str(), out.train_loss, out.val_loss, out.seconds);
  if (spec.save_base) save_checkpoint(base_ckpt, m, nullptr);
  return out;
}

// Runs tasks on n threads; task i may wait for task deps[i] (or -1).
void run_all(std::size_t n_threads, const std::vector<std::function<void()>>& tasks, const std::vector<int>& deps) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> state(tasks.size(), 0);  // 0 waiting, 1 running, 2 done
  auto worker = [&] {
    for (;;) {
      std::size_t pick = tasks.size();
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] {
          bool all_taken = true;
          for (std::size_t i = 0; i < tasks.size(); ++i) {
            if (state[i] != 0) continue;
            all_taken = false;
            if (deps[i] < 0 || state[static_cast<std::size_t>(deps[i])] == 2) {
              pick = i;
              return true;
            }
          }
          return all_taken;
        });
        if (pick == tasks.size()) return;
        state[pick] = 1;
      }
      tasks[pick]();
      {
        std::lock_guard<std::mutex> lock(mu);
        state[pick] = 2;
      }
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t i = 0; i < n_threads; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
}

std::string kib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const arguments args = parse_arguments(argc, argv);
  if (args.help) {
    std::fputs(usage, stdout);
    return 0;
  }
  const bool quick = args.quick;
  const fs::path data = find_data_dir(args.data);
  demo_config dc;
  dc.model.vocab = byte_tokenizer::vocab;
  dc.model.n_layers = 2;
  dc.model.layer = {64, 4, 2, 192};  // C 64, 4 query heads, 2 kv heads (GQA), SwiGLU width 192
  if (quick) {
    dc.pretrain_steps = 8;
    dc.finetune_steps = 8;
    dc.val_batches = 2;
    dc.loss_window = 4;
  }
  const std::size_t heal_step = dc.finetune_steps * 340 / 550;  // the recipe's 340 of 550
  const corpus_split stories = load_corpus(data / "stories.txt", 0.1);
  const corpus_split qa = load_corpus(data / "qa.txt", 0.1);
  const auto stamp = static_cast<unsigned long long>(std::chrono::system_clock::now().time_since_epoch().count());
  const fs::path base_ckpt = fs::temp_directory_path() / ("mxkit_demo_base_" + std::to_string(stamp) + ".ckpt");

  std::vector<run_spec> specs = {
      {"bf16", rc::bf16(), false, 0, true},
      {"fp8 delayed (hybrid)", rc::fp8_delayed({16, amax_algorithm::max, 0}), false, 0},
      {"mxfp8", rc::mxfp8(), false, 0},
      {"mxfp4 + hadamard", rc::mxfp4_amd(), false, 0},
      {"mxfp4, no hadamard", rc::mxfp4_no_hadamard(), false, 0},
      {"lora bf16", rc::bf16(), true, 0},
      {"lora mxfp4, no healing", rc::mxfp4_amd(), true, 0},
      {"lora mxfp4 -> fp8 (heal)", rc::mxfp4_amd(), true, heal_step},
  };
  const std::size_t lora_baseline = 5;
  std::printf("mxkit training recipes on the host reference path\n");
  std::printf("model: %zu layers, width %zu, %zu heads (%zu kv), SwiGLU %zu, byte vocabulary; batch %zux%zu tokens\n",
              dc.model.n_layers, dc.model.layer.d_model, dc.model.layer.n_heads, dc.model.layer.n_kv_heads, dc.model.layer.d_ff,
              dc.shape.batch, dc.shape.seq);
  std::printf("pretraining: %zu steps on stories.txt; LoRA (rank 16, alpha 32, QKV + output) on qa.txt: %zu steps, "
              "healing to FP8 before step %zu\n\n",
              dc.pretrain_steps, dc.finetune_steps, heal_step);
  std::fflush(stdout);

  std::vector<run_result> results(specs.size());
  std::vector<std::function<void()>> tasks;
  std::vector<int> deps;
  // The pretraining runs first (the longest), the LoRA runs last: they wait for the bf16 base.
  for (std::size_t i : {0, 3, 4, 1, 2, 5, 6, 7}) {
    tasks.emplace_back([&, i] {
      try {
        results[i] = run_one(specs[i], dc, specs[i].lora ? qa : stories, base_ckpt);
      } catch (const std::exception& e) {
        say("%s failed: %s", specs[i].label.c_str(), e.what());
        std::exit(1);
      }
    });
    deps.push_back(specs[i].lora ? 0 : -1);  // task 0 is the bf16 run: the LoRA runs' base
  }
  std::size_t threads = 2;
  if (const char* env = std::getenv("MXKIT_DEMO_THREADS")) threads = std::max(1, std::atoi(env));
  run_all(threads, tasks, deps);

  double base_val = 0;  // the pretrained base on qa.txt before fine-tuning
  {
    host_backend be;
    model m(be, dc.model, rc::bf16(), dc.model_seed);
    load_checkpoint(base_ckpt, m, nullptr);
    base_val = evaluate(m, sequential_batches(qa.validation, dc.shape, dc.val_batches));
  }
  std::error_code ec;
  fs::remove(base_ckpt, ec);

  std::printf("\n%-28s %6s %11s %10s %12s %8s\n", "recipe", "steps", "train loss", "val loss", "val vs bf16", "time");
  std::printf("%-28s %6s %11s %10s %12s %8s\n", "----------------------------", "-----", "----------", "--------", "-----------",
              "-------");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const run_result& r = results[i];
    if (i == lora_baseline)
      std::printf("%-28s %6s %11s %10.4f %12s %8s\n", "lora base (before tuning)", "0", "-", base_val, "", "");
    const double ref = specs[i].lora ? results[lora_baseline].val_loss : results[0].val_loss;
    const bool is_ref = i == 0 || i == lora_baseline;
    char gap[32];
    if (is_ref) std::snprintf(gap, sizeof gap, "(baseline)");
    else std::snprintf(gap, sizeof gap, "%+.4f", r.val_loss - ref);
    std::printf("%-28s %6zu %11.4f %10.4f %12s %7.1fs\n", r.label.c_str(), r.steps, r.train_loss, r.val_loss, gap, r.seconds);
  }
  std::printf("\nlosses: mean next-byte cross-entropy in nats (ln 256 = 5.55 at random init), each run in its own\n"
              "recipe; train = mean of the last %zu steps, val = held-out tail of the corpus. val vs bf16: minus the\n"
              "bf16 run (LoRA rows: minus the bf16 LoRA run). docs/training.md explains the table.\n",
              dc.loss_window);
  for (const run_result& r : results)
    if (r.healing) {
      const healing_report& h = *r.healing;
      std::printf("\nhealing switch of '%s' (%zu linears restored from a %s host stash):\n", r.label.c_str(), h.restored_linears,
                  kib(h.stash_bytes).c_str());
      std::printf("  resident weight memory: MXFP4 phase %s -> MXFP4 freed %s -> FP8 restored %s\n",
                  kib(h.weight_bytes_before).c_str(), kib(h.weight_bytes_dropped).c_str(), kib(h.weight_bytes_after).c_str());
      std::printf("  peak during the switch %s (with MXFP4 and FP8 co-resident it would be %s)\n", kib(h.peak_weight_bytes).c_str(),
                  kib(h.co_resident_bytes).c_str());
    }
  std::printf("\ntotal %.1f s on %zu thread(s)\n", elapsed(), threads);
  return 0;
}
