// SPDX-License-Identifier: Apache-2.0
#pragma once
// The backend's public operations by name, and the one seam that cross-cutting work hooks:
// a profiler, a tracer or the bookkeeping of communication overlap observes every operation at
// the single place each one passes after its checks (nn::backend::observed), instead of
// re-overriding every do_*() (CUB's and TransformerEngine's profilers likewise wrap the
// dispatch point, not each kernel). Host-only: an observer of a device backend records events on
// the backend's stream itself.
#include <cstddef>
#include <cstdint>

#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// The public operations, for the per-operation call counters and the observer.
enum class backend_op : std::uint8_t {
  alloc, write, write_tokens, read, fill, copy, axpy, amax,
  copy_amax, quantize, quantize_both, transpose, export_fp8, import_fp8, update_scales, gemm,
  rmsnorm_forward, rmsnorm_quantize, rmsnorm_backward, rope, attention_forward, attention_backward,
  swiglu_forward, swiglu_quantize, swiglu_backward, swiglu_backward_quantize, embedding_forward, embedding_backward, cross_entropy,
  global_norm, adamw_step,
};
inline constexpr std::size_t backend_op_count = static_cast<std::size_t>(backend_op::adamw_step) + 1;
static_assert(backend_op_count == 31);

}  // namespace nn
template <>
struct enum_names<nn::backend_op> {
  static constexpr const char* names[] = {
      "alloc", "write", "write_tokens", "read", "fill", "copy", "axpy", "amax",
      "copy_amax", "quantize", "quantize_both", "transpose", "export_fp8", "import_fp8", "update_scales", "gemm",
      "rmsnorm_forward", "rmsnorm_quantize", "rmsnorm_backward", "rope", "attention_forward", "attention_backward",
      "swiglu_forward", "swiglu_quantize", "swiglu_backward", "swiglu_backward_quantize", "embedding_forward",
      "embedding_backward", "cross_entropy", "global_norm", "adamw_step"};
  static constexpr nn::backend_op last = nn::backend_op::adamw_step;
};
static_assert(sizeof(enum_names<nn::backend_op>::names) / sizeof(const char*) == nn::backend_op_count, "a name for every backend_op");
namespace nn {

// One observed operation: which, and for a GEMM its gemm_product (fprop 0, dgrad 1, wgrad 2).
struct backend_event {
  backend_op op = backend_op::alloc;
  int product = -1;
};

// begin() runs just before the operation's do_*(), end() just after it returns (not when it
// throws). Both run on the thread that called the operation, in call order.
class backend_observer {
 public:
  virtual ~backend_observer() = default;
  virtual void begin(const backend_event& e) = 0;
  virtual void end(const backend_event& e) = 0;
};

}  // namespace nn
MXKIT_END_NAMESPACE
