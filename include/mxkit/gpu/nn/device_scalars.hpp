// SPDX-License-Identifier: Apache-2.0
#pragma once
// The device backend's scalars (gpu/nn/backend.hpp) between the layouts of the kernels that make
// and read them: one-thread kernels, each a few loads and stores. nn::backend keeps the loss, the
// gradient norm, the clip factor and the optimizer's step counts as (1, 1) and (1, 2) f64 tensors
// (the host oracle's types, nn/backend.hpp's contract 3); the kernels write a float loss,
// gpu::global_norm a grad_norm_result, gpu::adamw_update integer counts and a float learning rate
// read through a pointer.
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/config.hpp>
#include <mxkit/gpu/nn/adamw.hpp>
#include <mxkit/gpu/nn/chunk.hpp>
#include <mxkit/gpu/nn/global_norm.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

// A float result (the cross-entropy loss) as the backend's f64 scalar.
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) float_to_double_kernel(const float* in, double* out) {
  *out = static_cast<double>(*in);
}
// The optimizer's scalars: global_norm's result as the backend's (1, 1) f64 norm and clip
// tensors, its (1, 2) f64 step counts as AdamW's integer counts and back, the learning rate.
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) norm_to_scalars_kernel(const grad_norm_result* r, double* norm, double* clip) {
  *norm = static_cast<double>(r->norm);  // Inf and NaN stay what they are
  *clip = static_cast<double>(r->clip);
}
// The backend's norm and clip tensors as AdamW's input (the clip factor the caller passes is the
// one applied; a non-finite norm skips the step).
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) scalars_to_norm_kernel(const double* norm, const double* clip, grad_norm_result* r) {
  const bool finite = finite_bits(*norm);
  *r = grad_norm_result{static_cast<float>(*norm), finite ? static_cast<float>(*clip) : 1.0f, finite ? 0 : 1};
}
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) counts_from_state_kernel(const double* state, adamw_step_counts* counts) {
  counts->taken = static_cast<std::uint64_t>(state[0]);
  counts->skipped = static_cast<std::uint64_t>(state[1]);
}
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) counts_to_state_kernel(const adamw_step_counts* counts, double* state) {
  state[0] = static_cast<double>(counts->taken);
  state[1] = static_cast<double>(counts->skipped);
}
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) set_float_kernel(float* p, float value) {
  *p = value;
}
// The learning rate from a device scalar (a replayed step graph's: adamw_args::lr_device), rounded
// to float as the host rounds static_cast<float>(lr) for set_float_kernel: the same bits.
template <int Threads>
MXKIT_GLOBAL void __launch_bounds__(Threads) double_to_float_kernel(const double* in, float* out) {
  *out = static_cast<float>(*in);
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
