#pragma once
// The one interface between the nn layers and the hardware. Layers (linear, transformer_layer,
// model, adamw) only allocate tensors and call these kernels; host_backend (ref/host_backend.hpp)
// implements them with mxkit's host quantizer and reference GEMMs, a GPU backend implements the
// same calls with device kernels. Every heavy operation of a training step is one call here:
//   quantize / quantize_both / transpose    operands of the three GEMMs (recipe.hpp)
//   gemm                                    D[P,Q] = alpha * A . B^T + beta * D on stored copies
//   layer kernels                           RMSNorm, RoPE, attention, SwiGLU, embedding,
//                                           cross-entropy, AdamW, reductions
// Stored copies follow mxkit's convention (tensor/mx_tensor.hpp): a rowwise copy of a [rows,
// cols] matrix is stored as is, a columnwise copy transposed, so the reduction axis of every
// GEMM operand is contiguous. This holds for every precision, not only MX.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <mxkit/block/quantize_options.hpp>
#include <mxkit/nn/kernel_args.hpp>
#include <mxkit/nn/recipe.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// Which operand of which product a quantization feeds (counted by the backend).
enum class operand_use : std::uint8_t { fprop_x, fprop_w, dgrad_dy, dgrad_w, wgrad_dy, wgrad_x, adapter };
inline constexpr std::size_t operand_use_count = 7;

}  // namespace nn
template <>
struct enum_names<nn::operand_use> {
  static constexpr const char* names[] = {"fprop X", "fprop W", "dgrad dY", "dgrad W", "wgrad dY", "wgrad X", "adapter"};
  static constexpr nn::operand_use last = nn::operand_use::adapter;
};
namespace nn {

// One stored copy to produce from a high-precision tensor.
struct quant_request {
  operand_spec spec;
  block_axis axis = block_axis::rowwise;  // columnwise: stored transposed
  quantize_options mx;                    // kind mx: rule, rounding, rotation, Philox key/stream
  float fp8_scale = 1.0f;                 // kind fp8: code = cast(x * scale)
  operand_use use = operand_use::fprop_x;
  mem_tag tag = mem_tag::quantized_activation;
};

// Backend-owned storage of a quantized copy; each backend derives its own.
class qpayload {
 public:
  virtual ~qpayload() = default;
};

// A stored GEMM operand: one copy (rowwise or columnwise) of a logical [rows, cols] matrix.
class qtensor {
 public:
  qtensor() = default;
  qtensor(quant_request request, std::size_t rows, std::size_t cols, float amax, std::size_t bytes,
          std::shared_ptr<const qpayload> payload) noexcept
      : request_(request), rows_(rows), cols_(cols), amax_(amax), bytes_(bytes), payload_(std::move(payload)) {}

  const quant_request& request() const noexcept { return request_; }
  precision kind() const noexcept { return request_.spec.kind; }
  block_axis axis() const noexcept { return request_.axis; }
  std::size_t rows() const noexcept { return rows_; }
  std::size_t cols() const noexcept { return cols_; }
  // Stored shape [lines, length]; length is the reduction axis of the GEMM that consumes it.
  std::size_t lines() const noexcept { return axis() == block_axis::rowwise ? rows_ : cols_; }
  std::size_t length() const noexcept { return axis() == block_axis::rowwise ? cols_ : rows_; }
  float amax() const noexcept { return amax_; }  // kind fp8: max |x| of the input (delayed scaling)
  std::size_t bytes() const noexcept { return bytes_; }
  bool defined() const noexcept { return payload_ != nullptr; }
  const qpayload* payload() const noexcept { return payload_.get(); }
  void reset() noexcept { *this = qtensor{}; }

 private:
  quant_request request_;
  std::size_t rows_ = 0, cols_ = 0;
  float amax_ = 0.0f;
  std::size_t bytes_ = 0;
  std::shared_ptr<const qpayload> payload_;
};

struct qpair {
  qtensor rowwise, columnwise;
};

struct backend_counters {
  std::array<std::uint64_t, operand_use_count> quantized{};  // stored copies produced, by use
  std::array<std::uint64_t, 3> gemms{};                       // by gemm_product

  std::uint64_t copies(operand_use u) const noexcept { return quantized[static_cast<std::size_t>(u)]; }
  std::uint64_t gemm_calls(gemm_product g) const noexcept { return gemms[static_cast<std::size_t>(g)]; }
};

class backend {
 public:
  virtual ~backend() = default;
  virtual const char* name() const noexcept = 0;

  // ---- memory (zero-filled allocations; host values as double, exact for f32)
  virtual tensor alloc(std::size_t rows, std::size_t cols, dtype type, mem_tag tag) = 0;
  virtual void write(tensor& t, const std::vector<double>& values) = 0;
  virtual std::vector<double> read(const tensor& t) const = 0;
  virtual void fill(tensor& t, double value) = 0;
  virtual void copy(const tensor& src, tensor& dst) = 0;
  virtual void axpy(double alpha, const tensor& x, tensor& y) = 0;  // y += alpha * x
  virtual double sum_squares(const tensor& t) const = 0;
  virtual double amax(const tensor& t) const = 0;  // max |x| (NaN if any NaN)

  // ---- quantized operands and GEMM
  virtual qtensor quantize(const tensor& x, const quant_request& r) = 0;
  // Both copies of one tensor (the fused kernel of a GPU backend); same result as two quantize().
  virtual qpair quantize_both(const tensor& x, const quant_request& rowwise, const quant_request& columnwise) = 0;
  // Columnwise copy of an FP8 rowwise copy (per-tensor scale: a byte transpose).
  virtual qtensor transpose(const qtensor& fp8_rowwise, operand_use use, mem_tag tag) = 0;
  // FP8 copies between backend memory and host memory (the healing stash): quantize_fp8 of `w`
  // with `scale`, returned in host memory; and a host FP8 copy uploaded as a rowwise operand.
  virtual fp8_tensor export_fp8(const tensor& w, fp8_type type, float scale) = 0;
  virtual qtensor import_fp8(const fp8_tensor& host, operand_use use, mem_tag tag) = 0;
  // D[P,Q] = alpha * A . B^T + beta * D; A stored [P,R], B stored [Q,R] (same kind, same R).
  // (Non-virtual so that the defaults hold for every backend; implementations override run_gemm.)
  void gemm(gemm_product kind, const qtensor& a, const qtensor& b, tensor& d, float alpha = 1.0f, float beta = 0.0f) {
    run_gemm(kind, a, b, d, alpha, beta);
  }
  virtual void run_gemm(gemm_product kind, const qtensor& a, const qtensor& b, tensor& d, float alpha, float beta) = 0;

  // ---- layer kernels (forward and backward; *_backward kernels add into their outputs where noted)
  // y = x / rms(x) * w, rstd (rows, 1) saved.  dx += ..., dw += ... (dw may be null: frozen)
  virtual void rmsnorm_forward(const tensor& x, const tensor& w, tensor& y, tensor& rstd, double eps) = 0;
  virtual void rmsnorm_backward(const tensor& dy, const tensor& x, const tensor& w, const tensor& rstd, tensor& dx, tensor* dw) = 0;
  // In place on the q and k heads of a qkv tensor; inverse = rotate back (the backward pass).
  virtual void rope(tensor& qkv, const head_shape& s, double theta, bool inverse) = 0;
  // Causal grouped-query attention; probs (batch*n_heads, seq*seq) saved. dqkv is overwritten.
  virtual void attention_forward(const tensor& qkv, tensor& out, tensor& probs, const head_shape& s) = 0;
  virtual void attention_backward(const tensor& dout, const tensor& qkv, const tensor& probs, tensor& dqkv, const head_shape& s) = 0;
  // out = silu(gate) * up, gate_up = [gate | up]; dgate_up is overwritten.
  virtual void swiglu_forward(const tensor& gate_up, tensor& out) = 0;
  virtual void swiglu_backward(const tensor& dout, const tensor& gate_up, tensor& dgate_up) = 0;
  // out[i] = table[tokens[i]];  dtable[tokens[i]] += dout[i].
  virtual void embedding_forward(const std::vector<std::int32_t>& tokens, const tensor& table, tensor& out) = 0;
  virtual void embedding_backward(const std::vector<std::int32_t>& tokens, const tensor& dout, tensor& dtable) = 0;
  // Mean cross-entropy of softmax(logits) against targets; dlogits (if given) = its gradient.
  virtual double cross_entropy(const tensor& logits, const std::vector<std::int32_t>& targets, tensor* dlogits) = 0;
  virtual void adamw_update(tensor& param, const tensor& grad, tensor& m, tensor& v, const adamw_hyper& h) = 0;

  memory_tracker& memory() noexcept { return memory_; }
  const memory_tracker& memory() const noexcept { return memory_; }
  backend_counters& counters() noexcept { return counters_; }
  const backend_counters& counters() const noexcept { return counters_; }

 protected:
  memory_tracker memory_;
  backend_counters counters_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
