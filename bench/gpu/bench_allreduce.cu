// SPDX-License-Identifier: Apache-2.0
// All-reduce bus bandwidth through gpu::nccl_communicator on every GPU of the machine (one thread
// per rank; the library NCCL or RCCL as gpu/parallel/nccl_api.hpp finds it), against
// torch.distributed.all_reduce on the same GPUs in the same run (bench/allreduce_peer.py under
// torchrun). Bus bandwidth as nccl-tests defines it: bytes x 2 (n - 1) / n / time, the traffic
// each link carries in a ring, so the figure is comparable across rank counts.
//   bench_allreduce [--record] [--repeats N]
//   MXKIT_ALLREDUCE_PEER   the peer command (default: torchrun of bench/allreduce_peer.py); empty: none
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/parallel/nccl_communicator.hpp>
#include <mxkit/gpu/runtime.hpp>

#include "bench_common.hpp"
#include "training_bench.hpp"

namespace gpu = mxkit::gpu;
namespace nn = mxkit::nn;

namespace {

constexpr std::size_t sizes_mib[] = {8, 64, 256};
constexpr int warmup = 3, iterations = 20;

// Seconds per all-reduce of `bytes` bf16 on `ranks` GPUs (rank 0's wall time over `iterations`,
// after every rank's warm-up and a synchronization).
std::vector<double> time_all_reduce(int ranks, bool blocking) {
  const gpu::nccl::unique_id id = gpu::nccl_communicator::new_unique_id();
  std::vector<double> seconds(std::size(sizes_mib));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        MXKIT_GPU_CHECK(gpu::set_device(r));
        gpu::stream s;
        gpu::nccl_options o;
        o.own_stream = false;
        o.blocking = blocking;
        o.timeout = std::chrono::seconds(120);
        gpu::nccl_communicator comm(id, r, ranks, s.get(), o);
        for (std::size_t k = 0; k < std::size(sizes_mib); ++k) {
          const std::size_t n = sizes_mib[k] * (1u << 20) / 2;
          gpu::device_buffer<std::uint16_t> x(n, s.get());
          x.fill_bytes(0x3c, s.get());  // bf16 0x3c3c: a small finite value
          const nn::comm_buffer b{x.data(), n, nn::comm_type::bf16};
          for (int i = 0; i < warmup; ++i) comm.all_reduce(b, b, nn::reduce_op::sum);
          comm.synchronize();
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < iterations; ++i) comm.all_reduce(b, b, nn::reduce_op::sum);
          comm.synchronize();
          if (r == 0) seconds[k] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iterations;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        ++failures;
      }
    });
  for (std::thread& t : threads) t.join();
  if (failures) throw std::runtime_error("bench_allreduce: " + std::to_string(failures.load()) + " rank(s) failed");
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  const mxkit_bench::options opt = mxkit_bench::parse_args(argc, argv);
  const int devices = gpu::device_count();
  if (devices < 2) {
    std::printf("bench_allreduce: %d GPU(s); needs 2 or more\n", devices);
    return 0;
  }
  const int ranks = devices < 8 ? devices : 8;
  const gpu::nccl::api& lib = gpu::nccl::library();
  const std::string device = std::string(gpu::properties(0).name) + " x" + std::to_string(ranks);
  std::printf("%s %d (%s), %d ranks, bf16 sum, %d iterations per size\n", gpu::nccl::vendor_name, lib.version, lib.library.c_str(), ranks,
              iterations);
  // Both NCCL modes: the communicator's default (non-blocking, bounded waits) and blocking (what
  // torch.distributed uses by default), so the per-call cost of the first shows.
  const std::vector<double> seconds = time_all_reduce(ranks, false);
  const std::vector<double> seconds_blocking = time_all_reduce(ranks, true);

  std::string sizes;
  for (std::size_t mib : sizes_mib) sizes += (sizes.empty() ? "" : ",") + std::to_string(mib);
  const char* env = std::getenv("MXKIT_ALLREDUCE_PEER");
  const std::string peer_cmd = env ? env
                                   : "NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --standalone --nproc_per_node " +
                                         std::to_string(ranks) + " bench/allreduce_peer.py --sizes-mib " + sizes +
                                         " --iterations " + std::to_string(iterations);
  const std::map<std::string, double> peer = mxkit_bench::run_peer(peer_cmd);

  std::vector<mxkit_bench::result> rows;
  const double factor = 2.0 * (ranks - 1) / ranks;
  for (std::size_t k = 0; k < std::size(sizes_mib); ++k) {
    const double bytes = static_cast<double>(sizes_mib[k]) * (1u << 20);
    const double peer_busbw = mxkit_bench::peer_value(peer, "busbw_gbs_" + std::to_string(sizes_mib[k]));
    const std::string what = " bf16 sum " + std::to_string(sizes_mib[k]) + " MiB, " + std::to_string(ranks) + " ranks";
    rows.push_back({"allreduce", "nccl_communicator" + what, bytes * factor / seconds[k] / 1e9, "GB/s bus",
                    "torch.distributed.all_reduce", peer_busbw});
    rows.push_back({"allreduce", "nccl_communicator (blocking NCCL)" + what, bytes * factor / seconds_blocking[k] / 1e9, "GB/s bus",
                    "torch.distributed.all_reduce", peer_busbw});
  }
  mxkit_bench::finish(opt, device, rows);
  return 0;
}
