// SPDX-License-Identifier: Apache-2.0
#pragma once
// Owning MX copies in device memory: data, scales (in any scale layout) and how they were
// quantized; view() gives the mx_const_view every entry point takes, to_host() the host tensor.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// Owning device copy: data, scales (in any layout) and how it was quantized.
class device_mx_tensor {
 public:
  device_mx_tensor() = default;
  device_mx_tensor(block_layout layout, const quantize_options& options, scale_layout scales_layout = scale_layout::row_major)
      : layout_(layout),
        options_(options),
        scales_layout_(scales_layout),
        data_(layout.data_bytes()),
        scales_(scale_storage_size(scales_layout, layout.lines(), layout.blocks_per_line())) {}

  const block_layout& layout() const noexcept { return layout_; }
  const quantize_options& options() const noexcept { return options_; }
  scale_layout scales_layout() const noexcept { return scales_layout_; }
  device_buffer<std::uint8_t>& data() noexcept { return data_; }
  device_buffer<std::uint8_t>& scales() noexcept { return scales_; }
  const device_buffer<std::uint8_t>& data() const noexcept { return data_; }
  const device_buffer<std::uint8_t>& scales() const noexcept { return scales_; }
  // The copy as every mxkit entry point takes it (device pointers).
  mx_const_view view() const noexcept { return {layout_, options_, data_.data(), scales_.data(), scales_layout_}; }

  // Host copy with row-major scales (converted from the stored layout). Synchronous.
  mx_tensor to_host(stream_t s = nullptr) const {
    mx_tensor h(layout_, options_);
    h.set_data(data_.to_host(s));
    const std::vector<std::uint8_t> stored = scales_.to_host(s);
    h.set_scales(to_row_major_scales(stored.data(), layout_.lines(), layout_.blocks_per_line(), scales_layout_));
    return h;
  }

 private:
  block_layout layout_;
  quantize_options options_;
  scale_layout scales_layout_ = scale_layout::row_major;
  device_buffer<std::uint8_t> data_;
  device_buffer<std::uint8_t> scales_;
};

// The pair the training recipes consume, allocated for `in`'s shape and quantized in one launch.
struct device_mx_pair {
  device_mx_tensor rowwise, columnwise;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
