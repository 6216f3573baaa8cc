// SPDX-License-Identifier: Apache-2.0
#pragma once
// nn::communicator on NCCL (CUDA) or RCCL (HIP), one source: the library is loaded at run time
// (gpu/parallel/nccl_api.hpp), buffers are device memory of the rank's device, one process (or thread) per
// device.
//
// Streams. By default collectives run on a communication stream of the communicator's own, so
// they overlap the backend's compute (the gradient buckets of backward): each collective first
// waits for an event recorded on the backend's stream at the call (it sees everything enqueued
// before it), and join() makes the backend's stream wait for the communication stream (no host
// synchronization). mark() records an event on the communication stream after the collectives
// called so far, and join(mark) waits for that event only. nccl_options::own_stream = false
// enqueues them on the backend's stream instead (join() has nothing to do). With nccl_options::time_joins, join() brackets that wait
// with two timing events on the backend's stream; the time between them is how long compute
// stalled for communication, which take_exposed_seconds() sums (parallel/communicator.hpp). A buffer
// passed to a collective must stay alive until join(): the backend's stream-ordered pool must not
// hand its memory out again before the collective has read or written it. NCCL reads inputs in 16-byte pieces, so a buffer should lie
// in an allocation of a whole number of 16-byte units (gpu::allocate_async rounds up to that).
//
// Failure, never a hang: a watchdog thread aborts the communicator on NCCL's asynchronous error, a
// collective past the timeout or another rank's abort, and every later call throws comm_error
// (gpu/parallel/nccl_watchdog.hpp). nccl_options::verify_calls compares every collective's
// description across the ranks first (gpu/parallel/nccl_call_verification.hpp).
//
// NVLink multicast (NVLS) stays off: the first communicator (or unique id) of the process sets
// NCCL_NVLS_ENABLE=0, over any other value (the launch scripts set it too), before NCCL reads it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/gpu/parallel/nccl_api.hpp>
#include <mxkit/gpu/parallel/nccl_call_verification.hpp>
#include <mxkit/gpu/parallel/nccl_watchdog.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/parallel/communicator.hpp>
#include <mxkit/parallel/rendezvous.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

struct nccl_options {
  bool own_stream = true;                           // collectives on a communication stream (else on the backend's)
  std::chrono::milliseconds timeout{600'000};       // start-up and any collective's completion
  std::chrono::milliseconds poll_interval{2};       // the watchdog's period
  bool verify_calls = false;                        // compare every collective's description across ranks first
  // A blocking NCCL communicator (ncclConfig_t::blocking = 1): NCCL returns from each call once
  // it is enqueued, with no helper thread per call, but a call that waits for a peer (start-up, a
  // first connection to a rank that died) is not bounded by `timeout`; what runs on the GPU still
  // is (the watchdog). For measurements of the non-blocking mode's per-call cost.
  bool blocking = false;
  // Times the backend stream's wait at each join() (take_exposed_seconds): two event records per
  // join, read back when taken.
  bool time_joins = true;
  // NCCL's share of the SMs: its kernels run on exactly this many CTAs (ncclConfig_t::minCTAs =
  // maxCTAs = ctas; NCCL 2.17's "API: Types" documents both, positive, up to 32; RCCL has the same
  // members), one SM each while a GEMM's CTAs fill the rest. The backend's GEMMs then leave that
  // many SMs (device_backend::set_reserved_sms, gemm_options::reserved_sms), so a collective
  // launched beside the backward's persistent GEMMs starts at once instead of waiting for an SM.
  // 0: NCCL's own choice (both unset), the default.
  int ctas = 0;
};

class nccl_communicator final : public nn::communicator, private nccl_watchdog {
 public:
  static constexpr int max_ctas = 32;  // nccl_options::ctas: the bound NCCL 2.17 documents for minCTAs and maxCTAs
  // Joins the `size`-rank communicator named by `id` as `rank`, on the current device; `compute`
  // is the backend's stream. `control` (optional) is the rendezvous whose channel carries aborts.
  // Throws comm_error when start-up fails or passes the timeout, std::runtime_error when the
  // library cannot be loaded.
  nccl_communicator(const nccl::unique_id& id, int rank, int size, stream_t compute, nccl_options options = {},
                    std::shared_ptr<nn::tcp_rendezvous> control = nullptr)
      : nn::communicator(rank, size),
        nccl_watchdog(nccl::library(), options.timeout, options.poll_interval, std::move(control)),
        compute_(compute),
        options_(options) {
    mxkit::detail::require(options.timeout.count() > 0 && options.poll_interval.count() > 0, "nccl_communicator: timeout ",
                           options.timeout.count(), " ms and poll_interval ", options.poll_interval.count(), " ms must be positive");
    mxkit::detail::require(options.ctas >= 0 && options.ctas <= max_ctas, "nccl_communicator: ctas ", options.ctas, " is not in [0, ",
                           max_ctas, "] (0: NCCL's choice)");
    keep_multicast_off();
    MXKIT_GPU_CHECK(get_device(&device_));
    if (options_.own_stream) MXKIT_GPU_CHECK(stream_create(&comm_stream_));
    MXKIT_GPU_CHECK(event_create_timing_off(&ready_));
    MXKIT_GPU_CHECK(event_create_timing_off(&joined_));
    nccl::config_t config;
    config.blocking = options_.blocking ? 1 : 0;
    if (options_.ctas > 0) config.min_ctas = config.max_ctas = options_.ctas;
    nccl::comm_t comm = nullptr;
    const nccl::result_t r = api_.comm_init_rank_config(&comm, size, id, rank, &config);
    comm_ = comm;
    if (r != nccl::success && r != nccl::in_progress) {
      const std::string why = failure_text("ncclCommInitRankConfig", r);
      release();
      throw nn::comm_error(why);
    }
    try {
      wait_until_ready("start-up (ncclCommInitRankConfig: a rank that never started, or another WORLD_SIZE)");
    } catch (...) {
      release();
      throw;
    }
    if (options_.verify_calls) {
      void* p = nullptr;
      MXKIT_GPU_CHECK(malloc_device(&p, descriptor_bytes * static_cast<std::size_t>(size)));
      verify_buffer_ = p;
      MXKIT_GPU_CHECK(malloc_host_pinned(&p, descriptor_bytes * static_cast<std::size_t>(size)));
      verify_host_ = p;
    }
    start_watchdog();
  }

  // From the launch environment (torchrun's variables): rank 0 makes the unique id, the TCP
  // rendezvous on MASTER_ADDR:MASTER_PORT hands it out and stays as the control channel. The
  // caller selects the device first (set_device(env.local_rank)).
  static std::unique_ptr<nccl_communicator> from_environment(const nn::launch_environment& env, stream_t compute,
                                                             nccl_options options = {}) {
    auto control = std::make_shared<nn::tcp_rendezvous>(env, sizeof(nccl::unique_id), options.timeout);
    std::string id_bytes;
    if (env.rank == 0) {
      const nccl::unique_id id = new_unique_id();
      id_bytes.assign(id.internal, sizeof id.internal);
    }
    id_bytes = control->broadcast(id_bytes);
    nccl::unique_id id{};
    std::memcpy(id.internal, id_bytes.data(), sizeof id.internal);
    return std::make_unique<nccl_communicator>(id, env.rank, env.world_size, compute, options, std::move(control));
  }

  static nccl::unique_id new_unique_id() {
    keep_multicast_off();
    nccl::unique_id id{};
    const nccl::result_t r = nccl::library().get_unique_id(&id);
    if (r != nccl::success) throw nn::comm_error(failure_text(nccl::library(), "ncclGetUniqueId", r));
    return id;
  }

  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  ~nccl_communicator() override {
    stop_watchdog();
    // An orderly end: drain what is queued, then ncclCommFinalize (it completes once every rank's
    // operations are done, so no peer still reads this rank's buffers) and ncclCommDestroy. Each
    // wait is bounded by the timeout; on any failure (or after one) ncclCommAbort instead.
    if (!failed()) {
      try {
        synchronize();
        bool finalized = false;
        {
          const std::lock_guard<std::mutex> lock(mutex_);
          const nccl::result_t r = api_.comm_finalize(comm_);
          if (r != nccl::success && r != nccl::in_progress) fail_locked(failure_text("ncclCommFinalize", r));
        }
        if (!failed()) {
          wait_until_ready("ncclCommFinalize (another rank has not finished its collectives)");
          finalized = true;
        }
        if (finalized) {
          const std::lock_guard<std::mutex> lock(mutex_);
          (void)api_.comm_destroy(comm_);
          comm_ = nullptr;
        }
      } catch (...) {
      }
    }
    release();
    if (control_) control_->close();
  }

  const char* library_name() const noexcept { return nccl::vendor_name; }
  int library_version() const noexcept { return api_.version; }
  const std::string& library_path() const noexcept { return api_.library; }
  // The stream collectives run on (the backend's where own_stream is false).
  stream_t stream() const noexcept { return comm_stream_ ? comm_stream_ : compute_; }
  int device() const noexcept { return device_; }

  // Waits on the host until every collective called so far has completed; throws comm_error
  // when the communicator failed or fails meanwhile (bounded by the timeout).
  void synchronize() {
    check();
    settle();
    event_t done = nullptr;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      done = take_event();
      MXKIT_GPU_CHECK(event_record(done, stream()));
    }
    try {
      wait_for(done, "synchronize: collectives did not complete within the timeout");
    } catch (...) {
      give_event(done);
      throw;
    }
    give_event(done);
    check();
  }

  // Throws comm_error when the communicator has failed (the first cause).
  void check() const {
    if (failed()) {
      const std::lock_guard<std::mutex> lock(mutex_);
      throw nn::comm_error("mxkit: " + std::string(nccl::vendor_name) + " communicator (rank " + std::to_string(rank()) + " of " +
                           std::to_string(size()) + ") failed: " + failure_);
    }
  }
  using nccl_watchdog::failed;

 protected:
  void do_all_reduce(nn::comm_buffer in, nn::comm_buffer out, nn::reduce_op op) override {
    enqueue(call{kind::all_reduce, in.type, in.count, static_cast<int>(op)}, [&](nccl::comm_t c, stream_t s) {
      return api_.all_reduce(in.data, out.data, in.count, type_of(in.type), op_of(op), c, s);
    });
  }
  void do_reduce_scatter(nn::comm_buffer in, nn::comm_buffer out, nn::reduce_op op) override {
    enqueue(call{kind::reduce_scatter, in.type, out.count, static_cast<int>(op)}, [&](nccl::comm_t c, stream_t s) {
      return api_.reduce_scatter(in.data, out.data, out.count, type_of(in.type), op_of(op), c, s);
    });
  }
  void do_all_gather(nn::comm_buffer in, nn::comm_buffer out) override {
    enqueue(call{kind::all_gather, in.type, in.count, 0}, [&](nccl::comm_t c, stream_t s) {
      return api_.all_gather(in.data, out.data, in.count, type_of(in.type), c, s);
    });
  }
  void do_broadcast(nn::comm_buffer data, int root) override {
    enqueue(call{kind::broadcast, data.type, data.count, root}, [&](nccl::comm_t c, stream_t s) {
      return api_.broadcast(data.data, data.data, data.count, type_of(data.type), root, c, s);
    });
  }
  void do_join() override {
    check();
    settle();
    if (!comm_stream_) return;
    MXKIT_GPU_CHECK(event_record(joined_, comm_stream_));
    compute_waits_for(joined_);
    release_marks(next_mark_);  // every mark taken is behind this join
  }
  // A mark behind a collective still being enqueued (ncclInProgress) is recorded when that one
  // settles: the host does not wait for NCCL's thread here, as it does not at the call.
  std::uint64_t do_mark() override {
    check();
    ++next_mark_;
    if (!comm_stream_) return next_mark_;  // collectives on the backend's stream: in order already
    event_t e = nullptr;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      e = take_event();
    }
    marks_.push_back({next_mark_, e, false});
    if (!launching_.active) record_mark(marks_.back());
    return next_mark_;
  }
  void do_join_until(std::uint64_t mark) override {
    mxkit::detail::require(mark <= next_mark_, "nccl_communicator::join: mark ", mark, " was not taken (", next_mark_, " so far)");
    check();
    if (!comm_stream_ || mark == 0) return;  // (mark 0: before any collective)
    release_marks(mark - 1);                 // older marks: covered by this one
    if (marks_.empty() || marks_.front().index != mark) return;  // a full join or a later mark's join covered it
    if (!marks_.front().recorded) settle();
    compute_waits_for(marks_.front().done);
    release_marks(mark);
  }
  std::optional<double> do_take_exposed_seconds() override {
    if (!comm_stream_ || !options_.time_joins) return std::nullopt;
    check();
    fold_stalls(true);
    return std::exchange(exposed_ms_, 0.0) / 1e3;
  }
  void do_abort(const std::string& reason) noexcept override {
    if (control_) control_->abort(reason);
    fail("aborted by this rank: " + reason);
  }

 private:
  using kind = nccl_collective;
  using call = nccl_call;
  static constexpr std::size_t descriptor_bytes = nccl_call_descriptor_bytes;
  struct join_stall {
    event_t before, after;
  };
  // Stalls not yet read stay bounded: joins past this many fold the completed ones into exposed_ms_.
  static constexpr std::size_t stalls_folded_at = 256;

  stream_t compute_;
  stream_t comm_stream_ = nullptr;
  nccl_options options_;
  event_t ready_ = nullptr, joined_ = nullptr;
  void* verify_buffer_ = nullptr;  // device: size x descriptor_bytes
  void* verify_host_ = nullptr;    // pinned host copy
  std::uint64_t sequence_ = 0;
  struct collective_mark_event {
    std::uint64_t index;
    event_t done;   // recorded on the communication stream after the collectives called before mark()
    bool recorded;  // (not yet while the last of them is still being enqueued)
  };
  std::deque<collective_mark_event> marks_;  // marks not yet joined, oldest first (the caller's thread only)
  std::uint64_t next_mark_ = 0;              // the last mark handed out
  std::deque<join_stall> stalls_;            // joins not yet read, oldest first (the caller's thread only)
  std::vector<event_t> free_timing_events_;  // (the caller's thread only)
  double exposed_ms_ = 0;                    // stalls read since the last take_exposed_seconds
  struct launch_in_progress {
    bool active = false;
    std::uint64_t sequence = 0;
    kind what = kind::all_reduce;
  } launching_;  // the caller's thread only

  static void keep_multicast_off() {
    static std::once_flag once;
    std::call_once(once, [] { ::setenv("NCCL_NVLS_ENABLE", "0", 1); });
  }

  static nccl::data_type_t type_of(nn::comm_type t) {
    switch (t) {
      case nn::comm_type::f32: return nccl::float32;
      case nn::comm_type::f64: return nccl::float64;
      case nn::comm_type::bf16: return nccl::bfloat16;
      case nn::comm_type::i32: return nccl::int32;
      case nn::comm_type::u8: return nccl::uint8;
    }
    mxkit::detail::fail("nccl_communicator: comm_type ", static_cast<int>(t));
  }
  static nccl::red_op_t op_of(nn::reduce_op op) { return op == nn::reduce_op::max ? nccl::max : nccl::sum; }

  // An event from `pool`, or a new one (timing: one that records time, for the joins' stalls).
  static event_t take_from(std::vector<event_t>& pool, bool timing) {
    if (!pool.empty()) {
      event_t e = pool.back();
      pool.pop_back();
      return e;
    }
    event_t e = nullptr;
    MXKIT_GPU_CHECK(timing ? event_create(&e) : event_create_timing_off(&e));
    return e;
  }
  event_t take_event() { return take_from(free_events_, false); }  // under mutex_
  void give_event(event_t e) {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_events_.push_back(e);
  }
  // The backend's stream waits for `e`; with time_joins, bracketed by two timing events on it:
  // `before` completes when the compute enqueued so far has, `after` when `e` has too, so the time
  // between them is the stall.
  void compute_waits_for(event_t e) {
    if (!options_.time_joins) {
      MXKIT_GPU_CHECK(stream_wait_event(compute_, e));
      return;
    }
    join_stall j{take_timing_event(), take_timing_event()};
    MXKIT_GPU_CHECK(event_record(j.before, compute_));
    MXKIT_GPU_CHECK(stream_wait_event(compute_, e));
    MXKIT_GPU_CHECK(event_record(j.after, compute_));
    stalls_.push_back(j);
    if (stalls_.size() >= stalls_folded_at) fold_stalls(false);
  }
  // Marks up to `through` are joined: their events go back to the pool.
  void release_marks(std::uint64_t through) {
    while (!marks_.empty() && marks_.front().index <= through) {
      give_event(marks_.front().done);
      marks_.pop_front();
    }
  }
  event_t take_timing_event() { return take_from(free_timing_events_, true); }
  // Adds the recorded stalls to exposed_ms_, oldest first: all of them (waiting, bounded by the
  // timeout), or only those already complete.
  void fold_stalls(bool wait) {
    while (!stalls_.empty()) {
      const join_stall j = stalls_.front();
      if (wait) wait_for(j.after, "take_exposed_seconds: a join's collectives did not complete within the timeout");
      else if (event_query(j.after) != success) return;
      float ms = 0;
      MXKIT_GPU_CHECK(event_elapsed_ms(&ms, j.before, j.after));
      exposed_ms_ += ms;
      stalls_.pop_front();
      free_timing_events_.push_back(j.before);
      free_timing_events_.push_back(j.after);
    }
  }
  // Polls `e` until it completes; throws comm_error when the communicator fails meanwhile or the
  // timeout passes (naming `timeout_reason`).
  void wait_for(event_t e, const char* timeout_reason) {
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    poll_backoff backoff(options_.poll_interval);
    for (;;) {
      const error_t q = event_query(e);
      if (q == success) return;
      if (q != not_ready) MXKIT_GPU_CHECK(q);
      if (failed() || std::chrono::steady_clock::now() > deadline) {
        if (!failed()) fail(timeout_reason);
        check();
      }
      backoff.wait();
    }
  }

  // Polls the non-blocking communicator until its last operation left ncclInProgress.
  void wait_until_ready(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    poll_backoff backoff(options_.poll_interval);
    for (;;) {
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!comm_) break;
        nccl::result_t state = nccl::success;
        const nccl::result_t r = api_.comm_get_async_error(comm_, &state);
        if (r != nccl::success) state = r;
        if (state == nccl::success) return;
        if (state != nccl::in_progress) fail_locked(failure_text(what, state));
        else if (std::chrono::steady_clock::now() > deadline)
          fail_locked(std::string(what) + ": not complete after the timeout of " + std::to_string(options_.timeout.count()) + " ms");
      }
      if (control_ && !failed()) {
        if (std::optional<std::string> why = control_->poll_abort()) fail("during " + std::string(what) + ": " + *why);
      }
      if (failed()) break;
      backoff.wait();
    }
    check();
    throw nn::comm_error(std::string("mxkit: ") + what + ": the communicator was aborted");
  }

  template <class Launch>
  void enqueue(const call& c, Launch&& launch) {
    check();
    settle();
    const std::uint64_t seq = ++sequence_;
    if (options_.verify_calls) verify(c, seq);
    const stream_t s = stream();
    nccl::result_t r = nccl::success;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!comm_) {
        fail_locked("aborted");
      } else {
        if (comm_stream_) {
          MXKIT_GPU_CHECK(event_record(ready_, compute_));
          MXKIT_GPU_CHECK(stream_wait_event(comm_stream_, ready_));
        }
        r = launch(comm_, s);
      }
    }
    check();
    if (r == nccl::in_progress) {
      launching_ = {true, seq, c.what};  // settled by the next call (see settle())
      return;
    }
    if (r != nccl::success) fail(failure_text(name_of(c.what), r));
    check();
    record_completion(seq, c.what);
  }

  // A non-blocking communicator may answer a collective with ncclInProgress: NCCL's own thread is
  // still enqueueing it, and no other call may reach this communicator before it has finished.
  // The rank does not wait for that at the call: the next collective, join() or synchronize()
  // does, so the host goes on enqueueing the backward pass meanwhile. Only then is the
  // collective's kernel on the stream, and its completion event recorded.
  void settle() {
    if (!launching_.active) return;
    launching_.active = false;
    wait_until_ready(name_of(launching_.what));
    record_completion(launching_.sequence, launching_.what);
    for (collective_mark_event& m : marks_)  // marks taken since that call
      if (!m.recorded) record_mark(m);
  }
  void record_mark(collective_mark_event& m) {
    MXKIT_GPU_CHECK(event_record(m.done, comm_stream_));
    m.recorded = true;
  }
  void record_completion(std::uint64_t seq, kind what) {
    const std::lock_guard<std::mutex> lock(mutex_);
    event_t done = take_event();
    MXKIT_GPU_CHECK(event_record(done, stream()));
    pending_.push_back({done, std::chrono::steady_clock::now(), seq, what});
  }

  // All ranks all-gather their call's description and compare (verify_calls).
  void verify(const call& c, std::uint64_t seq) {
    const nccl_call_descriptor mine = describe(c, seq);
    const stream_t s = stream();
    auto* table = static_cast<std::uint8_t*>(verify_buffer_);
    nccl::result_t r = nccl::success;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!comm_) fail_locked("aborted");
      else {
        // The description goes up through the table's own slot (pinned memory, stream-ordered).
        std::memcpy(static_cast<std::uint8_t*>(verify_host_) + descriptor_bytes * static_cast<std::size_t>(rank()), &mine, sizeof mine);
        MXKIT_GPU_CHECK(memcpy_async(table + descriptor_bytes * static_cast<std::size_t>(rank()),
                                     static_cast<std::uint8_t*>(verify_host_) + descriptor_bytes * static_cast<std::size_t>(rank()),
                                     descriptor_bytes, copy_kind::host_to_device, s));
        r = api_.all_gather(table + descriptor_bytes * static_cast<std::size_t>(rank()), table, descriptor_bytes, nccl::uint8, comm_, s);
      }
    }
    check();
    if (r == nccl::in_progress) wait_until_ready("verify_calls all_gather");
    else if (r != nccl::success) fail(failure_text("verify_calls all_gather", r));
    check();
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      MXKIT_GPU_CHECK(memcpy_async(verify_host_, table, descriptor_bytes * static_cast<std::size_t>(size()), copy_kind::device_to_host, s));
      event_t done = take_event();
      MXKIT_GPU_CHECK(event_record(done, s));
      pending_.push_back({done, std::chrono::steady_clock::now(), seq, c.what});
    }
    synchronize();
    // Every rank holds the same table and compares it with rank 0's entry, so all of them throw
    // the same message.
    if (std::optional<std::string> why = nccl_call_mismatch(static_cast<const std::uint64_t*>(verify_host_), size())) {
      fail(*why);
      check();
    }
  }

  // Aborts the communicator (if any) and frees every resource. Never throws.
  void release() noexcept {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (comm_) {
        (void)api_.comm_abort(comm_);
        comm_ = nullptr;
      }
      for (const pending& p : pending_) free_events_.push_back(p.done);
      pending_.clear();
    }
    if (comm_stream_) (void)stream_synchronize(comm_stream_);
    for (event_t e : free_events_) (void)event_destroy(e);
    free_events_.clear();
    for (const collective_mark_event& m : marks_) (void)event_destroy(m.done);
    marks_.clear();
    for (const join_stall& j : stalls_) {
      (void)event_destroy(j.before);
      (void)event_destroy(j.after);
    }
    stalls_.clear();
    for (event_t e : free_timing_events_) (void)event_destroy(e);
    free_timing_events_.clear();
    if (ready_) (void)event_destroy(ready_);
    if (joined_) (void)event_destroy(joined_);
    ready_ = joined_ = nullptr;
    if (verify_buffer_) (void)free_device(verify_buffer_);
    if (verify_host_) (void)free_host_pinned(verify_host_);
    verify_buffer_ = verify_host_ = nullptr;
    if (comm_stream_) (void)stream_destroy(comm_stream_);
    comm_stream_ = nullptr;
  }
};

}  // namespace gpu
MXKIT_END_NAMESPACE
