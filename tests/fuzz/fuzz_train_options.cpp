// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the training program's command line (mxkit/train_program/options.hpp), parsed
// without training. The input is the arguments after the program's name, separated by NUL bytes
// (at most 64). parse_options must return options, nullopt (--help) or throw usage_error; any
// other exception (std::out_of_range, std::length_error, std::bad_alloc...) is a finding, as is
// any crash or sanitizer report. Options it returns must pass check_options' promises (the model
// and schedule constraints) and read back unchanged when written out as flags again.
// Among those promises: --ranks within 1..max_ranks (an int: no value wraps into another count),
// and the tokens the run reads, --steps x --ranks x --micro-batches x --batch x (--seq + 1), below
// 2^64 (the loader's batch numbers and --dump-batches' size cannot wrap).
// Seeds (corpus/fuzz_train_options): the ctest tiny model, a resumed run with switches, "=" forms,
// --help, values at and past the limits, several ranks, and the interchange outputs (--export,
// --dump-batches, --init-from) with counts at and past theirs.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <mxkit/train_program/options.hpp>

namespace {

using mxkit::train_program::options;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_train_options: %s\n", what.c_str());
  std::abort();
}

std::optional<options> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "05_train");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return mxkit::train_program::parse_options(static_cast<int>(args.size()), argv.data());
}

// Every field as flags ("--flag=value", so that a value starting with "--" stays a value).
std::vector<std::string> as_flags(const options& o) {
  using std::to_string;
  char lr[40];
  std::snprintf(lr, sizeof lr, "%.17g", o.lr);
  std::vector<std::string> out{"--recipe=" + o.recipe, std::string("--activations=") + mxkit::name_of(o.activations),
                               "--layers=" + to_string(o.layers), "--d-model=" + to_string(o.d_model),
                               "--heads=" + to_string(o.heads), "--kv-heads=" + to_string(o.kv_heads), "--ffn=" + to_string(o.ffn),
                               "--seq=" + to_string(o.seq), "--batch=" + to_string(o.batch), "--steps=" + to_string(o.steps),
                               std::string("--lr=") + lr, "--seed=" + to_string(o.seed), "--log-every=" + to_string(o.log_every),
                               "--eval-every=" + to_string(o.eval_every), "--eval-batches=" + to_string(o.eval_batches),
                               "--checkpoint-every=" + to_string(o.checkpoint_every)};
  if (!o.model.empty()) out.push_back("--model=" + o.model);  // (the shape flags above override it, as they did)
  if (o.warmup) out.push_back("--warmup=" + to_string(*o.warmup));
  if (o.stop_after) out.push_back("--stop-after=" + to_string(*o.stop_after));
  if (o.vocab) out.push_back("--vocab=" + to_string(*o.vocab));
  if (o.peak_tflops) {
    char b[40];
    std::snprintf(b, sizeof b, "%.17g", *o.peak_tflops);
    out.push_back(std::string("--peak-tflops=") + b);
  }
  for (const auto& [flag, path] : {std::pair{"--data=", &o.data}, {"--eval-data=", &o.eval_data}, {"--checkpoint=", &o.checkpoint}, {"--resume=", &o.resume},
                                   {"--csv=", &o.csv}, {"--init-from=", &o.init_from}, {"--export=", &o.export_path},
                                   {"--dump-batches=", &o.dump_batches}})
    if (!path->empty()) out.push_back(flag + path->string());
  if (o.overwrite) out.push_back("--overwrite");
  if (o.resume_any_config) out.push_back("--resume-any-config");
  out.push_back(std::string("--export-dtype=") + (o.export_dtype == mxkit::nn::safetensors_dtype::bf16 ? "bf16" : "f32"));
  out.push_back("--ranks=" + to_string(o.ranks));
  out.push_back("--micro-batches=" + to_string(o.micro_batches));
  out.push_back(std::string("--shard=") + mxkit::name_of(o.shard));
  out.push_back(std::string("--recompute=") + (o.recompute ? "on" : "off"));
  out.push_back(std::string("--weight-copies=") + (o.weight_copies_per_gemm ? "per-gemm" : "cached"));
  out.push_back(std::string("--gemm=") + (o.vendor_gemm ? "vendor" : "mxkit"));
  out.push_back(std::string("--gather=") + (o.gather_quantized ? "copies" : "fp32"));
  out.push_back(std::string("--reshard-after-forward=") + (o.reshard_after_forward ? "on" : "off"));
  out.push_back(std::string("--overlap-reductions=") + (o.overlap_reductions ? "on" : "off"));
  if (o.lora_rank > 0) out.push_back("--lora=" + to_string(o.lora_rank));
  if (o.lora_alpha) {
    char b[40];
    std::snprintf(b, sizeof b, "%.17g", *o.lora_alpha);
    out.push_back(std::string("--lora-alpha=") + b);
  }
  if (o.lora_targets) out.push_back("--lora-targets=" + mxkit::train_program::lora_targets_text(*o.lora_targets));
  if (!o.switch_to.empty()) {
    out.push_back("--switch-to=" + o.switch_to);
    out.push_back("--switch-at=" + to_string(o.switch_at));
  }
  return out;
}

bool same(const options& a, const options& b) {
  return a.data == b.data && a.eval_data == b.eval_data && a.vocab == b.vocab && a.recipe == b.recipe && a.activations == b.activations && a.layers == b.layers && a.d_model == b.d_model &&
         a.heads == b.heads && a.kv_heads == b.kv_heads && a.ffn == b.ffn && a.seq == b.seq && a.batch == b.batch &&
         a.steps == b.steps && a.stop_after == b.stop_after && a.warmup == b.warmup && a.lr == b.lr && a.eval_every == b.eval_every &&
         a.eval_batches == b.eval_batches && a.log_every == b.log_every && a.checkpoint == b.checkpoint && a.resume == b.resume &&
         a.csv == b.csv && a.checkpoint_every == b.checkpoint_every && a.seed == b.seed && a.peak_tflops == b.peak_tflops &&
         a.overwrite == b.overwrite && a.resume_any_config == b.resume_any_config && a.init_from == b.init_from &&
         a.export_path == b.export_path && a.dump_batches == b.dump_batches && a.export_dtype == b.export_dtype &&
         a.switch_to == b.switch_to && a.switch_at == b.switch_at && a.ranks == b.ranks && a.micro_batches == b.micro_batches &&
         a.shard == b.shard && a.recompute == b.recompute && a.weight_copies_per_gemm == b.weight_copies_per_gemm && a.gather_quantized == b.gather_quantized &&
         a.reshard_after_forward == b.reshard_after_forward && a.overlap_reductions == b.overlap_reductions && a.model == b.model &&
         a.rope_theta == b.rope_theta && a.norm_eps == b.norm_eps && a.rope_scale == b.rope_scale && a.lora_rank == b.lora_rank &&
         a.lora_alpha == b.lora_alpha && a.lora_targets.has_value() == b.lora_targets.has_value() &&
         (!a.lora_targets || mxkit::train_program::lora_targets_text(*a.lora_targets) == mxkit::train_program::lora_targets_text(*b.lora_targets));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] != 0) {
      args.back() += static_cast<char>(data[i]);
    } else if (args.size() < 64) {
      args.emplace_back();
    }
  }
  if (size == 0) args.clear();
  std::optional<options> o;
  try {
    o = parse(args);
  } catch (const mxkit::train_program::usage_error&) {
    return 0;  // a refusal: fine
  } catch (const std::exception& e) {
    finding(std::string("parse_options threw something other than usage_error: ") + e.what());
  }
  if (!o) return 0;  // --help
  // check_options' promises.
  if (o->heads == 0 || o->kv_heads == 0 || o->d_model % o->heads != 0 || o->heads % o->kv_heads != 0 || (o->d_model / o->heads) % 2 != 0)
    finding("accepted a model the layers refuse");
  if (o->warmup_steps() >= o->steps || o->log_every == 0 || (o->stop_after && (*o->stop_after > o->steps || *o->stop_after % o->log_every)))
    finding("accepted a schedule the trainer refuses");
  if (!(o->lr > 0) || !(o->lr < 1e300) || !(mxkit::train_program::approximate_parameters(*o) < 1.9e19))
    finding("accepted an lr or a model size out of range");
  if (o->ranks < 1 || o->ranks > mxkit::train_program::max_ranks || o->micro_batches == 0)
    finding("accepted --ranks or --micro-batches out of range");
  if (o->target_loss && o->eval_every == 0) finding("accepted --target-loss without evaluations");
  if (o->global_batch && (*o->global_batch == 0 || *o->global_batch % o->batch != 0)) finding("accepted a --global-batch --batch does not divide");
  if (!(o->adamw.beta1 >= 0 && o->adamw.beta1 < 1 && o->adamw.beta2 >= 0 && o->adamw.beta2 < 1 && o->adamw.eps > 0))
    finding("accepted AdamW settings the optimizer refuses");
  if ((o->lora_alpha || o->lora_targets) && o->lora_rank == 0) finding("accepted --lora-alpha or --lora-targets without --lora");
  if (o->lora_rank > 0 && (o->init_from.empty() || !o->checkpoint.empty() || !o->resume.empty() || !o->export_path.empty() ||
                           o->shard != mxkit::nn::sharding::none || o->lora_rank > o->d_model ||
                           (o->lora_targets && o->lora_targets->down && o->lora_rank > o->ffn)))
    finding("accepted --lora with flags it refuses, or a rank above an adapted linear's side");
  {
    std::uint64_t tokens = 1;  // (the fuzzer is built by clang: its overflow builtin is the oracle)
    bool wraps = o->seq == std::numeric_limits<std::size_t>::max();
    for (const std::uint64_t f : {std::uint64_t{o->steps}, static_cast<std::uint64_t>(o->ranks), std::uint64_t{o->micro_batches},
                                  std::uint64_t{o->batch}, std::uint64_t{o->seq} + 1})
      wraps = wraps || __builtin_mul_overflow(tokens, f, &tokens);
    if (wraps) finding("accepted --steps x --ranks x --micro-batches x --batch x (--seq + 1) of 2^64 or more");
  }
  // Written out and parsed again: the same options.
  try {
    const std::optional<options> again = parse(as_flags(*o));
    if (!again || !same(*o, *again)) finding("accepted options do not read back the same as flags");
  } catch (const std::exception& e) {
    finding(std::string("accepted options, written out as flags, are refused: ") + e.what());
  }
  return 0;
}
