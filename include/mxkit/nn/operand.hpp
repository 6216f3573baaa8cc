// SPDX-License-Identifier: Apache-2.0
#pragma once
// The operand vocabulary between the layers and a backend: what precision an operand of a GEMM
// has (operand_spec), which copy of a tensor to produce (quant_request, quant_plan), and the
// stored copies a backend hands back (qtensor, qpair; host_fp8 for the healing stash). Recipes
// (recipe.hpp) are built from these values; the backend interface (backend.hpp) speaks only
// these, so it includes no training policy.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/quantize_options.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/format/rounding.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

enum class precision : std::uint8_t { native, bf16, fp8, mx };

}  // namespace nn
template <>
struct enum_names<nn::precision> {
  static constexpr const char* names[] = {"native", "bf16", "fp8", "mx"};
  static constexpr nn::precision last = nn::precision::mx;
};
namespace nn {

struct operand_spec {
  precision kind = precision::bf16;
  mx_type mx = mx_type::mxfp4;              // kind mx: element format
  scale_rule rule = scale_rule::floor;      // kind mx: shared-scale rule
  rounding round = rounding::nearest_even;  // kind mx: element rounding (stochastic allowed)
  fp8_type fp8 = fp8_type::e4m3;            // kind fp8: element format (scale from delayed scaling)

  friend bool operator==(const operand_spec&, const operand_spec&) = default;
};

// The four kinds of operand, by name (recipes are written with these).
namespace recipes {
inline operand_spec native_operand() { return {precision::native}; }
inline operand_spec bf16_operand() { return {precision::bf16}; }
inline operand_spec mma_operand(fp8_type t) {
  operand_spec o{precision::fp8};
  o.fp8 = t;
  return o;
}
inline operand_spec mx_operand(mx_type t, scale_rule rule, rounding round = rounding::nearest_even) {
  operand_spec o{precision::mx};
  o.mx = t;
  o.rule = rule;
  o.round = round;
  return o;
}
}  // namespace recipes

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
// The element format, scale rule and rounding are the operand's (spec); the rotation and the
// Philox key belong to the GEMM (gemm_spec), the Philox stream to the tensor.
struct quant_request {
  operand_spec spec;
  block_axis axis = block_axis::rowwise;  // columnwise: stored transposed
  bool hadamard = false;                  // kind mx: the GEMM's 16-point rotation
  bool random_signs = false;              // kind mx: with hadamard, H.D with D from seed
  std::uint64_t seed = 0;                 // kind mx: Philox key (random signs, stochastic rounding)
  std::uint32_t stream = 0;               // kind mx: Philox stream of this tensor
  fp8_scaling_slot fp8;                   // kind fp8: code = cast(x * scale[row]); amax -> history[row, 0]
  operand_use use = operand_use::fprop_x;
  mem_tag tag = mem_tag::quantized_activation;
  // The caller leaves x unchanged for as long as it reads the copy (linear.hpp sets it for X, whose
  // wgrad copy is read in backward, for dY, and for a weight, whose cached copies are read only
  // while the weight's version is theirs): where the copy holds x's own values (bf16 of bf16), a
  // backend may hand back x itself instead of copying it (the device backend does, the columnwise
  // copy read MN-major by its GEMM).
  bool may_alias_input = false;

  // The MX quantizer's options for this copy.
  quantize_options mx_options() const noexcept { return {spec.rule, spec.round, hadamard, random_signs, seed, stream}; }
};

// The copies a consumer wants of one tensor: always the rowwise one, the columnwise one when
// `columnwise_wanted` (what a fused producer writes; linear::input_requests).
struct quant_plan {
  quant_request rowwise;
  quant_request columnwise;
  bool columnwise_wanted = false;
};

// An FP8 copy in host memory that a backend made (export_fp8: the healing stash) and can upload
// again (import_fp8). Its codes live in host memory the backend allocated (backend::alloc_host):
// page-locked on a GPU backend, so the upload runs on a copy engine with no staging copy.
class host_fp8 {
 public:
  host_fp8() = default;
  host_fp8(fp8_type type, std::size_t rows, std::size_t cols, float scale, float amax, std::shared_ptr<std::uint8_t[]> codes) noexcept
      : type_(type), rows_(rows), cols_(cols), scale_(scale), amax_(amax), codes_(std::move(codes)) {}
  fp8_type type() const noexcept { return type_; }
  std::size_t rows() const noexcept { return rows_; }
  std::size_t cols() const noexcept { return cols_; }
  float scale() const noexcept { return scale_; }  // code = cast(x * scale)
  float amax() const noexcept { return amax_; }
  std::size_t bytes() const noexcept { return rows_ * cols_; }
  const std::uint8_t* codes() const noexcept { return codes_.get(); }
  // A plain host tensor of the same codes (tests, oracles).
  fp8_tensor to_tensor() const {
    fp8_tensor t{type_, rows_, cols_, scale_, amax_, {}};
    if (bytes()) t.data.assign(codes(), codes() + bytes());
    return t;
  }

 private:
  fp8_type type_ = fp8_type::e4m3;
  std::size_t rows_ = 0, cols_ = 0;
  float scale_ = 1.0f, amax_ = 0.0f;
  std::shared_ptr<std::uint8_t[]> codes_;
};

// Backend-owned storage of a quantized copy; each backend derives its own.
class qpayload {
 public:
  virtual ~qpayload() = default;
};

// A stored GEMM operand: one copy (rowwise or columnwise) of a logical [rows, cols] matrix. An
// FP8 copy's scale lives in its payload (backend memory), written by the cast.
class qtensor {
 public:
  qtensor() = default;
  qtensor(quant_request request, std::size_t rows, std::size_t cols, std::size_t bytes, std::shared_ptr<const qpayload> payload) noexcept
      : request_(request), rows_(rows), cols_(cols), bytes_(bytes), payload_(std::move(payload)) {}

  const quant_request& request() const noexcept { return request_; }
  precision kind() const noexcept { return request_.spec.kind; }
  block_axis axis() const noexcept { return request_.axis; }
  std::size_t rows() const noexcept { return rows_; }
  std::size_t cols() const noexcept { return cols_; }
  // Stored shape [lines, length]; length is the reduction axis of the GEMM that consumes it.
  std::size_t lines() const noexcept { return axis() == block_axis::rowwise ? rows_ : cols_; }
  std::size_t length() const noexcept { return axis() == block_axis::rowwise ? cols_ : rows_; }
  std::size_t bytes() const noexcept { return bytes_; }
  bool defined() const noexcept { return payload_ != nullptr; }
  const qpayload* payload() const noexcept { return payload_.get(); }
  void reset() noexcept { *this = qtensor{}; }

 private:
  quant_request request_;
  std::size_t rows_ = 0, cols_ = 0;
  std::size_t bytes_ = 0;
  std::shared_ptr<const qpayload> payload_;
};

struct qpair {
  qtensor rowwise, columnwise;
};

}  // namespace nn
MXKIT_END_NAMESPACE
