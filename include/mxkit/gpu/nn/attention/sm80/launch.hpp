// SPDX-License-Identifier: Apache-2.0
#pragma once
// Launches of the m16n8k16 attention kernels (forward.hpp, backward.hpp) for the dispatch
// (attention/dispatch.hpp): Portable picks the instruction's emulation over mma.sync.
#include <mxkit/gpu/nn/attention/sm80/backward.hpp>
#include <mxkit/gpu/nn/attention/sm80/forward.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

template <class Kernel>
inline void attention_launch(Kernel kernel, dim3 grid, int smem, const attention_params& p, stream_t stream) {
  MXKIT_GPU_CHECK(set_max_dynamic_shared_bytes(kernel, smem));
  kernel<<<grid, attn_threads, static_cast<std::size_t>(smem), stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}

template <int D, bool Portable>
void attention_backward_mma(const attention_params& p, const dim3& grid_q, const dim3& grid_kv, stream_t stream) {
  attention_launch(attention_dkdv_kernel<D, Portable>, grid_kv, attn_dkdv_smem<D>, p, stream);
  attention_launch(attention_dq_kernel<D, Portable>, grid_q, attn_dq_smem<D>, p, stream);
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
