// SPDX-License-Identifier: Apache-2.0
#pragma once
// Gathering a sharded weight as its quantized MX or NVFP4 copy on the GPU: each rank quantizes its
// own rows (gpu::quantize, gpu::quantize_nvfp4 with the whole weight's amax) and the ranks
// all_gather the codes and scales as bytes, instead of gathering fp32 or bf16 and quantizing after
// (MXFP4: 17/32 of a byte per element, NVFP4 9/16). The device twins of ref::gather_quantized_mx
// and ref::gather_quantized_nvfp4 (parallel/quantized_gather.hpp), with their shard rule
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
#include <mxkit/gpu/device_nvfp4_tensor.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/quantize_nvfp4.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/parallel/communicator.hpp>
#include <mxkit/parallel/quantized_gather.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

// Rank r's rows of w (R rows a rank), zero-padded to R rows, contiguous.
template <class T>
device_buffer<std::remove_const_t<T>> padded_shard(matrix_view<T> w, std::size_t R, std::size_t r, stream_t stream) {
  using U = std::remove_const_t<T>;
  device_buffer<U> shard(R * w.cols, stream);
  shard.fill_bytes(0, stream);
  const std::size_t first = std::min(w.rows, r * R), count = std::min(w.rows, first + R) - first;
  if (count)
    MXKIT_GPU_CHECK(memcpy_2d_async(shard.data(), w.cols * sizeof(U), w.data + first * w.stride(), w.stride() * sizeof(U), w.cols * sizeof(U),
                                    count, copy_kind::device_to_device, stream));
  return shard;
}

// The whole copy's codes and scales (layout L, device memory) from the all-gathered shard copies
// (`chunk` bytes each: codes of layout P, R rows, then scales), each shard's padding rows dropped:
// ref::detail_gather::assemble_shards in stream-ordered copies.
inline void assemble_shards_async(const block_layout& L, const block_layout& P, std::size_t R, const std::uint8_t* all, std::size_t chunk,
                                  std::size_t n, std::uint8_t* data, std::uint8_t* scales, stream_t stream) {
  const std::size_t rows = L.rows, cols = L.cols, block = L.block_size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint8_t* codes = all + k * chunk;
    const std::uint8_t* chunk_scales = codes + P.data_bytes();
    const std::size_t at = std::min(rows, k * R), real = std::min(rows, at + R) - at;
    if (real == 0) continue;
    if (L.axis == block_axis::rowwise) {  // lines are rows
      MXKIT_GPU_CHECK(memcpy_async(data + at * L.line_bytes(), codes, real * P.line_bytes(), copy_kind::device_to_device, stream));
      MXKIT_GPU_CHECK(memcpy_async(scales + at * L.blocks_per_line(), chunk_scales, real * P.blocks_per_line(), copy_kind::device_to_device, stream));
    } else {  // lines are columns: shard k holds positions [at, at + real) of each
      MXKIT_GPU_CHECK(memcpy_2d_async(data + packed_bytes(at, L.storage_bits()), L.line_bytes(), codes, P.line_bytes(),
                                      packed_bytes(real, L.storage_bits()), cols, copy_kind::device_to_device, stream));
      MXKIT_GPU_CHECK(memcpy_2d_async(scales + at / block, L.blocks_per_line(), chunk_scales, P.blocks_per_line(), real / block, cols,
                                      copy_kind::device_to_device, stream));
    }
  }
}

}  // namespace detail

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

  device_buffer<U> shard = detail::padded_shard(w, R, r, stream);
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
  detail::assemble_shards_async(L, P, R, all.data(), chunk, n, out.data().data(), out.scales().data(), stream);
  return out;
}

// The NVFP4 copy (`format`: formats::nvfp4 or nvfp4_2d; axis) of the whole W on every rank: the
// device twin of ref::gather_quantized_nvfp4 (the ranks' MAX of their shards' amaxes,
// gpu::nvfp4_amax, then each shard quantized with the whole copy's tensor scale,
// nvfp4_tensor_scale_source::from_amax; the same wire format and assembly). Round to nearest
// only, as the host function. The tensor scale stays in device memory; the result is complete in
// the order of `stream`.
template <class T>
  requires quantizer_input<T>
device_nvfp4_tensor gather_quantized_nvfp4(nn::communicator& comm, matrix_view<const T> w, const block_format& format, block_axis axis,
                                           const nvfp4_options& options, stream_t stream) {
  using U = std::remove_const_t<T>;
  const std::size_t rows = w.rows, cols = w.cols;
  const block_layout L{format, axis, rows, cols};
  mxkit::detail::check_nvfp4_layout(L, "gpu::gather_quantized_nvfp4");
  mxkit::detail::require(options.round != rounding::stochastic,
                         "gpu::gather_quantized_nvfp4: stochastic rounding draws by the element's index in the whole tensor, which a shard's "
                         "quantizer does not take; round to nearest");
  mxkit::detail::require(axis == block_axis::rowwise || rows % L.block_size() == 0, "gpu::gather_quantized_nvfp4: a columnwise copy needs rows (",
                         rows, ") a multiple of ", L.block_size());
  mxkit::detail::require(w.data != nullptr || rows * cols == 0, "gpu::gather_quantized_nvfp4: null weight");
  const std::size_t n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t R = ref::shard_rows(rows, n);
  const block_layout P{format, axis, R, cols};
  device_nvfp4_tensor out(L, options, scale_layout::row_major, true);
  // The `axis` copy's outputs (row-major scales); the tensor scale goes straight into the result.
  const auto outputs = [&](std::uint8_t* data, std::uint8_t* scales) {
    nvfp4_outputs q;
    (axis == block_axis::rowwise ? q.rowwise_data : q.columnwise_data) = data;
    (axis == block_axis::rowwise ? q.rowwise_scales : q.columnwise_scales) = scales;
    (axis == block_axis::rowwise ? q.rowwise_tensor_scale : q.columnwise_tensor_scale) = out.tensor_scale().data();
    return q;
  };
  if (rows == 0 || cols == 0) {  // no amax to reduce: the tensor scale of none, 1
    quantize_nvfp4(matrix_view<const U>{w.data, rows, cols, w.ld}, format, options, outputs(nullptr, nullptr), {}, stream);
    return out;
  }
  device_buffer<U> shard = detail::padded_shard(w, R, r, stream);
  const matrix_view<const U> mine{shard.data(), R, cols};
  // The whole copy's amax: this shard's, then the ranks' maximum.
  device_buffer<float> amax(1, stream);
  nvfp4_amax(mine, format, options, axis == block_axis::rowwise ? amax.data() : nullptr, axis == block_axis::columnwise ? amax.data() : nullptr,
             stream);
  comm.all_reduce({amax.data(), 1, nn::comm_type::f32}, {amax.data(), 1, nn::comm_type::f32}, nn::reduce_op::max);
  comm.join();
  // This shard's copy with that tensor scale (every rank's).
  const std::size_t chunk = P.data_bytes() + P.scale_count();
  device_buffer<std::uint8_t> send(chunk, stream), all(chunk * n, stream);
  quantize_nvfp4(mine, format, options, outputs(send.data(), send.data() + P.data_bytes()), nvfp4_tensor_scale_source::from_amax(amax.data()),
                 stream);
  comm.all_gather({send.data(), chunk, nn::comm_type::u8}, {all.data(), all.size(), nn::comm_type::u8});
  comm.join();
  detail::assemble_shards_async(L, P, R, all.data(), chunk, n, out.data().data(), out.scales().data(), stream);
  return out;
}

}  // namespace gpu
MXKIT_END_NAMESPACE
