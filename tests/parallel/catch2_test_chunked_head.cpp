// SPDX-License-Identifier: Apache-2.0
// The head and its loss in chunks (nn/head_loss.hpp) under data parallelism: its backward runs
// between the head group's hooks (data_parallel.hpp gathers a fully sharded group's weights, makes
// its whole gradients and reduces them there), so ZeRO-1 and full sharding (copies gathered,
// resharded after forward) train the unsharded chunked run's weights and losses bit for bit, with
// a loss mask, on 2 and 3 ranks with micro-batches.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include <mxkit/parallel/data_parallel.hpp>
#include <mxkit/parallel/thread_communicator.hpp>
#include <mxkit/train/training.hpp>

#include "../catch.hpp"
#include "../nn/nn_test_helpers.hpp"

namespace chunked_head_test {
using namespace nn_test;

// Batch n: pseudo-random tokens of an odd vocabulary, a third of the targets masked out.
class batches : public batch_source {
 public:
  explicit batches(batch_shape s) : s_(s) {}
  batch at(std::uint64_t n) const override {
    batch b{s_, std::vector<std::int32_t>(s_.tokens()), std::vector<std::int32_t>(s_.tokens())};
    std::mt19937_64 gen(77 + n);
    b.loss_mask.resize(s_.tokens());
    for (std::size_t i = 0; i < s_.tokens(); ++i) {
      b.inputs[i] = static_cast<std::int32_t>(gen() % 37);
      b.targets[i] = static_cast<std::int32_t>(gen() % 37);
      b.loss_mask[i] = gen() % 3 == 0 ? 0 : 1;
    }
    return b;
  }
  const batch_shape& shape() const noexcept override { return s_; }

 private:
  batch_shape s_;
};

struct outcome {
  std::vector<double> losses;
  std::vector<std::vector<double>> weights;
};

outcome train(communicator* comm, sharding s, std::size_t chunk) {
  host_backend be;
  model_config mc = tiny_model();
  mc.vocab = 37;
  mc.loss_chunk = chunk;
  model m(be, mc, recipes::bf16(), 17);
  CHECK(m.loss_chunks().chunked(32) == (chunk > 0));  // (chunk 7 of 32 rows: on)
  train_config c;
  c.steps = 3;
  c.shape = {1, 32};
  c.schedule = {1e-2, 1e-3, 1, 3};
  c.optimizer.clip_norm = 0.0;  // (clipping's factor differs in an f64's last bits across shardings)
  c.parallel = {comm, 2, s};
  trainer t(m, std::make_shared<batches>(c.shape), c);
  t.run();
  outcome o{t.losses(), {}};
  t.parallel().gather_all();
  for (parameter* p : m.trainable_parameters()) o.weights.push_back(be.read(p->value));
  t.parallel().release_all(false);
  return o;
}

std::vector<outcome> train_ranks(int n, sharding s, std::size_t chunk) {
  std::vector<outcome> out(static_cast<std::size_t>(n));
  ref::run_ranks(n, [&](communicator& comm) { out[static_cast<std::size_t>(comm.rank())] = train(&comm, s, chunk); });
  return out;
}


TEST_CASE("data parallel: the head and its loss in chunks under ZeRO-1 and full sharding, the unsharded bits", "[nn][data_parallel][loss]") {
  for (const int n : {2, 3}) {
    const std::vector<outcome> plain = train_ranks(n, sharding::none, 7);  // 32 rows: chunks of 7, 7, 7, 7, 4
    for (const sharding s : {sharding::optimizer, sharding::full}) {
      INFO(n << " ranks, sharding " << name_of(s));
      const std::vector<outcome> sharded = train_ranks(n, s, 7);
      for (int k = 0; k < n; ++k) {
        CHECK(sharded[static_cast<std::size_t>(k)].losses == plain[0].losses);
        CHECK(sharded[static_cast<std::size_t>(k)].weights == plain[0].weights);
      }
    }
    // Chunked or not: the first step's loss, bit for bit (the weights may then differ in the head's
    // wgrad summation order).
    const std::vector<outcome> whole = train_ranks(n, sharding::full, 0);
    CHECK(whole[0].losses.front() == plain[0].losses.front());
  }
}

}  // namespace chunked_head_test
