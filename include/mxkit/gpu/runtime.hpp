// SPDX-License-Identifier: Apache-2.0
#pragma once
// RAII over the GPU runtime, used by every mxkit launcher: streams, events, device queries, and
// runtime errors turned into exceptions that carry the call, the file and line, and the
// runtime's own message (device memory: gpu/memory.hpp).
//   MXKIT_GPU_CHECK(gpu::stream_synchronize(s));   // throws gpu::error on failure
//   MXKIT_GPU_CHECK_LAUNCH();                      // after a kernel launch
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/gpu/platform.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

class error : public std::runtime_error {
 public:
  error(error_t code, const char* call, const char* file, int line)
      : std::runtime_error(std::string("mxkit: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
                           error_name(code) + " (" + error_string(code) + ")"),
        code_(code),
        call_(call),
        file_(file),
        line_(line) {}
  error_t code() const noexcept { return code_; }
  const std::string& call() const noexcept { return call_; }
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  error_t code_;
  std::string call_, file_;
  int line_;
};

namespace detail {
inline void check(error_t e, const char* call, const char* file, int line) {
  if (e != success) throw error(e, call, file, line);
}
}  // namespace detail

#define MXKIT_GPU_CHECK(expr) ::mxkit::gpu::detail::check((expr), #expr, __FILE__, __LINE__)
// A launch reports a bad configuration through the last error; execution errors surface at the
// next synchronizing call, which MXKIT_GPU_CHECK also turns into an exception.
#define MXKIT_GPU_CHECK_LAUNCH() \
  ::mxkit::gpu::detail::check(::mxkit::gpu::get_last_error(), "kernel launch", __FILE__, __LINE__)

// Number of usable devices; 0 (no exception) when there is no device or no driver, so tests and
// programs can skip themselves cleanly.
inline int device_count() noexcept {
  int n = 0;
  if (get_device_count(&n) != success) {
    (void)get_last_error();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

inline device_properties properties(int device = -1) {
  if (device < 0) MXKIT_GPU_CHECK(get_device(&device));
  device_properties p;
  MXKIT_GPU_CHECK(get_device_properties(&p, device));
  return p;
}

// Owning non-blocking stream.
class stream {
 public:
  stream() { MXKIT_GPU_CHECK(stream_create(&s_)); }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  stream(stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  stream& operator=(stream&& o) noexcept {
    if (this != &o) {
      if (s_) (void)stream_destroy(s_);
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  ~stream() {
    if (s_) (void)stream_destroy(s_);
  }
  stream_t get() const noexcept { return s_; }
  operator stream_t() const noexcept { return s_; }
  void synchronize() const { MXKIT_GPU_CHECK(stream_synchronize(s_)); }

 private:
  stream_t s_ = nullptr;
};

// Owning timing event.
class event {
 public:
  event() { MXKIT_GPU_CHECK(event_create(&e_)); }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  event(event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      if (e_) (void)event_destroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  ~event() {
    if (e_) (void)event_destroy(e_);
  }
  event_t get() const noexcept { return e_; }
  void record(stream_t s = nullptr) { MXKIT_GPU_CHECK(event_record(e_, s)); }
  void synchronize() const { MXKIT_GPU_CHECK(event_synchronize(e_)); }
  // Milliseconds from `start` to this event (both recorded; waits for this one).
  float elapsed_ms_since(const event& start) const {
    synchronize();
    float ms = 0;
    MXKIT_GPU_CHECK(event_elapsed_ms(&ms, start.e_, e_));
    return ms;
  }

 private:
  event_t e_ = nullptr;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
