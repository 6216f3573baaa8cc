// SPDX-License-Identifier: Apache-2.0
// Full sharding on the device backend through NCCL (one thread per GPU, the backend's stream the
// communicator's): gathering the weights as their quantized copies (parallel_config::
// gather_quantized; copy_gather::pack_copy / assemble_copy, gpu/nn/operand_payload.hpp) gives the
// fp32 gather's losses, weights and FP8 scales bit for bit, per recipe (MXFP4 with and without
// Hadamard, NVFP4 (each slab with the weight's amax, reduced over the ranks), MXFP8, FP8 delayed
// scaling, bf16, MXFP4 with bf16 first and last layers; FP8 and bf16
// weights, the bf16 head of every recipe among them, against the fp32 gather at the same shard
// layout, see below). The host twins: tests/parallel/catch2_test_data_parallel.cpp (NCCL's summation
// order too).
// Skipped without two GPUs or the library.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "nccl_ranks.hpp"

#include <mxkit/gpu/parallel/nccl_communicator.hpp>
#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/train/training.hpp>

#include "../nn/nn_test_helpers.hpp"
#include "../parallel/same_runs.hpp"

using namespace nn_test;

namespace {

struct outcome {
  std::vector<double> losses, scale;
  std::vector<std::vector<double>> weights;
};

// Every rank's outcome of a fully sharded run on `n` GPUs.
std::vector<outcome> train_sharded(int n, const recipe& r, bool gather_quantized, bool gather_fp8, bool gather_bf16) {
  model_config mc = tiny_model();
  mc.n_layers = r.bf16_first_layers ? 3 : 2;  // (an MXFP4 layer between the bf16 ones)
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
        c.parallel.gather_quantized_bf16 = gather_bf16;
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
  recipe edges = recipes::mxfp4();  // mxkit/train_program/options.hpp's mxfp4-bf16-edges
  edges.name = "mxfp4, bf16 first and last layer";
  edges.bf16_first_layers = edges.bf16_last_layers = 1;
  for (const recipe& r : {recipes::mxfp4(), recipes::mxfp4_no_hadamard(), recipes::nvfp4(), recipes::mxfp8(), recipes::fp8_delayed(), recipes::bf16(),
                          edges}) {
    // The fp32 gather at the copies' shard layout: NCCL's ring sums a gradient in an order that
    // depends on the rank owning it, so another layout moves the last bits of sums that round
    // (FP8's and bf16's; MX gradients add exactly). gather_quantized_fp8 and _bf16 off keep the
    // layout and gather those weights (the bf16 head of every recipe too) in fp32.
    {
      INFO(r.name << " on " << n << " GPUs: FP8 and bf16 weights as copies and in fp32");
      check_same_runs(train_sharded(n, r, true, true, true), train_sharded(n, r, true, false, false));
    }
    // MX weights against the fp32 gather (gather_quantized off) at its own layout: on two GPUs,
    // where a sum of two ranks' terms does not depend on the order.
    if (r.fprop.b.kind() == precision::mx) {
      INFO(r.name << " on 2 GPUs: every weight as copies and in fp32");
      check_same_runs(train_sharded(2, r, true, true, true), train_sharded(2, r, false, false, false));
    }
  }
}
