// SPDX-License-Identifier: Apache-2.0
// Sharded checkpoints on host rank threads: save and resume on the same N continue the
// uninterrupted run bit for bit; a checkpoint saved on 3 ranks loads on 2 ranks and on 1 (the
// weights and moments exactly); a corrupt or missing file is refused naming it; a save that fails
// on one rank (a full disk, injected through io_fault.hpp) keeps the previous checkpoint loadable;
// the manifest records the saver's run settings; a version 1 manifest still loads.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <mxkit/io/sharded_checkpoint.hpp>
#include <mxkit/parallel/thread_communicator.hpp>

#include "../catch.hpp"
#include "io_fault.hpp"
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

// The names of the files in dir, sorted.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
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
    CHECK(fs::exists(shard_path(dir, 0, 2, 1)));  // the first save is generation 1
    CHECK(fs::exists(shard_path(dir, 1, 2, 1)));
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
  const fs::path shard1 = read_sharded_manifest(dir).shard(dir, 1);
  {  // flip one payload byte of shard 1
    std::fstream f(shard1, std::ios::in | std::ios::out | std::ios::binary);
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
  fs::copy_file(read_sharded_manifest(other).shard(other, 1), shard1, fs::copy_options::overwrite_existing);
  CHECK_THROWS_WITH(load_sharded_checkpoint(dir, t), Catch::Matchers::Contains("does not belong to this manifest"));
  fs::remove(manifest_path(dir));
  CHECK_THROWS_WITH(load_sharded_checkpoint(dir, t), Catch::Matchers::Contains("manifest"));
  CHECK(weights(be, m) == before);
  fs::remove_all(dir);
  fs::remove_all(other);
}

#if MXKIT_POSIX_FILE_IO
TEST_CASE("sharded checkpoint: a save that fails on one rank keeps the previous checkpoint loadable, and a later save removes "
          "the files of the older ones",
          "[nn][checkpoint][data_parallel]") {
  for (sharding s : {sharding::none, sharding::full}) {
    INFO("sharding " << name_of(s));
    const fs::path dir = fresh_dir("failed_save");
    // Rank 1's disk is full at the save after step 3: its first write fails with ENOSPC, after rank
    // 0 has written its own new shard (they write at once, with no collective between).
    io_fault::scope fault({.fail_write_at = 1, .error = ENOSPC, .armed_threads_only = true});
    struct rank_result {
      std::vector<std::vector<double>> saved;  // the weights of the save after step 2
      std::optional<std::string> failure;      // what the save after step 3 threw
      bool saved_after_four = false;
    };
    std::vector<rank_result> out(2);
    std::vector<std::string> after_failure;
    ref::run_ranks(2, [&](communicator& comm) {
      host_backend be;
      model m(be, tiny_model(), recipes::bf16(), 17);
      trainer t(m, text_tokens(), config(&comm, 1, s));
      rank_result& r = out[static_cast<std::size_t>(comm.rank())];
      t.step();
      t.step();
      save_sharded_checkpoint(dir, t);
      r.saved = weights(be, m, &t.parallel());
      t.step();
      {
        std::optional<io_fault::arm_this_thread> full_disk;
        if (comm.rank() == 1) full_disk.emplace();
        try {
          save_sharded_checkpoint(dir, t);
        } catch (const checkpoint_error& e) {
          r.failure = e.what();
        }
      }
      if (comm.rank() == 0) after_failure = files_in(dir);  // (every rank removed its new shard before the save threw)
      t.step();
      save_sharded_checkpoint(dir, t);
      r.saved_after_four = true;
    });
    REQUIRE(out[0].failure);
    REQUIRE(out[1].failure);
    CHECK(out[1].failure->find("shard-1-of-2") != std::string::npos);
    CHECK(out[1].failure->find(std::generic_category().message(ENOSPC)) != std::string::npos);
    CHECK(out[0].failure->find("another rank failed to write its shard") != std::string::npos);
    CHECK(out[0].failure->find("the previous checkpoint there is kept") != std::string::npos);
    // The failed save removed its new shard on rank 0: the directory holds the first save only.
    CHECK(after_failure == std::vector<std::string>{"manifest", "shard-0-of-2-g1", "shard-1-of-2-g1"});
    CHECK(out[0].saved_after_four);
    // The save after step 4 (generation 2) removed generation 1's shards.
    CHECK(files_in(dir) == std::vector<std::string>{"manifest", "shard-0-of-2-g2", "shard-1-of-2-g2"});
    CHECK(read_sharded_manifest(dir).steps == 4);
    fs::remove_all(dir);
  }
  // Without the later save: the previous checkpoint (step 2) loads, with its weights.
  const fs::path dir = fresh_dir("failed_kept");
  io_fault::scope fault({.fail_write_at = 1, .error = ENOSPC, .armed_threads_only = true});
  std::vector<std::vector<double>> saved;
  bool failed = false;
  ref::run_ranks(2, [&](communicator& comm) {
    host_backend be;
    model m(be, tiny_model(), recipes::bf16(), 17);
    trainer t(m, text_tokens(), config(&comm, 1, sharding::optimizer));
    t.step();
    t.step();
    save_sharded_checkpoint(dir, t);
    if (comm.rank() == 0) saved = weights(be, m);
    t.step();
    std::optional<io_fault::arm_this_thread> full_disk;
    if (comm.rank() == 1) full_disk.emplace();
    try {
      save_sharded_checkpoint(dir, t);
    } catch (const checkpoint_error&) {
      if (comm.rank() == 0) failed = true;
    }
  });
  REQUIRE(failed);
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 5);
  trainer t(m, text_tokens(), config(nullptr, 2, sharding::none));
  const checkpoint_info info = load_sharded_checkpoint(dir, t);
  CHECK(info.steps == 2);
  CHECK(weights(be, m) == saved);
  fs::remove_all(dir);
}
#endif

TEST_CASE("sharded checkpoint: the manifest records the run settings, read back before loading", "[nn][checkpoint][data_parallel]") {
  const fs::path dir = fresh_dir("settings");
  const checkpoint_settings settings{{"recipe", "mxfp4"}, {"lr", "0.0006"}, {"heads", "2"}};
  ref::run_ranks(2, [&](communicator& comm) {
    host_backend be;
    model m(be, tiny_model(), recipes::bf16(), 17);
    trainer t(m, text_tokens(), config(&comm, 1, sharding::optimizer));
    t.step();
    save_sharded_checkpoint(dir, t, settings);
  });
  const checkpoint_info info = read_sharded_checkpoint_info(dir);
  CHECK(info.version == 2);
  CHECK(info.steps == 1);
  CHECK(info.settings == settings);
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 5);
  trainer t(m, text_tokens(), config(nullptr, 2, sharding::none));
  CHECK(load_sharded_checkpoint(dir, t).settings == settings);
  // A setting the format cannot hold is refused before any file is written.
  const fs::path bad = fresh_dir("bad_setting");
  CHECK_THROWS_WITH(save_sharded_checkpoint(bad, t, {{"a=b", "1"}}), Catch::Matchers::Contains("setting key 'a=b'"));
  CHECK(!fs::exists(bad));
  fs::remove_all(dir);
}

TEST_CASE("sharded checkpoint: a version 1 manifest (shards named shard-<r>-of-<N>, no settings) still loads",
          "[nn][checkpoint][data_parallel]") {
  const fs::path dir = fresh_dir("v1");
  run(2, 1, sharding::optimizer, 2, false, dir);
  const sharded_manifest now = read_sharded_manifest(dir);
  // The version 1 layout: magic, u32 1, u32 N, u64 steps, u64 optimizer steps, N checksums, FNV-1a.
  std::vector<std::uint8_t> v1(manifest_magic, manifest_magic + 8);
  checkpoint_io::put(v1, 1, 4);
  checkpoint_io::put(v1, now.ranks, 4);
  checkpoint_io::put(v1, now.steps, 8);
  checkpoint_io::put(v1, now.optimizer_steps, 8);
  for (std::uint64_t c : now.checksums) checkpoint_io::put(v1, c, 8);
  checkpoint_io::put(v1, checkpoint_io::fnv1a64(v1.data(), v1.size()), 8);
  std::ofstream(manifest_path(dir), std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(v1.data()),
                                                                               static_cast<std::streamsize>(v1.size()));
  for (int r = 0; r < 2; ++r) fs::rename(now.shard(dir, static_cast<std::size_t>(r)), shard_path(dir, r, 2, 0));
  const checkpoint_info info = read_sharded_checkpoint_info(dir);
  CHECK(info.version == 1);
  CHECK(info.settings.empty());
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 5);
  trainer t(m, text_tokens(), config(nullptr, 2, sharding::none));
  CHECK(load_sharded_checkpoint(dir, t).steps == 2);
  // A save over it writes generation 1 and removes the version 1 shards.
  save_sharded_checkpoint(dir, t);
  CHECK(files_in(dir) == std::vector<std::string>{"manifest", "shard-0-of-1-g1"});
  fs::remove_all(dir);
}
