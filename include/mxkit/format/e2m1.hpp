// SPDX-License-Identifier: Apache-2.0
#pragma once
// OCP MX v1.0 section 5.3.3 (FP4 E2M1): max 6, min normal 1, min subnormal 0.5, no Inf/NaN.
#include <mxkit/format/minifloat.hpp>

MXKIT_BEGIN_NAMESPACE
using e2m1 = minifloat<encoding<2, 1, special_values::none>>;
static_assert(e2m1::max().to_float() == 6.0f && e2m1::emax == 2);
MXKIT_END_NAMESPACE
