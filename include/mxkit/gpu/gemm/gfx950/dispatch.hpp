// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CDNA4 path as an entry of the GEMM's architecture list (gpu/gemm/gemm.hpp): MX operands with
// FP4/FP6/FP8 elements on a gfx950 device, through the block-scaled MFMA kernel (kernel.hpp).
// Compiled for gfx950 and its ISA inspected in CI; never run here (no AMD GPU).
#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#if !MXKIT_GPU_HIP
#error "mxkit/gpu/gemm/gfx950/ is AMD CDNA4 code: include it only in a HIP build (gpu/gemm/gemm.hpp does where it applies)"  // and nothing below compiles
#else
#include <mxkit/gpu/gemm/gfx950/kernel.hpp>
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/gemm/options.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace gfx950 {

struct gemm_arch {
  static constexpr gemm_path path = gemm_path::gfx950;
  static bool supports(const gemm_operand& a, const gemm_operand& b) { return mfma_supports(a, b) && available(); }
#if !defined(MXKIT_GPU_LIBRARY_HAS_GEMM) || defined(MXKIT_GPU_LIBRARY_DEFINES_GEMM)
  static void run(const gemm_operand& a, const gemm_operand& b, const gemm_output_desc& out, stream_t s, const gemm_options&) {
    launch_mfma(a, b, out, s);
  }
#endif
};

}  // namespace gfx950
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_HIP
