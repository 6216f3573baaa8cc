// SPDX-License-Identifier: Apache-2.0
#pragma once
// Umbrella header of the numerics: formats, blocks, transforms, tensors, GEMM descriptors and the
// host reference (quantizer, validate, GEMMs). The training stack is <mxkit/training_stack.hpp>; GPU code is
// under <mxkit/gpu/...>. Written by scripts/update_umbrella.sh, checked by ctest static.headers.
#include <mxkit/arch/intrinsics.hpp>
#include <mxkit/block/block_format.hpp>
#include <mxkit/block/element_encoder.hpp>
#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/pack.hpp>
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/block/quantize_options.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/checked_arithmetic.hpp>
#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/bits.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e2m3.hpp>
#include <mxkit/format/e3m2.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/format/e8m0.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/format/int8_fixed.hpp>
#include <mxkit/format/minifloat.hpp>
#include <mxkit/format/rounding.hpp>
#include <mxkit/gemm/product.hpp>
#include <mxkit/random/philox.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/names.hpp>
#include <mxkit/ref/parallel.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/tensor/foreign_layout.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>
#include <mxkit/transform/hadamard.hpp>
#include <mxkit/validation/diagnose.hpp>
#include <mxkit/validation/peer_presets.hpp>
#include <mxkit/validation/peer_quirks.hpp>
#include <mxkit/validation/validate.hpp>
#include <mxkit/validation/validate_gemm.hpp>
#include <mxkit/validation/validation_report.hpp>
#include <mxkit/version.hpp>
