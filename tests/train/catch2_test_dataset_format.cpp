// SPDX-License-Identifier: Apache-2.0
// Which format a path holds, told from the content (mxkit/train/dataset_format.hpp): a name alone
// never makes a format, and a token file that lacks its magic is refused, not read as text.
#include <filesystem>
#include <string>

#include <mxkit/train/dataset_format.hpp>
#include <mxkit/train/indexed_dataset.hpp>
#include <mxkit/train/packed_dataset.hpp>

#include "../catch.hpp"
#include "token_files.hpp"

using namespace mxkit::nn;
namespace fs = std::filesystem;

TEST_CASE("dataset format: Megatron by prefix or either file, .npy and text by content", "[train][dataset_format]") {
  nn_test::temp_dir dir;
  const fs::path prefix = dir.path / "corpus";
  train_test::megatron({{1, 2, 3}, {4, 5}}, 8).write(prefix);
  for (const fs::path& p : {prefix, fs::path(prefix.string() + ".idx"), fs::path(prefix.string() + ".bin")}) {
    const dataset_location at = detect_dataset(p, "--data");
    CHECK(at.kind == dataset_kind::megatron);
    CHECK(at.path == prefix);
  }
  // .npy by its magic, whatever the name; text whatever the name when there is no magic.
  nn_test::write_all(dir.path / "rows.dat", train_test::npy("<i4", {1, 2}, train_test::elements({1, 2}, 4)));
  CHECK(detect_dataset(dir.path / "rows.dat").kind == dataset_kind::packed);
  nn_test::write_all(dir.path / "notes.npy.txt", {'h', 'i'});
  CHECK(detect_dataset(dir.path / "notes.npy.txt").kind == dataset_kind::text);
  // An index under another name is a Megatron index (its magic), and refused for its name.
  fs::copy_file(prefix.string() + ".idx", dir.path / "index.dat");
  CHECK_THROWS_WITH(detect_dataset(dir.path / "index.dat", "--data"), mxkit_test::contains("is a Megatron index, but its name does not end in .idx"));
}

TEST_CASE("dataset format: a token file's name without its content is refused, not read as text", "[train][dataset_format]") {
  nn_test::temp_dir dir;
  // .idx without the magic: taken for an index, whose reader says "bad magic".
  nn_test::write_all(dir.path / "a.idx", {'t', 'e', 'x', 't', ' ', 'h', 'e', 'r', 'e', '!'});
  nn_test::write_all(dir.path / "a.bin", {});
  const dataset_location a = detect_dataset(dir.path / "a.idx");
  CHECK(a.kind == dataset_kind::megatron);
  CHECK_THROWS_WITH(indexed_dataset(a.path), mxkit_test::contains("bad magic"));
  // .npy without the magic: its reader says "bad magic".
  nn_test::write_all(dir.path / "b.npy", {'p', 'l', 'a', 'i', 'n'});
  const dataset_location b = detect_dataset(dir.path / "b.npy");
  CHECK(b.kind == dataset_kind::packed);
  CHECK_THROWS_WITH(packed_dataset(b.path), mxkit_test::contains("bad magic"));
  // .bin without an index beside it.
  nn_test::write_all(dir.path / "c.bin", {1, 0, 2, 0});
  CHECK_THROWS_WITH(detect_dataset(dir.path / "c.bin", "--data"),
                    mxkit_test::contains("there is no index '" + (dir.path / "c").string() + ".idx' beside it"));
  // A prefix with one file of the two: the reader names the missing one.
  const dataset_location half = detect_dataset(dir.path / "c");
  CHECK(half.kind == dataset_kind::megatron);
  CHECK_THROWS_WITH(indexed_dataset(half.path), mxkit_test::contains("c.idx': cannot open"));
  // Nothing there at all.
  CHECK_THROWS_WITH(detect_dataset(dir.path / "none", "--data"), mxkit_test::contains("--data '" + (dir.path / "none").string() + "' does not exist"));
}
