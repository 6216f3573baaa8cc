// SPDX-License-Identifier: Apache-2.0
#pragma once
// Rotary position embedding (Su et al. 2021, "RoFormer"), as in Llama: each q and k head of
// dimension D is split into halves (x1, x2) = (v[i], v[i + D/2]), i < D/2, and rotated by
// angle t * theta^(-2i/D) at position t (or Llama 3.1's rescaled frequency: nn/rope_frequencies.hpp):
//   forward   (x1 cos - x2 sin, x1 sin + x2 cos)
//   backward  the same rotation by -angle (a rotation's transpose is its inverse).
// The v heads are left alone. Angles are formed in double and rounded once.
#include <cmath>
#include <cstddef>

#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/rope_frequencies.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {
class rotary {
 public:
  explicit rotary(double theta = 10000.0) : f_{theta, {}} {}
  explicit rotary(const rope_frequencies& f) : f_(f) { check_config(f); }
  void forward(backend& be, tensor& qkv, const head_shape& s) const { be.rope(qkv, s, f_, false); }
  void backward(backend& be, tensor& dqkv, const head_shape& s) const { be.rope(dqkv, s, f_, true); }
  double theta() const noexcept { return f_.theta; }
  const rope_frequencies& frequencies() const noexcept { return f_; }

 private:
  rope_frequencies f_;
};

}  // namespace nn
MXKIT_END_NAMESPACE
