// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the attention kernels read and write: one argument block for every path (the mma.sync and
// portable kernels of gpu/nn/attention.hpp, the Hopper kernels of gpu/nn/attention/sm90/).
// Device pointers; bf16 as raw bits.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/platform.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

// log2(e): the kernels keep scores in base 2 (exp2f) and the LSE in natural log.
inline constexpr float attn_log2e = 1.4426950408889634f;

struct attention_params {
  const std::uint16_t* qkv;   // (B*T, stride) bf16 bits
  std::uint16_t* out;         // forward: (B*T, H*D)
  float* lse;                 // forward: (B*H, T)
  const std::uint16_t* dout;  // backward: (B*T, H*D)
  const std::uint16_t* o;     // backward: the forward's out
  const float* lse_in;        // backward
  float* delta;               // backward: (B*H, T), rowsum(dO * O)
  std::uint16_t* dqkv;        // backward: (B*T, stride)
  std::size_t stride;
  int batch, seq, heads, kv_heads;
  float scale_log2;           // log2(e) / sqrt(D): scores in base 2, exp2f
  float scale;                // 1 / sqrt(D)
};

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
