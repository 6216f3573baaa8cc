// SPDX-License-Identifier: Apache-2.0
#pragma once
// The DLPack C ABI (dmlc/dlpack, include/dlpack/dlpack.h, v0.8 legacy and v1.0 versioned
// structs), written from the public specification: the few structs through which torch, CuPy,
// JAX and NumPy >= 1.22 hand tensors to each other without a copy. Only the layout matters
// (these are the exchanged memory objects), so the types are plain C-compatible structs.
#include <cstdint>
#include <type_traits>

namespace mxkit_python::dlpack {

// DLDeviceType values (dlpack.h): the ones mxkit meets.
enum device_type : std::int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLROCM = 10,
  kDLCUDAManaged = 13,
};
// DLDataTypeCode values.
enum type_code : std::uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6, kDLFloat8_e4m3fn = 10 };

struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null: compact row-major
  std::uint64_t byte_offset;
};
// Legacy (pre-1.0) capsule payload, capsule name "dltensor" ("used_dltensor" once consumed).
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
// DLPack 1.0 capsule payload, capsule name "dltensor_versioned".
struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;  // bit 0: read only; bit 1: is a copy
  DLTensor dl_tensor;
};
inline constexpr std::uint64_t flag_read_only = 1u;  // DLPACK_FLAG_BITMASK_READ_ONLY
inline constexpr std::uint64_t flag_is_copied = 2u;  // DLPACK_FLAG_BITMASK_IS_COPIED

// The capsule name of each payload (the Python capsule protocol of dlpack.h); a consumer renames
// it "used_" + name when it takes the tensor.
template <class Managed>
constexpr const char* capsule_name() noexcept {
  if constexpr (std::is_same_v<Managed, DLManagedTensorVersioned>) return "dltensor_versioned";
  else return "dltensor";
}

}  // namespace mxkit_python::dlpack
