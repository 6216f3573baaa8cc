// SPDX-License-Identifier: Apache-2.0
#pragma once
// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"), Llama's MLP activation, on the fused
// gate/up projection output gu = [g | u] (M, 2F):
//   forward   out = silu(g) * u,  silu(g) = g * sigmoid(g)
//   backward  dg = dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  du = dout * silu(g)
// forward_quantized is the fused producer: the backend writes the down projection's quantized
// copies of `out` directly (backend::swiglu_quantize), and `out` itself only when asked for;
// backward_quantized the gate/up projection's copies of the gradient (swiglu_backward_quantize).
#include <cmath>
#include <cstddef>
#include <utility>

#include <mxkit/nn/backend.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {
class swiglu {
 public:
  // gu (M, 2F) -> out (M, F); keeps gu for backward.
  void forward(backend& be, const tensor& gu, tensor& out) {
    be.swiglu_forward(gu, out);
    gu_ = gu;
  }
  qpair forward_quantized(backend& be, const tensor& gu, const quant_plan& plan, tensor* out) {
    qpair q = be.swiglu_quantize(gu, plan, out);
    gu_ = gu;
    return q;
  }
  void backward(backend& be, const tensor& dout, tensor& dgu) { be.swiglu_backward(dout, gu_, dgu); }
  // The same gradient written over the saved gu, which backward reads for the last time: the
  // (M, 2F) gradient costs no memory of its own (the largest activation of a Llama layer). Hands
  // gu's memory back as dgu and releases the saved state.
  tensor backward_in_place(backend& be, const tensor& dout) {
    tensor dgu = std::exchange(gu_, tensor{});
    be.swiglu_backward(dout, dgu, dgu);
    return dgu;
  }
  // The copies `plan` asks for of the same gradient (the gate/up projection's dY copies), made
  // from the gradient written over the saved gu, which is freed then unless a copy is its memory
  // (backend::swiglu_backward_quantize). Consumes dout (reset) and the saved state.
  qpair backward_quantized(backend& be, tensor& dout, const quant_plan& plan) {
    tensor gu = std::exchange(gu_, tensor{});
    return be.swiglu_backward_quantize(dout, gu, plan);
  }
  void release_saved() noexcept { gu_.reset(); }

 private:
  tensor gu_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
