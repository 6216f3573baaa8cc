// SPDX-License-Identifier: Apache-2.0
// mxkit's C++ linear on a gpu::device_backend (linear_run.hpp), the oracle the Python tests hold
// mxkit.torch.Linear to on the GPU (tests/python/test_torch_linear.py). A unit of its own: the
// device backend (header-only here: the module links no kernel library) is the module's largest
// compile, and nothing else in the module needs it.
#include <mxkit/gpu/nn/backend.hpp>  // first: the vendor runtime before any MXKIT_HD code

#include "device.hpp"
#include "linear_run.hpp"

namespace mxkit_python::device {

linear_step_result linear_steps(const linear_step_args& args) {
  mxkit::gpu::device_backend be;
  // The module's GEMMs (device.cu) run with gpu::gemm's default options, which let `automatic`
  // take the vendor path (cuBLASLt: per-tensor FP8, and MXFP8's expanded bf16 copies); the oracle
  // makes the same choice, or the two would sum the same products in different orders.
  be.set_vendor_gemm(true);
  return run_linear_steps(be, args);  // its reads wait for the device
}

}  // namespace mxkit_python::device
