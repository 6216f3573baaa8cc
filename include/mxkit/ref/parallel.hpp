// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host threads for the reference paths that validation runs (quantize, the reference GEMMs,
// validate, validate_gemm). The work is a range of independent items (storage lines, output
// rows); each item is computed by exactly one thread with the same code and in the same order as
// the single-threaded loop, so no output bit depends on the thread count
// (tests/ref/catch2_test_parallel.cpp compares 1, 2, 3 and 8 threads byte for byte).
//
// `threads` arguments: 0 picks the count: one thread per hardware thread
// (std::thread::hardware_concurrency), but never more than the work justifies (about one thread
// per min_work_per_thread units of work, so small calls, such as the training stack's per-layer
// quantizations, stay on the caller's thread, and a call made from inside one of these workers
// does not start threads of its own); n > 0 uses n threads (at most one per item). An exception
// thrown in a worker is rethrown in the caller after every worker has finished.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <mxkit/config.hpp>

MXKIT_BEGIN_NAMESPACE
namespace detail {

// Work units (roughly element operations) below which a second thread costs more than it saves:
// starting and joining a thread is tens of microseconds.
inline constexpr double min_work_per_thread = 1 << 18;

// True on the threads parallel_chunks runs f on (the caller's included, while it does).
inline bool& in_host_worker() noexcept {
  thread_local bool inside = false;
  return inside;
}

// Threads to use for `items` items of `work` units in all (see the file comment).
inline unsigned host_thread_count(unsigned requested, std::size_t items, double work) noexcept {
  std::size_t n = requested;
  if (requested == 0 && in_host_worker()) return 1;
  if (requested == 0) {
    const unsigned hw = std::thread::hardware_concurrency();
    const double by_work = work / min_work_per_thread;
    n = std::min<std::size_t>(hw == 0 ? 1 : hw, by_work < 1.0 ? 1 : static_cast<std::size_t>(std::min(by_work, 1e6)));
  }
  return static_cast<unsigned>(std::max<std::size_t>(std::min(n, items), 1));
}

// Calls f(begin, end, chunk) for consecutive chunks [begin, end) covering [0, items); chunk
// numbers them in order (0, 1, ...), so per-chunk results can be merged in item order. With one
// thread, f runs on the caller's thread. Chunks are handed out dynamically (an atomic counter),
// about four per thread, so uneven items balance.
template <class F>
void parallel_chunks(std::size_t items, unsigned threads, F&& f) {
  if (items == 0) return;
  if (threads <= 1) {
    f(std::size_t{0}, items, std::size_t{0});
    return;
  }
  const std::size_t chunks = std::min<std::size_t>(items, std::size_t{threads} * 4);
  const std::size_t per = items / chunks, extra = items % chunks;  // the first `extra` chunks get one more
  const auto begin_of = [&](std::size_t c) { return c * per + std::min(c, extra); };
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto worker = [&] {
    const bool was_inside = in_host_worker();
    in_host_worker() = true;
    for (std::size_t c; (c = next.fetch_add(1)) < chunks;) {
      try {
        f(begin_of(c), begin_of(c + 1), c);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
    in_host_worker() = was_inside;
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {  // no more threads to be had: the ones started (and this one) do the work
      break;
    }
  }
  worker();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// The number of chunks parallel_chunks(items, threads, f) makes (for per-chunk result arrays).
inline std::size_t parallel_chunk_count(std::size_t items, unsigned threads) noexcept {
  if (items == 0) return 0;
  return threads <= 1 ? 1 : std::min<std::size_t>(items, std::size_t{threads} * 4);
}

}  // namespace detail
MXKIT_END_NAMESPACE
