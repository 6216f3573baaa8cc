// SPDX-License-Identifier: Apache-2.0
#pragma once
// Gathering a sharded weight as its quantized copies, on the host (the oracle and the wire format
// of sharded training's weight gather): each rank quantizes its own rows of W [rows, cols] and the
// ranks all_gather the bytes (u8), instead of gathering fp32 or bf16 and quantizing after. MXFP4
// moves 17/32 of a byte per element (codes and E8M0 scales), NVFP4 9/16, MXFP8 33/32, FP8 one
// byte: 2 to 7.5x less than fp32, 2 to 3.8x less than bf16.
//
// Why it is byte-identical to gathering first and quantizing after:
//   rows split in shards of R rows, R a multiple of 32 (shard_rows): a rowwise copy's blocks lie in
//     one row (within one shard), a columnwise copy's blocks are 32 consecutive rows of a column,
//     and R % 32 == 0 keeps each within one shard too; the 16-point Hadamard rotation runs inside a
//     block, the random signs depend on the seed only, so every block is quantized from the same
//     32 values with the same options wherever it is quantized;
//   stochastic rounding draws from (stream, element index): each shard passes its blocks' global
//     element index (the first index of its line segment), so the bits drawn are the same;
//   FP8 (delayed scaling): the scale is the table's, identical on every rank after the amax MAX
//     reduction (data_parallel.hpp), and the cast is element-wise; the gathered amax is the MAX
//     all_reduce of the shards' amaxes.
// The last shard is padded with zero rows to R (every rank sends the same count); padding rows
// form whole blocks of their own and are dropped on assembly.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/parallel/communicator.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>
#include <mxkit/ref/quantize.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>
#include <mxkit/tensor/mx_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace ref {

// Rows per shard for `ranks` ranks: ceil(rows / ranks) rounded up to a multiple of every format's
// block size (common_block_size: 32), so a columnwise block never spans two shards.
constexpr std::size_t shard_rows(std::size_t rows, std::size_t ranks) noexcept {
  const std::size_t per = (rows + ranks - 1) / ranks;
  return round_up_to_block(per, common_block_size);
}

namespace detail_gather {

// Rank r's rows of w [rows, cols] (row-major), zero-padded to R rows.
inline std::vector<float> shard_of(const std::vector<float>& w, std::size_t rows, std::size_t cols, std::size_t R, std::size_t r) {
  std::vector<float> out(R * cols, 0.0f);
  const std::size_t first = std::min(rows, r * R), last = std::min(rows, first + R);
  if (last > first) std::copy(w.begin() + static_cast<std::ptrdiff_t>(first * cols), w.begin() + static_cast<std::ptrdiff_t>(last * cols), out.begin());
  return out;
}

// The whole copy's codes and scales (layout L) from the all-gathered shard copies, `chunk` bytes
// each (a shard's codes of layout P, R rows, then its scales): each shard's real rows, its padding
// rows dropped. A columnwise copy's rows are a multiple of its block size (the callers check).
inline void assemble_shards(const block_layout& L, const block_layout& P, std::size_t R, const std::uint8_t* all, std::size_t chunk,
                            std::size_t n, std::uint8_t* data, std::uint8_t* scales) {
  const std::size_t rows = L.rows, cols = L.cols, block = L.block_size();
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint8_t* codes = all + k * chunk;
    const std::uint8_t* chunk_scales = codes + P.data_bytes();
    const std::size_t first = std::min(rows, k * R), count = std::min(rows, first + R) - first;  // real rows of shard k
    if (count == 0) continue;
    if (L.axis == block_axis::rowwise) {  // lines are rows: shard k's first `count` lines
      std::memcpy(data + first * L.line_bytes(), codes, count * P.line_bytes());
      std::memcpy(scales + first * L.blocks_per_line(), chunk_scales, count * P.blocks_per_line());
    } else {  // lines are columns: shard k holds positions [first, first + count) of every line
      const std::size_t bytes = packed_bytes(count, L.storage_bits()), at = packed_bytes(first, L.storage_bits());
      for (std::size_t c = 0; c < cols; ++c) {
        std::memcpy(data + c * L.line_bytes() + at, codes + c * P.line_bytes(), bytes);
        std::memcpy(scales + c * L.blocks_per_line() + first / block, chunk_scales + c * P.blocks_per_line(), count / block);
      }
    }
  }
}

}  // namespace detail_gather

// The mx copy (axis) of the whole W, from this rank's rows of it: each rank passes all of w (the
// values of rows outside its shard are not read) and receives every rank's quantized bytes.
inline mx_tensor gather_quantized_mx(nn::communicator& comm, const std::vector<float>& w, std::size_t rows, std::size_t cols, mx_type type,
                                     block_axis axis, const quantize_options& options) {
  detail::require(w.size() == rows * cols, "gather_quantized_mx: ", w.size(), " values for a ", rows, "x", cols, " weight");
  const std::size_t block = static_cast<std::size_t>(block_size_of(type));
  detail::require(axis == block_axis::rowwise || rows % block == 0, "gather_quantized_mx: a columnwise copy needs rows (", rows,
                  ") a multiple of ", block);
  const std::size_t n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t R = shard_rows(rows, n);
  const std::vector<float> mine = detail_gather::shard_of(w, rows, cols, R, r);
  // This shard's copy, each block quantized as the whole tensor's quantizer does it (ref::quantize):
  // the same block of values, options and element index (line * padded_length + position, for stochastic
  // rounding; round-to-nearest ignores it) at the block's place in the whole tensor.
  mx_tensor part(block_layout{checked_format_of(type, "gather_quantized_mx"), axis, R, cols}, options);
  const block_layout whole{format_of(type), axis, rows, cols};
  const block_layout& P = part.layout();
  visit_mx_type(type, [&](auto fmt) {
    using Fmt = decltype(fmt);
    quantize_options q = options;
    q.stream = stochastic_stream(options, axis);
    const bool by_row = axis == block_axis::rowwise;
    constexpr int n_block = Fmt::block_size;
    float v[n_block];
    for (std::size_t line = 0; line < P.lines(); ++line)
      for (std::size_t blk = 0; blk < P.blocks_per_line(); ++blk) {
        for (int i = 0; i < n_block; ++i) {
          const std::size_t pos = blk * n_block + static_cast<std::size_t>(i);
          v[i] = by_row ? (pos < cols ? mine[line * cols + pos] : 0.0f) : mine[pos * cols + line];
        }
        const std::size_t global = by_row ? (r * R + line) * whole.padded_length() + blk * n_block
                                          : line * whole.padded_length() + r * R + blk * n_block;
        const auto b = quantize_block<Fmt>(v, q, global);
        part.scales()[line * P.blocks_per_line() + blk] = b.scale.bits();
        std::uint8_t* out_line = part.data().data() + line * P.line_bytes();
        for (int i = 0; i < n_block; ++i)
          store_code(out_line, blk * n_block + static_cast<std::size_t>(i), b.elements[i].bits(), Fmt::storage_bits);
      }
  });
  // Wire format of a shard: element bytes, then scale bytes.
  std::vector<std::uint8_t> send(part.data().begin(), part.data().end());
  send.insert(send.end(), part.scales().begin(), part.scales().end());
  std::vector<std::uint8_t> all(send.size() * n);
  comm.all_gather({send.data(), send.size(), nn::comm_type::u8}, {all.data(), all.size(), nn::comm_type::u8});
  comm.join();

  mx_tensor out(block_layout{format_of(type), axis, rows, cols}, options);
  const block_layout& L = out.layout();
  std::vector<std::uint8_t> data(L.data_bytes()), scales(L.scale_count());
  detail_gather::assemble_shards(L, P, R, all.data(), send.size(), n, data.data(), scales.data());
  out.set_data(std::move(data));
  out.set_scales(std::move(scales));
  return out;
}

// The NVFP4 copy (`format`: formats::nvfp4 or nvfp4_2d; axis) of the whole W, from this rank's
// rows, on every rank. An NVFP4 copy's tensor scale is that of the whole copy's amax (arXiv
// 2509.25149), so the ranks reduce it first: each finds the amax of the values its shard's copy
// quantizes (the largest finite magnitude, rotated when the options rotate; zero padding raises
// nothing), one MAX all_reduce gives the whole copy's, and each rank quantizes its shard with
// that tensor scale. A block (or 16 x 16 tile) lies within one shard as the MX ones do, so every
// block gets the whole quantizer's scale and codes. Round to nearest only: stochastic rounding
// draws by element index in the whole tensor, which ref::quantize of a shard does not take.
// Per element gathered 9/16 byte (codes and E4M3 scales), against 17/32 for MXFP4.
inline nvfp4_tensor gather_quantized_nvfp4(nn::communicator& comm, const std::vector<float>& w, std::size_t rows, std::size_t cols,
                                           const block_format& format, block_axis axis, const nvfp4_options& options) {
  detail::require(w.size() == rows * cols, "gather_quantized_nvfp4: ", w.size(), " values for a ", rows, "x", cols, " weight");
  const block_layout L{format, axis, rows, cols};
  detail::check_nvfp4_layout(L, "gather_quantized_nvfp4");
  detail::check_nvfp4_options(options, "gather_quantized_nvfp4");
  detail::require(options.round != rounding::stochastic,
                  "gather_quantized_nvfp4: stochastic rounding draws by the element's index in the whole tensor, which a shard's quantizer does "
                  "not take; round to nearest");
  detail::require(axis == block_axis::rowwise || rows % L.block_size() == 0, "gather_quantized_nvfp4: a columnwise copy needs rows (", rows,
                  ") a multiple of ", L.block_size());
  const std::size_t n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t R = shard_rows(rows, n);
  const std::vector<float> mine = detail_gather::shard_of(w, rows, cols, R, r);
  const matrix_view<const float> shard{mine.data(), R, cols};
  const block_layout P{format, axis, R, cols};
  float amax = detail::nvfp4_copy_amax(shard, P, options, false, 0);
  comm.all_reduce({&amax, 1, nn::comm_type::f32}, {&amax, 1, nn::comm_type::f32}, nn::reduce_op::max);
  comm.join();
  const float t = nvfp4_tensor_scale(amax);
  const nvfp4_tensor part = quantize(shard, format, axis, options, t);
  // Wire format of a shard: element bytes, then scale bytes (the tensor scale is every rank's t).
  std::vector<std::uint8_t> send(part.data().begin(), part.data().end());
  send.insert(send.end(), part.scales().begin(), part.scales().end());
  std::vector<std::uint8_t> all(send.size() * n);
  comm.all_gather({send.data(), send.size(), nn::comm_type::u8}, {all.data(), all.size(), nn::comm_type::u8});
  comm.join();
  nvfp4_tensor out(L, options, t, true);
  detail_gather::assemble_shards(L, P, R, all.data(), send.size(), n, out.data().data(), out.scales().data());
  return out;
}

// The FP8 copy of the whole W (rowwise [rows, cols]; transpose() gives the columnwise one) with the
// global scale, from this rank's rows.
inline fp8_tensor gather_quantized_fp8(nn::communicator& comm, const std::vector<float>& w, std::size_t rows, std::size_t cols, fp8_type type,
                                       float scale) {
  detail::require(w.size() == rows * cols, "gather_quantized_fp8: ", w.size(), " values for a ", rows, "x", cols, " weight");
  const std::size_t n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t R = shard_rows(rows, n);
  const std::vector<float> mine = detail_gather::shard_of(w, rows, cols, R, r);
  fp8_tensor part = quantize_fp8(matrix_view<const float>{mine.data(), R, cols}, type, scale);
  std::vector<std::uint8_t> all(part.data.size() * n);
  comm.all_gather({part.data.data(), part.data.size(), nn::comm_type::u8}, {all.data(), all.size(), nn::comm_type::u8});
  float amax = part.amax;  // zero padding cannot raise it
  comm.all_reduce({&amax, 1, nn::comm_type::f32}, {&amax, 1, nn::comm_type::f32}, nn::reduce_op::max);
  comm.join();
  all.resize(rows * cols);  // the padding rows are the last ones
  return fp8_tensor{type, rows, cols, scale, amax, std::move(all)};
}

}  // namespace ref
MXKIT_END_NAMESPACE
