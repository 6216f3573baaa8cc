// SPDX-License-Identifier: Apache-2.0
#pragma once
// OCP 8-bit FP v1.0 / OCP MX v1.0 section 5.3.1 (FP8 E5M2): max 57344, min normal 2^-14, min subnormal 2^-16, IEEE Inf and NaN.
#include <mxkit/format/minifloat.hpp>

MXKIT_BEGIN_NAMESPACE
using e5m2 = minifloat<encoding<5, 2, special_values::ieee>>;
static_assert(e5m2::max().to_float() == 57344.0f && e5m2::emax == 15);
MXKIT_END_NAMESPACE
