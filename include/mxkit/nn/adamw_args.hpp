// SPDX-License-Identifier: Apache-2.0
#pragma once
// The arguments of the backend's multi-tensor AdamW step (nn/backend.hpp's adamw_step; the update
// rule is train/adamw.hpp's): one slot per parameter, and the step's host arguments.
#include <mxkit/config.hpp>
#include <mxkit/nn/tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// One parameter of a multi-tensor AdamW update.
struct adamw_slot_ref {
  tensor* param = nullptr;
  const tensor* grad = nullptr;
  tensor* m = nullptr;
  tensor* v = nullptr;
  double weight_decay = 0.0;
};
// The step's host arguments (kernel parameters, no device memory).
struct adamw_args {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

}  // namespace nn
MXKIT_END_NAMESPACE
