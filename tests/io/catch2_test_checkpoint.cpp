// SPDX-License-Identifier: Apache-2.0
// Checkpoints: exact round trip of weights and optimizer state (a resumed run continues with
// the same losses), atomic replacement, and clear refusals of truncated, foreign, corrupt,
// unsupported and mismatched files.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <latch>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__unix__)
#include <csignal>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

#include <mxkit/io/checkpoint.hpp>
#include <mxkit/train/training.hpp>

#include "../catch.hpp"
#include "io_fault.hpp"
#include "../nn/nn_test_helpers.hpp"
#include "temp_files.hpp"

using namespace nn_test;
namespace fs = std::filesystem;

namespace {

token_buffer synthetic_tokens() {
  auto v = std::make_shared<std::vector<std::uint8_t>>(8192);
  for (std::size_t i = 0; i < v->size(); ++i) (*v)[i] = static_cast<std::uint8_t>("checkpoints keep training state. "[i % 33]);
  return v;
}

train_config checkpoint_run(std::size_t steps) {
  train_config c;
  c.steps = steps;
  c.shape = {2, 32};
  c.schedule = {3e-3, 3e-4, 2, steps};
  return c;
}

void fix_checksum(std::vector<std::uint8_t>& b) {
  const std::uint64_t h = checkpoint_io::fnv1a64(b.data(), b.size() - 8);
  for (int i = 0; i < 8; ++i) b[b.size() - 8 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h >> (8 * i));
}
// The version 2 header checksum, after the settings (their size at offset 40).
void fix_header_checksum(std::vector<std::uint8_t>& b) {
  std::size_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::size_t{b[40 + static_cast<std::size_t>(i)]} << (8 * i);
  const std::uint64_t h = checkpoint_io::fnv1a64(b.data(), 48 + n);
  for (int i = 0; i < 8; ++i) b[48 + n + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h >> (8 * i));
}

std::vector<std::vector<double>> weights(model& m) {
  std::vector<std::vector<double>> out;
  for (parameter* p : m.parameters()) out.push_back(m.be().read(p->value));
  return out;
}
// (a bool, so that a failure does not print every weight)
bool same(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) { return a == b; }

// The names in a directory (a temporary left behind shows up here).
std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

std::string os_message(int err) { return std::generic_category().message(err); }

#if defined(__linux__)
// Bytes this process has read through read(2) and friends so far (proc(5), /proc/pid/io "rchar").
std::uint64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::uint64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  FAIL("no rchar in /proc/self/io");
  return 0;
}
#endif

}  // namespace

TEST_CASE("checkpoint: a resumed run continues with the same losses", "[nn][checkpoint]") {
  temp_dir dir;
  const fs::path file = dir.path / "run.ckpt";
  for (const recipe& r : {recipes::bf16(), recipes::mxfp4_nvidia_style()}) {
    INFO(r.name);
    // Uninterrupted: 8 steps.
    host_backend be1;
    model m1(be1, tiny_model(), r, 9);
    trainer t1(m1, synthetic_tokens(), checkpoint_run(8));
    for (int i = 0; i < 4; ++i) t1.step();
    save_checkpoint(file, m1, &t1.optimizer(), {t1.steps_done()});
    CHECK(fs::exists(file));
    CHECK_FALSE(fs::exists(file.string() + ".tmp"));
    t1.run();

    // Resumed: a fresh model with other weights, loaded, then the last 4 steps.
    host_backend be2;
    model m2(be2, tiny_model(), r, 1234);
    trainer t2(m2, synthetic_tokens(), checkpoint_run(8));
    const checkpoint_info info = load_checkpoint(file, m2, &t2.optimizer());
    CHECK(info.steps == 4);
    CHECK(info.optimizer_steps == 4);
    t2.seek(info.steps);
    t2.run();
    REQUIRE(t2.losses().size() == 4);
    for (std::size_t i = 0; i < 4; ++i) CHECK(t2.losses()[i] == t1.losses()[4 + i]);  // bit for bit
    CHECK(same(weights(m2), weights(m1)));
  }
}

TEST_CASE("checkpoint: saving over an existing checkpoint replaces it", "[nn][checkpoint]") {
  temp_dir dir;
  const fs::path file = dir.path / "model.ckpt";
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 9);
  save_checkpoint(file, m, nullptr);
  const auto first = read_all(file);
  set_entry(be, m.head().weight(), 0, 0.5);
  save_checkpoint(file, m, nullptr);
  CHECK(read_all(file) != first);
  CHECK(fs::directory_iterator(dir.path) != fs::directory_iterator());
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  CHECK(files == 1);  // no temporary left behind
}

TEST_CASE("checkpoint: bad files are refused and the model is left untouched", "[nn][checkpoint]") {
  temp_dir dir;
  const fs::path good = dir.path / "good.ckpt", bad = dir.path / "bad.ckpt";
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 9);
  adamw opt(be, m.parameters(), {});
  save_checkpoint(good, m, &opt);
  const auto bytes = read_all(good);
  host_backend be2;
  model target(be2, tiny_model(), recipes::bf16(), 77);
  adamw opt2(be2, target.parameters(), {});
  const auto before = weights(target);

  SECTION("truncated") {
    for (std::size_t keep : {std::size_t{4}, std::size_t{30}, bytes.size() / 2, bytes.size() - 1}) {
      write_all(bad, std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep)));
      INFO("kept " << keep << " bytes");
      CHECK_THROWS_AS(load_checkpoint(bad, target, &opt2), checkpoint_error);
      CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt2), mxkit_test::contains("truncated"));
    }
  }
  SECTION("foreign") {
    const std::string text = "this is a text file, not a checkpoint at all, but it is long enough";
    write_all(bad, std::vector<std::uint8_t>(text.begin(), text.end()));
    CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt2), mxkit_test::contains("not an mxkit checkpoint"));
  }
  SECTION("corrupt") {
    auto b = bytes;
    b[b.size() / 2] ^= 0x10;
    write_all(bad, b);
    CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt2), mxkit_test::contains("checksum mismatch"));
  }
  SECTION("trailing bytes") {
    auto b = bytes;
    b.push_back(0);
    write_all(bad, b);
    CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt2), mxkit_test::contains("unexpected bytes"));
  }
  SECTION("unsupported version") {
    auto b = bytes;
    b[8] = 3;
    fix_checksum(b);
    write_all(bad, b);
    CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt2), mxkit_test::contains("format version 3 is not supported"));
  }
  SECTION("another model") {
    host_backend be3;
    model_config c = tiny_model();
    c.layer.d_ff = 96;
    model other(be3, c, recipes::bf16(), 9);
    save_checkpoint(bad, other, nullptr);
    CHECK_THROWS_WITH(load_checkpoint(bad, target, nullptr), mxkit_test::contains("layers.0.gate_up.weight' is f32 192x32 in the file"));
  }
  SECTION("missing optimizer state") {
    save_checkpoint(bad, m, nullptr);
    CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt2), mxkit_test::contains("no optimizer state"));
    CHECK_NOTHROW(load_checkpoint(bad, target, nullptr));  // the weights alone load
    CHECK(same(weights(target), weights(m)));
    return;
  }
  SECTION("missing file") { CHECK_THROWS_WITH(load_checkpoint(dir.path / "nope.ckpt", target, nullptr), mxkit_test::contains("cannot open")); }
  CHECK(same(weights(target), before));
}

TEST_CASE("checkpoint: the header is the documented layout", "[nn][checkpoint]") {
  temp_dir dir;
  const fs::path file = dir.path / "layout.ckpt";
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 9);
  save_checkpoint(file, m, nullptr, {123, 0, {{"steps", "8"}, {"data", "a b=c"}}});
  const auto b = read_all(file);
  const std::string settings = "steps=8\ndata=a b=c\n";
  const std::size_t records = 56 + settings.size();
  REQUIRE(b.size() > records + 8);
  CHECK(std::string(b.begin(), b.begin() + 8) == "MXKITCKP");
  auto u = [&](std::size_t at, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t{b[at + static_cast<std::size_t>(i)]} << (8 * i);
    return v;
  };
  CHECK(u(8, 4) == 2);                          // version
  CHECK(u(12, 4) == m.parameters().size());     // one weight record per parameter
  CHECK(u(16, 8) == b.size() - records - 8);    // payload bytes
  CHECK(u(24, 8) == 123);                       // steps
  CHECK(u(32, 8) == 0);                         // no optimizer
  CHECK(u(40, 8) == settings.size());           // settings bytes
  CHECK(std::string(b.begin() + 48, b.begin() + 48 + static_cast<std::ptrdiff_t>(settings.size())) == settings);
  CHECK(u(48 + settings.size(), 8) == checkpoint_io::fnv1a64(b.data(), 48 + settings.size()));  // header checksum
  CHECK(u(b.size() - 8, 8) == checkpoint_io::fnv1a64(b.data(), b.size() - 8));
  CHECK(u(records, 4) == 0);                    // first record: a weight
  CHECK(u(records + 4, 4) == 0);                // f32
  CHECK(u(records + 8, 4) == std::string("embedding.weight").size());
}

namespace {
// The version 1 file of the same checkpoint: the 40-byte header, the records, one checksum.
std::vector<std::uint8_t> as_version_1(const std::vector<std::uint8_t>& v2) {
  std::uint64_t settings = 0;
  for (int i = 0; i < 8; ++i) settings |= std::uint64_t{v2[40 + static_cast<std::size_t>(i)]} << (8 * i);
  std::vector<std::uint8_t> v1 = v2;
  v1.erase(v1.begin() + 40, v1.begin() + 56 + static_cast<std::ptrdiff_t>(settings));  // the settings and the header checksum
  v1[8] = 1;
  fix_checksum(v1);
  return v1;
}
}  // namespace

TEST_CASE("checkpoint: the run settings are saved, read back before loading, and checked", "[nn][checkpoint]") {
  temp_dir dir;
  const fs::path file = dir.path / "run.ckpt", bad = dir.path / "bad.ckpt";
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 9);
  adamw opt(be, m.parameters(), {});
  const checkpoint_settings settings{{"recipe", "mxfp4"}, {"steps", "40"}, {"lr", "0.0006"}, {"empty", ""}};
  save_checkpoint(file, m, &opt, {7, 0, settings});

  const checkpoint_info peek = read_checkpoint_info(file);
  CHECK(peek.version == 2);
  CHECK(peek.steps == 7);
  CHECK(peek.settings == settings);
  host_backend be2;
  model target(be2, tiny_model(), recipes::bf16(), 77);
  adamw opt2(be2, target.parameters(), {});
  const checkpoint_info loaded = load_checkpoint(file, target, &opt2);
  CHECK(loaded.settings == settings);
  CHECK(same(weights(target), weights(m)));

  SECTION("a version 1 file still loads, with no settings") {
    write_all(bad, as_version_1(read_all(file)));
    host_backend be3;
    model old(be3, tiny_model(), recipes::bf16(), 5);
    adamw opt3(be3, old.parameters(), {});
    const checkpoint_info v1 = load_checkpoint(bad, old, &opt3);
    CHECK(v1.version == 1);
    CHECK(v1.steps == 7);
    CHECK(v1.settings.empty());
    CHECK(read_checkpoint_info(bad).version == 1);
    CHECK(same(weights(old), weights(m)));
  }
  SECTION("a corrupt setting is found by the header checksum, without the payload") {
    auto b = read_all(file);
    b[50] ^= 0x01;  // inside "recipe=mxfp4"
    write_all(bad, b);
    CHECK_THROWS_WITH(read_checkpoint_info(bad), mxkit_test::contains("header checksum mismatch"));
    CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt2), mxkit_test::contains("header checksum mismatch"));
  }
  SECTION("malformed settings with a valid header checksum are refused") {
    auto b = read_all(file);
    b[54] = '-';  // "recipe=mxfp4" loses its '='; both checksums are made right again
    fix_header_checksum(b);
    fix_checksum(b);
    write_all(bad, b);
    CHECK_THROWS_WITH(read_checkpoint_info(bad), mxkit_test::contains("run setting 0 is not key=value"));
  }
  SECTION("settings the format cannot hold are refused before anything is written") {
    const auto before = read_all(file);
    for (const checkpoint_settings& s : {checkpoint_settings{{"", "x"}}, checkpoint_settings{{"a=b", "x"}},
                                         checkpoint_settings{{"a", "x\ny"}}, checkpoint_settings{{"a", "1"}, {"a", "2"}},
                                         checkpoint_settings{{"a", std::string(checkpoint_max_settings_bytes, 'x')}}}) {
      CHECK_THROWS_AS(save_checkpoint(file, m, &opt, {1, 0, s}), std::invalid_argument);
      CHECK(read_all(file) == before);
    }
  }
  SECTION("a header that declares more settings than a checkpoint holds") {
    auto b = read_all(file);
    for (int i = 0; i < 8; ++i) b[40 + static_cast<std::size_t>(i)] = 0xFF;
    write_all(bad, b);
    CHECK_THROWS_WITH(read_checkpoint_info(bad), mxkit_test::contains("bytes of run settings, more than"));
  }
  SECTION("truncated inside the settings") {
    auto b = read_all(file);
    b.resize(60);
    write_all(bad, b);
    CHECK_THROWS_WITH(read_checkpoint_info(bad), mxkit_test::contains("truncated"));
  }
}

#if MXKIT_POSIX_FILE_IO
TEST_CASE("checkpoint: a failed write or sync or close keeps the old checkpoint and leaves no temporary", "[nn][checkpoint]") {
  temp_dir dir;
  const fs::path file = dir.path / "model.ckpt";
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 9);
  save_checkpoint(file, m, nullptr);
  const auto old = read_all(file);
  set_entry(be, m.head().weight(), 0, 0.5);  // the next checkpoint differs

  auto expect_failure = [&](int err, const char* step) {
    try {
      save_checkpoint(file, m, nullptr);
      FAIL("save_checkpoint did not throw");
    } catch (const checkpoint_error& e) {
      INFO(e.what());
      CHECK_THAT(e.what(), mxkit_test::contains(step));
      CHECK_THAT(e.what(), mxkit_test::contains(os_message(err)));  // the OS reason
    }
    CHECK(read_all(file) == old);
    CHECK(entries(dir.path) == std::set<std::string>{"model.ckpt"});
  };
  SECTION("write: a real EFBIG (RLIMIT_FSIZE below the checkpoint's size)") {
    rlimit saved{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // else the write raises SIGXFSZ (setrlimit(2))
    rlimit small = saved;
    small.rlim_cur = 4096;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    bool threw = false;
    std::string what;
    try {
      save_checkpoint(file, m, nullptr);
    } catch (const checkpoint_error& e) {
      threw = true;
      what = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);
    INFO(what);
    CHECK(threw);
    CHECK_THAT(what, mxkit_test::contains(os_message(EFBIG)));
    CHECK(read_all(file) == old);
    CHECK(entries(dir.path) == std::set<std::string>{"model.ckpt"});
  }
  SECTION("write: injected ENOSPC") {
    io_fault::scope fault({.fail_write_at = 1, .error = ENOSPC});
    expect_failure(ENOSPC, "writing");
  }
  SECTION("fsync of the file: injected EIO") {
    io_fault::scope fault({.fail_fsync_at = 1});
    expect_failure(EIO, "syncing");
  }
  SECTION("close: injected EIO (a deferred write error, as NFS reports it)") {
    io_fault::scope fault({.fail_close_at = 1});
    expect_failure(EIO, "closing");
  }
  SECTION("fsync of the directory after the rename: the new checkpoint is in place, and the caller is told") {
    io_fault::scope fault({.fail_fsync_at = 2});
    CHECK_THROWS_WITH(save_checkpoint(file, m, nullptr), mxkit_test::contains("in place") && mxkit_test::contains(os_message(EIO)));
    CHECK(fault.calls().fsyncs == 2);
    CHECK(read_all(file) != old);
    CHECK(entries(dir.path) == std::set<std::string>{"model.ckpt"});
    host_backend be2;
    model loaded(be2, tiny_model(), recipes::bf16(), 1);
    CHECK_NOTHROW(load_checkpoint(file, loaded, nullptr));
    CHECK(same(weights(loaded), weights(m)));
  }
  SECTION("a save syncs the file and its directory") {
    io_fault::scope count;
    save_checkpoint(file, m, nullptr);
    CHECK(count.calls().fsyncs == 2);
    CHECK(read_all(file) != old);
  }
}

TEST_CASE("checkpoint: concurrent saves to one path each leave a complete checkpoint", "[nn][checkpoint]") {
  temp_dir dir;
  const fs::path file = dir.path / "shared.ckpt";
  host_backend be1, be2;
  model m1(be1, tiny_model(), recipes::bf16(), 1), m2(be2, tiny_model(), recipes::bf16(), 2);
  const auto w1 = weights(m1), w2 = weights(m2);
  REQUIRE_FALSE(same(w1, w2));
  int torn = 0, errors = 0, from1 = 0, from2 = 0;
  std::string first_error;
  for (int round = 0; round < 25; ++round) {
    std::latch start(2);
    std::exception_ptr e1, e2;
    auto saver = [&](model& m, std::exception_ptr& err) {
      start.arrive_and_wait();
      try {
        save_checkpoint(file, m, nullptr);
      } catch (...) {
        err = std::current_exception();
      }
    };
    std::thread t1(saver, std::ref(m1), std::ref(e1)), t2(saver, std::ref(m2), std::ref(e2));
    t1.join();
    t2.join();
    for (const std::exception_ptr& e : {e1, e2})
      if (e) {
        ++errors;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          if (first_error.empty()) first_error = x.what();
        }
      }
    host_backend be3;
    model loaded(be3, tiny_model(), recipes::bf16(), 3);
    try {
      load_checkpoint(file, loaded, nullptr);
      const auto w = weights(loaded);
      from1 += same(w, w1);
      from2 += same(w, w2);
      torn += !same(w, w1) && !same(w, w2);
    } catch (const checkpoint_error& x) {
      ++torn;
      if (first_error.empty()) first_error = x.what();
    }
  }
  INFO("first error: " << first_error << "; checkpoints of model 1: " << from1 << ", of model 2: " << from2);
  CHECK(errors == 0);
  CHECK(torn == 0);
  CHECK(from1 + from2 == 25);
  CHECK(entries(dir.path) == std::set<std::string>{"shared.ckpt"});  // no temporary left
}

TEST_CASE("checkpoint: a symlink planted at <path>.tmp is never followed", "[nn][checkpoint]") {
  temp_dir dir;
  const fs::path file = dir.path / "model.ckpt", victim = dir.path / "victim.txt";
  const std::vector<std::uint8_t> precious{'p', 'r', 'e', 'c', 'i', 'o', 'u', 's'};
  write_all(victim, precious);
  fs::create_symlink(victim, file.string() + ".tmp");
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 9);
  try {
    save_checkpoint(file, m, nullptr);
  } catch (const std::exception& e) {
    FAIL_CHECK(e.what());
  }
  CHECK(read_all(victim) == precious);
  CHECK(fs::is_symlink(file.string() + ".tmp"));  // left as it was
  CHECK_FALSE(fs::is_symlink(file));
  host_backend be2;
  model loaded(be2, tiny_model(), recipes::bf16(), 1);
  CHECK_NOTHROW(load_checkpoint(file, loaded, nullptr));
  CHECK(same(weights(loaded), weights(m)));

  // A symlink at the checkpoint path itself is replaced, its target left alone (rename(2)).
  const fs::path link = dir.path / "link.ckpt", victim2 = dir.path / "victim2.txt";
  write_all(victim2, precious);
  fs::create_symlink(victim2, link);
  save_checkpoint(link, m, nullptr);
  CHECK(read_all(victim2) == precious);
  CHECK_FALSE(fs::is_symlink(link));
}
#endif

TEST_CASE("checkpoint: loading checks the header before it reads the payload", "[nn][checkpoint]") {
  temp_dir dir;
  host_backend be;
  model target(be, tiny_model(), recipes::bf16(), 77);
  adamw opt(be, target.parameters(), {});
  const auto before = weights(target);

  SECTION("a directory") {
    CHECK_THROWS_AS(load_checkpoint(dir.path, target, &opt), checkpoint_error);
    CHECK_THROWS_WITH(load_checkpoint(dir.path, target, &opt), mxkit_test::contains(dir.path.string()) && mxkit_test::contains("directory"));
  }
#if defined(__linux__)
  SECTION("/dev/zero: refused after the header, nothing more read") {
    const std::uint64_t read_before = bytes_read_so_far();
    CHECK_THROWS_AS(load_checkpoint("/dev/zero", target, &opt), checkpoint_error);
    CHECK_THROWS_WITH(load_checkpoint("/dev/zero", target, &opt), mxkit_test::contains("not an mxkit checkpoint"));
    CHECK(bytes_read_so_far() - read_before < (std::uint64_t{1} << 20));
  }
  SECTION("a 1 GiB foreign file (sparse) is refused without being read") {
    const fs::path big = dir.path / "big.bin";
    {
      std::ofstream out(big, std::ios::binary);
      out << "PK\x03\x04 a zip archive, say";
    }
    fs::resize_file(big, std::uintmax_t{1} << 30);  // ftruncate(2): a hole, no disk space
    const std::uint64_t read_before = bytes_read_so_far();
    CHECK_THROWS_WITH(load_checkpoint(big, target, &opt), mxkit_test::contains("not an mxkit checkpoint"));
    CHECK(bytes_read_so_far() - read_before < (std::uint64_t{1} << 20));
  }
  SECTION("a header that declares a payload this model cannot have") {
    host_backend be0;
    model m(be0, tiny_model(), recipes::bf16(), 9);
    const fs::path good = dir.path / "good.ckpt", bad = dir.path / "bad.ckpt";
    save_checkpoint(good, m, nullptr);
    auto b = read_all(good);
    const std::size_t header = 56;  // version 2 with no settings: 48 bytes, then the header checksum
    b.resize(header);
    const std::uint64_t payload = std::uint64_t{1} << 29;  // 512 MiB, and the file has them all (sparse)
    for (int i = 0; i < 8; ++i) b[16 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(payload >> (8 * i));
    fix_header_checksum(b);
    write_all(bad, b);
    fs::resize_file(bad, header + payload + 8);
    const std::uint64_t read_before = bytes_read_so_far();
    CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt), mxkit_test::contains("declares a payload of 536870912 bytes"));
    CHECK(bytes_read_so_far() - read_before < (std::uint64_t{1} << 20));
    // Far beyond any file: the same refusal, no allocation of the declared size.
    for (int i = 0; i < 8; ++i) b[16 + static_cast<std::size_t>(i)] = 0xFF;
    fix_header_checksum(b);
    b.resize(header + 8);  // a header and a checksum
    write_all(bad, b);
    CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt), mxkit_test::contains("declares a payload of 18446744073709551615 bytes"));
  }
#endif
#if MXKIT_POSIX_FILE_IO
  SECTION("a read error names the file and the OS reason") {
    host_backend be0;
    model m(be0, tiny_model(), recipes::bf16(), 9);
    adamw opt0(be0, m.parameters(), {});
    const fs::path good = dir.path / "good.ckpt";
    save_checkpoint(good, m, &opt0);
    REQUIRE_NOTHROW(load_checkpoint(good, target, &opt));
    io_fault::scope fault({.fail_read_at = 2});  // the header reads, the payload fails
    try {
      load_checkpoint(good, target, &opt);
      FAIL("load_checkpoint did not throw");
    } catch (const checkpoint_error& e) {
      CHECK_THAT(e.what(), mxkit_test::contains(good.string()));
      CHECK_THAT(e.what(), mxkit_test::contains(os_message(EIO)));
    }
    return;  // (the model loaded the good file above)
  }
#endif
  CHECK(same(weights(target), before));
}
