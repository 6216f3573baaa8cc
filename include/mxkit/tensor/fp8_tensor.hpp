// SPDX-License-Identifier: Apache-2.0
#pragma once
// Per-tensor scaled FP8 (the delayed-scaling recipe, Micikevicius et al. 2022 "FP8 Formats for
// Deep Learning"; TransformerEngine's convention): code = cast(x * scale) with saturation, value =
// code / scale. `scale` is a plain float chosen by the recipe (fp8_max / 2^margin / amax), so
// x * scale is one IEEE float multiply, then one rounding into FP8: device kernels do the same.
// amax of the input is returned too: the recipe's history needs it.
#include <cmath>
#include <cstdint>
#include <vector>

#include <mxkit/block/scale_rule.hpp>
#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/tensor/matrix_view.hpp>

MXKIT_BEGIN_NAMESPACE

enum class fp8_type : std::uint8_t { e4m3, e5m2 };

template <>
struct enum_names<fp8_type> {
  static constexpr const char* names[] = {"e4m3", "e5m2"};
  static constexpr fp8_type last = fp8_type::e5m2;
};
constexpr float fp8_max(fp8_type t) noexcept { return t == fp8_type::e4m3 ? 448.0f : 57344.0f; }

MXKIT_HD constexpr std::uint8_t fp8_encode(float x, fp8_type t, float scale, overflow o = overflow::saturate) noexcept {
  const float y = x * scale;
  return t == fp8_type::e4m3 ? e4m3::from_float(y, rounding::nearest_even, o).bits()
                             : e5m2::from_float(y, rounding::nearest_even, o).bits();
}
MXKIT_HD constexpr float fp8_decode(std::uint8_t code, fp8_type t) noexcept {
  return t == fp8_type::e4m3 ? e4m3::from_bits(code).to_float() : e5m2::from_bits(code).to_float();
}

// Row-major [rows, cols] FP8 codes with one scale.
struct fp8_tensor {
  fp8_type type = fp8_type::e4m3;
  std::size_t rows = 0, cols = 0;
  float scale = 1.0f;  // code = cast(x * scale)
  float amax = 0.0f;   // max |x| of the input (NaN if any input was NaN)
  std::vector<std::uint8_t> data;

  float scale_inv() const noexcept { return 1.0f / scale; }
};

namespace detail {
// The host checks of an FP8 cast's arguments (quantize_fp8, gpu::cast_fp8): fp8_encode's
// ternaries would treat any other fp8_type value as E5M2, any other overflow as propagate.
template <class... Where>
void check_fp8_cast(fp8_type type, float scale, overflow o, const Where&... where) {
  require(std::isfinite(scale) && scale > 0.0f, where..., ": scale must be finite and positive, got ", scale);
  check_enum(type, fp8_type::e5m2, "fp8_type", where...);
  check_enum(o, overflow::propagate, "overflow", where...);
}

// Every consumer of an fp8_tensor (a public aggregate whose codes anyone may resize) checks that
// the codes fill rows x cols exactly before reading them as [rows, cols].
template <class... Where>
void check_fp8_tensor(const fp8_tensor& t, const Where&... where) {
  check_enum(t.type, fp8_type::e5m2, "fp8_type", where...);
  const std::size_t n = checked_mul({"rows", t.rows}, {"cols", t.cols}, where...);
  require(t.data.size() == n, where..., ": ", t.data.size(), " codes for a ", t.rows, "x", t.cols, " FP8 tensor, expected ", n);
}
}  // namespace detail

template <class T>
  requires quantizer_input<T>
fp8_tensor quantize_fp8(matrix_view<T> in, fp8_type type, float scale, overflow o = overflow::saturate) {
  detail::check_fp8_cast(type, scale, o, "quantize_fp8");
  detail::check_matrix(in, "quantize_fp8:");
  const std::size_t n = detail::checked_mul({"rows", in.rows}, {"cols", in.cols}, "quantize_fp8");
  fp8_tensor out{type, in.rows, in.cols, scale, 0.0f, std::vector<std::uint8_t>(n)};
  std::uint32_t amax = 0;
  for (std::size_t r = 0; r < in.rows; ++r)
    for (std::size_t c = 0; c < in.cols; ++c) {
      const float x = load_float(in(r, c));
      amax = amax_bits(amax, x);  // the MX blocks' rule: NaN wins
      out.data[r * in.cols + c] = fp8_encode(x, type, scale, o);
    }
  out.amax = bit_cast<float>(amax);
  return out;
}

// The transposed copy (per-tensor scaling makes it a byte transpose): what dgrad/wgrad consume.
inline fp8_tensor transpose(const fp8_tensor& t) {
  detail::check_fp8_tensor(t, "transpose");
  fp8_tensor out{t.type, t.cols, t.rows, t.scale, t.amax, std::vector<std::uint8_t>(t.data.size())};
  for (std::size_t r = 0; r < t.rows; ++r)
    for (std::size_t c = 0; c < t.cols; ++c) out.data[c * t.rows + r] = t.data[r * t.cols + c];
  return out;
}

// code / scale. A scale of 0, below 0, non-finite, or so small that 1 / scale overflows (every
// code would decode to +-Inf, code 0 to NaN) is refused: no such tensor holds finite values.
inline std::vector<float> dequantize(const fp8_tensor& t) {
  detail::check_fp8_tensor(t, "dequantize");
  detail::require(std::isfinite(t.scale) && t.scale > 0.0f, "dequantize: FP8 scale ", t.scale, " must be finite and positive");
  detail::require(std::isfinite(t.scale_inv()), "dequantize: FP8 scale ", t.scale,
                  " has no finite inverse (1 / scale overflows float; the scale must be at least about 2.9e-39)");
  std::vector<float> out(t.data.size());
  const float inv = t.scale_inv();
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = fp8_decode(t.data[i], t.type) * inv;
  return out;
}

MXKIT_END_NAMESPACE
