// SPDX-License-Identifier: Apache-2.0
#pragma once
// Fixed-order reductions of the layer kernels (gpu/nn/). Float atomics add in the order the
// scheduler lands them, so their sum changes from run to run; these reduce in an order fixed by
// the thread indices alone, so the same inputs give the same bits on every run.
//   warp   an xor butterfly, log2(warp_size) shuffles. IEEE addition (and fmax) is commutative,
//          so the two lanes of each exchange compute the same bits and every lane ends with the
//          same total.
//   block  one value per warp into shared memory, then every thread adds the warp totals in
//          warp order (at most 8 on NVIDIA, 4 on AMD with 256 threads).
#include <mxkit/gpu/device.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

template <class F>
__device__ inline F warp_sum(F v) noexcept {
  for (int m = warp_size / 2; m > 0; m /= 2) v += shfl_xor(v, m);
  return v;
}

// Sum over a block of Threads threads (all of them call it, with blockDim.x == Threads); every
// thread gets the total. `partial` is shared memory of Threads / warp_size values; the call ends
// with a barrier, so it may be reused at once.
template <int Threads, class F>
__device__ inline F block_sum(F v, F* partial) noexcept {
  static_assert(Threads % warp_size == 0, "whole warps");
  v = warp_sum(v);
  if (lane_id() == 0) partial[threadIdx.x / warp_size] = v;
  sync_threads();
  F total = partial[0];
  for (int w = 1; w < Threads / warp_size; ++w) total += partial[w];
  sync_threads();
  return total;
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
