// SPDX-License-Identifier: Apache-2.0
#pragma once
// The LM head and its cross-entropy a chunk of tokens at a time, so that the fp32 (or bf16) logits
// of all B*T tokens are never held at once: with a vocabulary of 128,256 (Llama 3) the logits of one
// 8192-token sequence are 8192 x 128256 x 4 = 4,202,692,608 bytes in fp32, more than the layer
// activations of a small model; a chunk of c rows holds c x V instead (docs/training.md).
//
//   forward   y = rmsnorm(x) (M, C); for each chunk of rows [r0, r0 + c):
//               logits = y[r0 .. r0 + c) . W^T (c, V), the chunk's row losses, and in training
//               the loss gradient in place of the logits (the same kernel pass),
//               dW += dlogits^T . y[chunk] (wgrad, accumulated over the chunks),
//               dy[chunk] = dlogits . W (dgrad, the chunk's rows of dy)
//             then loss = the batch's mean, formed from all row losses in row order.
//   backward  returns dy; (the model) dx += rmsnorm_backward(dy), as without chunks.
// The head's backward runs inside the forward, as Liger Kernel's fused linear cross-entropy does
// (Hsu et al. 2024, "Liger Kernel: Efficient Triton Kernels for LLM Training"): the loss is the
// last operation of the step and its gradient with respect to itself is 1, so the logits'
// gradient is known as soon as the logits are, and a chunk's logits are formed once. Forming them
// in forward and again in backward (Cut Cross-Entropy's trade, Wijmans et al. 2024) would cost one
// more head GEMM a micro-batch, 2 M C V FLOPs beside the 6 M C V of the head's three: at the
// Llama 3 vocabulary the largest GEMM of the step. What a training forward keeps until backward is
// dy (M, C), no logits. So a training forward adds into the head's weight gradient: a forward
// that trains is followed by its backward (model.hpp sends the head group's before_backward in
// forward, so that data parallelism has the group's gradients ready; data_parallel.hpp).
//
// What is the same as the unchunked head (model.hpp), and what is not. The head's operands are the
// recipe's high precision, bf16 or native (nn/recipe.hpp's check_config allows nothing else), whose
// rounding is elementwise: a chunk's copies are the rows of the whole batch's copies (the fused
// rmsnorm_quantize's copies are, by the backend contract, the bytes quantize(y) gives). The fprop
// GEMM reduces over C and the dgrad GEMM over V, both within a row, so the logits, the row losses,
// the loss (all rows added in row order once: cross_entropy_rows), the logits' gradient and dy, and
// hence every gradient below the head, are the unchunked bits on the host reference. (A device
// GEMM may pick another split of its reduction for another row count: there the logits may differ
// in fp32's last bits.) The head's weight gradient is not: wgrad reduces over the tokens, and
// chunks add their partial sums, each rounded to fp32, in chunk order. With u = 2^-24 and S the sum
// of |dlogits_rv y_rc| over the M rows (products of bf16 copies: exact in fp32), the host's in-order
// fp32 sum is within (M - 1) u S of the exact one, and so is the chunked one (k chunk sums of
// m_i - 1 additions each, then k - 1 additions of them: M - 1 roundings, each within u S; first
// order, Higham, "Accuracy and Stability of Numerical Algorithms", 4.2), so the two differ by at
// most 2 (M - 1) u S, plus 2 u S for native fp32 operands (each product rounded once) and |dW| of a
// gradient accumulated before in S (tests/nn/catch2_test_head_loss.cpp checks each element).
#include <cstddef>
#include <cstdint>
#include <limits>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/linear.hpp>
#include <mxkit/nn/parameter.hpp>
#include <mxkit/nn/rmsnorm.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// model_config::loss_chunk: the rows a chunk. auto_loss_chunk chooses them from the vocabulary;
// 0 computes the head over all rows at once.
inline constexpr std::size_t auto_loss_chunk = std::numeric_limits<std::size_t>::max();
// The automatic chunk: whole 128-row tiles of the head's GEMMs (their row tile on Hopper) with
// rows x V x 4 bytes (fp32 logits) at most 1 GiB. V 128,256: 2048 rows, 1,050,673,152 bytes; a
// byte vocabulary (256): over a million rows, so every batch of today's small models is one chunk.
inline constexpr std::size_t auto_loss_chunk_bytes = std::size_t{1} << 30;

inline std::size_t loss_chunk_rows(std::size_t setting, std::size_t vocab) noexcept {
  if (setting != auto_loss_chunk) return setting;
  const std::size_t rows = auto_loss_chunk_bytes / (4 * (vocab ? vocab : 1));
  return rows >= 128 ? rows / 128 * 128 : (rows ? rows : 1);
}

class head_loss {
 public:
  head_loss() = default;
  // chunk: rows a chunk (0: none, every batch whole); type: the activations' (logits, y, dy).
  head_loss(std::size_t chunk, dtype type) : chunk_(chunk), type_(type) {}

  std::size_t chunk() const noexcept { return chunk_; }
  // Whether a batch of M rows is computed in chunks (more rows than one chunk).
  bool chunked(std::size_t M) const noexcept { return chunk_ > 0 && chunk_ < M; }

  // x (M, C): the last layer's output; targets and mask (M, 1) i32 (mask null: every row counts)
  // in backend memory. loss (1, 1) f64: the batch's mean. training: the head's weight gradient is
  // accumulated here, and dy kept for backward().
  void forward(backend& be, rmsnorm& norm, linear& head, const tensor& x, const tensor& targets, const tensor* mask, tensor& loss,
               bool training) {
    const std::size_t M = x.rows(), C = x.cols(), V = head.out_features();
    detail::require(chunked(M), "head_loss: a batch of ", M, " rows is one chunk of ", chunk_, ": the model computes it whole");
    dy_.reset();
    tensor y = be.alloc_uninitialized(M, C, type_, mem_tag::activation);
    norm.forward(x, y);
    tensor row_loss = be.alloc_uninitialized(M, 1, dtype::f64, mem_tag::activation);
    tensor dy = training ? be.alloc_uninitialized(M, C, type_, mem_tag::activation) : tensor{};
    for (std::size_t r0 = 0; r0 < M; r0 += chunk_) {
      const std::size_t rows = r0 + chunk_ < M ? chunk_ : M - r0;
      tensor logits = be.alloc_uninitialized(rows, V, type_, mem_tag::activation);
      head.forward(view_of(y, r0 * C, rows, C), logits, training);
      be.cross_entropy_rows(logits, targets, mask, r0, &row_loss, r0 + rows == M ? &loss : nullptr, training);
      if (!training) continue;
      tensor dy_rows = view_of(dy, r0 * C, rows, C);
      head.backward(logits, &dy_rows);  // wgrad adds into dW (grad_beta: the first chunk overwrites a zeroed gradient)
    }
    if (training) dy_ = dy;
    else norm.release_saved();
  }

  // The gradient of the last training forward's loss with respect to y, the norm's output (M, C),
  // made by that forward (the head's weight gradient too, where it trains).
  tensor backward() {
    detail::require(dy_.defined(), "head_loss: backward without a training forward");
    tensor dy = dy_;
    dy_.reset();
    return dy;
  }

  // Drops what a training forward kept (a forward that is not followed by backward).
  void release_saved() noexcept { dy_.reset(); }

 private:
  std::size_t chunk_ = 0;
  dtype type_ = dtype::f32;
  tensor dy_;  // a training forward's gradient with respect to y, until backward
};

}  // namespace nn
MXKIT_END_NAMESPACE
