// SPDX-License-Identifier: Apache-2.0
#pragma once
// Split K for the Hopper GEMM: the fixed-order reduction of the fp32 partials and the choice of
// the split count.
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/gemm/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/gemm/sm90/config.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

// A wgrad-shaped product (a few hundred thousand outputs, K = tokens in the tens of thousands)
// has fewer 128 x 256 tiles than the GPU has SMs: the reduction is split across CTAs (gridDim.y)
// into fp32 partials, then added in split order, so every run gives the same bits.
// D = sum_z partial_z + beta * C, in D's type; alpha and the scales are in the partials already.
template <bool Bf16Out>
MXKIT_GLOBAL void split_reduce_kernel(const float* partials, std::uint32_t splits, std::size_t stride, std::uint32_t rows,
                                      std::uint32_t cols, gemm_output_desc o, launch_gate gate) {
  if (gate.closed()) return;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float v = partials[i];
    for (std::uint32_t z = 1; z < splits; ++z) v += partials[z * stride + i];
    const std::size_t r = i / cols, c = i % cols, di = r * o.ldd + c, ci = r * o.ldc + c;
    if constexpr (Bf16Out) {
      if (o.beta != 0.0f) v = v + o.beta * bit_cast<float>(static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(o.c)[ci]) << 16);
      static_cast<std::uint16_t*>(o.d)[di] = bf16_output_bits(v);
    } else {
      if (o.beta != 0.0f) v = v + o.beta * static_cast<const float*>(o.c)[ci];
      static_cast<float*>(o.d)[di] = v;
    }
  }
}

// SMs of `device`.
inline std::uint32_t multiprocessors(int device) {
  int n = 0;
  MXKIT_GPU_CHECK(get_multiprocessor_count(&n, device));
  return static_cast<std::uint32_t>(n);
}

// How many ways to split K for `tiles` output tiles over `k_stages` stages on `sms` SMs (one CTA
// per SM): the split count with the fewest waves per unit of work, at least 8 stages (1 KiB of
// K) per split, each extra split charged 3 % for its partial's write and read-back.
constexpr std::uint32_t choose_k_splits(std::uint32_t tiles, std::uint32_t k_stages, std::uint32_t sms) noexcept {
  if (tiles == 0 || sms == 0) return 1;
  std::uint32_t best = 1;
  double best_cost = static_cast<double>((tiles + sms - 1) / sms);
  for (std::uint32_t z = 2; z <= 16 && k_stages / z >= 8; ++z) {
    const double cost = static_cast<double>((tiles * z + sms - 1) / sms) / z * (1.0 + 0.03 * (z - 1));
    if (cost < best_cost) best = z, best_cost = cost;
  }
  return best;
}
static_assert(choose_k_splits(18, 128, 132) == 7 && choose_k_splits(384, 6, 132) == 1 && choose_k_splits(512, 64, 132) == 1);

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
