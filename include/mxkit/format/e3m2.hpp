// SPDX-License-Identifier: Apache-2.0
#pragma once
// OCP MX v1.0 section 5.3.2 (FP6 E3M2): max 28, min normal 0.25, min subnormal 0.0625, no Inf/NaN.
#include <mxkit/format/minifloat.hpp>

MXKIT_BEGIN_NAMESPACE
using e3m2 = minifloat<encoding<3, 2, special_values::none>>;
static_assert(e3m2::max().to_float() == 28.0f && e3m2::emax == 4);
MXKIT_END_NAMESPACE
