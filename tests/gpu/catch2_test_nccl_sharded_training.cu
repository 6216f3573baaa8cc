// SPDX-License-Identifier: Apache-2.0
// Full sharding on the device backend through NCCL (one thread per GPU, the backend's stream the
// communicator's): gathering the weights as their quantized copies (parallel_config::
// gather_quantized; backend::pack_copy / assemble_copy, gpu/nn/operand_payload.hpp) gives the
// fp32 gather's losses, weights and FP8 scales bit for bit, per recipe (MXFP4 with and without
// Hadamard, MXFP8, FP8 delayed scaling; FP8 against the fp32 gather at the same shard layout, see
// below). The host twins: tests/nn/catch2_test_data_parallel.cpp (NCCL's summation order too).
// Skipped without two GPUs or the library.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "nccl_ranks.hpp"

#include <mxkit/gpu/nccl_communicator.hpp>
#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/nn/training.hpp>

#include "../nn/nn_test_helpers.hpp"
#include "../nn/same_runs.hpp"

using namespace nn_test;

namespace {

struct outcome {
  std::vector<double> losses, scale;
  std::vector<std::vector<double>> weights;
};

// Every rank's outcome of a fully sharded run on `n` GPUs.
std::vector<outcome> train_sharded(int n, const recipe& r, bool gather_quantized, bool gather_fp8) {
  model_config mc = tiny_model();
  mc.n_layers = 2;
  mc.layer = {128, 2, 1, 128};  // head_dim 64: the device attention's smallest
  std::vector<outcome> out(static_cast<std::size_t>(n));
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  const mxkit::gpu::nccl::unique_id id = mxkit::gpu::nccl_communicator::new_unique_id();
  mxkit::gpu::nccl_options o;
  o.timeout = std::chrono::seconds(120);
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k)
    threads.emplace_back([&, k] {
      try {
        MXKIT_GPU_CHECK(mxkit::gpu::set_device(k));
        mxkit::gpu::device_backend be;
        mxkit::gpu::nccl_communicator comm(id, k, n, be.stream(), o);  // destroyed before the backend
        model m(be, mc, r, 17);
        train_config c;
        c.steps = 3;
        c.shape = {1, 32};
        c.schedule = {1e-2, 1e-3, 1, 3};
        c.optimizer.clip_norm = 0.0;  // no clipping: the shard layout moves the norm's last bits only
        c.parallel = {&comm, 1, sharding::full};
        c.parallel.gather_quantized = gather_quantized;
        c.parallel.gather_quantized_fp8 = gather_fp8;
        trainer t(m, text_tokens(), c);
        t.run();
        outcome& got = out[static_cast<std::size_t>(k)];
        got.losses = t.losses();
        t.parallel().gather_all();
        for (parameter* p : m.trainable_parameters()) got.weights.push_back(be.read(p->value));
        t.parallel().release_all(false);
        if (m.scaling()) got.scale = be.read(m.scaling()->scale());
        be.synchronize();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(k)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  nccl_test::require_no_errors(errors);
  return out;
}

}  // namespace

TEST_CASE("full sharding on NCCL: the quantized copies' gather gives the fp32 gather's bits", "[nccl][training]") {
  const int n = nccl_test::ranks < 3 ? nccl_test::ranks : 3;
  for (const recipe& r : {recipes::mxfp4(), recipes::mxfp4_no_hadamard(), recipes::mxfp8(), recipes::fp8_delayed()}) {
    INFO(r.name << " on " << n << " GPUs");
    // The fp32 gather at the copies' shard layout: NCCL's ring sums a gradient in an order that
    // depends on the rank owning it, so another layout moves the last bits of sums that round
    // (FP8's; MX gradients add exactly). For FP8 gather_quantized_fp8 off keeps the layout; for MX
    // the fp32 gather (gather_quantized off) is compared, at its own layout.
    const bool fp8 = r.fprop.b.kind == precision::fp8;
    check_same_runs(train_sharded(n, r, true, true), train_sharded(n, r, fp8, false));
  }
}
