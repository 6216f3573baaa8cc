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
// The step's host arguments (kernel parameters), and where the learning rate is read instead of
// `lr` when it changes from step to step under a replayed step graph (nn/step_graph.hpp): a
// (1, 1) f64 backend tensor the caller fills before the step (null: `lr`). The update reads it as
// the float it would have made of `lr`, so both give the same bits.
struct adamw_args {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  const tensor* lr_device = nullptr;
};

}  // namespace nn
MXKIT_END_NAMESPACE
