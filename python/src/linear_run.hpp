// SPDX-License-Identifier: Apache-2.0
#pragma once
// mxkit's C++ linear layer (nn/linear.hpp) run for a few training steps on any backend, for the
// Python tests only: mxkit.torch.Linear must give its outputs and gradients bit for bit
// (tests/python/test_linear_host.py against the host backend, test_torch_linear.py against the
// device backend). Plain C++ over nn::backend, so module.cpp runs it on ref::host_backend and
// device_linear.cu (nvcc) on gpu::device_backend; no Python type crosses this line.
//
// A step is what a training loop does with one linear: the weight's values written (its version
// bumped, as an optimizer step bumps it), its gradient marked zero (zero_grad), forward,
// backward with the given dY, then end_step (the layer's own FP8 scaling table updated: the
// delayed-scaling update of nn/delayed_scaling.hpp).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/linear.hpp>
#include <mxkit/nn/recipe.hpp>

#include "linear_step.hpp"

namespace mxkit_python {

// The recipes the Python package names, each one of recipe.hpp's presets (the Python Linear reads
// their GEMM specs from recipe_by_name through the module: one definition of every recipe).
inline const std::vector<std::string>& recipe_names() {
  static const std::vector<std::string> names{"mxfp8",       "mxfp4",       "mxfp4_wgrad_hadamard", "mxfp4_no_hadamard",
                                              "mxfp4_rht_sr", "fp8_delayed", "nvfp4"};
  return names;
}
inline mxkit::nn::recipe recipe_by_name(const std::string& name, const mxkit::nn::delayed_scaling_config& scaling) {
  namespace r = mxkit::nn::recipes;
  if (name == "mxfp8") return r::mxfp8();
  if (name == "mxfp4") return r::mxfp4_amd();
  if (name == "mxfp4_wgrad_hadamard") return r::mxfp4_primus_turbo();
  if (name == "mxfp4_no_hadamard") return r::mxfp4_no_hadamard();
  if (name == "mxfp4_rht_sr") return r::mxfp4_nvidia_style();
  if (name == "nvfp4") return r::nvfp4();  // a lone layer: no selective bf16 layers
  if (name == "fp8_delayed") return r::fp8_delayed(scaling);
  std::string all;
  for (const std::string& n : recipe_names()) all += (all.empty() ? "" : ", ") + n;
  throw std::invalid_argument("recipe '" + name + "' is not one of " + all);
}

inline void append(std::vector<float>& out, const std::vector<double>& v) {
  for (double d : v) out.push_back(static_cast<float>(d));  // exact: every value is an f32 or bf16
}

inline linear_step_result run_linear_steps(mxkit::nn::backend& be, const linear_step_args& a) {
  namespace nn = mxkit::nn;
  mxkit::detail::require(a.steps > 0 && a.m > 0 && a.k > 0 && a.n > 0, "linear_steps: empty shapes");
  const nn::recipe r = recipe_by_name(a.recipe, a.scaling);
  nn::linear layer(be, "linear", a.k, a.n, a.layer_id, r, a.weight);
  linear_step_result out;
  const std::size_t xk = a.m * a.k, wk = a.n * a.k, yk = a.m * a.n;
  for (std::size_t s = 0; s < a.steps; ++s) {
    nn::tensor x = be.alloc(a.m, a.k, a.activations, nn::mem_tag::activation);
    nn::tensor dy = be.alloc(a.m, a.n, a.activations, nn::mem_tag::activation);
    be.write(x, std::vector<double>(a.x.begin() + s * xk, a.x.begin() + (s + 1) * xk));
    be.write(dy, std::vector<double>(a.dy.begin() + s * yk, a.dy.begin() + (s + 1) * yk));
    be.write(layer.weight().value, std::vector<double>(a.w.begin() + s * wk, a.w.begin() + (s + 1) * wk));
    ++layer.weight().version;               // an optimizer step: the cached copies are stale
    layer.weight().grad_is_zero = true;     // zero_grad: wgrad overwrites the gradient
    nn::tensor y = be.alloc_uninitialized(a.m, a.n, a.activations, nn::mem_tag::activation);
    layer.forward(x, y, true);
    nn::tensor dx;
    layer.backward(dy, &dx);
    append(out.y, be.read(y));
    append(out.dx, be.read(dx));
    append(out.dw, be.read(layer.weight().grad));
    layer.end_step();
  }
  if (const auto& table = layer.scaling()) {
    append(out.scale, be.read(table->scale()));
    append(out.history, be.read(table->history()));
  }
  return out;
}

}  // namespace mxkit_python
