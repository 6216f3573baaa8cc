// SPDX-License-Identifier: Apache-2.0
#pragma once
// nn::communicator whose ranks are threads of one process (the host reference backend's; what CI
// tests multi-rank training with, no GPU needed). The ranks share a thread_world: its size, its
// timeout and one rendezvous slot per rank.
//
// A collective is a rendezvous. Each rank posts its call (operation, reduce op, element type,
// count, root, buffers) and waits; the last rank to arrive checks that every call matches and
// then performs the whole collective on every rank's buffers (they are host memory of one
// process), so a reduction combines the ranks in a fixed order, in the element type: the result is
// deterministic and identical on every rank. Every rank leaves before the next collective can start.
// bf16 sums are carried in bf16 as NCCL carries ncclBfloat16 (each hop of its ring adds the
// incoming partial sum and the local value and sends the sum rounded to bf16): acc = bf16(acc + v)
// for each rank after the first, rounded to nearest even (bfloat16::from_float; the float sum of two
// bf16 values rounded once is the correctly rounded bf16 sum, as CUDA's __hadd for bf16 gives).
// The result is NCCL's bits exactly where NCCL adds the ranks in the same order (below); with two
// ranks in any order (one addition commutes).
//
// The order (sum_order): by_rank, 0, 1, ..., size-1 for every element, by default; or ring, as
// NCCL's ring reduce-scatter adds rank r's chunk: from rank r + 1 around the ring to r. With three
// or more ranks a float sum then depends on which rank owns an element, so a change of shard
// layout changes the last bits, as it does through NCCL; a test that compares two layouts
// (tests/parallel/catch2_test_data_parallel.cpp) sees on the host what NCCL would show on GPUs.
// all_reduce keeps rank order in both (NCCL's order there depends on its chunk sizes, and its tree
// algorithm adds in another order). NCCL documents neither order: "ring" reproduces the ring
// NCCL builds over ranks 0..N-1 in rank order, which topology detection may permute.
//
// Failure (communicator.hpp's contract): a mismatched call (another operation, reduce op, type,
// count or root on another rank) aborts the world, naming both calls; a rank that waits longer
// than the world's timeout aborts it, naming the ranks that never arrived; abort() (a rank's
// exception handler, run_ranks does it) ends the others' waits at once. After an abort every
// collective of every rank throws comm_error with the first reason, so no rank hangs and each
// error names what went wrong first. Any positive timeout is accepted: a wait's deadline saturates
// at the clock's last time point (milliseconds::max() waits for ever) instead of wrapping into the
// past, which would time every collective out at once.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/parallel/communicator.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

class thread_communicator;

enum class sum_order : std::uint8_t { by_rank, ring };

// The shared state of `size` rank threads. Outlives every thread_communicator made from it.
class thread_world {
 public:
  explicit thread_world(int size, std::chrono::milliseconds timeout = std::chrono::seconds(60), sum_order order = sum_order::by_rank)
      : size_(size), timeout_(timeout), order_(order) {
    detail::require(size >= 1, "thread_world: size ", size, " must be at least 1");
    detail::require(timeout.count() > 0, "thread_world: timeout must be positive, got ", timeout.count(), " ms");
    slots_.resize(static_cast<std::size_t>(size));
  }
  thread_world(const thread_world&) = delete;
  thread_world& operator=(const thread_world&) = delete;

  int size() const noexcept { return size_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  // Ends every rank's wait with comm_error (the first reason wins): a rank that fails, or
  // run_ranks when a rank thread cannot be started.
  void abort(const std::string& reason) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mu_);
      abort_locked(reason);
    } catch (...) {  // string allocation: nothing better to do in a noexcept abort
    }
  }
  // now + timeout, or the clock's last time point where that sum would not fit: the deadline is
  // computed in the clock's own units (nanoseconds), in which a timeout of about 292 years or
  // more does not fit at all.
  static std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) noexcept {
    using clock = std::chrono::steady_clock;
    const clock::time_point now = clock::now();
    const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(clock::time_point::max() - now);
    if (timeout >= room) return clock::time_point::max();
    return now + timeout;
  }
  // The first abort's reason ("" while none).
  std::string abort_reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

 private:
  friend class thread_communicator;
  enum class kind : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };
  static const char* name_of(kind k) noexcept {
    switch (k) {
      case kind::all_reduce: return "all_reduce";
      case kind::reduce_scatter: return "reduce_scatter";
      case kind::all_gather: return "all_gather";
      case kind::broadcast: return "broadcast";
    }
    return "?";
  }
  struct call {
    kind what = kind::all_reduce;
    nn::reduce_op op = nn::reduce_op::sum;
    nn::comm_buffer in, out;
    int root = 0;
    std::uint64_t sequence = 0;  // the rank's collective number (0-based)
    bool posted = false;

    std::string describe() const {
      std::ostringstream s;
      s << name_of(what);
      if (what == kind::all_reduce || what == kind::reduce_scatter) s << " (" << mxkit::name_of(op) << ")";
      s << " of " << in.count << " " << mxkit::name_of(in.type);
      if (what == kind::broadcast) s << " from root " << root;
      return s.str();
    }
    bool matches(const call& o) const noexcept {
      return what == o.what && op == o.op && in.type == o.in.type && in.count == o.in.count && out.count == o.out.count &&
             root == o.root;
    }
  };

  // Called with mu_ held by the last rank to arrive: every call matches.
  void perform() {
    const call& c0 = slots_[0];
    switch (c0.what) {
      case kind::all_reduce: {
        std::vector<std::uint8_t> result(c0.in.bytes());
        reduce(0, c0.in.count, result.data());
        for (const call& c : slots_)
          if (!result.empty()) std::memcpy(c.out.data, result.data(), result.size());
        break;
      }
      case kind::reduce_scatter: {
        const std::size_t n = c0.out.count;
        std::vector<std::vector<std::uint8_t>> chunks(slots_.size(), std::vector<std::uint8_t>(c0.out.bytes()));
        for (std::size_t r = 0; r < slots_.size(); ++r)
          reduce(r * n, n, chunks[r].data(), order_ == sum_order::ring ? (r + 1) % slots_.size() : 0);
        for (std::size_t r = 0; r < slots_.size(); ++r)
          if (!chunks[r].empty()) std::memcpy(slots_[r].out.data, chunks[r].data(), chunks[r].size());
        break;
      }
      case kind::all_gather: {  // gathered first: a rank's input may be its own chunk of the output
        const std::size_t chunk = c0.in.bytes();
        std::vector<std::uint8_t> all(chunk * slots_.size());
        for (std::size_t r = 0; r < slots_.size(); ++r)
          if (chunk) std::memcpy(all.data() + r * chunk, slots_[r].in.data, chunk);
        for (const call& c : slots_)
          if (!all.empty()) std::memcpy(c.out.data, all.data(), all.size());
        break;
      }
      case kind::broadcast: {
        const call& root = slots_[static_cast<std::size_t>(c0.root)];
        for (const call& c : slots_)
          if (c.in.data != root.in.data && c0.in.bytes()) std::memcpy(c.in.data, root.in.data, c0.in.bytes());
        break;
      }
    }
  }
  // out[0, n) = op over ranks of in[first, first + n), the ranks from `start` on around the ring.
  void reduce(std::size_t first, std::size_t n, std::uint8_t* out, std::size_t start = 0) const {
    const nn::comm_type t = slots_[0].in.type;
    const nn::reduce_op op = slots_[0].op;
    auto run = [&](auto zero, auto load, auto store, auto carry) {
      for (std::size_t i = 0; i < n; ++i) {
        auto acc = zero;
        for (std::size_t j = 0; j < slots_.size(); ++j) {
          const std::size_t r = (start + j) % slots_.size();
          const auto v = load(slots_[r].in.data, first + i);
          if (j == 0) acc = v;
          else if (op == nn::reduce_op::sum) acc = carry(acc + v);
          else acc = (v != v || acc != acc) ? (v != v ? v : acc) : (v > acc ? v : acc);  // max, NaN wins (amax)
        }
        store(out, i, acc);
      }
    };
    auto plain = [&](auto zero) {
      using T = decltype(zero);
      run(zero, [](const void* p, std::size_t i) { return static_cast<const T*>(p)[i]; },
          [](std::uint8_t* o, std::size_t i, T v) { std::memcpy(o + i * sizeof(T), &v, sizeof(T)); }, [](T v) { return v; });
    };
    switch (t) {
      case nn::comm_type::f32: plain(0.0f); break;
      case nn::comm_type::f64: plain(0.0); break;
      case nn::comm_type::i32: plain(std::int32_t{0}); break;
      case nn::comm_type::bf16: {
        // Carried in bf16, as NCCL's ncclBfloat16 sum is: every partial sum rounded to nearest even
        // (the float sum of two bf16 values, rounded once: the correctly rounded bf16 sum).
        const auto round = [](float v) { return bfloat16::from_float(v, rounding::nearest_even, overflow::propagate).to_float(); };
        run(0.0f, [](const void* p, std::size_t i) { return static_cast<const bfloat16*>(p)[i].to_float(); },
            [](std::uint8_t* o, std::size_t i, float v) {
              const bfloat16 b = bfloat16::from_float(v, rounding::nearest_even, overflow::propagate);  // exact: v is a bf16 value
              std::memcpy(o + i * sizeof(bfloat16), &b, sizeof(bfloat16));
            },
            round);
        break;
      }
      case nn::comm_type::u8: break;  // refused by communicator::check_reduction
    }
  }

  // Sets the abort reason (the first one wins) and wakes every waiting rank. mu_ held.
  void abort_locked(const std::string& reason) {
    if (reason_.empty()) reason_ = reason.empty() ? "aborted" : reason;
    cv_.notify_all();
  }

  // One rank's collective, start to finish.
  void collective(int rank, call c) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = deadline_after(timeout_);
    auto failed = [&] { return !reason_.empty(); };
    auto throw_aborted = [&] {
      throw nn::comm_error("thread_communicator rank " + std::to_string(rank) + ": " + c.describe() + " (collective #" +
                           std::to_string(c.sequence) + ") failed: " + reason_);
    };
    // The previous collective must be left by every rank first.
    if (!cv_.wait_until(lock, deadline, [&] { return failed() || !departing_; })) {
      abort_locked("rank " + std::to_string(rank) + " timed out after " + std::to_string(timeout_.count()) +
                   " ms waiting for the ranks to leave the previous collective");
    }
    if (failed()) throw_aborted();
    c.posted = true;
    slots_[static_cast<std::size_t>(rank)] = c;
    if (++arrived_ == size_) {
      for (std::size_t r = 1; r < slots_.size(); ++r)
        if (!slots_[r].matches(slots_[0]) || slots_[r].sequence != slots_[0].sequence) {
          abort_locked("mismatched collectives: rank 0 called " + slots_[0].describe() + " (collective #" +
                       std::to_string(slots_[0].sequence) + "), rank " + std::to_string(r) + " called " + slots_[r].describe() +
                       " (collective #" + std::to_string(slots_[r].sequence) + ")");
          throw_aborted();
        }
      perform();
      departing_ = true;
      cv_.notify_all();
    } else if (!cv_.wait_until(lock, deadline, [&] { return failed() || departing_; })) {
      std::string missing;
      for (std::size_t r = 0; r < slots_.size(); ++r)
        if (!slots_[r].posted) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      abort_locked("rank " + std::to_string(rank) + " timed out after " + std::to_string(timeout_.count()) + " ms in " +
                   c.describe() + " (collective #" + std::to_string(c.sequence) + "): rank(s) " + missing + " never arrived");
    }
    if (!departing_ || failed()) throw_aborted();
    slots_[static_cast<std::size_t>(rank)].posted = false;
    if (--arrived_ == 0) {
      departing_ = false;
      cv_.notify_all();
    }
  }

  int size_;
  std::chrono::milliseconds timeout_;
  sum_order order_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<call> slots_;
  int arrived_ = 0;
  bool departing_ = false;  // the collective is done; ranks are leaving
  std::string reason_;      // non-empty once aborted
};

class thread_communicator final : public nn::communicator {
 public:
  thread_communicator(thread_world& world, int rank) : communicator(rank, world.size()), world_(&world) {}
  thread_world& world() noexcept { return *world_; }

 protected:
  void do_all_reduce(nn::comm_buffer in, nn::comm_buffer out, nn::reduce_op op) override {
    run(thread_world::kind::all_reduce, in, out, op, 0);
  }
  void do_reduce_scatter(nn::comm_buffer in, nn::comm_buffer out, nn::reduce_op op) override {
    run(thread_world::kind::reduce_scatter, in, out, op, 0);
  }
  void do_all_gather(nn::comm_buffer in, nn::comm_buffer out) override {
    run(thread_world::kind::all_gather, in, out, nn::reduce_op::sum, 0);
  }
  void do_broadcast(nn::comm_buffer data, int root) override { run(thread_world::kind::broadcast, data, data, nn::reduce_op::sum, root); }
  void do_join() override {}  // every collective ran to completion before it returned
  // A host collective holds its caller until every rank has arrived and the result is written: all
  // of its time is exposed.
  std::optional<double> do_take_exposed_seconds() override { return std::exchange(exposed_seconds_, 0.0); }
  void do_abort(const std::string& reason) noexcept override {
    try {
      world_->abort("rank " + std::to_string(rank()) + " aborted: " + reason);
    } catch (...) {  // string allocation: nothing better to do in a noexcept abort
    }
  }

 private:
  void run(thread_world::kind k, nn::comm_buffer in, nn::comm_buffer out, nn::reduce_op op, int root) {
    thread_world::call c;
    c.what = k;
    c.op = op;
    c.in = in;
    c.out = out;
    c.root = root;
    c.sequence = sequence_++;
    const auto start = std::chrono::steady_clock::now();
    world_->collective(rank(), c);
    exposed_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  thread_world* world_;
  std::uint64_t sequence_ = 0;
  double exposed_seconds_ = 0;
};

// Runs f(communicator&) on `size` threads, one per rank, and waits for all of them. A rank that
// throws aborts the world (so the others' collectives end with comm_error at once); the first
// error is rethrown, preferring the one that caused the abort over the comm_errors it caused.
// When the system refuses a thread part-way (a process or memory limit: std::system_error from
// std::thread), the ranks already started are aborted the same way and joined (a std::thread
// destroyed unjoined would call std::terminate), and run_ranks throws std::system_error naming
// the rank that could not start, with the system's reason.
template <class F>
void run_ranks(int size, F&& f, std::chrono::milliseconds timeout = std::chrono::seconds(60), sum_order summation = sum_order::by_rank) {
  thread_world world(size, timeout, summation);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::uint8_t> is_comm(static_cast<std::size_t>(size), 0);  // not vector<bool>: ranks write their own entries at once
  std::mutex order_mu;
  std::vector<int> order;  // ranks in the order they failed
  auto rank_main = [&](int r) {
    thread_communicator comm(world, r);
    try {
      f(comm);
    } catch (const nn::comm_error& e) {
      errors[static_cast<std::size_t>(r)] = std::current_exception();
      is_comm[static_cast<std::size_t>(r)] = 1;
      comm.abort(e.what());
      std::lock_guard<std::mutex> lock(order_mu);
      order.push_back(r);
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(r)] = std::current_exception();
      comm.abort(e.what());
      std::lock_guard<std::mutex> lock(order_mu);
      order.push_back(r);
    } catch (...) {
      errors[static_cast<std::size_t>(r)] = std::current_exception();
      comm.abort("an exception of unknown type");
      std::lock_guard<std::mutex> lock(order_mu);
      order.push_back(r);
    }
  };
  {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(size));
    // Every started thread is joined before `threads` is destroyed, on every path out of here.
    struct joiner {
      std::vector<std::thread>& threads;
      ~joiner() {
        for (std::thread& t : threads)
          if (t.joinable()) t.join();
      }
    } join_all{threads};
    int started = 0;
    auto cannot_start = [&] {
      return "run_ranks: cannot start the thread of rank " + std::to_string(started) + " of " + std::to_string(size) + " (the " +
             std::to_string(started) + " started were stopped)";
    };
    try {
      for (; started < size; ++started) threads.emplace_back(rank_main, started);
    } catch (const std::system_error& e) {
      world.abort(cannot_start() + ": " + e.what());
      throw std::system_error(e.code(), cannot_start());  // what(): the message, then the system's reason
    } catch (...) {
      world.abort(cannot_start());
      throw;
    }
  }
  for (int r : order)
    if (!is_comm[static_cast<std::size_t>(r)]) std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
  if (!order.empty()) std::rethrow_exception(errors[static_cast<std::size_t>(order.front())]);
}

}  // namespace ref
MXKIT_END_NAMESPACE
