// SPDX-License-Identifier: Apache-2.0
#pragma once
// NVFP4 blocks rounded to nearest even without a division an element: the device quantizer's path
// for its common case (gpu/quantize/nvfp4_kernel.hpp).
//
// The rule (block/nvfp4_scale.hpp) codes element x of a block with E4M3 scale s under tensor scale
// t as e2m1(fl(x / d)), d = fl(s x t). Here the quotient of |x| comes from d's reciprocal
// r = fl(1 / d), found once a block, and the fused multiply-add (hw::fma_rn):
//   q = fl(|x| r), then twice q = fl(q + e r) with the residual e = |x| - d q in one FMA.
// That is how correctly rounded division is built on machines with an FMA (P. Markstein,
// "Computation of elementary functions on the IBM RISC System/6000 processor", IBM J. Res. Dev.
// 34(1), 1990): with r within half an ulp of 1/d, a q within an ulp of |x| / d has an exact
// residual and corrects to the correctly rounded quotient; fl(|x| r) is within an ulp and a half,
// the first correction brings it within one, the second rounds correctly. Those steps hold while none under- or overflows, which
// the block's bounds below guarantee for every quotient of 1/8 or more; a smaller one stays below
// 1/4, E2M1's code 0, as its correctly rounded quotient does. The quotient then takes the MX
// blocks' E2M1 encoder (block/element_encoder.hpp: two FMAs and an integer min, nearest even,
// saturating) at unit scale, and the sign is x's. So no rounding rule is written here: the bits are
// quantize_nvfp4_block's, which tests/block/catch2_test_nvfp4_nearest_even.cpp checks for the
// quotients (against fp32_div) and for the codes around every code threshold of every scale code.
//
// A zero scale (its elements are their signed zeros) is the reciprocal 0: every quotient is 0.
// NaN and Inf blocks, and blocks outside the bounds (a divisor below 2^-96 or above 2^96, or
// quotients past 2^32, which only a given tensor scale far below the tensor's amax makes), are
// quantize_nvfp4_block's: `path` says which.
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
// The bounds of the reciprocal path (the file comment). With d in [2^-96, 2^96] and r = fl(1/d), a
// quotient of 1/8 or more has residuals on a grid of 2^-149 or coarser (d's ulp times q's), so they
// are exact floats; no product or quotient of a block whose amax gives fl(amax r) <= 2^32 overflows.
inline constexpr float nvfp4_reciprocal_min_divisor = exp2i(-96);
inline constexpr float nvfp4_reciprocal_max_divisor = exp2i(96);
inline constexpr float nvfp4_reciprocal_max_quotient = exp2i(32);
}  // namespace detail

// fl(a / divisor) for a >= 0 within the bounds, from reciprocal = fl(1 / divisor) (the file
// comment's sequence). Constant evaluation divides: no plain expression fuses a multiply-add.
struct nvfp4_reciprocal_divider {
  float divisor = 1.0f;
  float reciprocal = 1.0f;

  MXKIT_HD constexpr float quotient(float a) const noexcept {
    if (__builtin_is_constant_evaluated()) return reciprocal == 0.0f ? 0.0f : fp32_div(a, divisor);
    float q = hw::fma_rn(a, reciprocal, 0.0f);
    q = hw::fma_rn(hw::fma_rn(-divisor, q, a), reciprocal, q);
    return hw::fma_rn(hw::fma_rn(-divisor, q, a), reciprocal, q);
  }
};

// One block's scale and divider under a copy's scaler, from its amax (float bits, the block's own
// or its 16 x 16 tile's); `path` false: the block is quantize_nvfp4_block's (NaN or Inf, or
// outside the bounds).
struct nvfp4_nearest_even_block {
  e4m3 scale;
  nvfp4_reciprocal_divider divider;
  bool path = false;

  MXKIT_HD static constexpr nvfp4_nearest_even_block make(std::uint32_t amax, const nvfp4_scaler& scaler) noexcept {
    nvfp4_nearest_even_block b{};
    if (amax >= 0x7F800000u) return b;  // NaN or Inf
    b.scale = scaler.block_scale(bit_cast<float>(amax));
    const nvfp4_block_scaling s = scaler.for_block(b.scale);
    if (s.zero) {
      b.divider = {1.0f, 0.0f};
      b.path = true;
      return b;
    }
    const float r = fp32_div(1.0f, s.divisor);
    b.divider = {s.divisor, r};
    b.path = s.divisor >= detail::nvfp4_reciprocal_min_divisor && s.divisor <= detail::nvfp4_reciprocal_max_divisor &&
             fp32_mul(bit_cast<float>(amax), r) <= detail::nvfp4_reciprocal_max_quotient;
    return b;
  }

  // The block's codes from its values v (rotated when the copy is), for `path` blocks. Each code
  // is packed as it is made, as the MX packer does (block/quantize_block.hpp,
  // encode_float_path_packed): the sign shifted in, then 8 x the word plus the biased magnitude.
  MXKIT_HD constexpr void encode(const float* v, std::uint32_t* words) const noexcept {
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

// quantize_nvfp4_block(v, amax, scaler, options rounding to nearest even), packed: the reciprocal
// path where it holds.
MXKIT_HD constexpr nvfp4_packed_block quantize_nvfp4_block_nearest_even(const float* v, std::uint32_t amax,
                                                                        const nvfp4_scaler& scaler) noexcept {
  const nvfp4_nearest_even_block b = nvfp4_nearest_even_block::make(amax, scaler);
  if (!b.path) return pack_nvfp4_block(quantize_nvfp4_block(v, amax, scaler, nvfp4_options{rounding::nearest_even}));
  nvfp4_packed_block p{b.scale, {}};
  b.encode(v, p.words);
  return p;
}

MXKIT_END_NAMESPACE
