// Checkpoints: exact round trip of weights and optimizer state (a resumed run continues with
// the same losses), atomic replacement, and clear refusals of truncated, foreign, corrupt,
// unsupported and mismatched files.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <mxkit/nn/checkpoint.hpp>
#include <mxkit/nn/training.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;
namespace fs = std::filesystem;

namespace {

token_buffer synthetic_tokens() {
  auto v = std::make_shared<std::vector<std::uint8_t>>(8192);
  for (std::size_t i = 0; i < v->size(); ++i) (*v)[i] = static_cast<std::uint8_t>("checkpoints keep training state. "[i % 33]);
  return v;
}

train_config short_run(std::size_t steps) {
  train_config c;
  c.steps = steps;
  c.shape = {2, 32};
  c.schedule = {3e-3, 3e-4, 2, steps};
  return c;
}

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("mxkit_ckpt_test_" + std::to_string(std::random_device{}()));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<std::uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_all(const fs::path& p, const std::vector<std::uint8_t>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void fix_checksum(std::vector<std::uint8_t>& b) {
  const std::uint64_t h = checkpoint_io::fnv1a64(b.data(), b.size() - 8);
  for (int i = 0; i < 8; ++i) b[b.size() - 8 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h >> (8 * i));
}

std::vector<std::vector<double>> weights(model& m) {
  std::vector<std::vector<double>> out;
  for (parameter* p : m.parameters()) out.push_back(m.be().read(p->value));
  return out;
}
// (a bool, so that a failure does not print every weight)
bool same(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) { return a == b; }

}  // namespace

TEST_CASE("checkpoint: a resumed run continues with the same losses", "[nn][checkpoint]") {
  temp_dir dir;
  const fs::path file = dir.path / "run.ckpt";
  for (const recipe& r : {recipes::bf16(), recipes::mxfp4_nvidia_style()}) {
    INFO(r.name);
    // Uninterrupted: 8 steps.
    host_backend be1;
    model m1(be1, tiny_model(), r, 9);
    trainer t1(m1, synthetic_tokens(), short_run(8));
    for (int i = 0; i < 4; ++i) t1.step();
    save_checkpoint(file, m1, &t1.optimizer(), {t1.steps_done()});
    CHECK(fs::exists(file));
    CHECK_FALSE(fs::exists(file.string() + ".tmp"));
    t1.run();

    // Resumed: a fresh model with other weights, loaded, then the last 4 steps.
    host_backend be2;
    model m2(be2, tiny_model(), r, 1234);
    trainer t2(m2, synthetic_tokens(), short_run(8));
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
    b[8] = 2;
    fix_checksum(b);
    write_all(bad, b);
    CHECK_THROWS_WITH(load_checkpoint(bad, target, &opt2), mxkit_test::contains("format version 2 is not supported"));
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
  save_checkpoint(file, m, nullptr, {123});
  const auto b = read_all(file);
  REQUIRE(b.size() > 48);
  CHECK(std::string(b.begin(), b.begin() + 8) == "MXKITCKP");
  auto u = [&](std::size_t at, int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t{b[at + static_cast<std::size_t>(i)]} << (8 * i);
    return v;
  };
  CHECK(u(8, 4) == 1);                          // version
  CHECK(u(12, 4) == m.parameters().size());     // one weight record per parameter
  CHECK(u(16, 8) == b.size() - 48);             // payload bytes
  CHECK(u(24, 8) == 123);                       // steps
  CHECK(u(32, 8) == 0);                         // no optimizer
  CHECK(u(b.size() - 8, 8) == checkpoint_io::fnv1a64(b.data(), b.size() - 8));
  CHECK(u(40, 4) == 0);                         // first record: a weight
  CHECK(u(44, 4) == 0);                         // f32
  CHECK(u(48, 4) == std::string("embedding.weight").size());
}
