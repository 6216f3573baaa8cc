// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checked file I/O for checkpoints and training corpora. Every read, write, sync and close is
// checked; a failure throws std::system_error carrying errno, so what() ends with the OS reason
// (the strerror text). Callers put the file's role in front ("checkpoint '<path>': ...").
//   input_file     a file opened for reading, what fstat(2) says about it (a directory; the size
//                  of a regular file, none for devices and pipes), and reads that stop early only
//                  at end of file: a read(2) error throws instead of looking like a short file;
//                  seek() for readers of parts of a regular file (a shard's rows of a tensor).
//   replace_file   writes a whole file atomically and durably, POSIX style:
//                   1. a fresh temporary ".mxkit-<16 hex digits>" in the target's directory (so
//                      the rename stays on one file system; a short name, so a target name of
//                      NAME_MAX bytes still has one), open(2)ed with O_CREAT | O_EXCL |
//                      O_NOFOLLOW: never an existing file and never through a symlink, so
//                      concurrent writers each own their temporary and a planted symlink cannot
//                      redirect the write; given the replaced file's owner (where permitted) and
//                      mode, so a file kept private stays private;
//                   2. every byte written, fsync(2), close(2), each result checked (close can
//                      report an earlier write error: close(2), NOTES);
//                   3. rename(2) over the target, atomic: readers and concurrent writers see the
//                      old file or one complete new file (the last rename wins);
//                   4. fsync(2) of the directory, which makes the rename itself durable (fsync(2):
//                      syncing a file does not sync "the entry in the directory containing the
//                      file"; that needs "an explicit fsync() on a file descriptor for the
//                      directory").
//                  A target that exists and is not a regular file (nor a symlink, which the
//                  rename replaces, leaving what it points to alone) is refused before step 1:
//                  renaming over a pipe, device or socket (/dev/null, for a process that may)
//                  would put a regular file in its place.
//                  A failure in steps 1-3 removes the temporary and leaves the target untouched;
//                  a failure in step 4 says that the new file is in place but may not be durable.
//                  A crash (no exception) can leave a ".mxkit-*" file behind, never a torn
//                  target.
// detail::io_ops() is the seam the read/write/fsync/close calls go through, so that tests can make
// them fail: a real disk fails rarely and never on demand. Nothing else should change it.
// Without POSIX (no <unistd.h>) the same interface runs on <cstdio>: exclusive creation ("wbx"),
// checked fwrite/fflush/fclose, no fsync, no fault seam.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#define MXKIT_POSIX_FILE_IO 1
#else
#include <cstdio>
#define MXKIT_POSIX_FILE_IO 0
#endif

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {

// (Callers copy errno into a local first: building the message may allocate, and the order in
// which function arguments are evaluated is unspecified.)
[[noreturn]] inline void throw_os_error(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

// A name for a temporary next to `path`: ".mxkit-" and 16 hex digits (mixed from a per-process
// counter, the clock and the process id), 23 bytes in the target's folder whatever the target's
// name is, so a target of 255 bytes (NAME_MAX) still gets one. Uniqueness is not what makes it
// safe (O_EXCL does; a collision only costs a retry): it keeps retries rare and the name hard to
// predict for someone planting files.
inline std::filesystem::path temporary_name(const std::filesystem::path& path) {
  static std::atomic<std::uint64_t> counter{0};
  const std::uint64_t n = ++counter;
#if MXKIT_POSIX_FILE_IO
  const std::uint64_t pid = static_cast<std::uint64_t>(::getpid());
#else
  const std::uint64_t pid = 0;
#endif
  std::uint64_t z = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) +
                    0x9E3779B97F4A7C15ull * n + (pid << 40);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64 finalizer
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  static constexpr char hex[] = "0123456789abcdef";
  std::string name = ".mxkit-";
  for (int i = 0; i < 16; ++i) name += hex[(z >> (4 * i)) & 0xF];
  return path.parent_path() / name;
}

#if MXKIT_POSIX_FILE_IO

// The system calls of this header's file I/O (see the top of the file: a test seam).
struct file_ops {
  ::ssize_t (*read)(int, void*, std::size_t);
  ::ssize_t (*write)(int, const void*, std::size_t);
  int (*fsync)(int);
  int (*close)(int);
};
inline file_ops& io_ops() noexcept {
  static file_ops ops{::read, ::write, ::fsync, ::close};
  return ops;
}

// An owned file descriptor. The destructor closes without looking (error paths only); a caller
// whose data depends on the close calls close() and checks it.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~unique_fd() { reset(); }
  int get() const noexcept { return fd_; }
  // 0 or the errno of close(2). The descriptor is gone either way (Linux releases it even on
  // EINTR; retrying could close another thread's new descriptor: close(2), NOTES).
  int close() noexcept {
    const int fd = std::exchange(fd_, -1);
    return fd < 0 || io_ops().close(fd) == 0 ? 0 : errno;
  }

 private:
  void reset() noexcept {
    if (fd_ >= 0) (void)io_ops().close(std::exchange(fd_, -1));
  }
  int fd_ = -1;
};

// 0, or the errno of the write(2) that failed. A write may store fewer bytes than asked
// (write(2): "the number of bytes written may be less than count"); the loop writes the rest.
inline int write_all(int fd, const void* data, std::size_t n) noexcept {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ::ssize_t w = io_ops().write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;  // no progress and no error: do not spin
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return 0;
}

class input_file {
 public:
  explicit input_file(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      throw_os_error(err, "cannot open the file");
    }
    fd_ = unique_fd(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      throw_os_error(err, "cannot stat the file");
    }
    directory_ = S_ISDIR(st.st_mode);
    if (S_ISREG(st.st_mode)) size_ = static_cast<std::uint64_t>(st.st_size);
  }
  bool is_directory() const noexcept { return directory_; }
  // The size of a regular file; none for devices, pipes and directories (they have no size to trust).
  std::optional<std::uint64_t> regular_size() const noexcept { return size_; }
  // Reads up to n bytes, fewer only at end of file; a read(2) error throws.
  std::size_t read(void* dst, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      const ::ssize_t r = io_ops().read(fd_.get(), static_cast<char*>(dst) + got, n - got);
      if (r < 0) {
        const int err = errno;
        if (err == EINTR) continue;
        throw_os_error(err, "reading failed after " + std::to_string(offset_ + got) + " bytes");
      }
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    offset_ += got;
    return got;
  }
  // Moves the next read to byte `offset` of a regular file (a sharded checkpoint's reader reads
  // its rows of each tensor, not the whole file: io/hf_sharded.hpp).
  void seek(std::uint64_t offset) {
    if (offset > static_cast<std::uint64_t>(std::numeric_limits<::off_t>::max()) ||
        ::lseek(fd_.get(), static_cast<::off_t>(offset), SEEK_SET) < 0) {
      const int err = offset > static_cast<std::uint64_t>(std::numeric_limits<::off_t>::max()) ? EOVERFLOW : errno;
      throw_os_error(err, "seeking to byte " + std::to_string(offset) + " failed");
    }
    offset_ = offset;
  }

 private:
  unique_fd fd_;
  bool directory_ = false;
  std::optional<std::uint64_t> size_;
  std::uint64_t offset_ = 0;
};

inline void sync_directory(const std::filesystem::path& dir) {
  const std::string in_place = "the new file is in place, but ";
  unique_fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    throw_os_error(err, in_place + "opening its directory '" + dir.string() + "' to sync the rename failed");
  }
  // EINVAL: this file system cannot sync a directory (fsync(2), ERRORS); nothing more can be done.
  if (io_ops().fsync(fd.get()) != 0) {
    const int err = errno;
    if (err != EINVAL) throw_os_error(err, in_place + "syncing its directory '" + dir.string() + "' failed");
  }
}

// See the top of the file. Throws std::system_error naming the step and the file.
inline void replace_file(const std::filesystem::path& path, const void* data, std::size_t n) {
  const std::filesystem::path dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  struct stat target {};
  if (::lstat(path.c_str(), &target) == 0 && !S_ISREG(target.st_mode) && !S_ISLNK(target.st_mode) && !S_ISDIR(target.st_mode))
    throw_os_error(EEXIST, "'" + path.string() + "' is not a regular file (a device, pipe or socket); not replacing it");
  std::filesystem::path tmp;
  unique_fd fd;
  for (int attempt = 1;; ++attempt) {
    tmp = temporary_name(path);
    const int f = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (f >= 0) {
      fd = unique_fd(f);
      break;
    }
    const int err = errno;
    if (err != EEXIST || attempt == 100) throw_os_error(err, "cannot create the temporary '" + tmp.string() + "'");
  }
  auto abandon = [&](int err, const std::string& what) {
    (void)fd.close();
    (void)::unlink(tmp.c_str());
    throw_os_error(err, what);
  };
  // (Appended, not "'" + ...: GCC 12 at -O3 reports a false -Wrestrict overlap in operator+'s insert.)
  const std::string t = std::string(1, '\'').append(tmp.string()).append(1, '\'');
  // The replaced file's owner and mode (a checkpoint kept at 0600 stays 0600). The owner first:
  // chown(2) may clear set-user-ID bits that the mode then restores. Giving the file to another
  // user needs privilege: without it the temporary stays the caller's (EPERM is not an error).
  struct stat old {};
  if (::stat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode)) {
    if (::fchown(fd.get(), old.st_uid, old.st_gid) != 0 && errno != EPERM) {
      const int err = errno;
      abandon(err, "giving " + t + " the owner of '" + path.string() + "' failed");
    }
    if (::fchmod(fd.get(), old.st_mode & 07777) != 0) {
      const int err = errno;
      abandon(err, "giving " + t + " the mode of '" + path.string() + "' failed");
    }
  }
  if (const int err = write_all(fd.get(), data, n)) abandon(err, "writing " + t + " failed");
  if (io_ops().fsync(fd.get()) != 0) {
    const int err = errno;
    abandon(err, "syncing " + t + " failed");
  }
  if (const int err = fd.close()) abandon(err, "closing " + t + " failed");
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    abandon(err, "renaming " + t + " to '" + path.string() + "' failed");
  }
  sync_directory(dir);
}

#else  // no POSIX: <cstdio>

class input_file {
 public:
  explicit input_file(const std::filesystem::path& path) {
    std::error_code ec;
    directory_ = std::filesystem::is_directory(path, ec);
    if (std::filesystem::is_regular_file(path, ec)) size_ = std::filesystem::file_size(path, ec);
    f_ = std::fopen(path.string().c_str(), "rb");
    if (!f_) {
      const int err = errno;
      throw_os_error(err, "cannot open the file");
    }
  }
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;
  ~input_file() {
    if (f_) std::fclose(f_);
  }
  bool is_directory() const noexcept { return directory_; }
  std::optional<std::uint64_t> regular_size() const noexcept { return size_; }
  std::size_t read(void* dst, std::size_t n) {
    const std::size_t got = std::fread(dst, 1, n, f_);
    if (got < n && std::ferror(f_)) {
      const int err = errno ? errno : EIO;
      throw_os_error(err, "reading failed after " + std::to_string(offset_ + got) + " bytes");
    }
    offset_ += got;
    return got;
  }
  void seek(std::uint64_t offset) {
    if (offset > static_cast<std::uint64_t>(std::numeric_limits<long>::max()) || std::fseek(f_, static_cast<long>(offset), SEEK_SET) != 0)
      throw_os_error(errno ? errno : EINVAL, "seeking to byte " + std::to_string(offset) + " failed");
    offset_ = offset;
  }

 private:
  std::FILE* f_ = nullptr;
  bool directory_ = false;
  std::optional<std::uint64_t> size_;
  std::uint64_t offset_ = 0;
};

inline void replace_file(const std::filesystem::path& path, const void* data, std::size_t n) {
  std::error_code status_ec;
  const std::filesystem::file_status target = std::filesystem::symlink_status(path, status_ec);
  if (std::filesystem::exists(target) && !std::filesystem::is_regular_file(target) && !std::filesystem::is_symlink(target) &&
      !std::filesystem::is_directory(target))
    throw_os_error(EEXIST, "'" + path.string() + "' is not a regular file (a device, pipe or socket); not replacing it");
  std::filesystem::path tmp;
  std::FILE* f = nullptr;
  for (int attempt = 1; !f; ++attempt) {
    tmp = temporary_name(path);
    f = std::fopen(tmp.string().c_str(), "wbx");  // exclusive creation (C11 fopen "x")
    if (!f && attempt == 100) {
      const int err = errno ? errno : EEXIST;
      throw_os_error(err, "cannot create the temporary '" + tmp.string() + "'");
    }
  }
  auto abandon = [&](int err, const std::string& what) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw_os_error(err ? err : EIO, what);
  };
  const std::string t = "'" + tmp.string() + "'";
  const bool written = std::fwrite(data, 1, n, f) == n && std::fflush(f) == 0;
  const int write_err = errno;
  if (std::fclose(f) != 0 || !written) {
    const int err = written ? errno : write_err;
    abandon(err, "writing " + t + " failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) abandon(ec.value(), "renaming " + t + " to '" + path.string() + "' failed");
}

#endif

}  // namespace detail
MXKIT_END_NAMESPACE
