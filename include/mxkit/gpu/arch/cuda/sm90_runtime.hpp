// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the Hopper kernels (gpu/gemm/sm90/, gpu/nn/attention/sm90/) need from the host: whether this
// program carries sm_90a device code that runs on the current device (asked once per device),
// and the driver's tensor-map encoder for TMA descriptors (fetched through the runtime, so the
// program does not link libcuda).
#include <cstdint>
#include <mutex>

#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder is fetched from the driver)
#include <cudaTypedefs.h>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/error.hpp>
#include <mxkit/gpu/arch/cuda/sm90_ptx.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace sm90 {

// 1 when the device code of this program has the sm_90a kernels (built for compute_90a) and runs
// on this device; asked once per device.
MXKIT_GLOBAL void probe_kernel(int* out) { *out = MXKIT_SM90A; }

inline bool available() {
  static int cached[64];
  static std::once_flag once[64];
  int dev = 0;
  if (get_device(&dev) != success || dev < 0 || dev >= 64) return false;
  std::call_once(once[dev], [dev] {
    int* flag = nullptr;
    int host = 0;
    if (cudaMalloc(&flag, sizeof(int)) == cudaSuccess) {
      probe_kernel<<<1, 1>>>(flag);
      if (cudaGetLastError() == cudaSuccess && cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess)
        cached[dev] = host;
      (void)cudaFree(flag);
    }
    (void)cudaGetLastError();  // a device without a compatible image leaves a launch error
  });
  return cached[dev] == 1;
}

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    MXKIT_GPU_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &status));
    mxkit::detail::require(status == cudaDriverEntryPointSuccess && f != nullptr,
                           "sm90: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace sm90
}  // namespace gpu
MXKIT_END_NAMESPACE
