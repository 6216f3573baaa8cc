// SPDX-License-Identifier: Apache-2.0
#pragma once
// The GEMM's choices, shared by the generic entry points (gemm.hpp) and the architecture folders
// that run them (sm90/, gfx950/, portable.hpp): which path, and each path's knobs.
#include <cstdint>

#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// vendor: the platform's own BLAS (cuBLASLt, gemm/vendor/) for bf16 and per-tensor FP8 operands;
// last in the enum so the earlier values keep their numbers.
enum class gemm_path : std::uint8_t { automatic, portable, sm90, gfx950, vendor };

}  // namespace gpu
template <>
struct enum_names<gpu::gemm_path> {
  static constexpr const char* names[] = {"automatic", "portable", "sm90", "gfx950", "vendor"};
  static constexpr gpu::gemm_path last = gpu::gemm_path::vendor;
};
namespace gpu {

struct gemm_options {
  gemm_path path = gemm_path::automatic;
  // automatic: may take the vendor path (cuBLASLt; gemm/vendor/). false keeps `automatic` on
  // mxkit's own kernels, whose bits do not depend on the operands' storage order or the output
  // type (the same products summed in the same order); cuBLASLt picks an algorithm per problem,
  // so a transposed copy or a bf16 D may be summed otherwise (same bits run to run, though).
  bool vendor = true;
  // sm90, MXFP4 x MXFP4: true sums each 32-block's products exactly and adds them in fp32 (as
  // the reference); false lets the tensor cores accumulate four blocks (128 K) before the fp32
  // add, as DeepGEMM and cuBLASLt's FP8 do: faster, but Hopper keeps only about 14 bits in
  // that accumulation (DeepSeek-V3 report, section 3.3.2).
  bool exact_block_sums = true;
  // sm90, MXFP8 x MXFP8: expand both sides to bf16 with the block scales applied (exact) and
  // run the bf16 tensor cores, which need no per-block promotion; costs 2 bytes of scratch per
  // operand element. Blocks with exponents beyond +-48 fall back to the FP8 block-scaled kernel.
  bool mxfp8_via_bf16 = true;
  // sm90: two zeroed words of device memory that only this stream's GEMMs use (a GEMM leaves them
  // zeroed): the persistent kernel then hands out its tiles dynamically, so a GEMM that overlaps
  // another stream's kernels (a collective's) loses only the SMs they hold, not the tiles queued
  // behind them (sm90/kernel.hpp). Null: the static order. Results are the same bits either way.
  // The vendor path (cuBLASLt) schedules its own grid and ignores this and reserved_sms.
  std::uint32_t* tile_counter = nullptr;
  // sm90: SMs left to a collective that may run beside this GEMM (NCCL limited to that many CTAs,
  // ncclConfig_t::maxCTAs: gpu::nccl_options::ctas). The persistent kernel's CTAs never yield
  // their SM, so a collective launched while they hold every SM waits for tiles to drain; a grid
  // of persistent_grid_sms() leaves the collective its SMs at once. 0: every SM (the default).
  // Results are the same bits for any value: a tile's sums do not depend on which CTA takes it,
  // and the split-K choice stays the whole device's (sm90/launch.hpp).
  std::uint32_t reserved_sms = 0;
};

// The persistent grid's width: the device's SMs less those reserved, at least one.
constexpr std::uint32_t persistent_grid_sms(std::uint32_t device_sms, std::uint32_t reserved_sms) noexcept {
  return reserved_sms < device_sms ? device_sms - reserved_sms : 1u;
}
static_assert(persistent_grid_sms(132, 0) == 132 && persistent_grid_sms(132, 16) == 116 && persistent_grid_sms(8, 8) == 1);

}  // namespace gpu
MXKIT_END_NAMESPACE
