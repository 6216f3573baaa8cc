// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fault injection into mxkit's file I/O (the detail::io_ops() seam of file_io.hpp): the n-th
// read, write, fsync or close fails with a chosen errno, as a full disk, a failing device or a
// network file system would make it fail. The scope counts the calls and restores the real ones.
// A failing close still releases the descriptor, as close(2) does on Linux.
// Several threads (the ranks of ref::run_ranks): with plan::armed_threads_only, only the calls of
// threads that armed themselves (io_fault::arm_this_thread) are counted and failed, so that one
// rank's disk fills while the others' do not; every other thread's calls go straight through.
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include <mxkit/file_io.hpp>

#if MXKIT_POSIX_FILE_IO
#include <unistd.h>

namespace io_fault {

struct plan {
  int fail_read_at = 0, fail_write_at = 0, fail_fsync_at = 0, fail_close_at = 0;  // 1-based call; 0: never
  int error = EIO;
  bool armed_threads_only = false;  // count and fail the calls of armed threads only
};

inline bool& armed() {
  thread_local bool a = false;
  return a;
}
// Arms the calling thread (for plan::armed_threads_only) until the end of the enclosing scope.
class arm_this_thread {
 public:
  arm_this_thread() { armed() = true; }
  ~arm_this_thread() { armed() = false; }
  arm_this_thread(const arm_this_thread&) = delete;
  arm_this_thread& operator=(const arm_this_thread&) = delete;
};

struct counts {
  int reads = 0, writes = 0, fsyncs = 0, closes = 0;
  std::uint64_t bytes_read = 0;
};

struct state {
  plan p;
  counts n;
};
inline state& current() {
  static state s;
  return s;
}

class scope {
 public:
  explicit scope(plan p = {}) : saved_(mxkit::detail::io_ops()) {
    current() = {p, {}};
    mxkit::detail::file_ops& ops = mxkit::detail::io_ops();
    ops.read = [](int fd, void* buf, std::size_t n) -> ::ssize_t {
      state& s = current();
      if (!counted(s)) return ::read(fd, buf, n);
      if (++s.n.reads == s.p.fail_read_at) return fail(s.p.error);
      const ::ssize_t r = ::read(fd, buf, n);
      if (r > 0) s.n.bytes_read += static_cast<std::uint64_t>(r);
      return r;
    };
    ops.write = [](int fd, const void* buf, std::size_t n) -> ::ssize_t {
      state& s = current();
      if (!counted(s)) return ::write(fd, buf, n);
      if (++s.n.writes == s.p.fail_write_at) return fail(s.p.error);
      return ::write(fd, buf, n);
    };
    ops.fsync = [](int fd) -> int {
      state& s = current();
      if (!counted(s)) return ::fsync(fd);
      if (++s.n.fsyncs == s.p.fail_fsync_at) return static_cast<int>(fail(s.p.error));
      return ::fsync(fd);
    };
    ops.close = [](int fd) -> int {
      state& s = current();
      const int r = ::close(fd);
      if (!counted(s)) return r;
      if (++s.n.closes == s.p.fail_close_at) return static_cast<int>(fail(s.p.error));
      return r;
    };
  }
  ~scope() { mxkit::detail::io_ops() = saved_; }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
  const counts& calls() const { return current().n; }

 private:
  static bool counted(const state& s) { return !s.p.armed_threads_only || armed(); }
  static ::ssize_t fail(int error) {
    errno = error;
    return -1;
  }
  mxkit::detail::file_ops saved_;
};

}  // namespace io_fault
#endif
