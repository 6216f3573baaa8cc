// SPDX-License-Identifier: Apache-2.0
#pragma once
// The collectives of multi-rank training, beside the backend (not inside it): a backend computes
// on one device, a communicator moves bytes between the ranks' backends. Implementations:
//   ref::thread_communicator  ranks are threads of one process, buffers are host memory (the
//                             host reference backend; what CI tests without GPUs);
//   gpu::nccl_communicator    NCCL under CUDA, RCCL under HIP (one source), buffers are device
//                             memory of the rank's device_backend.
// As nn::backend does, the public non-virtual functions check the arguments once (sizes, types,
// the same count on every rank is the implementation's to verify where it can) and call the
// protected do_*() functions.
//
// Ordering. A collective sees every operation that the rank's backend enqueued before it was
// called, and writes its output in the order collectives were called. Its output is visible to
// backend operations enqueued after the next join(). A device communicator may run collectives
// on a stream of its own (overlap with the backward pass) ordered by events; join() makes the
// backend's stream wait for them without a host synchronization. The host one runs each
// collective to completion before returning, so join() has nothing to do there.
// join(mark()) waits for fewer: only the collectives called before the mark, not those called
// after it. Full sharding needs that: a layer's prefetched weights are gathered before the
// previous layer's gradients are reduced, and waiting for both at every layer left each layer's
// reduction exposed (docs/perf/multi_gpu.md). A buffer of a collective called after the mark
// must stay alive until a later join covers it. An implementation without marks joins fully.
//
// Failure. A rank that throws, a mismatched call (another operation, count or type on another
// rank) or a peer that never arrives ends every rank's collective with comm_error within the
// communicator's timeout, never a hang; abort() ends them at once (it is what a rank calls from
// its exception handler so the others need not wait for the timeout).
//
// Exposed communication. take_exposed_seconds() is the time this rank's compute waited for
// collectives since the last call: on a device, how long the backend's stream stalled at join()
// for the communication stream (the communication that overlap did not hide); on the host, the
// whole time of each collective, which runs to completion in the caller. An implementation that
// does not measure it answers nullopt.
//
// Determinism. Reductions combine the ranks' values in rank order (0, 1, ..., size-1) wherever the
// implementation controls the order (the host one always). NCCL's ring order is fixed for a given
// communicator and size, so a run repeats bit for bit on the same N.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/nn/tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

enum class reduce_op : std::uint8_t { sum, max };
}  // namespace nn
template <>
struct enum_names<nn::reduce_op> {
  static constexpr const char* names[] = {"sum", "max"};
  static constexpr nn::reduce_op last = nn::reduce_op::max;
};
namespace nn {

// Element types a collective moves: the tensor dtypes, and u8 for opaque bytes (quantized copies:
// codes and E8M0 or FP8 scales are gathered as bytes; reductions refuse u8).
enum class comm_type : std::uint8_t { f32, f64, bf16, i32, u8 };
}  // namespace nn
template <>
struct enum_names<nn::comm_type> {
  static constexpr const char* names[] = {"f32", "f64", "bf16", "i32", "u8"};
  static constexpr nn::comm_type last = nn::comm_type::u8;
};
namespace nn {

constexpr std::size_t size_of(comm_type t) noexcept {
  switch (t) {
    case comm_type::f32: return 4;
    case comm_type::f64: return 8;
    case comm_type::bf16: return 2;
    case comm_type::i32: return 4;
    case comm_type::u8: return 1;
  }
  return 0;
}
constexpr comm_type comm_type_of(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return comm_type::f32;
    case dtype::f64: return comm_type::f64;
    case dtype::bf16: return comm_type::bf16;
    case dtype::i32: return comm_type::i32;
  }
  return comm_type::u8;
}

// A rank's side of a collective: `count` elements of `type` at `data` (backend memory).
struct comm_buffer {
  void* data = nullptr;
  std::size_t count = 0;
  comm_type type = comm_type::f32;
  std::size_t bytes() const noexcept { return count * size_of(type); }
};
inline comm_buffer buffer_of(const tensor& t) noexcept { return {t.data(), t.size(), comm_type_of(t.type())}; }

// Every failure of a collective (timeout, a peer's abort or error, a mismatched call).
class comm_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class communicator {
 public:
  virtual ~communicator() = default;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  // out[i] = op over ranks of in[i]; in and out may be the same buffer.
  void all_reduce(comm_buffer in, comm_buffer out, reduce_op op) {
    check_reduction(in, op, "all_reduce");
    require_same(in, out, 1, "all_reduce");
    do_all_reduce(in, out, op);
  }
  void all_reduce(tensor& t, reduce_op op) { all_reduce(buffer_of(t), buffer_of(t), op); }

  // in holds size() equal chunks of out.count elements; rank r receives op over ranks of chunk r.
  void reduce_scatter(comm_buffer in, comm_buffer out, reduce_op op) {
    check_reduction(in, op, "reduce_scatter");
    require_same(out, in, static_cast<std::size_t>(size_), "reduce_scatter");
    do_reduce_scatter(in, out, op);
  }
  // out holds size() chunks of in.count elements; chunk r is rank r's in.
  void all_gather(comm_buffer in, comm_buffer out) {
    require_same(in, out, static_cast<std::size_t>(size_), "all_gather");
    do_all_gather(in, out);
  }
  // Every rank's buffer becomes root's.
  void broadcast(comm_buffer data, int root) {
    detail::require(root >= 0 && root < size_, "communicator::broadcast: root ", root, " is not a rank of ", size_);
    do_broadcast(data, root);
  }
  // The backend's stream waits for every collective called so far (no host synchronization).
  void join() { do_join(); }
  // A point in this rank's sequence of collectives; a mark taken later compares greater or equal.
  struct collective_mark {
    std::uint64_t index = 0;
    friend constexpr bool operator<=(collective_mark a, collective_mark b) noexcept { return a.index <= b.index; }
  };
  collective_mark mark() { return {do_mark()}; }
  // The backend's stream waits for the collectives called before `m` (see above).
  void join(collective_mark m) { do_join_until(m.index); }
  // Ends every rank's collectives with comm_error (this rank's too, from now on), naming `reason`.
  void abort(const std::string& reason) noexcept { do_abort(reason); }
  // Seconds this rank's compute waited for collectives since the previous call (see above).
  std::optional<double> take_exposed_seconds() { return do_take_exposed_seconds(); }

 protected:
  communicator(int rank, int size) : rank_(rank), size_(size) {
    detail::require(size >= 1, "communicator: size ", size, " must be at least 1");
    detail::require(rank >= 0 && rank < size, "communicator: rank ", rank, " is not in [0, ", size, ")");
  }
  virtual void do_all_reduce(comm_buffer in, comm_buffer out, reduce_op op) = 0;
  virtual void do_reduce_scatter(comm_buffer in, comm_buffer out, reduce_op op) = 0;
  virtual void do_all_gather(comm_buffer in, comm_buffer out) = 0;
  virtual void do_broadcast(comm_buffer data, int root) = 0;
  virtual void do_join() = 0;
  virtual void do_abort(const std::string& reason) noexcept = 0;
  virtual std::optional<double> do_take_exposed_seconds() { return std::nullopt; }
  // Without marks of its own an implementation hands out one mark, and joins fully: every mark
  // compares equal, and join(mark) covers every collective.
  virtual std::uint64_t do_mark() { return 0; }
  virtual void do_join_until(std::uint64_t) { do_join(); }

 private:
  int rank_, size_;

  static void check_reduction(const comm_buffer& in, reduce_op op, const char* what) {
    detail::check_enum(op, reduce_op::max, "reduce_op", "communicator::", what);
    detail::check_enum(in.type, comm_type::u8, "comm_type", "communicator::", what);
    detail::require(in.type != comm_type::u8, "communicator::", what, ": u8 buffers are bytes and cannot be reduced");
  }
  // big.count == small.count * factor, same type, both non-null unless empty.
  static void require_same(const comm_buffer& small, const comm_buffer& big, std::size_t factor, const char* what) {
    detail::check_enum(small.type, comm_type::u8, "comm_type", "communicator::", what);
    detail::require(small.type == big.type, "communicator::", what, ": element types differ (", name_of(small.type), " and ",
                    name_of(big.type), ")");
    detail::require(big.count / factor == small.count && big.count % factor == 0, "communicator::", what, ": buffers of ",
                    small.count, " and ", big.count, " elements, expected ", factor, "x");
    detail::require((small.count == 0 || small.data) && (big.count == 0 || big.data), "communicator::", what,
                    ": null buffer of non-zero count");
  }
};

}  // namespace nn
MXKIT_END_NAMESPACE
