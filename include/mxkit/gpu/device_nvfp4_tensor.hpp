// SPDX-License-Identifier: Apache-2.0
#pragma once
// Owning NVFP4 copies in device memory (as device_mx_tensor for MX): data, scales in any scale
// layout, the fp32 tensor scale as one device float (gpu::quantize_nvfp4 writes it there, so no
// host round trip is needed between quantizing and using the copy), and how the copy was
// quantized; to_host() gives the host nvfp4_tensor.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

class device_nvfp4_tensor {
 public:
  device_nvfp4_tensor() = default;
  // Refuses a format that is not NVFP4, an unknown axis or rounding, and sizes that wrap.
  device_nvfp4_tensor(block_layout layout, const nvfp4_options& options, scale_layout scales_layout = scale_layout::row_major,
                      bool tensor_scale_from_amax = true)
      : layout_(checked(layout, options)),
        options_(options),
        scales_layout_(scales_layout),
        from_amax_(tensor_scale_from_amax),
        data_(layout.data_bytes()),
        scales_(scale_storage_size(scales_layout, layout.lines(), layout.blocks_per_line())),
        tensor_scale_(1) {}

  const block_layout& layout() const noexcept { return layout_; }
  const nvfp4_options& options() const noexcept { return options_; }
  scale_layout scales_layout() const noexcept { return scales_layout_; }
  bool tensor_scale_from_amax() const noexcept { return from_amax_; }
  device_buffer<std::uint8_t>& data() noexcept { return data_; }
  device_buffer<std::uint8_t>& scales() noexcept { return scales_; }
  device_buffer<float>& tensor_scale() noexcept { return tensor_scale_; }
  const device_buffer<std::uint8_t>& data() const noexcept { return data_; }
  const device_buffer<std::uint8_t>& scales() const noexcept { return scales_; }
  const device_buffer<float>& tensor_scale() const noexcept { return tensor_scale_; }

  // Host copy with row-major scales (converted from the stored layout). Synchronous.
  nvfp4_tensor to_host(stream_t s = nullptr) const {
    nvfp4_tensor h(layout_, options_, tensor_scale_.to_host(s)[0], from_amax_);
    const std::vector<std::uint8_t> data = data_.to_host(s), stored = scales_.to_host(s);
    std::copy(data.begin(), data.end(), h.data().begin());
    const std::vector<std::uint8_t> scales = to_row_major_scales(stored.data(), layout_.lines(), layout_.blocks_per_line(), scales_layout_);
    std::copy(scales.begin(), scales.end(), h.scales().begin());
    return h;
  }

 private:
  static const block_layout& checked(const block_layout& l, const nvfp4_options& o) {
    mxkit::detail::check_nvfp4_layout(l, "device_nvfp4_tensor");
    mxkit::detail::check_nvfp4_options(o, "device_nvfp4_tensor");
    return l;
  }

  block_layout layout_{formats::nvfp4};
  nvfp4_options options_;
  scale_layout scales_layout_ = scale_layout::row_major;
  bool from_amax_ = true;
  device_buffer<std::uint8_t> data_;
  device_buffer<std::uint8_t> scales_;
  device_buffer<float> tensor_scale_;
};

// Both copies of one input, as quantize_nvfp4_both fills them.
struct device_nvfp4_pair {
  device_nvfp4_tensor rowwise, columnwise;
};

}  // namespace gpu
MXKIT_END_NAMESPACE
