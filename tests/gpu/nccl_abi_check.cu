// SPDX-License-Identifier: Apache-2.0
// gpu/nccl_api.hpp's declarations against a real nccl.h (built only with MXKIT_NCCL_ROOT): every
// value and offset the communicator relies on is static_asserted, so a wrong one fails the build.
// The program prints the header's version and the one of the library that loads here.
#include <cstddef>
#include <cstdio>

#include <nccl.h>

#include <mxkit/gpu/parallel/nccl_api.hpp>

namespace api = mxkit::gpu::nccl;

// Enumerators of two enums compared as integers (a direct == between two enum types is a warning).
template <class... Pairs>
constexpr bool same_values(Pairs... p) {
  const long long v[] = {static_cast<long long>(p)...};
  for (std::size_t i = 0; i < sizeof...(p); i += 2)
    if (v[i] != v[i + 1]) return false;
  return true;
}

static_assert(sizeof(ncclUniqueId) == sizeof(api::unique_id) && NCCL_UNIQUE_ID_BYTES == api::unique_id_bytes);
static_assert(sizeof(ncclComm_t) == sizeof(api::comm_t));

static_assert(same_values(ncclSuccess, api::success, ncclUnhandledCudaError, api::unhandled_cuda_error, ncclSystemError, api::system_error, ncclInternalError, api::internal_error, ncclInvalidArgument, api::invalid_argument, ncclInvalidUsage, api::invalid_usage, ncclRemoteError, api::remote_error, ncclInProgress, api::in_progress));
static_assert(sizeof(ncclResult_t) == sizeof(api::result_t));

static_assert(same_values(ncclInt8, api::int8, ncclUint8, api::uint8, ncclInt32, api::int32, ncclUint32, api::uint32, ncclInt64, api::int64, ncclUint64, api::uint64, ncclFloat16, api::float16, ncclFloat32, api::float32, ncclFloat64, api::float64, ncclBfloat16, api::bfloat16));
static_assert(sizeof(ncclDataType_t) == sizeof(api::data_type_t));
static_assert(same_values(ncclSum, api::sum, ncclProd, api::prod, ncclMax, api::max, ncclMin, api::min));
static_assert(sizeof(ncclRedOp_t) == sizeof(api::red_op_t));

// ncclConfig_t: our struct is its 2.17 prefix.
static_assert(offsetof(ncclConfig_t, size) == offsetof(api::config_t, size));
static_assert(offsetof(ncclConfig_t, magic) == offsetof(api::config_t, magic));
static_assert(offsetof(ncclConfig_t, version) == offsetof(api::config_t, version));
static_assert(offsetof(ncclConfig_t, blocking) == offsetof(api::config_t, blocking));
static_assert(offsetof(ncclConfig_t, cgaClusterSize) == offsetof(api::config_t, cga_cluster_size));
static_assert(offsetof(ncclConfig_t, minCTAs) == offsetof(api::config_t, min_ctas));
static_assert(offsetof(ncclConfig_t, maxCTAs) == offsetof(api::config_t, max_ctas));
static_assert(offsetof(ncclConfig_t, netName) == offsetof(api::config_t, net_name));
static_assert(sizeof(api::config_t) <= sizeof(ncclConfig_t));
static_assert(NCCL_CONFIG_UNDEF_INT == api::config_undef_int);
static_assert(NCCL_VERSION(2, 17, 0) == api::version_code(2, 17, 0));
#if defined(NCCL_API_MAGIC)
static_assert(NCCL_API_MAGIC == api::config_magic);
#endif

int main() {
  const ncclConfig_t initializer = NCCL_CONFIG_INITIALIZER;
  if (initializer.magic != api::config_magic) {
    std::printf("NCCL_CONFIG_INITIALIZER's magic 0x%x differs from ours 0x%x\n", initializer.magic, api::config_magic);
    return 1;
  }
  std::printf("nccl.h: version code %d; ncclConfig_t %zu bytes, ours (2.17 prefix) %zu\n", NCCL_VERSION_CODE, sizeof(ncclConfig_t),
              sizeof(api::config_t));
  try {
    const api::api& a = api::library();
    std::printf("loaded %s: version code %d\n", a.library.c_str(), a.version);
  } catch (const std::exception& e) {
    std::printf("no library loads here (%s); the declarations compiled, which is the check\n", e.what());
  }
  return 0;
}
