// SPDX-License-Identifier: Apache-2.0
#pragma once
// What mxkit's C++ linear is run with and gives back in the Python tests' oracle (linear_run.hpp
// runs it; device.hpp declares its device form): plain values, no Python or CUDA type.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/tensor.hpp>

namespace mxkit_python {

struct linear_step_args {
  std::string recipe;
  mxkit::nn::delayed_scaling_config scaling;
  std::size_t steps = 0, m = 0, k = 0, n = 0;
  std::uint32_t layer_id = 0;  // the layer's id: the first key of its Philox streams (nn::mix_stream)
  std::vector<float> x, w, dy;  // [steps, m, k], [steps, n, k], [steps, m, n]
  mxkit::nn::dtype activations = mxkit::nn::dtype::bf16, weight = mxkit::nn::dtype::bf16;
};
struct linear_step_result {
  std::vector<float> y, dx, dw;        // [steps, m, n], [steps, m, k], [steps, n, k]
  std::vector<float> scale, history;   // FP8 recipes: the table's 3 scales and [3, H] history after the last step
};

}  // namespace mxkit_python
