// SPDX-License-Identifier: Apache-2.0
#pragma once
// OCP 8-bit FP v1.0 / OCP MX v1.0 section 5.3.1 (FP8 E4M3): max 448, min normal 2^-6, min subnormal 2^-9, NaN S.1111.111, no Inf.
#include <mxkit/format/minifloat.hpp>

MXKIT_BEGIN_NAMESPACE
using e4m3 = minifloat<encoding<4, 3, special_values::all_ones_nan>>;
static_assert(e4m3::max().to_float() == 448.0f && e4m3::emax == 8);
MXKIT_END_NAMESPACE
