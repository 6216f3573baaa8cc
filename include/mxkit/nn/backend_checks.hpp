// SPDX-License-Identifier: Apache-2.0
#pragma once
// The argument checks of nn::backend's public operations (nn/backend.hpp), beside require_shape
// and require_type (nn/tensor.hpp): apart so that the interface reads as its operations, and
// shared with the copy gather of full sharding (parallel/copy_gather.hpp), which checks its
// requests as quantize() does. Each names the operation (`what`) and both sides of a mismatch.
#include <cstddef>

#include <mxkit/error.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/kernel_args.hpp>
#include <mxkit/nn/operand.hpp>
#include <mxkit/nn/tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

inline void check_quant_input(const tensor& x, const char* what) {
  detail::require(x.defined(), what, ": input tensor is not allocated");
  detail::require(is_floating(x.type()), what, ": input is an integer tensor");
}
// Whether r's copy has a tensor scale (NVFP4), and the name of its format or kind in messages.
inline bool has_tensor_scale(const quant_request& r) noexcept { return r.spec.is<block_scaled_spec>() && r.spec.block_scaled().is_nvfp4(); }
inline const char* copy_name(const quant_request& r) noexcept {
  return r.spec.is<block_scaled_spec>() ? r.spec.block_scaled().format_name() : name_of(r.spec.kind());
}

inline void check_request(const quant_request& r, const char* what) {
  r.spec.visit(overloaded{
      [](native_spec) {},
      [](bf16_spec) {},
      [&](const fp8_spec& f) {
        detail::require(r.fp8.table != nullptr, what, ": an FP8 request needs a scaling table row");
        detail::require(r.fp8.row < r.fp8.table->rows(), what, ": scaling row ", r.fp8.row, " of a ", r.fp8.table->rows(), "-row table");
        detail::require(r.fp8.table->type(r.fp8.row) == f.type, what, ": scaling row ", r.fp8.row, " holds ",
                        name_of(r.fp8.table->type(r.fp8.row)), ", the request asks for ", name_of(f.type));
      },
      // The MX formats and NVFP4 have a training path; another format is refused by name.
      [&](const block_scaled_spec& b) { b.check_trainable(what); },
  });
  if (r.tensor_amax.defined()) {
    detail::require(has_tensor_scale(r), what, ": a given tensor amax is for NVFP4 requests (the format with a tensor scale), not ", copy_name(r));
    require_shape(r.tensor_amax, 1, 1, what);
    require_type(r.tensor_amax, dtype::f32, what);
  }
}
inline void check_pair(const quant_request& row, const quant_request* col, const char* what) {
  detail::require(row.axis == block_axis::rowwise && (!col || col->axis == block_axis::columnwise), what,
                  ": the requests must be one rowwise and one columnwise copy");
  check_request(row, what);
  if (col) check_request(*col, what);
}
inline void check_scalar(const tensor& t, const char* what) {
  require_shape(t, 1, 1, what);
  require_type(t, dtype::f64, what);
}
inline void check_tokens(const tensor& t, const char* what) {
  detail::require(t.defined() && t.cols() == 1, what, ": must be a (tokens, 1) tensor");
  require_type(t, dtype::i32, what);
}
inline void check_param(const tensor& t, const char* what) {
  detail::require(t.defined(), what, ": tensor is not allocated");
  detail::require(t.type() == dtype::f32 || t.type() == dtype::f64, what, ": parameters are f32 or f64, got ", name_of(t.type()));
}
// A layer's weight (RMSNorm gains; the linears' weights are GEMM operands): bf16 too, a layer
// held in bf16 for its forward and backward as PyTorch's bf16 modules are. The embedding
// table and the optimizer's parameters stay f32 or f64 (master weights).
inline void check_layer_weight(const tensor& t, const char* what) {
  detail::require(t.defined(), what, ": tensor is not allocated");
  detail::require(t.type() == dtype::f32 || t.type() == dtype::bf16 || t.type() == dtype::f64, what,
                  ": layer weights are f32, bf16 or f64, got ", name_of(t.type()));
}
// An activation of a model whose parameters are `param`'s type: f64 with f64, f32 or bf16 with
// f32 or bf16.
inline void check_activation_of(const tensor& act, const tensor& param, const char* what) {
  detail::require(param.type() == dtype::f64 ? act.type() == dtype::f64 : (act.type() == dtype::f32 || act.type() == dtype::bf16),
                  what, ": ", name_of(act.type()), " activations with ", name_of(param.type()), " parameters");
}
inline void check_activation(const tensor& t, std::size_t rows, std::size_t cols, const char* what) {
  require_shape(t, rows, cols, what);
  detail::require(is_floating(t.type()), what, ": activations are floating-point");
}
inline void check_like(const tensor& t, const tensor& like, std::size_t rows, std::size_t cols, const char* what) {
  require_shape(t, rows, cols, what);
  require_type(t, like.type(), what);
}
inline void check_stat(const tensor& t, const tensor& act, std::size_t rows, std::size_t cols, const char* what) {
  require_shape(t, rows, cols, what);
  require_type(t, stat_type(act.type()), what);
}
inline void check_rmsnorm(const tensor& x, const tensor& w, const tensor& rstd) {
  detail::require(x.defined() && is_floating(x.type()), "rmsnorm: input must be an allocated floating-point tensor");
  check_layer_weight(w, "rmsnorm weight");
  require_shape(w, 1, x.cols(), "rmsnorm weight");
  check_activation_of(x, w, "rmsnorm input");
  check_stat(rstd, x, x.rows(), 1, "rmsnorm rstd");
}
inline void check_heads(const head_shape& s) {
  detail::require(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "attention: n_heads ", s.n_heads,
                  " is not a multiple of n_kv_heads ", s.n_kv_heads);
  detail::require(s.head_dim > 0 && s.batch > 0 && s.seq > 0, "attention: empty head shape");
}
inline void check_cross_entropy(const tensor& logits, const tensor& targets, const tensor* mask, std::size_t first) {
  detail::require(logits.defined() && is_floating(logits.type()), "cross_entropy: logits must be an allocated floating-point tensor");
  check_tokens(targets, "cross_entropy targets");
  detail::require(logits.rows() > 0 && first <= targets.rows() && logits.rows() <= targets.rows() - first, "cross_entropy: rows ", first,
                  " .. ", first + logits.rows(), " of a batch of ", targets.rows(), " targets");
  if (mask) {
    check_tokens(*mask, "cross_entropy loss mask");
    require_shape(*mask, targets.rows(), 1, "cross_entropy loss mask");
  }
}
inline void check_swiglu(const tensor& gu) {
  detail::require(gu.defined() && is_floating(gu.type()), "swiglu: input must be an allocated floating-point tensor");
  detail::require(gu.cols() % 2 == 0, "swiglu: gate/up width ", gu.cols(), " is odd");
}

}  // namespace nn
MXKIT_END_NAMESPACE
