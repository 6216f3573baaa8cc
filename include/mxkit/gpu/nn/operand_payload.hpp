// SPDX-License-Identifier: Apache-2.0
#pragma once
// The device backend's quantized copies (gpu/nn/backend.hpp): where one copy's bytes live
// (device_payload) and how they are laid out, made in the backend's stream-ordered pool by a
// payload_factory that counts them (bytes by tag in the backend's memory_tracker, live copies
// by precision). The kernels that fill them are the backend's; this header holds no kernel.
// Layouts: MX codes then scales ([lines, blocks] row-major, scale_layout::row_major), NVFP4 codes
// then E4M3 scales (the same) then the fp32 tensor scale, FP8 codes
// then the one float scale the codes were made with (the GEMM's descale, read on the device),
// bf16 values, or no bytes of its own where a bf16 copy reads its source in place (MN-major).
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include <mxkit/gpu/platform.hpp>  // first: the vendor runtime before any MXKIT_HD code

#include <mxkit/error.hpp>
#include <mxkit/format/float16.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/nn/backend.hpp>
#include <mxkit/nn/operand.hpp>
#include <mxkit/parallel/copy_gather.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// Storage of one quantized copy in device memory: one pool allocation holding the codes, then
// the MX scales ([lines, blocks] row-major) or the FP8 scale.
struct device_payload final : nn::qpayload {
  std::shared_ptr<void> memory;
  nn::tensor source;               // a view's tensor (view_of), kept alive with the copy
  std::uint8_t* data = nullptr;
  std::uint8_t* scales = nullptr;  // mx
  float* fp8_scale = nullptr;      // fp8: the scale the codes were made with
  block_layout layout{};           // mx: an MX format or NVFP4, the format says which (holds_nvfp4)
  quantize_options options{};      // mx (an MX format)
  nvfp4_options nvfp4_opts{};      // mx (NVFP4)
  float* tensor_scale = nullptr;   // mx (NVFP4): the copy's fp32 tensor scale, where its quantizer wrote it
  bool mn_major = false;           // bf16 columnwise: `data` holds the [length, lines] rows of its source
  nn::tracked_bytes tracked;
  std::size_t* live = nullptr;     // the backend's count of live copies of this kind
  device_payload() = default;
  // A block-scaled copy of NVFP4 (its tensor scale follows the scales); false for an MX one.
  bool holds_nvfp4() const noexcept { return mxkit::is_nvfp4(layout.format); }
  device_payload(const device_payload&) = delete;
  device_payload& operator=(const device_payload&) = delete;
  ~device_payload() override {
    if (live) --*live;
  }
};

// The payload of a copy a device backend made (refuses any other backend's copy).
inline const device_payload& payload_of(const nn::qtensor& q) {
  const auto* p = dynamic_cast<const device_payload*>(q.payload());
  mxkit::detail::require(p != nullptr, "device_backend: the quantized copy was not made by a device_backend");
  return *p;
}

// `bytes` from the stream-ordered pool, counting in `driver_allocations` an allocation that had
// to grow the pool (its reserved bytes): a steady-state step counts none. While a step graph is
// recorded the allocation becomes the graph's own memory node and is not counted: the pool's
// attributes may not be queried under stream capture (cudaErrorStreamCaptureUnsupported).
inline void* pool_alloc_counted(std::size_t bytes, stream_t s, std::uint64_t& driver_allocations) {
  if (capture_memory::current() != nullptr) return allocate_async(bytes, s);
  const std::size_t before = pool_reserved_bytes();
  void* p = allocate_async(bytes, s);
  if (pool_reserved_bytes() != before) ++driver_allocations;
  return p;
}

// FP8 requests: the scale a cast reads (the scaling table's row), and the history slot its amax
// goes to (null when it records none).
inline const float* fp8_scale_of(const nn::quant_request& r) { return r.fp8.table->scale().as<float>() + r.fp8.row; }
inline float* amax_history_of(const nn::quant_request& r) {
  nn::scaling_table& t = *r.fp8.table;
  return r.fp8.record_amax ? t.history().as<float>() + r.fp8.row * t.config().history_length : nullptr;
}
// A plan whose copies one FP8 cast writes together: FP8 codes and, when wanted, their
// transpose, of the same type and scaling row.
inline bool one_fp8_cast(const nn::quant_plan& p) {
  const nn::quant_request &r = p.rowwise, &c = p.columnwise;
  return r.spec.is<nn::fp8_spec>() && (!p.columnwise_wanted || (c.spec == r.spec && c.fp8.table == r.fp8.table && c.fp8.row == r.fp8.row));
}

// Makes and counts one backend's payloads. Set up once the backend's stream exists; `memory`,
// `driver_allocations` and `live` (by precision) are the backend's and outlive every copy.
class payload_factory {
 public:
  using live_counts = std::array<std::size_t, 4>;
  payload_factory() = default;
  payload_factory(stream_t s, nn::memory_tracker& memory, std::uint64_t& driver_allocations, live_counts& live)
      : stream_(s), memory_(&memory), driver_allocations_(&driver_allocations), live_(&live) {}

  // `bytes` (at least 16) of uninitialized pool memory, released in stream order.
  std::shared_ptr<device_payload> bytes(std::size_t bytes) const {
    auto p = std::make_shared<device_payload>();
    void* m = pool_alloc_counted(bytes < 16 ? 16 : bytes, stream_, *driver_allocations_);
    p->memory = std::shared_ptr<void>(m, [s = stream_](void* d) { deallocate_async(d, s); });
    p->data = static_cast<std::uint8_t*>(m);
    return p;
  }
  // NVFP4 codes (padded to 256 bytes), the E4M3 scales ([lines, blocks] row-major), then the fp32
  // tensor scale (4-byte aligned): gpu::quantize_nvfp4 writes it and the GEMM's epilogue reads
  // it, both on the stream, so no host ever waits for it.
  std::shared_ptr<device_payload> nvfp4(const nn::quant_request& r, std::size_t rows, std::size_t cols) const {
    const block_layout layout{r.spec.block_scaled().format, r.axis, rows, cols};
    const std::size_t data = (layout.data_bytes() + 255) / 256 * 256, scales = (layout.scale_count() + 3) / 4 * 4;
    auto p = bytes(data + scales + sizeof(float));
    p->scales = p->data + data;
    p->tensor_scale = reinterpret_cast<float*>(p->data + data + scales);
    p->layout = layout;
    p->nvfp4_opts = r.nvfp4_quantize_options();
    return p;
  }
  // MX codes (padded to 256 bytes) then the scales.
  std::shared_ptr<device_payload> mx(const nn::quant_request& r, std::size_t rows, std::size_t cols) const {
    const block_layout layout{r.spec.block_scaled().format, r.axis, rows, cols};
    const std::size_t data = (layout.data_bytes() + 255) / 256 * 256, scales = layout.lines() * layout.blocks_per_line();
    auto p = bytes(data + scales);
    p->scales = p->data + data;
    p->layout = layout;
    p->options = r.mx_options();
    return p;
  }
  // FP8 codes (padded to 16 bytes) then the float scale.
  std::shared_ptr<device_payload> fp8(std::size_t rows, std::size_t cols) const {
    const std::size_t data = (rows * cols + 15) / 16 * 16;
    auto p = bytes(data + sizeof(float));
    p->fp8_scale = reinterpret_cast<float*>(p->data + data);
    return p;
  }
  // A bf16 activation as its own bf16 copy (the request allows it), rowwise as it is, columnwise
  // read MN-major: the payload shares x's memory and keeps it alive; no bytes are added to the
  // copies' count, none are moved.
  nn::qtensor view_of(const nn::quant_request& r, const nn::tensor& x) const {
    auto p = std::make_shared<device_payload>();
    p->source = x;
    p->data = static_cast<std::uint8_t*>(x.data());
    p->mn_major = r.axis == block_axis::columnwise;
    count_live(r, *p);
    return nn::qtensor(r, x.rows(), x.cols(), x.bytes(), std::move(p));
  }
  // The columnwise bf16 copy `r` of the tensor whose rowwise copy is `row`: the same bytes read
  // MN-major, kept alive with it; 0 bytes of its own.
  nn::qtensor alias_of(const nn::quant_request& r, const nn::qtensor& row) const {
    const device_payload& src = payload_of(row);
    auto p = std::make_shared<device_payload>();
    p->memory = src.memory;
    p->source = src.source;
    p->data = src.data;
    p->mn_major = true;
    count_live(r, *p);
    return nn::qtensor(r, row.rows(), row.cols(), 0, std::move(p));
  }
  // parallel/copy_gather.hpp's wire format of a copy (its codes, then its scales [lines, blocks]
  // row-major, as the payload holds them, then NVFP4's tensor scale): q's bytes at `out` (device
  // memory), stream-ordered copies.
  void pack(const nn::qtensor& q, std::uint8_t* out) const {
    const device_payload& p = payload_of(q);
    if (nn::backend::columnwise_is_transpose(q.kind())) {  // FP8, bf16 (rowwise): the elements as stored
      const std::size_t n = nn::copy_gather::copy_wire_bytes(q.request(), q.rows(), q.cols());
      if (n != 0) MXKIT_GPU_CHECK(memcpy_async(out, p.data, n, copy_kind::device_to_device, stream_));
      return;
    }
    MXKIT_GPU_CHECK(memcpy_async(out, p.data, p.layout.data_bytes(), copy_kind::device_to_device, stream_));
    MXKIT_GPU_CHECK(memcpy_async(out + p.layout.data_bytes(), p.scales, p.layout.scale_count(), copy_kind::device_to_device, stream_));
    if (p.holds_nvfp4())  // then the tensor scale, the whole tensor's (copy_gather::pack_copy checked that it was given)
      MXKIT_GPU_CHECK(memcpy_async(out + p.layout.data_bytes() + p.layout.scale_count(), p.tensor_scale, sizeof(float),
                                   copy_kind::device_to_device, stream_));
  }
  // The whole [rows, cols] copy `r` from the ranks' slabs in `wire` (device memory): rowwise slabs
  // are whole lines, columnwise slabs positions [first_row, first_row + rows) of every line (a 2D
  // copy each); an NVFP4 copy takes the tensor scale its slabs carry (all the same: the host
  // reference checks that, here it would cost a host synchronization); an FP8 copy (rowwise) takes
  // the scale of its scaling row, the one its slabs' casts read; a bf16 copy (rowwise) is its values.
  nn::qtensor assembled(const nn::quant_request& r, std::size_t rows, std::size_t cols, const std::uint8_t* wire,
                        std::span<const nn::copy_slab> slabs) const {
    if (nn::backend::columnwise_is_transpose(r.spec.kind())) {
      const bool is_fp8 = r.spec.is<nn::fp8_spec>();
      const std::size_t row_bytes = nn::copy_gather::copy_wire_bytes(r, 1, cols);
      auto p = is_fp8 ? fp8(rows, cols) : bytes(rows * row_bytes);
      for (const nn::copy_slab& s : slabs)
        MXKIT_GPU_CHECK(memcpy_async(p->data + s.first_row * row_bytes, wire + s.byte_offset, s.rows * row_bytes, copy_kind::device_to_device,
                                     stream_));
      if (is_fp8) MXKIT_GPU_CHECK(memcpy_async(p->fp8_scale, fp8_scale_of(r), sizeof(float), copy_kind::device_to_device, stream_));
      return finish(r, rows, cols, std::move(p));
    }
    const bool is_nvfp4 = r.spec.block_scaled().is_nvfp4();
    auto p = is_nvfp4 ? nvfp4(r, rows, cols) : mx(r, rows, cols);
    const block_layout L = p->layout;
    if (is_nvfp4) {  // every slab carries the whole tensor's tensor scale: the first one's
      const block_layout P{r.spec.block_scaled().format, r.axis, slabs.front().rows, cols};
      MXKIT_GPU_CHECK(memcpy_async(p->tensor_scale, wire + slabs.front().byte_offset + P.data_bytes() + P.scale_count(), sizeof(float),
                                   copy_kind::device_to_device, stream_));
    }
    for (const nn::copy_slab& s : slabs) {
      const block_layout P{r.spec.block_scaled().format, r.axis, s.rows, cols};
      const std::uint8_t* codes = wire + s.byte_offset;
      const std::uint8_t* scales = codes + P.data_bytes();
      if (r.axis == block_axis::rowwise) {
        MXKIT_GPU_CHECK(memcpy_async(p->data + s.first_row * L.line_bytes(), codes, P.data_bytes(), copy_kind::device_to_device, stream_));
        MXKIT_GPU_CHECK(memcpy_async(p->scales + s.first_row * L.blocks_per_line(), scales, P.scale_count(), copy_kind::device_to_device,
                                     stream_));
      } else {
        MXKIT_GPU_CHECK(memcpy_2d_async(p->data + packed_bytes(s.first_row, L.storage_bits()), L.line_bytes(), codes, P.line_bytes(),
                                        P.line_bytes(), cols, copy_kind::device_to_device, stream_));
        MXKIT_GPU_CHECK(memcpy_2d_async(p->scales + s.first_row / L.block_size(), L.blocks_per_line(), scales, P.blocks_per_line(),
                                        P.blocks_per_line(), cols, copy_kind::device_to_device, stream_));
      }
    }
    return finish(r, rows, cols, std::move(p));
  }

  // The copy of a filled payload: its bytes counted under the request's tag.
  nn::qtensor finish(const nn::quant_request& r, std::size_t rows, std::size_t cols, std::shared_ptr<device_payload> p) const {
    const std::size_t bytes = r.spec.visit(nn::overloaded{
        [&](const nn::block_scaled_spec&) {
          return p->layout.data_bytes() + p->layout.scale_count() + (p->holds_nvfp4() ? sizeof(float) : 0);
        },
        [&](const nn::fp8_spec&) { return rows * cols + sizeof(float); },
        [&](nn::bf16_spec) { return rows * cols * sizeof(bfloat16); },
        [&](nn::native_spec) { return rows * cols * sizeof(bfloat16); },  // never made: do_quantize refuses native operands
    });
    p->tracked = nn::tracked_bytes(memory_, r.tag, bytes);
    count_live(r, *p);
    return nn::qtensor(r, rows, cols, bytes, std::move(p));
  }

 private:
  void count_live(const nn::quant_request& r, device_payload& p) const {
    p.live = &(*live_)[static_cast<std::size_t>(r.spec.kind())];
    ++*p.live;
  }
  stream_t stream_ = nullptr;
  nn::memory_tracker* memory_ = nullptr;
  std::uint64_t* driver_allocations_ = nullptr;
  live_counts* live_ = nullptr;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
