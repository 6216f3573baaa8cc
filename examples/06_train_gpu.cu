// SPDX-License-Identifier: Apache-2.0
// The training program (include/mxkit/train_program/program.hpp, src/train/program.cpp) on one GPU through mxkit's device backend
// (gpu::device_backend: CUDA, or HIP from the same source). With no flags it trains the default
// model, about 100 M parameters, for about five minutes on an H200:
//   06_train_gpu                                   # bf16 recipe, the repository's corpora
//   06_train_gpu --recipe mxfp4 --data book.txt --steps 2000 --checkpoint run.ckpt --csv run.csv
//   06_train_gpu --help                            # every flag, and the FLOP convention
// MFU is measured against the bf16 dense peak of the device, looked up from its name below
// (--peak-tflops sets it for other devices). Without a GPU it says so and exits 0 (77 when
// MXKIT_SKIP_EXIT_CODE=77, as ctest runs it).
//
// On several GPUs: one process per GPU with torchrun's environment (WORLD_SIZE > 1), e.g.
//   bash scripts/launch_gpus.sh 4 06_train_gpu --recipe mxfp4                 # data parallel
//   bash scripts/launch_gpus.sh 4 06_train_gpu --shard full --recompute on    # fully sharded
// Each process takes GPU LOCAL_RANK and joins the NCCL (RCCL) communicator through the TCP
// rendezvous on MASTER_ADDR:MASTER_PORT (gpu/parallel/nccl_communicator.hpp); only rank 0 prints (set
// MXKIT_ALL_RANKS_PRINT=1 to see every rank). A rank that fails aborts the communicator, so the
// others end at once with its message instead of waiting in a collective. MXKIT_NCCL_BLOCKING=1
// makes the communicator blocking, to measure what the non-blocking one costs a training run.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <mxkit/gpu/gemm/options.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/parallel/nccl_communicator.hpp>
#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/parallel/rendezvous.hpp>

#include <mxkit/train_program/program.hpp>

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
  return mxkit::train_program::main(argc, argv, "06_train_gpu", [](const mxkit::train_program::options& o) {
    if (gpu::device_count() == 0) {
      std::printf("no GPU here: 06_train_gpu was compiled; run it on a machine with a GPU (or 05_train on the host)\n");
      const char* code = std::getenv("MXKIT_SKIP_EXIT_CODE");
      return code ? std::atoi(code) : 0;
    }
    const mxkit::nn::launch_environment env = mxkit::nn::launch_environment::from_environment();
    if (o.ranks != 1)
      throw mxkit::train_program::usage_error("--ranks: 06_train_gpu takes its ranks from its launcher, one process per GPU "
                                       "(bash scripts/launch_gpus.sh N 06_train_gpu ...)");
    if (env.world_size > 1) {
      if (env.local_rank >= gpu::device_count())
        throw mxkit::train_program::usage_error("LOCAL_RANK " + std::to_string(env.local_rank) + " but this machine has " +
                                         std::to_string(gpu::device_count()) + " GPU(s)");
      MXKIT_GPU_CHECK(gpu::set_device(env.local_rank));
      if (env.rank != 0 && !std::getenv("MXKIT_ALL_RANKS_PRINT")) {
        std::FILE* quiet = std::freopen("/dev/null", "w", stdout);  // rank 0 prints; the others' output goes nowhere
        (void)quiet;
      }
    }
    const gpu::device_properties p = gpu::properties();
    static_assert(mxkit::train_program::max_comm_sms == gpu::nccl_communicator::max_ctas);
    if (o.comm_sms >= p.multiprocessors)
      throw mxkit::train_program::usage_error("--comm-sms " + std::to_string(o.comm_sms) + ": this GPU has " +
                                              std::to_string(p.multiprocessors) + " SMs; leave the GEMMs at least one");
    gpu::device_backend be;
    be.set_vendor_gemm(o.vendor_gemm);
    if (o.vendor_gemm) std::printf("GEMMs of bf16, per-tensor FP8 and expanded MXFP8 copies: the vendor path where it loads (--gemm vendor)\n");
    std::unique_ptr<gpu::nccl_communicator> comm;  // destroyed before the backend whose stream it uses
    if (env.world_size > 1) {
      // (gpu::nccl_options::blocking says what the blocking mode gives up.)
      gpu::nccl_options nccl;
      const char* blocking = std::getenv("MXKIT_NCCL_BLOCKING");
      nccl.blocking = blocking && std::string_view(blocking) == "1";
      // --comm-sms: NCCL's share of the SMs, and the GEMMs' persistent grids on the rest (a
      // collective may be in flight beside any GEMM of the step: the prefetched gathers in
      // forward, the gradient reductions in backward).
      nccl.ctas = o.comm_sms;
      be.set_reserved_sms(static_cast<unsigned>(o.comm_sms));
      if (o.comm_sms > 0)
        std::printf("--comm-sms %d: %s kernels on %d CTAs (ncclConfig_t minCTAs = maxCTAs), GEMMs' persistent grids on %u of %d SMs\n",
                    o.comm_sms, gpu::nccl::vendor_name, o.comm_sms,
                    gpu::persistent_grid_sms(static_cast<unsigned>(p.multiprocessors), static_cast<unsigned>(o.comm_sms)), p.multiprocessors);
      comm = gpu::nccl_communicator::from_environment(env, be.stream(), nccl);
    }
    try {
      return mxkit::train_program::run(be, {p.name, bf16_peak_tflops(p.name), device_memory}, o, comm.get());
    } catch (const std::exception& e) {
      if (comm) comm->abort(e.what());  // the other ranks end now, naming this rank's error
      throw;
    }
  });
}
