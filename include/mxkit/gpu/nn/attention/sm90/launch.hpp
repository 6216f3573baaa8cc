// SPDX-License-Identifier: Apache-2.0
#pragma once
// Hopper flash attention, host side: tensor maps and the launches of the forward and backward
// kernels (gpu/nn/attention.hpp calls them).
#include <mxkit/gpu/platform.hpp>
#if !MXKIT_GPU_CUDA
#error "mxkit/gpu/nn/attention/sm90/ is NVIDIA Hopper code: include it only in a CUDA build"  // and nothing below compiles
#else
#include <cstddef>

#include <mxkit/gpu/arch/cuda/sm90_runtime.hpp>
#include <mxkit/gpu/nn/attention/sm90/backward_dkdv.hpp>
#include <mxkit/gpu/nn/attention/sm90/backward_dq.hpp>
#include <mxkit/gpu/nn/attention/sm90/forward.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

// ---- host side ----------------------------------------------------------------------------------
// A 3-D map over `batch` blocks of `rows` x `row_bytes` bytes (block stride rows * ld_bytes,
// row stride ld_bytes), read in boxes of `box_rows` x 128 bytes with the 128-byte swizzle; rows
// past `rows` within a block and bytes past `row_bytes` are zero-filled.
inline CUtensorMap make_attention_map(const void* data, std::size_t row_bytes, std::size_t rows, std::size_t batch, std::size_t ld_bytes,
                                      std::uint32_t box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {row_bytes, rows, batch};
  const cuuint64_t strides[2] = {ld_bytes, ld_bytes * rows};
  const cuuint32_t box[3] = {128, box_rows, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(data), dims, strides, box, elem_strides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  mxkit::detail::require(r == CUDA_SUCCESS, "attention (sm90): cuTensorMapEncodeTiled failed with ", static_cast<int>(r), " for ",
                         batch, " x ", rows, " x ", row_bytes, " bytes");
  return map;
}

template <class Kernel>
inline void attention_launch(Kernel kernel, std::size_t smem, dim3 grid, const attention_maps& maps, const attention_params& p,
                             stream_t stream) {
  MXKIT_GPU_CHECK(set_max_dynamic_shared_bytes(kernel, static_cast<int>(smem)));
  kernel<<<grid, attn_threads, smem, stream>>>(maps, p);
  MXKIT_GPU_CHECK_LAUNCH();
}

// Forward: one kernel over the qkv rows.
template <int D>
void attention_forward(const attention_params& p, stream_t stream) {
  const std::size_t rows = static_cast<std::size_t>(p.seq), batch = static_cast<std::size_t>(p.batch);
  attention_maps maps{};
  maps.m[0] = make_attention_map(p.qkv, p.stride * 2, rows, batch, p.stride * 2, 128);
  const dim3 grid(static_cast<unsigned>(p.batch * p.heads), static_cast<unsigned>((p.seq + 127) / 128));
  attention_launch(attention_forward_kernel<D>, attn_smem_bytes<attn_forward_smem<D>>, grid, maps, p, stream);
}

// Backward (Delta already in p.delta): the dK/dV kernel, then the dQ kernel.
template <int D>
void attention_backward(const attention_params& p, stream_t stream) {
  const std::size_t rows = static_cast<std::size_t>(p.seq), batch = static_cast<std::size_t>(p.batch);
  const std::size_t od = static_cast<std::size_t>(p.heads) * D;
  const CUtensorMap qkv128 = make_attention_map(p.qkv, p.stride * 2, rows, batch, p.stride * 2, 128);
  const CUtensorMap qkv64 = make_attention_map(p.qkv, p.stride * 2, rows, batch, p.stride * 2, 64);
  const CUtensorMap dout64 = make_attention_map(p.dout, od * 2, rows, batch, od * 2, 64);
  const CUtensorMap dout128 = make_attention_map(p.dout, od * 2, rows, batch, od * 2, 128);
  const unsigned tiles = static_cast<unsigned>((p.seq + 127) / 128);
  attention_launch(attention_dkdv_kernel<D>, attn_smem_bytes<attn_dkdv_smem<D>>, dim3(static_cast<unsigned>(p.batch * p.kv_heads), tiles),
                   attention_maps{{qkv128, qkv64, dout64}}, p, stream);
  attention_launch(attention_dq_kernel<D>, attn_smem_bytes<attn_dq_smem<D>>, dim3(static_cast<unsigned>(p.batch * p.heads), tiles),
                   attention_maps{{qkv128, dout128, qkv64}}, p, stream);
}

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
#endif  // MXKIT_GPU_CUDA
