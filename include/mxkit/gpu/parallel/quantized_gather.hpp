// SPDX-License-Identifier: Apache-2.0
#pragma once
// Gathering a sharded weight as its quantized MX copy on the GPU: each rank quantizes its own rows
// (gpu::quantize) and the ranks all_gather the codes and E8M0 scales as bytes, instead of
// gathering fp32 or bf16 and quantizing after (MXFP4: 17/32 of a byte per element). The device
// twin of ref::gather_quantized_mx (parallel/quantized_gather.hpp), with its shard rule
// (ref::shard_rows: R rows per rank, a multiple of 32, the last shard zero-padded) and its wire
// format (a shard's element bytes, then its row-major scale bytes), so the result is the same
// bytes as quantizing the whole weight (that header says why; tests/gpu checks it through NCCL).
// Round-to-nearest modes only: stochastic rounding draws from each element's index in the whole
// tensor, which the device quantizer does not take as an offset (the host function does).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <mxkit/error.hpp>
#include <mxkit/gpu/device_mx_tensor.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/parallel/communicator.hpp>
#include <mxkit/parallel/quantized_gather.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// The `axis` copy of the whole W [rows, cols] (device memory; each rank reads only its shard's
// rows) on every rank of `comm`, whose collectives are ordered after `stream` (the backend's).
// The result (row-major scales) is complete in the order of `stream`.
template <class T>
  requires quantizer_input<T>
device_mx_tensor gather_quantized_mx(nn::communicator& comm, matrix_view<const T> w, mx_type type, block_axis axis,
                                     const quantize_options& options, stream_t stream) {
  using U = std::remove_const_t<T>;
  const std::size_t rows = w.rows, cols = w.cols;
  mxkit::detail::require(options.round != rounding::stochastic,
                         "gpu::gather_quantized_mx: stochastic rounding needs each element's global index (use the host's "
                         "ref::gather_quantized_mx)");
  const std::size_t block = static_cast<std::size_t>(block_size_of(type));
  mxkit::detail::require(axis == block_axis::rowwise || rows % block == 0, "gpu::gather_quantized_mx: a columnwise copy needs rows (", rows,
                         ") a multiple of ", block);
  mxkit::detail::require(w.data != nullptr || rows * cols == 0, "gpu::gather_quantized_mx: null weight");
  const std::size_t n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t R = ref::shard_rows(rows, n);
  const block_format format = checked_format_of(type, "gpu::gather_quantized_mx");
  const block_layout P{format, axis, R, cols}, L{format, axis, rows, cols};
  device_mx_tensor out(L, options);
  if (rows == 0 || cols == 0) return out;

  // This rank's rows, zero-padded to R.
  device_buffer<U> shard(R * cols, stream);
  shard.fill_bytes(0, stream);
  const std::size_t first = std::min(rows, r * R), count = std::min(rows, first + R) - first;
  if (count)
    MXKIT_GPU_CHECK(memcpy_2d_async(shard.data(), cols * sizeof(U), w.data + first * w.stride(), w.stride() * sizeof(U), cols * sizeof(U),
                                    count, copy_kind::device_to_device, stream));
  // Its copy: element bytes at 0 (16-byte aligned, as the quantizer writes them), scales after.
  const std::size_t chunk = P.data_bytes() + P.scale_count();
  device_buffer<std::uint8_t> send(chunk, stream), all(chunk * n, stream);
  quantize_outputs q;
  if (axis == block_axis::rowwise) {
    q.rowwise_data = send.data();
    q.rowwise_scales = send.data() + P.data_bytes();
  } else {
    q.columnwise_data = send.data();
    q.columnwise_scales = send.data() + P.data_bytes();
  }
  quantize(matrix_view<const U>{shard.data(), R, cols}, type, options, q, stream);
  comm.all_gather({send.data(), chunk, nn::comm_type::u8}, {all.data(), all.size(), nn::comm_type::u8});
  comm.join();

  // Assembly, as the host function does it: drop each shard's padding rows.
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint8_t* codes = all.data() + k * chunk;
    const std::uint8_t* scales = codes + P.data_bytes();
    const std::size_t at = std::min(rows, k * R), real = std::min(rows, at + R) - at;
    if (real == 0) continue;
    if (axis == block_axis::rowwise) {  // lines are rows
      MXKIT_GPU_CHECK(memcpy_async(out.data().data() + at * L.line_bytes(), codes, real * P.line_bytes(), copy_kind::device_to_device, stream));
      MXKIT_GPU_CHECK(memcpy_async(out.scales().data() + at * L.blocks_per_line(), scales, real * P.blocks_per_line(),
                                   copy_kind::device_to_device, stream));
    } else {  // lines are columns: shard k holds positions [at, at + real) of each
      MXKIT_GPU_CHECK(memcpy_2d_async(out.data().data() + packed_bytes(at, L.storage_bits()), L.line_bytes(), codes, P.line_bytes(),
                                      packed_bytes(real, L.storage_bits()), cols, copy_kind::device_to_device, stream));
      MXKIT_GPU_CHECK(memcpy_2d_async(out.scales().data() + at / block, L.blocks_per_line(), scales, P.blocks_per_line(), real / block, cols,
                                      copy_kind::device_to_device, stream));
    }
  }
  return out;
}

}  // namespace gpu
MXKIT_END_NAMESPACE
