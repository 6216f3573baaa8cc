// SPDX-License-Identifier: Apache-2.0
#pragma once
// OCP MX v1.0 section 5.3.2 (FP6 E2M3): max 7.5, min normal 1, min subnormal 0.125, no Inf/NaN.
#include <mxkit/format/minifloat.hpp>

MXKIT_BEGIN_NAMESPACE
using e2m3 = minifloat<encoding<2, 3, special_values::none>>;
static_assert(e2m3::max().to_float() == 7.5f && e2m3::emax == 2);
MXKIT_END_NAMESPACE
