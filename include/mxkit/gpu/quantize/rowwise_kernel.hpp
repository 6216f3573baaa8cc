// SPDX-License-Identifier: Apache-2.0
#pragma once
// The MX quantization kernel for a call that asks for the rowwise copy alone (launched by
// gpu/quantize.hpp; the tiled kernel, gpu/quantize/kernel.hpp, writes the columnwise copy and
// both). Without a transpose there is nothing to stage: no shared memory, no tiles. A segment is
// 32 consecutive blocks of one row (1024 elements), and 32 consecutive threads (a warp, half a
// wave64) take one segment, thread i its block i: 16-byte loads straight from global memory,
// the block through the same quantize_block_packed as every other path (so each byte equals
// the host reference, ref/quantize.hpp), the codes out as 16-byte stores and the scale as one
// byte. A segment's codes are one contiguous run and its row-major scales one 32-byte sector;
// the tiled kernel's rowwise stores come from 16 rows a warp, each row's two scale bytes a
// sector write of its own (docs/perf/quantize.md, v9).
//
// Values: MXFP8 stored as bf16 values (quantize_outputs::values_as_bf16), 64 bytes a block through
// the tiled kernel's store_block_values, so a rowwise copy of values streams as the codes do.
//
// InFlight: the segments whose blocks a thread loads before it quantizes any of them. One, the
// default, measured as fast as two or faster in every rowwise case of bench_quantize_gpu, which
// prints both (docs/perf/quantize.md, v9). Grid-stride over segments; the threads of a segment
// past its row's last block idle.
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/device.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/block/quantize_block.hpp>
#include <mxkit/gpu/quantize/params.hpp>
#include <mxkit/gpu/quantize/scale_padding.hpp>
#include <mxkit/gpu/quantize/tile.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace detail {

struct rowwise_shape {
  static constexpr int threads = 256;        // per CTA
  static constexpr int segment_blocks = 32;  // blocks of a row per segment: one per thread of a group of 32
  static constexpr int in_flight = 1;        // segments a thread loads before quantizing (InFlight's default)
};

// The raw 16-byte chunks of one block: 32 elements of T.
template <class T>
struct raw_block {
  static constexpr int chunks = mx_block_size * static_cast<int>(sizeof(T)) / 16;  // 4 (16-bit) or 8 (float)
  uint4 c[chunks];
};

// Block `blk` of row `row` as raw chunks: vector loads when the launch allows them and the block
// lies inside the row, else element by element with zeros past the row's end (block padding).
template <class T>
__device__ inline raw_block<T> load_raw_block(const quantize_params<T>& p, std::size_t row, std::size_t blk) {
  raw_block<T> r;
  const std::size_t c0 = blk * mx_block_size;
  const T* src = p.in + row * p.ld + c0;
  if (p.vector_loads && c0 + mx_block_size <= p.cols) {
    for (int j = 0; j < raw_block<T>::chunks; ++j) r.c[j] = reinterpret_cast<const uint4*>(src)[j];
  } else {
    constexpr int epc = 16 / static_cast<int>(sizeof(T));
    for (int j = 0; j < raw_block<T>::chunks; ++j) {
      union {
        uint4 v;
        T e[epc];
      } u{};
      for (int k = 0; k < epc; ++k)
        if (c0 + static_cast<std::size_t>(j * epc + k) < p.cols) u.e[k] = src[j * epc + k];
      r.c[j] = u.v;
    }
  }
  return r;
}

template <class Fmt, class T, bool Rotate, bool RandomSigns, int InFlight, bool Values = false>
MXKIT_GLOBAL void __launch_bounds__(rowwise_shape::threads) quantize_rowwise_kernel(const quantize_params<T> p) {
  static_assert(Fmt::block_size == mx_block_size, "a segment's threads each take one 32-element MX block");
  static_assert(!Values || (takes_bf16_values<Fmt> && !Rotate), "bf16 values are for MXFP8 without the rotation");
  constexpr int seg = rowwise_shape::segment_blocks;
  constexpr int block_bytes = Values ? 2 * mx_block_size : mx_block_size * Fmt::storage_bits / 8;
  constexpr int epc = 16 / static_cast<int>(sizeof(T));
  const std::size_t row_blocks = (p.cols + mx_block_size - 1) / mx_block_size;
  const std::size_t segments_per_row = (row_blocks + seg - 1) / seg;
  const std::size_t segments = p.rows * segments_per_row;
  const std::size_t line_bytes = row_blocks * block_bytes;  // packed codes: whole bytes a block
  const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * rowwise_shape::threads + threadIdx.x;
  const std::size_t groups = static_cast<std::size_t>(gridDim.x) * (rowwise_shape::threads / seg);
  const int slot = static_cast<int>(threadIdx.x) % seg;
  quantize_options o = p.row_options;
  o.hadamard = Rotate;
  const hadamard_signs signs{RandomSigns ? p.sign_mask : 0u};
  std::uint32_t amax = 0;

  for (std::size_t first = thread / seg; first < segments; first += groups * InFlight) {
    // Loads of all InFlight segments first, then their blocks one by one.
    raw_block<T> raw[InFlight];
    std::size_t row[InFlight], blk[InFlight];
    bool live[InFlight];
#pragma unroll
    for (int u = 0; u < InFlight; ++u) {
      const std::size_t s = first + static_cast<std::size_t>(u) * groups;
      row[u] = s / segments_per_row;
      blk[u] = (s - row[u] * segments_per_row) * seg + static_cast<std::size_t>(slot);
      live[u] = s < segments && blk[u] < row_blocks;
      if (live[u]) raw[u] = load_raw_block(p, row[u], blk[u]);
    }
#pragma unroll
    for (int u = 0; u < InFlight; ++u) {
      if (!live[u]) continue;
      float v[mx_block_size];
      for (int j = 0; j < raw_block<T>::chunks; ++j) unpack_chunk<T>(raw[u].c[j], v + j * epc);
      if (p.amax)
        for (int i = 0; i < mx_block_size; ++i) amax = amax_bits(amax, v[i]);
      block_cursor c{p.row_data + row[u] * line_bytes + blk[u] * block_bytes, 0, row[u], 0, blk[u]};
      std::uint32_t words[block_words<Fmt>];
      const e8m0 scale = quantize_block_packed<Fmt>(v, o, signs, c.first_index(row_blocks), words);
      if constexpr (Values) store_block_values<Fmt>(c, words, scale, p.row_scales, p.row_layout, p.rows, row_blocks, p.beyond_exact_range);
      else store_block<Fmt>(c, words, scale, p.row_scales, p.row_layout, p.rows, row_blocks);
    }
  }

  if (p.amax) {
    amax = warp_max(amax);
    if (lane_id() == 0) atomic_max(p.amax, amax);
  }
  zero_scale_padding(p.row_scales, p.row_layout, p.rows, row_blocks, thread, static_cast<std::size_t>(gridDim.x) * rowwise_shape::threads);
}

}  // namespace detail
}  // namespace gpu
MXKIT_END_NAMESPACE
