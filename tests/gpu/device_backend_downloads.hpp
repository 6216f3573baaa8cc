// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host copies of the device backend's quantized copies, for the tests that compare them with the
// host oracle's byte for byte. Each waits for the backend's stream (a host read the backend's
// counters do not see: these read the payloads directly, gpu/nn/operand_payload.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/gpu/nn/backend.hpp>
#include <mxkit/gpu/nn/host_transfers.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

namespace gpu_test {

// An MX copy's codes and scales.
inline mxkit::mx_tensor download_mx(const mxkit::gpu::device_backend& be, const mxkit::nn::qtensor& q) {
  mxkit::detail::require(q.kind() == mxkit::nn::precision::mx, "download_mx: a ", mxkit::name_of(q.kind()), " copy");
  const mxkit::gpu::device_payload& p = mxkit::gpu::payload_of(q);
  mxkit::mx_tensor h(p.layout, p.options);
  h.set_data(mxkit::gpu::download_bytes(p.data, p.layout.data_bytes(), be.stream()));
  h.set_scales(mxkit::gpu::download_bytes(p.scales, p.layout.lines() * p.layout.blocks_per_line(), be.stream()));
  return h;
}
// An NVFP4 copy's codes, E4M3 scales and the tensor scale its quantizer wrote.
inline mxkit::nvfp4_tensor download_nvfp4(const mxkit::gpu::device_backend& be, const mxkit::nn::qtensor& q) {
  const mxkit::gpu::device_payload& p = mxkit::gpu::payload_of(q);
  mxkit::detail::require(q.kind() == mxkit::nn::precision::mx && p.holds_nvfp4(), "download_nvfp4: a ", mxkit::name_of(q.kind()),
                         " copy that is not NVFP4");
  const std::vector<std::uint8_t> t = mxkit::gpu::download_bytes(p.tensor_scale, sizeof(float), be.stream());
  float scale = 0.0f;
  std::memcpy(&scale, t.data(), sizeof(float));
  mxkit::nvfp4_tensor h(p.layout, p.nvfp4_opts, scale);
  const std::vector<std::uint8_t> data = mxkit::gpu::download_bytes(p.data, p.layout.data_bytes(), be.stream());
  const std::vector<std::uint8_t> scales = mxkit::gpu::download_bytes(p.scales, p.layout.scale_count(), be.stream());
  std::copy(data.begin(), data.end(), h.data().begin());
  std::copy(scales.begin(), scales.end(), h.scales().begin());
  return h;
}
// An FP8 copy's codes and the scale the cast used.
inline mxkit::fp8_tensor download_fp8(const mxkit::gpu::device_backend& be, const mxkit::nn::qtensor& q) {
  mxkit::detail::require(q.kind() == mxkit::nn::precision::fp8, "download_fp8: a ", mxkit::name_of(q.kind()), " copy");
  const mxkit::gpu::device_payload& p = mxkit::gpu::payload_of(q);
  mxkit::fp8_tensor t{q.request().spec.fp8().type, q.lines(), q.length(), 1.0f, 0.0f,
                      mxkit::gpu::download_bytes(p.data, q.rows() * q.cols(), be.stream())};
  const std::vector<std::uint8_t> s = mxkit::gpu::download_bytes(p.fp8_scale, sizeof(float), be.stream());
  std::memcpy(&t.scale, s.data(), sizeof(float));
  return t;
}
// A bf16 copy's [lines, length] values, however it is stored (MN-major copies read their
// source's rows).
inline std::vector<mxkit::bfloat16> download_bf16(const mxkit::gpu::device_backend& be, const mxkit::nn::qtensor& q) {
  mxkit::detail::require(q.kind() == mxkit::nn::precision::bf16, "download_bf16: a ", mxkit::name_of(q.kind()), " copy");
  const mxkit::gpu::device_payload& p = mxkit::gpu::payload_of(q);
  const std::vector<std::uint8_t> b = mxkit::gpu::download_bytes(p.data, q.rows() * q.cols() * sizeof(mxkit::bfloat16), be.stream());
  std::vector<mxkit::bfloat16> out(q.rows() * q.cols());
  if (!b.empty()) std::memcpy(out.data(), b.data(), b.size());
  if (!p.mn_major) return out;
  std::vector<mxkit::bfloat16> lines(out.size());
  for (std::size_t r = 0; r < q.length(); ++r)
    for (std::size_t l = 0; l < q.lines(); ++l) lines[l * q.length() + r] = out[r * q.lines() + l];
  return lines;
}

}  // namespace gpu_test
