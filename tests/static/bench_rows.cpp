// SPDX-License-Identifier: Apache-2.0
// ctest static.bench_rows: the rows bench/bench_common.hpp writes (--record) are rows that
// bench/render_results.py accepts, with recipe and shape derived from the case label as it
// derives them. Writes a few awkward rows to OUT, then runs PYTHON RENDER validate --derived OUT.
//   mxkit_bench_rows OUT PYTHON RENDER
#include <bench_common.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s OUT.jsonl PYTHON RENDER\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  std::filesystem::remove(out);
  using mxkit_bench::result;
  const std::vector<result> rows = {
      {"gemm", "mxfp4 8B qkv fprop 8192x6144x4096", 346.1, "TFLOP/s", "cuBLAS bf16", 772.4, "cublasGemmEx, \"quoted\""},
      {"gemm", "hybrid e5m2 x e4m3 70B o dgrad 8192x8192x8192", 666.9, "TFLOP/s", "cuBLAS bf16", 748},
      {"gemm", "cuBLASLt fp8 per-tensor 8B o fprop 8192x4096x4096", 1331, "TFLOP/s", "cuBLAS bf16", 767.7},
      {"gemm", "nvfp4 (bf16 expansion included) 70B o fprop 8192x8192x8192", 700, "TFLOP/s", "cuBLAS bf16", 755},
      {"quantize_gpu", "mxfp8_e4m3 rowwise+columnwise hadamard bf16 16384x8192", 2095, "GB/s", "d2d copy", 4182},
      {"layer", "mxfp4 (bf16 weights, lean memory) Llama-3.1-8B layer B1 T8192 fwd+bwd step", 21.69, "ms", "torch.compile bf16",
       21.58},
      {"layer", "bf16 Llama-3.1-8B layer B1 T8192 fwd+bwd time in optimizer", 0, "ms", "", 0.0},
      {"train", "torch eager bf16 76M byte Llama (12L d768) tokens/s", 3.284e5, "tokens/s", "torch.compile bf16", 6.382e5},
      {"attention", "causal GQA forward+backward bf16 B16 T1024 H12 Hkv4 D64", 235.6, "TFLOP/s", "torch SDPA", 0.0},
      {"allreduce", "nccl_communicator bf16 sum 256 MiB, 4 ranks", 333.1, "GB/s bus", "torch.distributed.all_reduce", 339.9},
      {"layer_kernels", "rope from the factor table (8B)", 94.9, "us", "copy floor", 57.4},
      {"lora70b", "Llama 2 70B LoRA B1 T8192 FP8 / MXFP4 tokens/s", 1.253, "x", "", 0.0},
      {"train_multi", "Llama 3.1 8B shape (vocab 256), FSDP + recompute, T8192, mxfp4+Hadamard, 4 GPUs: MFU per GPU", 38.6, "%",
       "torch FSDP2+compile bf16", 42.22},
      {"validate_host", "validate mxfp4 rowwise hadamard 8192x8192 (ROCm TE storage, AITER scales), 2 threads", 1.2, "s", "1 thread",
       1.1},
      {"quantize_host", "a label with\ta tab, a \\ backslash and a line\nbreak", 1e-7, "GB/s", "memcpy", 13.17},
      {"quantize_host", "not finite: left out with a warning", std::numeric_limits<double>::quiet_NaN(), "GB/s", "", 0.0},
  };
  mxkit_bench::append_results(out, "a \"device\" name", rows);
  const std::string command = std::string("\"") + argv[2] + "\" \"" + argv[3] + "\" validate --derived \"" + out + "\"";
  std::fflush(stdout);
  const int rc = std::system(command.c_str());
  return rc == 0 ? 0 : 1;
}
