// SPDX-License-Identifier: Apache-2.0
// A communicator whose collectives complete only when a join waits for them, as a device
// communicator's run on their own stream: each call is queued with its buffers and runs on the
// inner (a rank thread's) communicator at the first join that covers it, join() or join(mark)
// for a mark taken after the call. Code that reads a collective's output before joining it,
// writes its input after calling it, or frees its buffers before a join covers it, gets other
// bits (or a sanitizer report) where the host communicator's immediate collectives hide it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include <mxkit/parallel/communicator.hpp>

namespace nn_test {

class deferred_communicator final : public mxkit::nn::communicator {
 public:
  explicit deferred_communicator(mxkit::nn::communicator& inner)
      : mxkit::nn::communicator(inner.rank(), inner.size()), inner_(&inner) {}
  // Joins of a mark that left later collectives queued (the partial joins that happened).
  std::size_t partial_joins = 0;

 protected:
  void do_all_reduce(mxkit::nn::comm_buffer in, mxkit::nn::comm_buffer out, mxkit::nn::reduce_op op) override {
    queue({kind::all_reduce, in, out, op, 0});
  }
  void do_reduce_scatter(mxkit::nn::comm_buffer in, mxkit::nn::comm_buffer out, mxkit::nn::reduce_op op) override {
    queue({kind::reduce_scatter, in, out, op, 0});
  }
  void do_all_gather(mxkit::nn::comm_buffer in, mxkit::nn::comm_buffer out) override {
    queue({kind::all_gather, in, out, mxkit::nn::reduce_op::sum, 0});
  }
  void do_broadcast(mxkit::nn::comm_buffer data, int root) override { queue({kind::broadcast, data, data, mxkit::nn::reduce_op::sum, root}); }
  void do_join() override { run_through(called_); }
  // A mark is the number of collectives called before it.
  std::uint64_t do_mark() override { return called_; }
  void do_join_until(std::uint64_t mark) override {
    run_through(mark);
    if (!pending_.empty()) ++partial_joins;
  }
  void do_abort(const std::string& reason) noexcept override { inner_->abort(reason); }

 private:
  enum class kind { all_reduce, reduce_scatter, all_gather, broadcast };
  struct call {
    kind what;
    mxkit::nn::comm_buffer in, out;
    mxkit::nn::reduce_op op;
    int root;
  };
  void queue(const call& c) {
    pending_.push_back(c);
    ++called_;
  }
  // Runs the queued collectives called before collective number `end`.
  void run_through(std::uint64_t end) {
    while (!pending_.empty() && ran_ < end) {
      const call c = pending_.front();
      pending_.pop_front();
      ++ran_;
      switch (c.what) {
        case kind::all_reduce: inner_->all_reduce(c.in, c.out, c.op); break;
        case kind::reduce_scatter: inner_->reduce_scatter(c.in, c.out, c.op); break;
        case kind::all_gather: inner_->all_gather(c.in, c.out); break;
        case kind::broadcast: inner_->broadcast(c.in, c.root); break;
      }
    }
  }
  mxkit::nn::communicator* inner_;
  std::deque<call> pending_;
  std::uint64_t called_ = 0, ran_ = 0;
};

}  // namespace nn_test
