// SPDX-License-Identifier: Apache-2.0
// file_io.hpp: replace_file keeps the replaced file's mode and owner, its temporary fits
// beside a target whose name is as long as the file system allows, and it never puts a regular
// file in the place of a pipe (or device, or socket). (Failures of each system call
// are covered through checkpoints in catch2_test_checkpoint.cpp.)
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <mxkit/file_io.hpp>

#include "catch.hpp"

#if MXKIT_POSIX_FILE_IO
#include <sys/stat.h>
#include <unistd.h>

namespace {
namespace fs = std::filesystem;

// A fresh, empty folder for one test case, removed with it.
struct scratch_dir {
  fs::path path;
  explicit scratch_dir(const std::string& name) : path(fs::temp_directory_path() / (name + "." + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void replace(const fs::path& p, const std::string& text) { mxkit::detail::replace_file(p, text.data(), text.size()); }

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

::mode_t mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

// ---- Issue #33 items 5 and 6 (fail on 144c4cb) ------------------------------------------------------

TEST_CASE("file_io: replacing a file keeps its mode", "[nn][file_io]") {
  const scratch_dir dir("mxkit_file_io_mode");
  const fs::path file = dir.path / "checkpoint.bin";
  for (const ::mode_t mode : {0600u, 0640u, 0400u, 0755u}) {
    INFO("mode " << std::oct << mode);
    replace(file, "old");
    REQUIRE(::chmod(file.c_str(), mode) == 0);
    replace(file, "new contents");
    CHECK(read_text(file) == "new contents");
    CHECK(mode_of(file) == mode);
    CHECK(names_in(dir.path) == std::vector<std::string>{"checkpoint.bin"});  // no temporary left
  }
  // A new file gets the usual mode: 0666 less the umask.
  const ::mode_t mask = ::umask(022);
  ::umask(mask);
  const fs::path fresh = dir.path / "fresh.bin";
  replace(fresh, "x");
  CHECK(mode_of(fresh) == (0666u & ~mask));
}

TEST_CASE("file_io: replacing a file keeps its owner where the process may set it", "[nn][file_io]") {
  if (::geteuid() != 0) {
    WARN("not root: chown to another user is not permitted, nothing to check");
    return;
  }
  const scratch_dir dir("mxkit_file_io_owner");
  const fs::path file = dir.path / "owned.bin";
  replace(file, "old");
  REQUIRE(::chown(file.c_str(), 12345, 23456) == 0);
  REQUIRE(::chmod(file.c_str(), 0640) == 0);
  replace(file, "new");
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK(st.st_uid == 12345u);
  CHECK(st.st_gid == 23456u);
  CHECK((st.st_mode & 07777) == 0640u);
}

TEST_CASE("file_io: a target name of 240 or 255 bytes can be replaced", "[nn][file_io]") {
  const scratch_dir dir("mxkit_file_io_long");
  for (const std::size_t length : {std::size_t{240}, std::size_t{255}}) {
    INFO("name of " << length << " bytes");
    const fs::path file = dir.path / std::string(length, 'c');
    replace(file, "first");
    CHECK(read_text(file) == "first");
    replace(file, "second");
    CHECK(read_text(file) == "second");
    CHECK(names_in(dir.path) == std::vector<std::string>{std::string(length, 'c')});
    fs::remove(file);
  }
  // The temporary is a short name in the target's folder, whatever the target's name.
  const fs::path long_target = dir.path / std::string(255, 'c');
  const fs::path tmp = mxkit::detail::temporary_name(long_target);
  CHECK(tmp.parent_path() == dir.path);
  CHECK(tmp.filename().string().size() <= 32);
  CHECK(tmp != mxkit::detail::temporary_name(long_target));
}

TEST_CASE("file_io: a pipe is not replaced by a regular file; a symlink is replaced, its target kept", "[nn][file_io]") {
  const scratch_dir dir("mxkit_file_io_fifo");
  const fs::path fifo = dir.path / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(replace(fifo, "bytes"), mxkit_test::contains("is not a regular file (a device, pipe or socket); not replacing it"));
  CHECK(fs::is_fifo(fs::symlink_status(fifo)));
  CHECK(names_in(dir.path) == std::vector<std::string>{"pipe"});  // no temporary left either
  // A symlink to the pipe: the rename replaces the link, the pipe stays (what it always did).
  const fs::path link = dir.path / "link";
  fs::create_symlink(fifo, link);
  replace(link, "bytes");
  CHECK(fs::is_regular_file(fs::symlink_status(link)));
  CHECK(fs::is_fifo(fs::symlink_status(fifo)));
}

#endif
