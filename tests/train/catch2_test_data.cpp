// SPDX-License-Identifier: Apache-2.0
// Byte tokenizer, corpus file loading and splitting, deterministic batches.
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <mxkit/train/data.hpp>

#include "../catch.hpp"
#include "../io/io_fault.hpp"

using namespace mxkit;
using namespace mxkit::nn;
namespace fs = std::filesystem;

TEST_CASE("data: byte tokenizer round trip", "[nn][data]") {
  const std::string text = "Q: what is two plus two?\nA: four. \xC3\xA9";
  const auto tokens = byte_tokenizer::encode(text);
  CHECK(tokens.size() == text.size());
  CHECK(tokens[0] == 'Q');
  CHECK(tokens.back() == 0xA9);
  CHECK(byte_tokenizer::decode(tokens) == text);
}

TEST_CASE("data: a corpus file is read and split into train and a held-out tail", "[nn][data]") {
  const fs::path file = fs::temp_directory_path() / ("mxkit_corpus_test_" + std::to_string(std::random_device{}()) + ".txt");
  std::vector<std::uint8_t> bytes(3 * 1024 * 1024 + 123);  // more than one read chunk
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 2654435761u >> 24);
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const corpus_split c = load_corpus(file, 0.1);
  fs::remove(file);
  const std::size_t n_val = bytes.size() / 10;
  REQUIRE(c.validation->size() == n_val);
  REQUIRE(c.train->size() == bytes.size() - n_val);
  CHECK(std::equal(c.train->begin(), c.train->end(), bytes.begin()));
  CHECK(std::equal(c.validation->begin(), c.validation->end(), bytes.end() - static_cast<std::ptrdiff_t>(n_val)));

  CHECK_THROWS_WITH(load_corpus(file), mxkit_test::contains("cannot open"));
  CHECK_THROWS_WITH(split_corpus(bytes, 1.5), mxkit_test::contains("validation fraction"));
}

TEST_CASE("data: the shipped corpora load", "[nn][data]") {
  const fs::path data = fs::path(__FILE__).parent_path().parent_path().parent_path() / "data";
  for (const char* name : {"stories.txt", "qa.txt"}) {
    INFO(name);
    const corpus_split c = load_corpus(data / name, 0.1);
    CHECK(c.train->size() > 50000);
    CHECK(c.validation->size() > 5000);
    std::set<std::uint8_t> seen(c.train->begin(), c.train->end());
    CHECK(seen.size() > 30);                 // real text, not a constant
    CHECK(*seen.rbegin() < 128);             // ASCII
  }
}

TEST_CASE("data: batches are deterministic windows with shifted targets", "[nn][data]") {
  auto tokens = std::make_shared<std::vector<std::uint8_t>>(1000);
  for (std::size_t i = 0; i < tokens->size(); ++i) (*tokens)[i] = static_cast<std::uint8_t>(i % 251);
  const batch_shape shape{3, 16};
  batch_loader a(tokens, shape, 7), b(tokens, shape, 7), other(tokens, shape, 8);
  bool differs = false;
  for (int n = 0; n < 20; ++n) {
    const batch x = a.next(), y = b.next(), z = other.next();
    CHECK(x.inputs == y.inputs);
    CHECK(x.targets == y.targets);
    differs = differs || x.inputs != z.inputs;
    for (std::size_t r = 0; r < shape.batch; ++r) {
      const std::int32_t first = x.inputs[r * 16];
      for (std::size_t t = 0; t < 16; ++t) {
        CHECK(x.targets[r * 16 + t] == (x.inputs[r * 16 + t] + 1) % 251);  // the next byte
        if (t) CHECK(x.inputs[r * 16 + t] == (first + static_cast<std::int32_t>(t)) % 251);  // one contiguous window
      }
    }
  }
  CHECK(differs);
  a.seek(5);
  CHECK(a.next().inputs == b.at(5).inputs);  // resumable
}

TEST_CASE("data: validation batches are consecutive non-overlapping windows", "[nn][data]") {
  auto tokens = std::make_shared<std::vector<std::uint8_t>>(200);
  for (std::size_t i = 0; i < tokens->size(); ++i) (*tokens)[i] = static_cast<std::uint8_t>(i);
  const auto batches = sequential_batches(tokens, {2, 16}, 100);
  REQUIRE(batches.size() == 6);  // 6 * 32 + 1 <= 200 < 7 * 32 + 1
  for (std::size_t k = 0; k < batches.size(); ++k)
    for (std::size_t i = 0; i < 32; ++i) {
      CHECK(batches[k].inputs[i] == static_cast<std::int32_t>(32 * k + i));
      CHECK(batches[k].targets[i] == static_cast<std::int32_t>(32 * k + i + 1));
    }
  CHECK(sequential_batches(tokens, {2, 16}, 2).size() == 2);
  CHECK_THROWS_WITH(sequential_batches(tokens, {8, 64}, 1), mxkit_test::contains("cannot fill"));
  CHECK_THROWS_WITH(batch_loader(tokens, {1, 300}, 1), mxkit_test::contains("cannot fill a window"));
}

TEST_CASE("data: empty or wrapping batch shapes are refused", "[nn][data]") {
  auto tokens = std::make_shared<std::vector<std::uint8_t>>(1000);
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  SECTION("batch or sequence 0 (a mean over no tokens is NaN)") {
    CHECK_THROWS_WITH(batch_loader(tokens, {0, 16}, 1), mxkit_test::contains("batch must be positive, got 0"));
    CHECK_THROWS_WITH(batch_loader(tokens, {2, 0}, 1), mxkit_test::contains("seq must be positive, got 0"));
    CHECK_THROWS_WITH(sequential_batches(tokens, {0, 16}, 3), mxkit_test::contains("batch must be positive, got 0"));
    CHECK_THROWS_WITH(sequential_batches(tokens, {2, 0}, 3), mxkit_test::contains("seq must be positive, got 0"));
  }
  SECTION("seq + 1 wraps") {
    CHECK_THROWS_AS(batch_loader(tokens, {1, max}, 1), std::invalid_argument);
    CHECK_THROWS_WITH(batch_loader(tokens, {1, max}, 1), mxkit_test::contains("seq + 1"));
    CHECK_THROWS_WITH(sequential_batches(tokens, {1, max}, 1), mxkit_test::contains("seq + 1"));
  }
  SECTION("batch x seq wraps (to 0: the batch would be two empty vectors written out of bounds)") {
    const batch_shape wraps{std::size_t{1} << (std::numeric_limits<std::size_t>::digits - 4), 16};
    CHECK_THROWS_AS(batch_loader(tokens, wraps, 1), std::invalid_argument);
    CHECK_THROWS_WITH(batch_loader(tokens, wraps, 1), mxkit_test::contains("batch x seq"));
    CHECK_THROWS_WITH(sequential_batches(tokens, wraps, 1), mxkit_test::contains("batch x seq"));
  }
}

TEST_CASE("data: a corpus read error is an error (never a shorter corpus)", "[nn][data]") {
  const fs::path dir = fs::temp_directory_path() / ("mxkit_corpus_dir_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  // The OS reason once: std::system_error appends it to what() (a message once said
  // "Input/output error: Input/output error").
  auto reasons = [](const std::string& what, int err) {
    const std::string reason = std::generic_category().message(err);
    std::size_t n = 0;
    for (std::size_t at = what.find(reason); at != std::string::npos; at = what.find(reason, at + 1)) ++n;
    return n;
  };
  SECTION("a directory (read(2) fails with EISDIR)") {
    CHECK_THROWS_AS(load_corpus(dir), std::system_error);
    CHECK_THROWS_WITH(load_corpus(dir), mxkit_test::contains(std::generic_category().message(EISDIR)));
    try {
      load_corpus(dir);
    } catch (const std::system_error& e) {
      CHECK(e.code().value() == EISDIR);
      CHECK(reasons(e.what(), EISDIR) == 1);
    }
  }
#if MXKIT_POSIX_FILE_IO
  SECTION("a read that fails after the first chunk") {
    const fs::path file = dir / "corpus.txt";
    {
      std::ofstream out(file, std::ios::binary);
      const std::string line = "a line of text that repeats\n";
      for (int i = 0; i < 100000; ++i) out << line;  // 2.8 MB: several read chunks
    }
    REQUIRE_NOTHROW(load_corpus(file));
    io_fault::scope fault({.fail_read_at = 2});
    try {
      const corpus_split c = load_corpus(file);
      FAIL("no exception; the corpus has " << c.train->size() + c.validation->size() << " of " << fs::file_size(file) << " bytes");
    } catch (const std::system_error& e) {
      CHECK(e.code().value() == EIO);
      CHECK_THAT(e.what(), mxkit_test::contains("reading failed after 1048576 bytes"));
      CHECK(reasons(e.what(), EIO) == 1);
      CHECK_THAT(e.what(), mxkit_test::contains(file.string()));
    }
  }
#endif
  std::error_code ec;
  fs::remove_all(dir, ec);
}
