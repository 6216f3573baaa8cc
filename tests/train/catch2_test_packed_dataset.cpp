// SPDX-License-Identifier: Apache-2.0
// Packed .npy datasets (mxkit/train/npy.hpp, mxkit/train/packed_dataset.hpp): good arrays of each
// accepted dtype and header version, a loss mask, each damaged file refused by name, and NeMo's
// per-epoch row order.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <mxkit/train/packed_dataset.hpp>
#include <mxkit/train/seeded_shuffle.hpp>

#include "../catch.hpp"
#include "token_files.hpp"

using namespace mxkit::nn;
using train_test::elements;
using train_test::npy;
namespace fs = std::filesystem;

namespace {
const std::vector<std::int64_t> tokens = {1, 2, 3, 4, 5, 60, 7, 8, 9, 10, 11, 12};  // (3, 4)
const std::vector<std::int64_t> mask = {0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1};

void refused(const fs::path& p, const train_test::bytes& file, const std::vector<std::string>& fragments,
             const std::optional<fs::path>& mask_path = std::nullopt) {
  nn_test::write_all(p, file);
  try {
    packed_dataset d(p, mask_path);
    FAIL("opened a damaged file; expected '" << fragments.front() << "'");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    INFO(what);
    for (const std::string& s : fragments) CHECK(what.find(s) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("packed dataset: integer arrays of any accepted dtype and version, with a loss mask", "[train][packed_dataset]") {
  nn_test::temp_dir dir;
  const fs::path p = dir.path / "rows.npy";
  for (const auto& [descr, size] : std::vector<std::pair<std::string, std::size_t>>{{"<i4", 4}, {"<i8", 8}, {"<u2", 2}, {"|u1", 1}, {"<u4", 4}, {"<i2", 2}}) {
    for (int version : {1, 2, 3}) {
      INFO(descr << " version " << version);
      nn_test::write_all(p, npy(descr, {3, 4}, elements(tokens, size), version));
      fs::remove(dir.path / "rows.loss_mask.npy");
      const packed_dataset d(p);
      CHECK(d.rows() == 3);
      CHECK(d.row_length() == 4);
      CHECK(d.max_token() == 60);
      CHECK_FALSE(d.has_mask());
      std::vector<std::int32_t> row(4);
      d.read_row(1, row.data());
      CHECK(row == std::vector<std::int32_t>{5, 60, 7, 8});
      std::vector<std::uint8_t> m(4);
      d.read_mask(1, m.data());
      CHECK(m == std::vector<std::uint8_t>{1, 1, 1, 1});
    }
  }
  // The default mask beside it: NAME.loss_mask.npy, bool or integer.
  for (const auto& [descr, size] : std::vector<std::pair<std::string, std::size_t>>{{"|b1", 1}, {"|u1", 1}, {"<i4", 4}}) {
    nn_test::write_all(dir.path / "rows.loss_mask.npy", npy(descr, {3, 4}, elements(mask, size)));
    const packed_dataset d(p);
    REQUIRE(d.has_mask());
    std::vector<std::uint8_t> m(4);
    d.read_mask(2, m.data());
    CHECK(m == std::vector<std::uint8_t>{1, 1, 1, 1});
    d.read_mask(0, m.data());
    CHECK(m == std::vector<std::uint8_t>{0, 0, 1, 1});
  }
  CHECK(packed_dataset::default_mask_path("a/b.npy") == fs::path("a/b.loss_mask.npy"));
  CHECK(packed_dataset::default_mask_path("a/b") == fs::path("a/b.loss_mask.npy"));
  // A mask named explicitly.
  nn_test::write_all(dir.path / "m.npy", npy("|b1", {3, 4}, elements(mask, 1)));
  CHECK(packed_dataset(p, dir.path / "m.npy").has_mask());
}

TEST_CASE("packed dataset: damaged and foreign arrays are refused by name", "[train][packed_dataset]") {
  nn_test::temp_dir dir;
  const fs::path p = dir.path / "rows.npy";
  const std::string name = "packed tokens '" + p.string() + "'";
  const auto data = elements(tokens, 4);

  SECTION("bad magic, version, truncated preamble") {
    auto f = npy("<i4", {3, 4}, data);
    f[1] = 'X';
    refused(p, f, {name, "bad magic"});
    f = npy("<i4", {3, 4}, data);
    f[6] = 4;
    refused(p, f, {name, "bad version 4.0"});
    refused(p, train_test::bytes(f.begin(), f.begin() + 8), {name, "truncated"});
    f = npy("<i4", {3, 4}, data);
    f[8] = 0xFF;  // a header length past the end
    refused(p, f, {name, "truncated: the header is"});
  }
  SECTION("bad headers") {
    refused(p, npy("", {}, data, 1, false, "not a dict"), {name, "bad header", "expected '{'"});
    refused(p, npy("", {}, data, 1, false, "{'descr': '<i4', 'shape': (3, 4), }"), {name, "lacks 'fortran_order'"});
    refused(p, npy("", {}, data, 1, false, "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 4), 'extra': 1, }"),
            {name, "unknown key 'extra'"});
    refused(p, npy("", {}, data, 1, false, "{'descr': '<i4', 'fortran_order': Maybe, 'shape': (3, 4), }"), {name, "True or False"});
    refused(p, npy("", {}, data, 1, false, "{'descr': '<i4', 'fortran_order': False, 'shape': (3, x), }"), {name, "tuple of non-negative integers"});
    refused(p, npy("", {}, data, 1, false, "{'descr': '<i4, 'fortran_order': False, 'shape': (3, 4), }"), {name, "bad header"});
  }
  SECTION("dtypes that are not little-endian integers") {
    refused(p, npy("<f4", {3, 4}, data), {name, "dtype '<f4' is floating-point"});
    refused(p, npy(">i4", {3, 4}, data), {name, "dtype '>i4' is big-endian"});
    refused(p, npy("|O", {3, 4}, data), {name, "dtype '|O'"});
    refused(p, npy("|O8", {3, 4}, elements(tokens, 8)), {name, "Python objects (pickled)"});
    refused(p, npy("<i3", {3, 4}, data), {name, "not an integer of 1, 2, 4 or 8 bytes"});
    refused(p, npy("|b1", {3, 4}, elements(tokens, 1)), {name, "is bool: tokens must be integers"});
  }
  SECTION("Fortran order") { refused(p, npy("<i4", {3, 4}, data, 1, true), {name, "fortran_order is True"}); }
  SECTION("shape against the data, and the shape of a packed array") {
    refused(p, npy("<i4", {3, 5}, data), {name, "truncated: shape (3, 5) of <i4 is 60 bytes of data, the file has 48"});
    refused(p, npy("<i4", {2, 4}, data), {name, "trailing bytes"});
    refused(p, npy("<i4", {12}, data), {name, "1-dimensional"});
    refused(p, npy("<i4", {12, 1}, data), {name, "at least one row of at least 2 tokens"});
    refused(p, npy("<i4", {0, 4}, {}), {name, "at least one row"});
  }
  SECTION("tokens outside int32") {
    auto bad = tokens;
    bad[6] = -3;
    refused(p, npy("<i4", {3, 4}, elements(bad, 4)), {name, "token -3 (row 1, position 2) is negative"});
    bad[6] = 1ll << 40;
    refused(p, npy("<i8", {3, 4}, elements(bad, 8)), {name, "token 1099511627776 (row 1, position 2) is past the int32 range"});
  }
  SECTION("a loss mask that does not match") {
    const fs::path m = dir.path / "rows.loss_mask.npy";
    const std::string mname = "packed loss mask '" + m.string() + "'";
    nn_test::write_all(m, npy("|b1", {4, 3}, elements(mask, 1)));
    refused(p, npy("<i4", {3, 4}, data), {mname, "shape (4, 3) differs from the tokens' (3, 4)"});
    auto two = mask;
    two[5] = 2;
    nn_test::write_all(m, npy("|u1", {3, 4}, elements(two, 1)));
    refused(p, npy("<i4", {3, 4}, data), {mname, "value 2 (row 1, position 1) is not 0 or 1"});
    nn_test::write_all(m, npy("<f4", {3, 4}, elements(mask, 4)));
    refused(p, npy("<i4", {3, 4}, data), {mname, "floating-point"});
    fs::remove(m);
    refused(p, npy("<i4", {3, 4}, data), {"packed loss mask '" + (dir.path / "nothere.npy").string() + "': cannot open"}, dir.path / "nothere.npy");
  }
}

TEST_CASE("packed samples: NeMo's order, each epoch a seeded permutation of the rows", "[train][packed_dataset]") {
  nn_test::temp_dir dir;
  std::vector<std::int64_t> t;
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < 3; ++c) t.push_back(100 * r + c);
  nn_test::write_all(dir.path / "rows.npy", npy("<i4", {10, 3}, elements(t, 4)));
  const auto d = std::make_shared<const packed_dataset>(dir.path / "rows.npy");
  // Rows [2, 9), 17 samples: ceil(17 / 7) = 3 epochs, each a permutation, from one generator.
  const packed_samples s(d, 2, 9, {17, 42, true});
  REQUIRE(s.size() == 21);
  CHECK(s.window() == 3);
  seeded_shuffle r(42);
  for (std::uint64_t e = 0; e < 3; ++e) {
    std::vector<std::uint32_t> epoch(7);
    std::iota(epoch.begin(), epoch.end(), 0u);
    r.shuffle(std::span<std::uint32_t>(epoch));
    for (std::uint64_t i = 0; i < 7; ++i) {
      CHECK(s.row(e * 7 + i) == 2 + epoch[i]);
      std::vector<std::int32_t> row(3);
      s.fill(e * 7 + i, row.data());
      CHECK(row[0] == static_cast<std::int32_t>(100 * (2 + epoch[i])));
    }
  }
  const packed_samples plain(d, 0, 10, {0, 0, false});
  REQUIRE(plain.size() == 10);
  for (std::uint64_t i = 0; i < 10; ++i) CHECK(plain.row(i) == i);
  CHECK_THROWS_WITH(packed_samples(d, 3, 3, {0, 0, false}), mxkit_test::contains("rows [3, 3) of 10"));
}
