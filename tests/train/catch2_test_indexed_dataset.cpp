// SPDX-License-Identifier: Apache-2.0
// Megatron indexed datasets (mxkit/train/indexed_dataset.hpp): every token dtype read back, and
// each kind of damaged file refused with a message naming the file and the field.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <mxkit/train/indexed_dataset.hpp>

#include "../catch.hpp"
#include "token_files.hpp"

using namespace mxkit::nn;
using train_test::idx_layout;
using train_test::poke;
namespace fs = std::filesystem;

namespace {
const std::vector<std::vector<std::int64_t>> seqs = {{5, 1, 7}, {}, {100, 3}, {9, 9, 9, 9}};

std::vector<std::int32_t> sequence(const indexed_dataset& d, std::uint64_t s) {
  std::vector<std::int32_t> out(d.length(s));
  d.read(s, 0, out.size(), out.data());
  return out;
}

// Opening `f` at `prefix` throws, naming the index and every fragment.
void refused(const train_test::megatron_files& f, const fs::path& prefix, const std::vector<std::string>& fragments) {
  f.write(prefix);
  try {
    indexed_dataset d(prefix);
    FAIL("opened a damaged dataset; expected a message with '" << fragments.front() << "'");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    INFO(what);
    for (const std::string& s : fragments) CHECK(what.find(s) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("indexed dataset: every integer dtype reads back as int32", "[train][indexed_dataset]") {
  nn_test::temp_dir dir;
  for (std::uint8_t code : {1, 2, 3, 4, 5, 8}) {
    INFO("dtype code " << int(code));
    const fs::path prefix = dir.path / std::string("d").append(std::to_string(code));
    train_test::megatron(seqs, code, {0, 2, 4}).write(prefix);
    const indexed_dataset d(prefix);
    CHECK(static_cast<int>(d.dtype()) == code);
    CHECK(d.sequences() == 4);
    CHECK(d.documents() == 2);
    CHECK(d.first_sequence(0) == 0);
    CHECK(d.first_sequence(1) == 2);
    CHECK(d.first_sequence(2) == 4);
    CHECK(d.tokens() == 9);
    CHECK(d.max_token() == 100);
    CHECK(sequence(d, 0) == std::vector<std::int32_t>{5, 1, 7});
    CHECK(sequence(d, 1).empty());
    CHECK(sequence(d, 2) == std::vector<std::int32_t>{100, 3});
    std::int32_t mid[2] = {0, 0};
    d.read(3, 1, 2, mid);
    CHECK((mid[0] == 9 && mid[1] == 9));
    CHECK_THROWS_WITH(d.read(0, 2, 2, mid), mxkit_test::contains("tokens [2, 4) of a sequence of 3"));
  }
  // Multimodal datasets carry one mode byte per sequence after the document indices.
  train_test::megatron(seqs, 4, {}, true).write(dir.path / "modes");
  CHECK(indexed_dataset(dir.path / "modes").tokens() == 9);
  // int64 tokens below 2^31 fit.
  train_test::megatron({{2147483647, 0}}, 5).write(dir.path / "big");
  CHECK(indexed_dataset(dir.path / "big").max_token() == 2147483647);
}

TEST_CASE("indexed dataset: damaged files are refused by name", "[train][indexed_dataset]") {
  nn_test::temp_dir dir;
  const fs::path p = dir.path / "x";
  const std::string idx = std::string("Megatron index '").append((dir.path / "x.idx").string()).append("'");
  const idx_layout at{seqs.size()};
  const auto good = [] { return train_test::megatron(seqs, 4); };

  SECTION("missing files") {
    CHECK_THROWS_WITH(indexed_dataset(p), mxkit_test::contains("Megatron index '" + (dir.path / "x.idx").string() + "': cannot open"));
    auto f = good();
    f.write(p);
    fs::remove(dir.path / "x.bin");
    CHECK_THROWS_WITH(indexed_dataset(p), mxkit_test::contains("Megatron data file '" + (dir.path / "x.bin").string() + "': cannot open"));
  }
  SECTION("bad magic") {
    auto f = good();
    f.idx[0] = 'N';
    refused(f, p, {idx, "bad magic"});
  }
  SECTION("bad version") {
    auto f = good();
    poke<std::uint64_t>(f.idx, at.version(), 2);
    refused(f, p, {idx, "bad version 2"});
  }
  SECTION("bad dtype: unknown and floating-point codes") {
    auto f = good();
    poke<std::uint8_t>(f.idx, at.dtype(), 9);
    refused(f, p, {idx, "bad dtype code 9"});
    poke<std::uint8_t>(f.idx, at.dtype(), 0);
    refused(f, p, {idx, "bad dtype code 0"});
    poke<std::uint8_t>(f.idx, at.dtype(), 7);
    refused(f, p, {idx, "dtype code 7 is float32"});
    poke<std::uint8_t>(f.idx, at.dtype(), 6);
    refused(f, p, {idx, "dtype code 6 is float64"});
  }
  SECTION("truncated index, anywhere") {
    for (std::size_t keep : {std::size_t{5}, std::size_t{20}, at.length(2), at.document(4)}) {
      auto f = good();
      f.idx.resize(keep);
      refused(f, p, {idx, keep < 9 ? "bad magic" : "truncated"});
    }
  }
  SECTION("counts against the file size, trailing bytes") {
    auto f = good();
    poke<std::uint64_t>(f.idx, at.sequence_count(), 5);
    refused(f, p, {idx, "truncated", "5 sequences"});
    poke<std::uint64_t>(f.idx, at.sequence_count(), ~std::uint64_t{0});
    refused(f, p, {idx, "sequence count 18446744073709551615"});
    f = good();
    f.idx.push_back(0);
    f.idx.push_back(0);
    refused(f, p, {idx, "trailing bytes"});
  }
  SECTION("truncated data file") {
    auto f = good();
    f.bin.resize(f.bin.size() - 4);
    refused(f, p, {"Megatron data file", "out of range"});
    f = good();
    f.bin.push_back(1);
    refused(f, p, {"Megatron data file '" + (dir.path / "x.bin").string() + "' has 37 bytes, but its index describes 36"});
  }
  SECTION("a pointer out of range") {
    auto f = good();
    poke<std::int64_t>(f.idx, at.pointer(3), 1 << 20);
    refused(f, p, {idx, "sequence pointer 3 is 1048576", "out of range"});
  }
  SECTION("pointers not monotone, negative") {
    auto f = good();
    poke<std::int64_t>(f.idx, at.pointer(2), 4);
    refused(f, p, {idx, "sequence pointer 2 is 4, below the previous one 12"});
    f = good();
    poke<std::int64_t>(f.idx, at.pointer(0), -8);
    refused(f, p, {idx, "sequence pointer 0 is -8 (negative)"});
  }
  SECTION("lengths that disagree with the pointers") {
    auto f = good();
    poke<std::int32_t>(f.idx, at.length(0), 2);
    refused(f, p, {idx, "sequence pointer 1 is 12 but the lengths before it", "put it at 8", "disagree"});
    f = good();
    poke<std::int32_t>(f.idx, at.length(1), -1);
    refused(f, p, {idx, "sequence length 1 is -1"});
  }
  SECTION("document indices: not monotone, not from 0, not ending at the sequence count") {
    auto f = train_test::megatron(seqs, 4, {0, 3, 2, 4});
    refused(f, p, {idx, "document index 2 is 2, below the previous one 3 (not monotone)"});
    f = train_test::megatron(seqs, 4, {1, 2, 4});
    refused(f, p, {idx, "document index 0 is 1"});
    f = train_test::megatron(seqs, 4, {0, 2, 3});
    refused(f, p, {idx, "the last document index is 3, not the sequence count 4"});
    f = train_test::megatron(seqs, 4, {0, 2, 9});
    refused(f, p, {idx, "document index 2 is 9, past the sequence count 4"});
  }
  SECTION("tokens outside int32") {
    refused(train_test::megatron({{1, 2}, {3, -4}}, 3), p, {"Megatron data file", "token -4 (sequence 1, position 1) is negative"});
    refused(train_test::megatron({{1, 2}, {3, 2147483648}}, 5), p, {"token 2147483648 (sequence 1, position 1) is past the int32 range"});
  }
}
