// SPDX-License-Identifier: Apache-2.0
#pragma once
// Deprecated spelling of <mxkit/training_stack.hpp> (an umbrella named nn.hpp beside the nn/
// folder read as one of its headers); kept until release 0.2 (CHANGELOG.md).
#include <mxkit/training_stack.hpp>
