// SPDX-License-Identifier: Apache-2.0
#pragma once
// A view of an MXFP8 copy whose elements are held as their bf16 values, code x block scale
// (block/bf16_values.hpp), as gpu::quantize writes it with quantize_outputs::values_as_bf16. The
// GEMM takes it where it takes an MX copy (gpu::gemm); the values are what Hopper's bf16 tensor
// cores multiply, and the codes, where a path needs them, are the values divided by the scales.
#include <cstdint>

#include <mxkit/block/quantize_options.hpp>
#include <mxkit/format/float16.hpp>  // bfloat16
#include <mxkit/tensor/block_layout.hpp>

MXKIT_BEGIN_NAMESPACE

struct mx_values_view {
  block_layout layout;                      // an MXFP8 format (E4M3 or E5M2), either axis
  quantize_options options;                 // how it was quantized (no rotation: the quantizer refuses one)
  const bfloat16* values = nullptr;         // [lines, padded_length], dense
  const std::uint8_t* scales = nullptr;     // [lines, blocks_per_line], row-major
  const int* beyond_exact_range = nullptr;  // the quantizer's flag (device memory): non-zero when a non-zero
                                            // block lies beyond +-48 binades, which the bf16 product cannot take exactly
};

MXKIT_END_NAMESPACE
