// SPDX-License-Identifier: Apache-2.0
// A communicator that forwards every collective to another (a rank thread's) and counts what
// passes: the data-parallel tests read the gathered and broadcast bytes, the LoRA tests the
// gradient reductions. One definition, shared by the files one unity build compiles together.
#pragma once

#include <cstddef>
#include <string>

#include <mxkit/parallel/communicator.hpp>

namespace nn_test {

class counting_communicator final : public mxkit::nn::communicator {
 public:
  explicit counting_communicator(mxkit::nn::communicator& inner)
      : mxkit::nn::communicator(inner.rank(), inner.size()), inner_(&inner) {}
  std::size_t gathered = 0, gathered_bytes_u8 = 0, broadcast_bytes = 0;  // bytes, this rank's side
  // Sum all-reduces of more than one element (data_parallel's gradient groups; a logging step's
  // loss is a one-element sum, the FP8 amax history a max): their elements and their number.
  std::size_t gradient_elements = 0, gradient_reductions = 0;

 protected:
  void do_all_reduce(mxkit::nn::comm_buffer in, mxkit::nn::comm_buffer out, mxkit::nn::reduce_op op) override {
    if (op == mxkit::nn::reduce_op::sum && in.count > 1) {
      gradient_elements += in.count;
      ++gradient_reductions;
    }
    inner_->all_reduce(in, out, op);
  }
  void do_reduce_scatter(mxkit::nn::comm_buffer in, mxkit::nn::comm_buffer out, mxkit::nn::reduce_op op) override {
    inner_->reduce_scatter(in, out, op);
  }
  void do_all_gather(mxkit::nn::comm_buffer in, mxkit::nn::comm_buffer out) override {
    gathered += out.bytes();
    if (out.type == mxkit::nn::comm_type::u8) gathered_bytes_u8 += out.bytes();
    inner_->all_gather(in, out);
  }
  void do_broadcast(mxkit::nn::comm_buffer data, int root) override {
    broadcast_bytes += data.bytes();
    inner_->broadcast(data, root);
  }
  void do_join() override { inner_->join(); }
  void do_abort(const std::string& reason) noexcept override { inner_->abort(reason); }

 private:
  mxkit::nn::communicator* inner_;
};

}  // namespace nn_test
