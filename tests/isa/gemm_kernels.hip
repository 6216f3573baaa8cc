// SPDX-License-Identifier: Apache-2.0
// Translation unit for the ISA check (check_isa.cmake): instantiates every device GEMM kernel of
// the HIP build (the gfx950 block-scaled MFMA kernels for all 25 FP4/FP6/FP8 operand pairs, the
// portable kernel) through the launchers. Compiled to assembly, never run.
#include <mxkit/gpu/gemm/gemm.hpp>

void mxkit_isa_instantiate(const mxkit::gpu::gemm_operand& a, const mxkit::gpu::gemm_operand& b,
                           const mxkit::gpu::gemm_output_desc& out, mxkit::gpu::stream_t s) {
  mxkit::gpu::gfx950::launch_mfma(a, b, out, s);
  mxkit::gpu::portable::launch(a, b, out, s);
}
