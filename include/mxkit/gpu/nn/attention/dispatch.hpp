// SPDX-License-Identifier: Apache-2.0
#pragma once
// Which attention kernels run, and the checked entries that run them: the Hopper wgmma/TMA kernels
// (attention/sm90/, where the program holds sm_90a device code and runs on such a device), else the
// m16n8k16 kernels (attention/sm80/) on mma.sync, or on its emulation (`portable`: the AMD build's
// path, and a test of it on NVIDIA). gpu/nn/attention.hpp holds the public entries over these.
#include <cstddef>
#include <cstdint>
#include <span>

#include <mxkit/gpu/nn/attention/sm80/launch.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/launch.hpp>
#include <mxkit/gpu/nn/attention_params.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/kernel_args.hpp>

#if MXKIT_GPU_CUDA
#include <mxkit/gpu/nn/attention/sm90/launch.hpp>
#endif

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

inline void attention_check(const char* entry, const nn::head_shape& s, std::size_t stride) {
  mxkit::detail::require(s.head_dim == 64 || s.head_dim == 128, entry, ": head_dim is ", s.head_dim, ", supported: 64 and 128");
  mxkit::detail::require(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, entry, ": n_heads ", s.n_heads,
                         " is not a multiple of n_kv_heads ", s.n_kv_heads);
  mxkit::detail::require(stride >= s.qkv_dim() && stride % 8 == 0, entry, ": row stride ", stride,
                         " must be >= qkv_dim ", s.qkv_dim(), " and a multiple of 8 (16-byte rows)");
  mxkit::detail::require(s.seq <= 65535u * attn_tile, entry, ": seq ", s.seq, " exceeds the limit ", 65535u * attn_tile,
                         " (64-row tiles on grid y)");
  mxkit::detail::require(s.batch * s.n_heads <= (1u << 30), entry, ": batch * n_heads is ", s.batch * s.n_heads,
                         ", the limit is 2^30");
}

inline attention_params attention_make_params(const bfloat16* qkv, std::size_t stride, const nn::head_shape& s) {
  attention_params p{};
  p.qkv = reinterpret_cast<const std::uint16_t*>(qkv);
  p.stride = stride;
  p.batch = static_cast<int>(s.batch);
  p.seq = static_cast<int>(s.seq);
  p.heads = static_cast<int>(s.n_heads);
  p.kv_heads = static_cast<int>(s.n_kv_heads);
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  p.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(s.head_dim)));
  return p;
}

// Which kernels run: the Hopper wgmma/TMA ones (nn/attention/sm90/; needs sm_90a
// device code and such a device), the mma.sync ones above (sm_80+), or the same fragment code on
// the instruction's emulation (the AMD build's path; on NVIDIA, a test of it).
enum class attention_kernels { sm90, tensor_core, portable };

inline attention_kernels attention_default_kernels() {
#if MXKIT_GPU_CUDA
  if (sm90::available()) return attention_kernels::sm90;
#endif
  return attention_kernels::tensor_core;
}

// Workspace: the backward's Delta (B*H*T floats); the forward needs none. The same whichever
// kernels run.
inline std::size_t attention_delta_bytes(const nn::head_shape& s) noexcept { return s.batch * s.n_heads * s.seq * sizeof(float); }

inline void attention_check_workspace(const char* entry, std::span<std::byte> workspace, std::size_t need) {
  mxkit::detail::require(workspace.size() >= need && (need == 0 || workspace.data() != nullptr), entry, ": workspace of ",
                         workspace.size(), " bytes, need ", need);
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(workspace.data()) % 16 == 0, entry, ": workspace is not 16-byte aligned");
}

// The entries: compiled in the kernel library when one is used (gpu/kernel_library.hpp).
#if !defined(MXKIT_GPU_LIBRARY_HAS_ATTENTION) || defined(MXKIT_GPU_LIBRARY_DEFINES_ATTENTION)
#if defined(MXKIT_GPU_LIBRARY_DEFINES_ATTENTION)
#define MXKIT_GPU_ATTENTION_ENTRY  // the kernel library's one definition
#else
#define MXKIT_GPU_ATTENTION_ENTRY inline
#endif
MXKIT_GPU_ATTENTION_ENTRY void attention_forward_impl(const bfloat16* qkv, std::size_t stride, bfloat16* out, float* lse, const nn::head_shape& s,
                                   std::span<std::byte> workspace, attention_kernels kernels, stream_t stream) {
  constexpr const char* entry = "gpu::attention_forward";
  attention_check(entry, s, stride);
  if (s.tokens() == 0) return;
  mxkit::detail::require(qkv && out && lse, entry, ": null pointer (qkv ", qkv != nullptr, ", out ", out != nullptr, ", lse ",
                         lse != nullptr, ")");
  check_aligned16(qkv, entry, "qkv");
  check_aligned16(out, entry, "out");
  attention_check_workspace(entry, workspace, 0);
  attention_params p = attention_make_params(qkv, stride, s);
  p.out = reinterpret_cast<std::uint16_t*>(out);
  p.lse = lse;
#if MXKIT_GPU_CUDA
  if (kernels == attention_kernels::sm90) {
    if (s.head_dim == 64) sm90::attention_forward<64>(p, stream);
    else sm90::attention_forward<128>(p, stream);
    return;
  }
#endif
  // x: (b, head), y: tile; blocks start in x-fastest order, so every head's heaviest tile goes first.
  const dim3 grid(static_cast<unsigned>(s.batch * s.n_heads), static_cast<unsigned>((s.seq + attn_tile - 1) / attn_tile));
  const bool portable = kernels == attention_kernels::portable;
  if (s.head_dim == 64) {
    if (portable) attention_launch(attention_forward_kernel<64, true>, grid, attn_forward_smem<64>, p, stream);
    else attention_launch(attention_forward_kernel<64, false>, grid, attn_forward_smem<64>, p, stream);
  } else {
    if (portable) attention_launch(attention_forward_kernel<128, true>, grid, attn_forward_smem<128>, p, stream);
    else attention_launch(attention_forward_kernel<128, false>, grid, attn_forward_smem<128>, p, stream);
  }
}

MXKIT_GPU_ATTENTION_ENTRY void attention_backward_impl(const bfloat16* dout, const bfloat16* qkv, std::size_t stride, const bfloat16* out,
                                    const float* lse, bfloat16* dqkv, const nn::head_shape& s, std::span<std::byte> workspace,
                                    attention_kernels kernels, stream_t stream) {
  constexpr const char* entry = "gpu::attention_backward";
  attention_check(entry, s, stride);
  if (s.tokens() == 0) return;
  mxkit::detail::require(dout && qkv && out && lse && dqkv, entry, ": null pointer (dout ", dout != nullptr, ", qkv ",
                         qkv != nullptr, ", out ", out != nullptr, ", lse ", lse != nullptr, ", dqkv ", dqkv != nullptr, ")");
  attention_check_workspace(entry, workspace, attention_delta_bytes(s));
  check_aligned16(dout, entry, "dout");
  check_aligned16(qkv, entry, "qkv");
  check_aligned16(dqkv, entry, "dqkv");
  attention_params p = attention_make_params(qkv, stride, s);
  p.dout = reinterpret_cast<const std::uint16_t*>(dout);
  p.o = reinterpret_cast<const std::uint16_t*>(out);
  p.lse_in = lse;
  p.delta = reinterpret_cast<float*>(workspace.data());
  p.dqkv = reinterpret_cast<std::uint16_t*>(dqkv);
  const std::size_t rows = s.batch * s.n_heads * s.seq;
  if (s.head_dim == 64) launch_attention_delta<64>(p, rows, stream);
  else launch_attention_delta<128>(p, rows, stream);
#if MXKIT_GPU_CUDA
  if (kernels == attention_kernels::sm90) {
    if (s.head_dim == 64) sm90::attention_backward<64>(p, stream);
    else sm90::attention_backward<128>(p, stream);
    return;
  }
#endif
  const unsigned tiles = static_cast<unsigned>((s.seq + attn_tile - 1) / attn_tile);
  const dim3 grid_q(static_cast<unsigned>(s.batch * s.n_heads), tiles), grid_kv(static_cast<unsigned>(s.batch * s.n_kv_heads), tiles);
  const bool portable = kernels == attention_kernels::portable;
  if (s.head_dim == 64) {
    if (portable) attention_backward_mma<64, true>(p, grid_q, grid_kv, stream);
    else attention_backward_mma<64, false>(p, grid_q, grid_kv, stream);
  } else {
    if (portable) attention_backward_mma<128, true>(p, grid_q, grid_kv, stream);
    else attention_backward_mma<128, false>(p, grid_q, grid_kv, stream);
  }
}
#else
void attention_forward_impl(const bfloat16* qkv, std::size_t stride, bfloat16* out, float* lse, const nn::head_shape& s,
                            std::span<std::byte> workspace, attention_kernels kernels, stream_t stream);
void attention_backward_impl(const bfloat16* dout, const bfloat16* qkv, std::size_t stride, const bfloat16* out, const float* lse,
                             bfloat16* dqkv, const nn::head_shape& s, std::span<std::byte> workspace, attention_kernels kernels,
                             stream_t stream);
#endif

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
