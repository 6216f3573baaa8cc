// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training program behind examples 05_train (host reference backend) and 06_train_gpu (the
// GPU backend): a Llama-style model from random weights, any recipe, on any file read as bytes or
// a token dataset (Megatron-LM indexed, packed .npy: train_data.hpp), with progress, evaluation,
// checkpoints, resumption and a CSV of the losses. Everything
// here talks to an nn::backend only, so the host build runs (and ctest checks) exactly the code
// the GPU runs; the two mains differ only in the backend they construct and what they know about
// the device (device_info).
//
// The command line is train_options.hpp; the checks of the output files (--checkpoint, --csv,
// --export, --dump-batches) before the first step are files.hpp. A checkpoint, a single
// file or a sharded manifest, records the run's settings (run_settings, train_program.cpp);
// --resume compares them with the flags before it loads anything. A run whose loss or gradient
// norm stops being finite ends with an error before it saves over a checkpoint.
//
// Host reads: the trainer reads the loss (and the gradient norm) at --log-every steps only, so a
// device backend runs the steps in between without waiting for the host. Evaluations and
// checkpoints synchronize first and are timed apart: tokens/s and TFLOP/s count training only.
//
// The default configuration (about 100 M parameters: 16 layers, d_model 768, 12 heads, 4 KV
// heads, SwiGLU 2048, sequence 1024, batch 16) is sized for one GPU; --steps is to be calibrated
// to about five minutes on an H200. On the host, pass a small model (05_train's header comment).
//
// The training itself (run() and what it calls) is train_program.cpp, compiled once by the host
// compiler into a library both programs link (cmake/MxkitTrainProgram.cmake): the GPU program's
// own translation unit then compiles its backend and this header only (docs/perf/build.md).
//
// --lora: a LoRA fine-tune of the --init-from base (train_program/lora.hpp): the base frozen, the
// adapters trained on one rank; --switch-to heals it as it does a pretraining run.
//
// Several ranks: run() takes the rank's nn::communicator (05_train: --ranks N host threads; a GPU
// program: its NCCL/RCCL communicator). --batch is then each rank's micro-batch, the global batch
// ranks x --micro-batches x --batch; rank 0 prints (global tokens/s, MFU per rank) and writes the
// CSV, --export (full sharding: the masters gathered first) and --dump-batches; --checkpoint and
// --resume name a directory of shards (io/sharded_checkpoint.hpp), which resumes on another
// number of ranks too.
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include <mxkit/config.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/parallel/communicator.hpp>

#include <mxkit/train_program/options.hpp>

MXKIT_BEGIN_NAMESPACE
namespace train_program {

namespace nn = ::mxkit::nn;

// What the program knows about the machine besides its backend.
struct device_info {
  std::string name;                     // printed in the header line
  double peak_tflops = 0;               // bf16 dense peak in TFLOP/s for MFU; 0: unknown (no MFU column)
  std::function<std::string()> memory;  // optional: one line on the device's memory (GPU: free / total)
};

// Trains as `o` says on `be`, as one rank of `comm` when given (every rank calls it; rank 0
// prints). Returns the process exit code; throws on failures. Defined in train_program.cpp.
int run(nn::backend& be, const device_info& device, const options& o, nn::communicator* comm = nullptr);

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
MXKIT_END_NAMESPACE
