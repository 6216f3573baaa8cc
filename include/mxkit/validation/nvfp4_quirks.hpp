// SPDX-License-Identifier: Apache-2.0
#pragma once
// How NVIDIA TransformerEngine and torchao compute NVFP4's scales, as the formulas the NVFP4
// validation reference (validation/nvfp4_validate.hpp) and presets (validation/nvfp4_presets.hpp)
// switch between. The real quantities are the paper's in all three (arXiv 2509.25149: a tensor
// scale from the amax over 448 x 6, block scales amax_block / 6 over it cast to E4M3, elements
// over both cast to E2M1); they differ in the order of the fp32 operations, in the clamps, and in
// what the copy stores as its tensor scale, and each difference moves bytes. Read from the
// libraries' public source (facts, not their code), every fp32 operation is computed as IEEE
// does (format/float_arithmetic.hpp):
//
// mxkit (block/nvfp4_scale.hpp): stores t = fl(amax / 2688); block e4m3(fl(fl(amax_b / 6) / t));
//   elements fl(x / fl(e x t)); a zero-scale block writes signed zeros.
//
// TransformerEngine (NVIDIA/TransformerEngine; the kernels in transformer_engine/common/cast/nvfp4/
// core_nvfp4.cuh and quantize_transpose_nvfp4.cuh, their bit-exact emulation
// transformer_engine/pytorch/custom_recipes/reference_nvfp4.py, NVFP4QuantizerRef):
//   stored      the copy's amax, not a scale (NVFP4Tensor's amax_rowwise / amax_columnwise).
//   S_enc       fl(2688 / amax), at most FLT_MAX, and 1 for amax 0 (core_nvfp4.cuh,
//               compute_global_encode_scaling_factor_FP4); S_dec = fl(1 / S_enc) (the kernel's
//               `1.0 / S_enc`, a double quotient rounded to float: the float quotient).
//   block       e4m3(fl(amax_b x fl(S_enc x fl(1/6)))): the FP4 reciprocal folded into the global
//               scale (compute_decoding_scaling_factor, both namespaces), cast by __nv_fp8_e4m3's
//               satfinite, nearest-even conversion; a zero block gets 0x00.
//   elements    fl(x x m) with m = min(fl(1 / fl(e x S_dec)), FLT_MAX) (the kernel's
//               block_scale_inverse), converted by cvt.rn.satfinite.e2m1x2.f32 (util/ptx_arch_spec.cuh,
//               mul_cvt_*_to_fp4_4x): nearest even, saturating. A zero-scale block multiplies by
//               FLT_MAX, so its non-zero elements mostly saturate to +-6.
//   rotation    the RHT on the columnwise copy only, the one the wgrad GEMM reads (common/recipe/
//               __init__.py, NVFP4BlockScaling: for inputs and gradients): H16/4
//               after TE's fixed sign vector (pytorch/tensor/nvfp4_tensor.py, get_wgrad_sign_vector;
//               as a mask te_nvfp4_rht_signs), on bf16 inputs, its results bf16 (the RHT matrix and
//               output are bf16 and the columnwise amax is taken on them: common/hadamard_transform/
//               hadamard_transform.cu, max.xorsign.abs.bf16x2; pytorch/csrc/quantizer.cpp,
//               NVFP4Quantizer::quantize_impl, with_post_rht_amax; TE rotates bf16 inputs only). The
//               rowwise copy keeps the input's amax. TE sums the 16 products in the tensor cores'
//               fp32 accumulation order: the preset is TE's wherever that sum is exact in fp32 (a
//               block's bf16 inputs within a factor 2^12 of each other, or with fewer bits).
//   2-D         weights: one amax per 16 x 16 tile for both copies (quantize_transpose_nvfp4.cuh,
//               quantize_transpose_nvfp4_2D_kernel; reference_nvfp4.py, quant_tile_shape (16, 16)).
//   not modeled stochastic rounding (curanddx Philox, 8 bits per element into cvt.rs), NaN (TE's
//               amaxes use fmaxf, which drops it), Inf (an Inf amax gives S_enc 1 and scale 448),
//               and -0.0: the preset keeps its sign (0x8), TE's Python emulation writes 0x0, and
//               its kernels' conversion of -0.0 is not pinned here.
//
// torchao (pytorch/ao; torchao/prototype/mx_formats/nvfp4_tensor.py, nvfp4_quantize and
// per_tensor_amax_to_scale; kernels.py, f32_to_f4_unpacked and pack_uint4; utils.py, to_blocked):
//   stored      per_tensor_scale P = fl(amax / 2688): a decode scale (per_tensor_amax_to_scale).
//   block       e4m3(clamp(fl(fl(amax_b / 6) / P), 2^-6, 448)), torch's nearest-even cast; the
//               clamp's floor E4M3_EPS is E4M3's least normal, so a zero block gets 0x08.
//   elements    fl(x x fl(fl(1 / P) / e)), a rounded reciprocal (as torchao's Triton kernel
//               computes it), clamped to +-6, _f32_to_floatx_unpacked: nearest even, -0 keeps its
//               sign. Without a per_tensor_scale (one level) the bytes are those of P = 1.
//   not modeled NaN (it reaches P and every scale), Inf (its block's scale clamps to 448), P = 0
//               (an all-zero tensor: torchao divides by it), P below about 2^-120 (1 / P / e
//               overflows and 0 x Inf is NaN there).
#include <cstdint>

#include <mxkit/block/nvfp4_scale.hpp>
#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/float_arithmetic.hpp>
#include <mxkit/ref/names.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// Whose order of operations computes the scales and what the stored tensor scale means.
enum class nvfp4_formula : std::uint8_t {
  mxkit,    // block/nvfp4_scale.hpp; stored: t, the decode scale
  te,       // TransformerEngine; stored: the copy's amax
  torchao,  // torchao nvfp4_quantize; stored: per_tensor_scale, the decode scale
};

// The NVFP4 reference's departures from mxkit's rule (validate_nvfp4_options::quirks).
struct nvfp4_quirks {
  nvfp4_formula formula = nvfp4_formula::mxkit;
  bool rotated_bf16 = false;  // rotated values rounded to bf16 before their amax (TE's RHT)

  constexpr bool any() const noexcept { return formula != nvfp4_formula::mxkit || rotated_bf16; }
  friend constexpr bool operator==(const nvfp4_quirks&, const nvfp4_quirks&) = default;
};

// TE's RHT sign vector (get_wgrad_sign_vector: -1 at elements 3, 5-10, 12, 14, 15) as
// nvfp4_options::hadamard_signs (bit i: element i negated before H16).
inline constexpr std::uint32_t te_nvfp4_rht_signs = 0xD7E8u;

}  // namespace ref
template <>
struct enum_names<ref::nvfp4_formula> {
  static constexpr const char* names[] = {"mxkit", "te", "torchao"};
  static constexpr ref::nvfp4_formula last = ref::nvfp4_formula::torchao;
};
namespace detail {

inline constexpr float float_max = bit_cast<float>(0x7F7FFFFFu);

// TransformerEngine's scales for a copy whose stored amax is `amax` (finite, >= 0).
struct te_nvfp4_scaler {
  float s_enc = 1.0f, s_dec = 1.0f;

  static constexpr te_nvfp4_scaler from_amax(float amax) noexcept {
    te_nvfp4_scaler s;
    if (amax > 0.0f) {
      const float q = fp32_div(nvfp4_range, amax);
      s.s_enc = q < float_max ? q : float_max;
    }
    s.s_dec = fp32_div(1.0f, s.s_enc);
    return s;
  }
  constexpr e4m3 block_scale(float block_amax) const noexcept {
    constexpr float fp4_max_inv = fp32_div(1.0f, e2m1::max().to_float());
    return e4m3::from_float(fp32_mul(block_amax, fp32_mul(s_enc, fp4_max_inv)), rounding::nearest_even, overflow::saturate);
  }
  constexpr float scaled(float x, e4m3 e) const noexcept {
    const float d = fp32_mul(e.to_float(), s_dec);
    float m = float_max;
    if (d > 0.0f) {
      const float r = fp32_div(1.0f, d);
      m = r < float_max ? r : float_max;
    }
    return fp32_mul(x, m);
  }
  constexpr float decode_tensor_scale() const noexcept { return s_dec; }
};

// torchao's scales for a copy whose per_tensor_scale is p (a positive normal float).
struct torchao_nvfp4_scaler {
  float p = 1.0f, p_inv = 1.0f;

  static constexpr torchao_nvfp4_scaler from_scale(float p) noexcept { return {p, fp32_div(1.0f, p)}; }
  constexpr e4m3 block_scale(float block_amax) const noexcept {
    constexpr float eps = e4m3::min_normal().to_float(), max = e4m3::max().to_float();
    float s = fp32_div(fp32_div(block_amax, e2m1::max().to_float()), p);
    s = s < eps ? eps : s > max ? max : s;
    return e4m3::from_float(s, rounding::nearest_even, overflow::saturate);
  }
  constexpr float scaled(float x, e4m3 e) const noexcept { return fp32_mul(x, fp32_div(p_inv, e.to_float())); }
  constexpr float decode_tensor_scale() const noexcept { return p; }
};

// mxkit's, with the accessor the others have.
struct mxkit_nvfp4_scaler : nvfp4_scaler {
  constexpr float decode_tensor_scale() const noexcept { return tensor_scale; }
};

// Calls fn(scaler) with formula f's scaler for stored tensor scale `stored`
// (check_nvfp4_stored first).
template <class F>
decltype(auto) with_nvfp4_scaler(ref::nvfp4_formula f, float stored, F&& fn) {
  switch (f) {
    case ref::nvfp4_formula::te: return fn(te_nvfp4_scaler::from_amax(stored));
    case ref::nvfp4_formula::torchao: return fn(torchao_nvfp4_scaler::from_scale(stored));
    case ref::nvfp4_formula::mxkit: break;
  }
  return fn(mxkit_nvfp4_scaler{{stored}});
}

// What a copy of formula f stores as its tensor scale when its finite amax is `amax`.
constexpr float nvfp4_expected_stored(ref::nvfp4_formula f, float amax) noexcept {
  switch (f) {
    case ref::nvfp4_formula::te: return amax;
    case ref::nvfp4_formula::torchao: return fp32_div(amax, nvfp4_range);
    case ref::nvfp4_formula::mxkit: break;
  }
  return nvfp4_tensor_scale(amax);
}
// The stored value of "no tensor scale" (quantized as if it were 1): TE's S_enc = 1 comes from
// an amax of 2688; mxkit's and torchao's decode scale is 1.
constexpr float nvfp4_neutral_stored(ref::nvfp4_formula f) noexcept { return f == ref::nvfp4_formula::te ? nvfp4_range : 1.0f; }

// The stored tensor scale of formula f must be one the formula can read: a finite amax >= 0
// (TE), a positive normal float (mxkit, torchao: torchao's own P of an all-zero tensor is 0,
// which it divides by; not modeled).
template <class... Where>
void check_nvfp4_stored(ref::nvfp4_formula f, float stored, const Where&... where) {
  check_enum(f, ref::nvfp4_formula::torchao, "nvfp4_formula", where...);
  if (f == ref::nvfp4_formula::te) {
    require(stored >= 0.0f && stored <= float_max, where..., ": TransformerEngine's stored amax ", stored,
            " is not a finite value >= 0");
    return;
  }
  require(nvfp4_valid_tensor_scale(stored), where..., ": ", f == ref::nvfp4_formula::torchao ? "torchao's per_tensor_scale " : "tensor scale ",
          stored, " (bits 0x", std::hex, bit_cast<std::uint32_t>(stored), std::dec, ") is not a positive, finite, normal float",
          f == ref::nvfp4_formula::torchao && stored == 0.0f ? " (torchao's scale of an all-zero tensor, which it divides by: not modeled)" : "");
}

}  // namespace detail
MXKIT_END_NAMESPACE
