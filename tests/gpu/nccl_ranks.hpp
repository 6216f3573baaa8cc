// SPDX-License-Identifier: Apache-2.0
#pragma once
// The multi-GPU tests' ranks: one thread per GPU of this machine (2 to 8), each with its own
// stream (the "backend's") and gpu::nccl_communicator. The first use of `ranks` (in a test
// case) makes the test program exit 77 (skipped) without two GPUs or without the NCCL/RCCL
// library.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "../parallel/free_port.hpp"

#include <mxkit/gpu/parallel/nccl_communicator.hpp>
#include <mxkit/gpu/runtime.hpp>

namespace nccl_test {

namespace gpu = mxkit::gpu;
namespace nn = mxkit::nn;

// The number of ranks, an int wherever it is used, found at its first use rather than when the
// program starts: the unity executable of the GPU tests (MXKIT_UNITY_GPU_TESTS) holds every GPU
// test file, and a start-up check would skip all of them on a one-GPU machine. ctest runs that
// executable once per file (Catch's filename tags), so the exit skips only this file's tests.
struct rank_count {
  static int value() {
    static const int n = [] {
      const int gpus = gpu::device_count();
      if (gpus < 2) {
        std::printf("SKIPPED: %d GPU(s); the NCCL communicator tests need 2\n", gpus);
        std::fflush(stdout);
        std::exit(77);
      }
      try {
        (void)gpu::nccl::library();
      } catch (const std::exception& e) {
        std::printf("SKIPPED: %s\n", e.what());
        std::fflush(stdout);
        std::exit(77);
      }
      std::printf("%s %d at %s; %d ranks (one per GPU, threads)\n", gpu::nccl::vendor_name, gpu::nccl::library().version,
                  gpu::nccl::library().library.c_str(), gpus < 8 ? gpus : 8);
      return gpus < 8 ? gpus : 8;
    }();
    return n;
  }
  operator int() const { return value(); }  // NOLINT(google-explicit-constructor): used as the int it stands for
};
inline constexpr rank_count ranks{};

struct rank_context {
  int rank;
  gpu::stream_t stream;  // the "backend's" stream
  gpu::nccl_communicator& comm;
};

// Runs body(rank_context) on `n` threads, rank r on device r; returns each rank's exception text
// ("" when it returned). Without `control`, the ranks share one unique id made here.
inline std::vector<std::string> run_ranks(int n, gpu::nccl_options options, const std::function<void(rank_context&)>& body,
                                   bool control = false) {
  const gpu::nccl::unique_id id = gpu::nccl_communicator::new_unique_id();
  const int port = control ? test_ports::free_loopback_port() : 0;  // for the TCP rendezvous
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        MXKIT_GPU_CHECK(gpu::set_device(r));
        gpu::stream s;
        std::unique_ptr<gpu::nccl_communicator> comm;
        if (control) {
          nn::launch_environment env;
          env.rank = r;
          env.world_size = n;
          env.local_rank = r;
          env.master_addr = "127.0.0.1";
          env.master_port = port;
          comm = gpu::nccl_communicator::from_environment(env, s.get(), options);
        } else {
          comm = std::make_unique<gpu::nccl_communicator>(id, r, n, s.get(), options);
        }
        rank_context c{r, s.get(), *comm};
        body(c);
        s.synchronize();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        if (errors[static_cast<std::size_t>(r)].empty()) errors[static_cast<std::size_t>(r)] = "(empty what())";
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

inline void require_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
}

}  // namespace nccl_test
