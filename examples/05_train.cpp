// SPDX-License-Identifier: Apache-2.0
// The training program (include/mxkit/train_program/program.hpp, src/train/program.cpp) on the host reference backend: the same
// command line, output, checkpoints and CSV as 06_train_gpu, so the program is run and checked
// (ctest example.05_train.*) on machines without a GPU. The default model (about 100 M
// parameters) is sized for a GPU; on the host train a small one, for example
//   05_train --layers 2 --d-model 128 --heads 2 --kv-heads 1 --ffn 384 --seq 128 --batch 4
//            --steps 200 --lr 3e-3 --log-every 20 --eval-every 100   (one command; ~2.5 min)
// 05_train --help lists every flag.
// --ranks N trains on N rank threads of this process (ref::thread_communicator): the data-parallel
// and sharded code paths a GPU program runs through NCCL, checked on the host.
#include <mxkit/host/host_backend.hpp>
#include <mxkit/parallel/thread_communicator.hpp>

#include <mxkit/train_program/program.hpp>

int main(int argc, char** argv) {
  return mxkit::train_program::main(argc, argv, "05_train", [](const mxkit::train_program::options& o) {
    if (o.comm_sms > 0)
      throw mxkit::train_program::usage_error("--comm-sms " + std::to_string(o.comm_sms) +
                                              ": 05_train's rank threads share host memory and run no NCCL (a GPU program's flag)");
    if (o.vendor_gemm)
      throw mxkit::train_program::usage_error("--gemm vendor: 05_train runs the host reference's GEMMs (a GPU program's flag)");
    if (o.ranks == 1) {
      mxkit::ref::host_backend be;
      return mxkit::train_program::run(be, {"host CPU", 0, {}}, o);
    }
    int code = 0;
    mxkit::ref::run_ranks(o.ranks, [&](mxkit::nn::communicator& comm) {
      mxkit::ref::host_backend be;
      const int c = mxkit::train_program::run(be, {"host CPU, " + std::to_string(o.ranks) + " rank threads", 0, {}}, o, &comm);
      if (comm.rank() == 0) code = c;
    });
    return code;
  });
}
