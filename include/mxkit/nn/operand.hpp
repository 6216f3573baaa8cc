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
#include <type_traits>
#include <utility>
#include <variant>

#include <mxkit/block/block_format.hpp>
#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/block/quantize_options.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/rounding.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/tensor/block_layout.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// The name of an operand's kind, for messages and per-kind counters: the index of its alternative in
// operand_spec (below), never stored beside it. `mx` names the block-scaled kind (the format says
// which blocks: an MX format or NVFP4).
enum class precision : std::uint8_t { native, bf16, fp8, mx };

}  // namespace nn
template <>
struct enum_names<nn::precision> {
  static constexpr const char* names[] = {"native", "bf16", "fp8", "mx"};
  static constexpr nn::precision last = nn::precision::mx;
};
namespace nn {

// The kinds of operand, each with what only it has:
//   native_spec         no rounding (the oracle of the gradient check)
//   bf16_spec           values rounded to bfloat16 (RNE)
//   fp8_spec            an OCP FP8 type; its per-tensor scale comes from delayed scaling
//                       (delayed_scaling.hpp), so the rounding is RNE (saturating cast)
//   block_scaled_spec   a block-scaled format as its value (block/block_format.hpp: the MX
//                       formats of OCP MX v1.0 section 5, NVFP4 of arXiv 2509.25149), the rule
//                       that picks an E8M0 block scale (OCP section 5.4.1, block/scale_rule.hpp;
//                       MX only) and the element rounding (stochastic too)
struct native_spec {
  friend constexpr bool operator==(const native_spec&, const native_spec&) = default;
};
struct bf16_spec {
  friend constexpr bool operator==(const bf16_spec&, const bf16_spec&) = default;
};
struct fp8_spec {
  fp8_type type = fp8_type::e4m3;
  friend constexpr bool operator==(const fp8_spec&, const fp8_spec&) = default;
};
struct block_scaled_spec {
  block_format format = formats::mxfp4;
  scale_rule rule = scale_rule::floor;
  rounding round = rounding::nearest_even;

  // The format's name in messages: its mx_type's, NVFP4's, or "unknown block format" (mxkit::format_name).
  constexpr const char* format_name() const noexcept { return mxkit::format_name(format); }
  // The two families a backend trains with, told apart by the format's value: an MX format (an
  // mx_type: the backends' MX quantizers and GEMMs, which read `rule`) or NVFP4 (formats::nvfp4,
  // formats::nvfp4_2d: the NVFP4 quantizers and GEMMs; its E4M3 block scales have their own rule,
  // block/nvfp4_scale.hpp, so `rule` is not read). Another format value trains nowhere:
  // check_trainable() refuses it by name.
  constexpr bool is_mx() const noexcept { return mx_type_of(format, nullptr); }
  constexpr bool is_nvfp4() const noexcept { return mxkit::is_nvfp4(format); }
  void check_trainable(const char* what) const {
    detail::require(is_mx() || is_nvfp4(), what, ": block-scaled operand in ", format_name(),
                    ", which no backend trains with (the MX formats and NVFP4 do)");
  }
  // The mx_type an MX operand's quantizer and GEMM dispatch on; an NVFP4 or other format is
  // refused by name rather than quantized as something else.
  mx_type mx() const { return to_mx_type(format, "block-scaled operand"); }
  friend constexpr bool operator==(const block_scaled_spec&, const block_scaled_spec&) = default;
};

// Overloaded call operators, for visit: `spec.visit(overloaded{[](const fp8_spec&) {...}, ...})`.
template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

// An operand's precision: exactly one of the kinds above. A switch over it is `visit` with one
// handler per alternative, so an alternative added here fails to compile where it is not handled;
// the checked accessors (fp8(), block_scaled()) throw for another kind instead of reading a field
// that means nothing for it. Trivially copyable and comparable, as recipes compare and copy it.
class operand_spec {
 public:
  using alternatives = std::variant<native_spec, bf16_spec, fp8_spec, block_scaled_spec>;

  constexpr operand_spec() noexcept : v_(bf16_spec{}) {}
  constexpr operand_spec(native_spec s) noexcept : v_(s) {}
  constexpr operand_spec(bf16_spec s) noexcept : v_(s) {}
  constexpr operand_spec(fp8_spec s) noexcept : v_(s) {}
  constexpr operand_spec(block_scaled_spec s) noexcept : v_(s) {}

  constexpr precision kind() const noexcept { return static_cast<precision>(v_.index()); }
  template <class A>
  constexpr bool is() const noexcept {
    return std::holds_alternative<A>(v_);
  }
  const fp8_spec& fp8() const { return as<fp8_spec>(); }
  fp8_spec& fp8() { return as<fp8_spec>(); }
  const block_scaled_spec& block_scaled() const { return as<block_scaled_spec>(); }
  block_scaled_spec& block_scaled() { return as<block_scaled_spec>(); }
  constexpr const alternatives& value() const noexcept { return v_; }
  template <class F>
  constexpr decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), v_);
  }

  friend constexpr bool operator==(const operand_spec&, const operand_spec&) = default;

 private:
  template <class A>
  const A& as() const {
    const A* a = std::get_if<A>(&v_);
    detail::require(a != nullptr, "operand_spec: a ", name_of(kind()), " operand has no ",
                    name_of(operand_spec{A{}}.kind()), " part");
    return *a;
  }
  template <class A>
  A& as() {
    return const_cast<A&>(std::as_const(*this).as<A>());
  }
  alternatives v_;
};
static_assert(std::is_trivially_copyable_v<operand_spec>);
static_assert(operand_spec{native_spec{}}.kind() == precision::native && operand_spec{bf16_spec{}}.kind() == precision::bf16 &&
                  operand_spec{fp8_spec{}}.kind() == precision::fp8 && operand_spec{block_scaled_spec{}}.kind() == precision::mx,
              "precision names the alternatives in their order");

// The kinds of operand, by name (recipes are written with these).
namespace recipes {
inline operand_spec native_operand() { return native_spec{}; }
inline operand_spec bf16_operand() { return bf16_spec{}; }
inline operand_spec mma_operand(fp8_type t) { return fp8_spec{t}; }
inline operand_spec block_scaled_operand(const block_format& f, scale_rule rule, rounding round = rounding::nearest_even) {
  return block_scaled_spec{f, rule, round};
}
// t past the enum is refused (checked_format_of), never taken for MXFP4.
inline operand_spec mx_operand(mx_type t, scale_rule rule, rounding round = rounding::nearest_even) {
  return block_scaled_operand(checked_format_of(t, "mx_operand"), rule, round);
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

// What the quantizer of a block-scaled copy takes beyond the operand's spec: the rotation and the
// Philox key belong to the GEMM (gemm_spec), the Philox stream to the tensor.
struct block_scaled_options {
  bool hadamard = false;      // the GEMM's 16-point rotation
  bool random_signs = false;  // with hadamard, H.D with D from seed
  std::uint64_t seed = 0;     // Philox key (random signs, stochastic rounding)
  std::uint32_t stream = 0;   // Philox stream of this tensor
  friend constexpr bool operator==(const block_scaled_options&, const block_scaled_options&) = default;
};

// One stored copy to produce from a high-precision tensor.
// The element format, scale rule and rounding are the operand's (spec). A block-scaled copy reads
// `block`, an FP8 copy `fp8` (code = cast(x * scale[row]); amax -> history[row, 0]); each is the
// part of its kind and is read through a spec of that kind only.
struct quant_request {
  operand_spec spec;
  block_axis axis = block_axis::rowwise;  // columnwise: stored transposed
  block_scaled_options block;             // block-scaled spec: rotation and Philox key and stream
  fp8_scaling_slot fp8;                   // fp8 spec: the scaling table row
  operand_use use = operand_use::fprop_x;
  mem_tag tag = mem_tag::quantized_activation;
  // The caller leaves x unchanged for as long as it reads the copy (linear.hpp sets it for X, whose
  // wgrad copy is read in backward, for dY, and for a weight, whose cached copies are read only
  // while the weight's version is theirs): where the copy holds x's own values (bf16 of bf16), a
  // backend may hand back x itself instead of copying it (the device backend does, the columnwise
  // copy read MN-major by its GEMM).
  bool may_alias_input = false;
  // NVFP4: the copy's tensor scale from this amax, a (1, 1) f32 tensor of the backend, instead of
  // the copy's own: the amax of a whole tensor of which x is a part (backend::copy_amax of each
  // part, then their maximum), so the part's codes and scales are the whole tensor's. Full
  // sharding quantizes a rank's rows of a weight so (parallel/gathered_copies.hpp).
  tensor tensor_amax;

  // The block quantizer's options for this copy (a block-scaled spec; throws for another kind).
  quantize_options mx_options() const {
    const block_scaled_spec& b = spec.block_scaled();
    return {b.rule, b.round, block.hadamard, block.random_signs, block.seed, block.stream};
  }
  // The NVFP4 quantizer's options for this copy (block/nvfp4_block.hpp): the same rounding,
  // rotation, random signs (the MX quantizer's sign mask of `seed`) and Philox key and stream.
  nvfp4_options nvfp4_quantize_options() const {
    const quantize_options o = mx_options();
    return {o.round, o.hadamard, o.sign_mask(), o.seed, o.stream};
  }
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
  precision kind() const noexcept { return request_.spec.kind(); }
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
