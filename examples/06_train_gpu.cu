// SPDX-License-Identifier: Apache-2.0
// The training program (examples/train_program.hpp) on one GPU through mxkit's device backend
// (gpu::device_backend: CUDA, or HIP from the same source). With no flags it trains the default
// model, about 100 M parameters, for about five minutes on an H200:
//   06_train_gpu                                   # bf16 recipe, the repository's corpora
//   06_train_gpu --recipe mxfp4 --data book.txt --steps 2000 --checkpoint run.ckpt --csv run.csv
//   06_train_gpu --help                            # every flag, and the FLOP convention
// MFU is measured against the bf16 dense peak of the device, looked up from its name below
// (--peak-tflops sets it for other devices). Without a GPU it says so and exits 0 (77 when
// MXKIT_SKIP_EXIT_CODE=77, as ctest runs it).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/gpu/runtime.hpp>

#include "train_program.hpp"

namespace {

// bf16 dense tensor-core peak (no sparsity) from the vendors' data sheets, TFLOP/s; 0: unknown.
// H100 PCIe and NVL have lower clocks than the SXM part the 989 belongs to; MI325X has MI300X's
// compute dies.
double bf16_peak_tflops(std::string_view name) {
  auto has = [&](const char* s) { return name.find(s) != std::string_view::npos; };
  if (has("H200")) return 989;
  if (has("H100") && !has("PCIe") && !has("NVL")) return 989;
  if (has("MI300X") || has("MI325X")) return 1307;
  if (has("MI355X")) return 2500;
  return 0;
}

std::string device_memory() {
  const mxkit::gpu::device_memory_info m = mxkit::gpu::memory_info();
  char b[96];
  std::snprintf(b, sizeof b, "%.2f GiB used of %.2f GiB", static_cast<double>(m.total_bytes - m.free_bytes) / (1u << 30),
                static_cast<double>(m.total_bytes) / (1u << 30));
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  namespace gpu = mxkit::gpu;
  return train_program::main(argc, argv, "06_train_gpu", [](const train_program::options& o) {
    if (gpu::device_count() == 0) {
      std::printf("no GPU here: 06_train_gpu was compiled; run it on a machine with a GPU (or 05_train on the host)\n");
      const char* code = std::getenv("MXKIT_SKIP_EXIT_CODE");
      return code ? std::atoi(code) : 0;
    }
    const gpu::device_properties p = gpu::properties();
    gpu::device_backend be;
    return train_program::run(be, {p.name, bf16_peak_tflops(p.name), device_memory}, o);
  });
}
