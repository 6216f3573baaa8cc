// SPDX-License-Identifier: Apache-2.0
#pragma once
// The watchdog of gpu::nccl_communicator (gpu/parallel/nccl_communicator.hpp): the thread that
// decides a rank has failed, and the state it shares with the communicator's calls under one
// mutex (the NCCL communicator handle and every NCCL call on it, the collectives not yet complete,
// the first failure). Apart from the communicator, which enqueues the collectives; it derives from
// nccl_watchdog (privately) and starts the thread last in its constructor and stops it first in its
// destructor, so the thread sees only this class's members.
//
// Failure, never a hang. The communicator is non-blocking (ncclConfig_t::blocking = 0): no NCCL
// call waits for another rank. A watchdog thread polls, every poll_interval,
//   - ncclCommGetAsyncError (NCCL's own errors: a remote rank's network failure, a CUDA error),
//   - the oldest collective not yet complete (an event recorded after it): older than `timeout`
//     means a rank died, hangs or called another collective (NCCL waits forever on a dead peer's
//     NVLink buffers; torch's ProcessGroupNCCL watchdog does the same),
//   - the rendezvous's control channel, where one exists: another rank's abort() or a process
//     that ended without closing it (parallel/rendezvous.hpp) ends this rank at once.
// On any of them it calls ncclCommAbort (the running kernels return, the streams drain) and every
// later call of this communicator throws comm_error naming the first cause. abort(reason) does
// the same from the rank's own exception handler and tells the other ranks through the channel.
// Start-up is bounded by the same timeout (a rank that never arrives).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mxkit/enum_names.hpp>
#include <mxkit/gpu/parallel/nccl_api.hpp>
#include <mxkit/gpu/parallel/nccl_call_verification.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/parallel/rendezvous.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

class nccl_watchdog {
 public:
  nccl_watchdog(const nccl_watchdog&) = delete;
  nccl_watchdog& operator=(const nccl_watchdog&) = delete;

  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

 protected:
  // `timeout`: a collective's completion; `poll_interval`: the thread's period; `control` (optional):
  // the rendezvous whose channel carries the ranks' aborts.
  nccl_watchdog(const nccl::api& api, std::chrono::milliseconds timeout, std::chrono::milliseconds poll_interval,
                std::shared_ptr<nn::tcp_rendezvous> control)
      : api_(api), control_(std::move(control)), timeout_(timeout), poll_interval_(poll_interval) {}
  ~nccl_watchdog() { stop_watchdog(); }

  void start_watchdog() { watchdog_ = std::thread([this] { watch(); }); }
  // Stops the thread and waits for it (nothing if it never started).
  void stop_watchdog() noexcept {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    if (watchdog_.joinable()) watchdog_.join();
  }

  // Waiting for NCCL or for an event: an operation that is "in progress" right after the call
  // (a non-blocking communicator's enqueue runs on NCCL's own thread) is usually done within
  // microseconds, so the first polls only yield; later ones sleep, doubling up to poll_interval,
  // so a long wait costs no CPU. Sleeping a whole poll_interval at once cost every collective
  // that much, whatever its size (docs/perf/multi_gpu.md).
  class poll_backoff {
   public:
    explicit poll_backoff(std::chrono::milliseconds longest) : longest_(longest) {}
    void wait() {
      if (yields_ < fast_polls) {
        ++yields_;
        std::this_thread::yield();
        return;
      }
      std::this_thread::sleep_for(next_);
      next_ = std::min<std::chrono::microseconds>(next_ * 2, longest_);
    }

   private:
    static constexpr int fast_polls = 256;
    int yields_ = 0;
    std::chrono::microseconds next_{8};
    std::chrono::microseconds longest_;
  };
  // A collective called and not yet complete: its completion event, since when, which.
  struct pending {
    event_t done;
    std::chrono::steady_clock::time_point since;
    std::uint64_t sequence;
    nccl_collective what;
  };

  static std::string failure_text(const nccl::api& api, const char* call, nccl::result_t r) {
    const char* s = api.get_error_string ? api.get_error_string(r) : nullptr;
    return std::string("mxkit: ") + call + " failed: " + nccl::vendor_name + " error " + std::to_string(static_cast<int>(r)) + " (" +
           (s ? s : "?") + ")";
  }
  std::string failure_text(const char* call, nccl::result_t r) const { return failure_text(api_, call, r); }

  // Records the first cause and aborts the NCCL communicator (its kernels return). Never throws.
  void fail(const std::string& why) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    fail_locked(why);
  }
  void fail_locked(const std::string& why) noexcept {
    if (!failed_.load(std::memory_order_relaxed)) {
      failure_ = why;
      failed_.store(true, std::memory_order_release);
    }
    if (comm_) {
      (void)api_.comm_abort(comm_);
      comm_ = nullptr;
    }
  }

  const nccl::api& api_;
  std::shared_ptr<nn::tcp_rendezvous> control_;
  int device_ = 0;
  nccl::comm_t comm_ = nullptr;  // null once aborted
  mutable std::mutex mutex_;     // comm_ and every NCCL call on it, pending_, free_events_, failure_, stop_
  std::deque<pending> pending_;
  std::vector<event_t> free_events_;
  std::atomic<bool> failed_{false};
  std::string failure_;

 private:
  // The thread (see the header comment).
  void watch() {
    (void)set_device(device_);
    for (;;) {
      std::optional<std::string> peer;
      if (control_ && !failed()) peer = control_->poll_abort();
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
        if (peer) fail_locked("another rank ended the run: " + *peer);
        if (comm_) {
          nccl::result_t state = nccl::success;
          const nccl::result_t r = api_.comm_get_async_error(comm_, &state);
          if (r != nccl::success) state = r;
          if (state != nccl::success && state != nccl::in_progress) fail_locked(failure_text("asynchronous", state));
        }
        while (!pending_.empty()) {
          const error_t q = event_query(pending_.front().done);
          if (q == not_ready && !failed()) break;
          free_events_.push_back(pending_.front().done);
          pending_.pop_front();
        }
        if (!pending_.empty() && std::chrono::steady_clock::now() - pending_.front().since > timeout_) {
          const pending& p = pending_.front();
          fail_locked("collective #" + std::to_string(p.sequence) + " (" + name_of(p.what) +
                      ") did not complete within the timeout of " + std::to_string(timeout_.count()) +
                      " ms (a rank died, hangs, or called another collective)");
        }
      }
      std::this_thread::sleep_for(poll_interval_);
    }
  }

  std::chrono::milliseconds timeout_, poll_interval_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
