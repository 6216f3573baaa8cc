// SPDX-License-Identifier: Apache-2.0
// Sharded checkpoints on host rank threads: save and resume on the same N continue the
// uninterrupted run bit for bit; a checkpoint saved on 3 ranks loads on 2 ranks and on 1 (the
// weights and moments exactly); a corrupt or missing file is refused naming it.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <mxkit/io/sharded_checkpoint.hpp>
#include <mxkit/parallel/thread_communicator.hpp>

#include "../catch.hpp"
#include "../nn/nn_test_helpers.hpp"

using namespace nn_test;
namespace fs = std::filesystem;

namespace {

train_config config(communicator* comm, std::size_t micro, sharding s) {
  train_config c;
  c.steps = 4;
  c.shape = {1, 32};
  c.schedule = {1e-2, 1e-3, 1, 4};
  c.parallel = {comm, micro, s};
  return c;
}

struct run_result {
  std::vector<double> losses;
  std::vector<std::vector<double>> weights, moments;
};

std::vector<std::vector<double>> weights(backend& be, model& m, data_parallel* dp = nullptr) {
  if (dp) dp->gather_all();  // full sharding
  std::vector<std::vector<double>> w;
  for (parameter* p : m.parameters()) w.push_back(be.read(p->value));
  if (dp) dp->release_all(false);
  return w;
}
// Every parameter's first moment, whole (sharded: the rank's pieces, so compare across runs on one N only).
std::vector<std::vector<double>> moments(backend& be, adamw& opt) {
  std::vector<std::vector<double>> out;
  for (const adamw::slot& s : opt.slots()) out.push_back(be.read(s.m));
  return out;
}

// Trains `steps` steps of 4 on n ranks (rank 0's results), saving after `save_at` steps into dir
// (0: no save) or first loading dir (load).
run_result run(int n, std::size_t micro, sharding s, std::size_t save_at, bool load, const fs::path& dir) {
  std::vector<run_result> out(static_cast<std::size_t>(n));
  ref::run_ranks(n, [&](communicator& comm) {
    host_backend be;
    model m(be, tiny_model(), recipes::bf16(), load ? 99 : 17);  // a resumed run starts from other weights
    trainer t(m, text_tokens(), config(n > 1 ? &comm : nullptr, micro, s));
    run_result& r = out[static_cast<std::size_t>(comm.rank())];
    if (load) {
      load_sharded_checkpoint(dir, t);
      r.weights = weights(be, m, &t.parallel());
    }
    while (t.steps_done() < 4) {
      t.step();
      if (t.steps_done() == save_at) {
        save_sharded_checkpoint(dir, t);
        r.weights = weights(be, m, &t.parallel());
        r.moments = moments(be, t.optimizer());
      }
    }
    r.losses = t.losses();
  });
  return out[0];
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("mxkit_sharded_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

}  // namespace

TEST_CASE("sharded checkpoint: save and resume on the same N continue the run bit for bit", "[nn][checkpoint][data_parallel]") {
  for (sharding s : {sharding::none, sharding::optimizer, sharding::full}) {
    INFO("sharding " << name_of(s));
    const fs::path dir = fresh_dir("same");
    const run_result whole = run(2, 1, s, 2, false, dir);
    CHECK(fs::exists(manifest_path(dir)));
    CHECK(fs::exists(shard_path(dir, 0, 2)));
    CHECK(fs::exists(shard_path(dir, 1, 2)));
    const run_result resumed = run(2, 1, s, 0, true, dir);
    CHECK(resumed.weights == whole.weights);  // the weights as saved
    REQUIRE(resumed.losses.size() == 2);
    CHECK(resumed.losses[0] == whole.losses[2]);
    CHECK(resumed.losses[1] == whole.losses[3]);
    fs::remove_all(dir);
  }
}

TEST_CASE("sharded checkpoint: saved on 3 ranks, resumed on 2 ranks and on 1 by resharding", "[nn][checkpoint][data_parallel]") {
  const fs::path dir = fresh_dir("reshard");
  const run_result three = run(3, 1, sharding::optimizer, 2, false, dir);
  // 2 ranks: the weights exactly; the global batch differs (2 micro-batches instead of 3), so the
  // losses only train on.
  const run_result two = run(2, 1, sharding::optimizer, 0, true, dir);
  CHECK(two.weights == three.weights);
  const run_result two_full = run(2, 1, sharding::full, 0, true, dir);
  CHECK(two_full.weights == three.weights);
  CHECK(two_full.losses == two.losses);  // full sharding trains as ZeRO-1 does, bit for bit
  // 1 rank with 3 micro-batches: the global batch of the 3-rank run; the continuation agrees within
  // the accumulation bound's effect on two AdamW steps (loose: 1e-3 relative).
  const run_result one = run(1, 3, sharding::none, 0, true, dir);
  CHECK(one.weights == three.weights);
  REQUIRE(one.losses.size() == 2);
  CHECK(std::abs(one.losses[0] - three.losses[2]) <= 1e-3 * three.losses[2]);
  CHECK(std::abs(one.losses[1] - three.losses[3]) <= 1e-3 * three.losses[3]);
  fs::remove_all(dir);
}

TEST_CASE("sharded checkpoint: a corrupt shard, a foreign shard and a missing manifest are refused, naming the file",
          "[nn][checkpoint][data_parallel]") {
  const fs::path dir = fresh_dir("bad");
  run(2, 1, sharding::optimizer, 2, false, dir);
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 5);
  trainer t(m, text_tokens(), config(nullptr, 2, sharding::none));
  const std::vector<std::vector<double>> before = weights(be, m);
  {  // flip one payload byte of shard 1
    std::fstream f(shard_path(dir, 1, 2), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  CHECK_THROWS_WITH(load_sharded_checkpoint(dir, t), Catch::Matchers::Contains("shard-1-of-2") && Catch::Matchers::Contains("checksum"));
  CHECK(weights(be, m) == before);  // nothing written
  // A shard of another save: shard 0 of a later save beside shard 1 of this one.
  const fs::path other = fresh_dir("other");
  run(2, 1, sharding::optimizer, 3, false, other);
  fs::copy_file(shard_path(other, 1, 2), shard_path(dir, 1, 2), fs::copy_options::overwrite_existing);
  CHECK_THROWS_WITH(load_sharded_checkpoint(dir, t), Catch::Matchers::Contains("does not belong to this manifest"));
  fs::remove(manifest_path(dir));
  CHECK_THROWS_WITH(load_sharded_checkpoint(dir, t), Catch::Matchers::Contains("manifest"));
  CHECK(weights(be, m) == before);
  fs::remove_all(dir);
  fs::remove_all(other);
}
