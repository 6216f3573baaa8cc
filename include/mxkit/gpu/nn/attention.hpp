// SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal grouped-query attention (Ainslie et al. 2023) on the device, forward and backward, the
// kernels of ref/nn/attention.hpp computed FlashAttention-2 style (Dao, "FlashAttention-2:
// Faster Attention with Better Parallelism and Work Partitioning", 2023): the T x T scores never
// leave the chip; the forward keeps an online softmax (running row max m and row sum l) per query
// row and saves only the log-sum-exp LSE = m + log(l) per row; the backward recomputes
// P = exp(S - LSE) tile by tile.
//   forward   S = q k^T / sqrt(D) (u <= t),  P = softmax(S),  O = P v,  LSE_t = log sum_u exp S_tu
//   backward  Delta_t = rowsum(dO_t * O_t)  (Dao 2023, algorithm 2, line 4)
//             dP = dO v^T,  dS = P * (dP - Delta),  dq = dS k / sqrt(D),
//             dk = dS^T q / sqrt(D),  dv = P^T dO
// Layout (nn::head_shape): qkv (B*T, row_stride) bf16 with row [q heads | k heads | v heads],
// query head h reads kv head h / (H / Hkv); out (B*T, H*D) bf16; lse (B*H, T) float; dqkv has
// qkv's layout and stride and is overwritten.
//
// Work partition (Dao 2023, section 3.2): one block of 4 warps per (64 query rows, b, h) in the
// forward, each warp owning 16 query rows, so the softmax statistics stay in one warp (no
// shared-memory exchange between warps). Grid x is (b, head) and y the tile, heaviest first (the
// causal triangle: query tile i visits i + 1 key tiles): blocks start in x-fastest order, so the
// long blocks of every head start early and the tail is short.
// Backward, deterministic (no float atomics, whose sum depends on the order they land in):
//   dkdv  one block per (64 key rows, b, kv head) owns its dK and dV in registers and loops over
//         the group's query heads in order and, for each, over the query tiles at or after its
//         keys (Dao 2023, algorithm 2: the outer loop over key/value blocks); the GQA sum over
//         the group is this fixed loop, not a reduction across blocks.
//   dq    one block per (64 query rows, b, h) loops over the key tiles in order and accumulates
//         dQ = dS K in registers: a second recomputation of S and dP (two more matmuls than the
//         atomic dQ of Dao 2023) buys a result that is the same bits on every run.
// On an sm_90a device (a program built with compute_90a device code) the same computation runs on
// the Hopper kernels of nn/attention/sm90/ (wgmma, TMA, larger tiles); the m16n8k16 kernels of
// nn/attention/sm80/ are the path everywhere else (nn/attention/dispatch.hpp chooses).
// Arithmetic: bf16 operands on the tensor cores (mma.sync m16n8k16, fp32 accumulation) on
// sm_80+; P and dS are rounded to bf16 to feed the second matmul of each pair, as Dao 2023;
// softmax, LSE and Delta in fp32. Elsewhere (AMD this round, and the tests' `portable` runs on
// NVIDIA) the same fragment code runs on an emulation of the instruction with lane shuffles and
// fp32 FMAs (portable_mma, sm80/fragments.hpp); MFMA on gfx942/gfx950 is future work. Shared memory per block
// at D = 128: forward 68 KiB, dkdv 68.5 KiB, dq 102 KiB (48 KiB or less at D = 64 except dq's
// 54 KiB): within Hopper's 227 KiB and gfx950's 160 KiB LDS; gfx942's 64 KiB LDS needs smaller
// tiles there (future work; the launch reports the error, nothing runs silently wrong).
#include <cstddef>
#include <span>

#include <mxkit/gpu/nn/attention/dispatch.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/nn/kernel_args.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// Bytes of device workspace the forward and the backward need, used only between the kernels a
// call enqueues: the backward's Delta; the forward needs none today (every path reads its
// operands in place), and callers that ask keep working if a path comes to need some.
inline std::size_t attention_forward_workspace(const nn::head_shape& s) noexcept {
  (void)s;
  return 0;
}
inline std::size_t attention_backward_workspace(const nn::head_shape& s) noexcept { return detail::attention_delta_bytes(s); }

// Causal GQA forward. qkv (B*T, qkv_stride) bf16, row [q heads | k heads | v heads] (stride a
// multiple of 8 elements, >= s.qkv_dim()); out (B*T, H*D) bf16; lse (B*H, T) float, the natural
// log-sum-exp of each row's scaled scores. D = s.head_dim is 64 or 128. Device pointers, qkv and
// out 16-byte aligned; workspace at least attention_forward_workspace(s) bytes, 16-byte aligned.
// Asynchronous on `stream`; no allocation.
inline void attention_forward(const bfloat16* qkv, std::size_t qkv_stride, bfloat16* out, float* lse, const nn::head_shape& s,
                              std::span<std::byte> workspace, stream_t stream = nullptr) {
  detail::attention_forward_impl(qkv, qkv_stride, out, lse, s, workspace, detail::attention_default_kernels(), stream);
}

// Causal GQA backward: dqkv (qkv's layout and stride, every element overwritten) from dout
// (B*T, H*D), qkv, the forward's out and lse. workspace: at least attention_backward_workspace(s)
// bytes of device memory, 16-byte aligned. Deterministic: the same inputs give the same bits on
// every run. Asynchronous on `stream`; no allocation.
inline void attention_backward(const bfloat16* dout, const bfloat16* qkv, std::size_t qkv_stride, const bfloat16* out,
                               const float* lse, bfloat16* dqkv, const nn::head_shape& s, std::span<std::byte> workspace,
                               stream_t stream = nullptr) {
  detail::attention_backward_impl(dout, qkv, qkv_stride, out, lse, dqkv, s, workspace, detail::attention_default_kernels(), stream);
}

}  // namespace gpu
MXKIT_END_NAMESPACE
