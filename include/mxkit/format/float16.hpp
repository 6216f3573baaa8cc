// SPDX-License-Identifier: Apache-2.0
#pragma once
// IEEE binary16 and bfloat16 as instances of the same template: quantizer inputs and bf16 outputs
// convert with the same rounding code as the MX elements.
#include <mxkit/format/minifloat.hpp>

MXKIT_BEGIN_NAMESPACE
using float16 = minifloat<encoding<5, 10, special_values::ieee>>;
using bfloat16 = minifloat<encoding<8, 7, special_values::ieee>>;
static_assert(float16::max().to_float() == 65504.0f);
static_assert(bfloat16::max().to_float() == 0x1.FEp127f);
MXKIT_END_NAMESPACE
