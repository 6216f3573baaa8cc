// SPDX-License-Identifier: Apache-2.0
#pragma once
// NVFP4 blocks without a division an element: the device quantizer's path for nearest-even and
// stochastic rounding (gpu/quantize/nvfp4_kernel.hpp).
//
// The rule (block/nvfp4_scale.hpp) rounds element x of a block with E4M3 scale s under tensor
// scale t from fl(x / d), d = fl(s x t). Here the quotient of |x| comes from d's reciprocal
// r = fl(1 / d), found once a block, and the fused multiply-add (hw::fma_rn):
//   q = fl(|x| r), then twice q = fl(q + e r) with the residual e = |x| - d q in one FMA.
// That is how correctly rounded division is built on machines with an FMA (P. Markstein,
// "Computation of elementary functions on the IBM RISC System/6000 processor", IBM J. Res. Dev.
// 34(1), 1990): with r within half an ulp of 1/d, a q within an ulp of |x| / d has an exact
// residual and corrects to the correctly rounded quotient; fl(|x| r) is within an ulp and a half,
// the first correction brings it within one, the second rounds correctly. Those steps hold while
// none under- or overflows: with d in [2^-64, 2^64], a quotient of 2^-39 or more has residuals
// on a grid of 2^-149 or coarser (d's ulp times q's), exact floats; a smaller one comes out below
// 2^-38, as its correctly rounded quotient is, and there both roundings give the same code: 0
// under nearest even (E2M1's least step is 0.5), and no step up under stochastic rounding, whose
// 32 random bits round up from 0 only above 2^-33 (format/bits.hpp, round_shifted). Blocks whose
// quotients would pass 2^32 (a given tensor scale far below the data) leave the path too. The
// sign is x's: fl(x / d) is -fl(|x| / d), and -0 for x = -0.
//
// Nearest even then takes the MX blocks' E2M1 encoder (block/element_encoder.hpp: two FMAs and an
// integer min, saturating) at unit scale, packed as it is made; stochastic rounding takes the
// block quantizer's own loop (quantize_nvfp4_block's, Philox bits per four elements) with these
// quotients. A zero scale (its elements are their signed zeros) is the reciprocal 0: every
// quotient is 0. NaN and Inf blocks, and blocks off the bounds, are quantize_nvfp4_block's: `path`
// says which. tests/block/catch2_test_nvfp4_reciprocal.cpp checks the quotients against fp32_div,
// the codes around every code threshold of every scale code, and whole blocks of both roundings.
#include <cstdint>

#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/block/element_encoder.hpp>
#include <mxkit/block/nvfp4_block.hpp>
#include <mxkit/block/nvfp4_scale.hpp>
#include <mxkit/config.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/float_arithmetic.hpp>
#include <mxkit/format/rounding.hpp>

MXKIT_BEGIN_NAMESPACE

// A block's codes as little-endian words: element 8j + i in bits 4i .. 4i + 3 of word j (the
// nibble order of block/pack.hpp, element 2k in the low nibble of byte k).
inline constexpr int nvfp4_block_words = nvfp4_block_size / 8;

struct nvfp4_packed_block {
  e4m3 scale;
  std::uint32_t words[nvfp4_block_words];
};

MXKIT_HD constexpr nvfp4_packed_block pack_nvfp4_block(const nvfp4_block& b) noexcept {
  nvfp4_packed_block p{b.scale, {}};
  for (int j = 0; j < nvfp4_block_words; ++j) {
    std::uint32_t w = 0;
    for (int i = 7; i >= 0; --i) w = w << 4 | b.elements[8 * j + i].bits();
    p.words[j] = w;
  }
  return p;
}

namespace detail {
// The bounds of the reciprocal path (the file comment).
inline constexpr float nvfp4_reciprocal_min_divisor = exp2i(-64);
inline constexpr float nvfp4_reciprocal_max_divisor = exp2i(64);
inline constexpr float nvfp4_reciprocal_max_quotient = exp2i(32);
// The bounds of the block scale's path (nvfp4_reciprocal_scaler): an amax in [2^-36, 2^34) keeps
// amax / 6 in [2^-39, 2^32); a tensor scale in [2^-55, 2^55] is a divisor on the path, and so is
// fl(s x t) for every non-zero E4M3 scale s (2^-9 <= s <= 448).
inline constexpr float nvfp4_scale_path_min_amax = exp2i(-36);
inline constexpr float nvfp4_scale_path_max_amax = exp2i(34);
inline constexpr float nvfp4_scale_path_min_tensor_scale = exp2i(-55);
inline constexpr float nvfp4_scale_path_max_tensor_scale = exp2i(55);
// fl(q x fl(1 / t)) at most 2^31: q / t is below 2^32, on the path.
inline constexpr float nvfp4_scale_path_max_estimate = exp2i(31);
}  // namespace detail

// fl(a / divisor) for a >= 0 on the path, from reciprocal = fl(1 / divisor) (the file comment's
// sequence); signed(x) is fl(x / divisor) for any finite x. Constant evaluation divides: no plain
// expression fuses a multiply-add.
struct nvfp4_reciprocal_divider {
  float divisor = 1.0f;
  float reciprocal = 1.0f;

  MXKIT_HD constexpr float quotient(float a) const noexcept {
    if (__builtin_is_constant_evaluated()) return reciprocal == 0.0f ? 0.0f : fp32_div(a, divisor);
    float q = hw::fma_rn(a, reciprocal, 0.0f);
    q = hw::fma_rn(hw::fma_rn(-divisor, q, a), reciprocal, q);
    return hw::fma_rn(hw::fma_rn(-divisor, q, a), reciprocal, q);
  }
  MXKIT_HD constexpr float operator()(float x) const noexcept {
    return bit_cast<float>(bit_cast<std::uint32_t>(quotient(hw::abs_float(x))) | (bit_cast<std::uint32_t>(x) & 0x80000000u));
  }
};

// A copy's scaler (nvfp4_scaler) with what the reciprocal path needs of its tensor scale t, found
// once a copy: the divider by t. A block's scale is then e4m3(fl(fl(amax / 6) / t)) with both
// divisions through dividers, {6, fl(1/6)} and {t, fl(1/t)}, where the file comment's proof holds
// for both: amax in [2^-36, 2^34), so that amax / 6 is a quotient in [2^-39, 2^32); t in
// [2^-55, 2^55], a divisor on the path; and fl(q x fl(1/t)) at most 2^31, so that q / t is below
// 2^32. A quotient q / t below 2^-39 comes out below 2^-38, and it rounds to the E4M3 scale 0
// as the correctly rounded one does (E4M3's least step is 2^-9). Other blocks take the rule's
// divisions. With t on the path, every non-zero scale's divisor fl(s x t) is one too.
struct nvfp4_reciprocal_scaler {
  nvfp4_scaler scaler;            // the copy's rule
  nvfp4_reciprocal_divider by_t;  // {t, fl(1/t)} when `fast`
  bool fast = false;              // t in [2^-55, 2^55]

  MXKIT_HD static constexpr nvfp4_reciprocal_scaler of(const nvfp4_scaler& s) noexcept {
    const float t = s.tensor_scale;
    const bool fast = t >= detail::nvfp4_scale_path_min_tensor_scale && t <= detail::nvfp4_scale_path_max_tensor_scale;
    return {s, {t, fast ? fp32_div(1.0f, t) : 1.0f}, fast};
  }

  // scaler.block_scale(amax) for a finite amax >= 0.
  MXKIT_HD constexpr e4m3 block_scale(float amax) const noexcept {
    constexpr nvfp4_reciprocal_divider by_six{6.0f, fp32_div(1.0f, 6.0f)};
    static_assert(by_six.divisor == e2m1::max().to_float(), "the rule divides the block amax by E2M1's largest value");
    if (fast && amax >= detail::nvfp4_scale_path_min_amax && amax < detail::nvfp4_scale_path_max_amax) {
      const float q = by_six.quotient(amax);
      if (q * by_t.reciprocal <= detail::nvfp4_scale_path_max_estimate) return nvfp4_scale_of_quotient(by_t.quotient(q));
    }
    return scaler.block_scale(amax);
  }
};

// One block's scale and divider under a copy's scaler, from its amax (float bits, the block's own
// or its 16 x 16 tile's); `path` false: the block is quantize_nvfp4_block's (NaN or Inf, or off
// the bounds). A caller quantizing many blocks of a copy makes its nvfp4_reciprocal_scaler once.
struct nvfp4_reciprocal_block {
  e4m3 scale;
  nvfp4_reciprocal_divider divider;
  bool path = false;

  MXKIT_HD static constexpr nvfp4_reciprocal_block make(std::uint32_t amax, const nvfp4_reciprocal_scaler& rs) noexcept {
    nvfp4_reciprocal_block b{};
    if (amax >= 0x7F800000u) return b;  // NaN or Inf
    const float a = bit_cast<float>(amax);
    b.scale = rs.block_scale(a);
    if (rs.fast && !nvfp4_zero_scale(b.scale)) {
      // t and the scale finite, the divisor on the path: for_block's product and the reciprocal
      // without fp32_mul's and fp32_div's operand tests.
      const float d = fp32_mul_finite(nvfp4_scale_value(b.scale), rs.scaler.tensor_scale);
      const float r = fp32_div_finite(1.0f, d);
      b.divider = {d, r};
      b.path = fp32_mul_finite(a, r) <= detail::nvfp4_reciprocal_max_quotient;
      return b;
    }
    const nvfp4_block_scaling s = rs.scaler.for_block(b.scale);
    if (s.zero) {
      b.divider = {1.0f, 0.0f};
      b.path = true;
      return b;
    }
    const float r = fp32_div(1.0f, s.divisor);
    b.divider = {s.divisor, r};
    b.path = s.divisor >= detail::nvfp4_reciprocal_min_divisor && s.divisor <= detail::nvfp4_reciprocal_max_divisor &&
             fp32_mul(a, r) <= detail::nvfp4_reciprocal_max_quotient;
    return b;
  }

  // The block's nearest-even codes from its values v (rotated when the copy is), for `path`
  // blocks. Each code is packed as it is made, as the MX packer does (block/quantize_block.hpp,
  // encode_float_path_packed): the sign shifted in, then 8 x the word plus the biased magnitude.
  MXKIT_HD constexpr void encode_nearest_even(const float* v, std::uint32_t* words) const noexcept {
    using encoder = block_element_encoder<e2m1>;
    constexpr std::uint32_t word_bias = [] {
      std::uint32_t w = 0;
      for (int i = 0; i < 8; ++i) w = w * 16u + encoder::bias;
      return w;
    }();
    for (int j = 0; j < nvfp4_block_words; ++j) {
      std::uint32_t w = 0;
      for (int i = 7; i >= 0; --i) {
        const float x = v[8 * j + i];
        w = (w << 1) | (bit_cast<std::uint32_t>(x) >> 31);
        w = w * 8u + encoder::encode_magnitude_biased(divider.quotient(hw::abs_float(x)), 1.0f);
      }
      words[j] = w - word_bias;
    }
  }
};

// quantize_nvfp4_block(v, amax, scaler, options rounding to nearest even), packed: through the
// reciprocal where it holds.
MXKIT_HD constexpr nvfp4_packed_block quantize_nvfp4_block_nearest_even(const float* v, std::uint32_t amax,
                                                                        const nvfp4_reciprocal_scaler& rs) noexcept {
  const nvfp4_reciprocal_block b = nvfp4_reciprocal_block::make(amax, rs);
  if (!b.path) return pack_nvfp4_block(quantize_nvfp4_block(v, amax, rs.scaler, nvfp4_options{rounding::nearest_even}));
  nvfp4_packed_block p{b.scale, {}};
  b.encode_nearest_even(v, p.words);
  return p;
}

// quantize_nvfp4_block(v, amax, scaler, o, first_index): the same loop over the elements, with the
// reciprocal's quotients where it holds. Any rounding: none gives a code other than 0 to a quotient
// below 2^-33 (the file comment). The kernel's path for stochastic rounding.
MXKIT_HD constexpr nvfp4_block quantize_nvfp4_block_by_reciprocal(const float* v, std::uint32_t amax, const nvfp4_reciprocal_scaler& rs,
                                                                  const nvfp4_options& o, std::uint64_t first_index) noexcept {
  const nvfp4_reciprocal_block b = nvfp4_reciprocal_block::make(amax, rs);
  if (!b.path) return quantize_nvfp4_block(v, amax, rs.scaler, o, first_index);
  nvfp4_block out{};
  out.scale = b.scale;
  detail::round_nvfp4_elements(out, v, o, first_index, b.divider);
  return out;
}

MXKIT_END_NAMESPACE
