// SPDX-License-Identifier: Apache-2.0
#pragma once
// The MX quantization kernel for a call that asks for the rowwise copy alone (launched by
// gpu/quantize.hpp; the tiled kernel, gpu/quantize/kernel.hpp, writes the columnwise copy and
// both). Without a transpose nothing needs tiles. A segment is 32 consecutive blocks of one row
// (1024 elements), and 32 consecutive threads (a warp, half a wave64) take one segment, thread i
// its block i, through the same quantize_block_packed as every other path (so each byte equals
// the host reference, ref/quantize.hpp). A segment's input is one contiguous run, its codes
// another, and its row-major scales one 32-byte sector; the tiled kernel's rowwise stores come
// from 16 rows a warp, each row's two scale bytes a sector write of its own (docs/perf/quantize.md,
// v9).
//
// Staged: the segment's input and output pass through 2 KB (4 KB for float input) of shared
// memory a warp, so that every global load and store of the warp is one contiguous 512-byte run
// (a lane's 16 bytes beside its neighbours'), where a lane reading and writing its own block
// makes each warp access a 16-byte piece every 64 bytes: four times the L2 requests for the same
// bytes (Nsight Compute found the unstaged kernel's L2 busier than its DRAM). Staging covers whole
// segments of 16-byte aligned rows whose blocks are whole 16-byte chunks of output (every format
// but MXFP6); the rest reads and writes block by block, as Staged = false does everywhere.
// Staging measured faster for bf16 values (64 bytes a block out) and slower for codes, so
// gpu/quantize.hpp stages the values only (bench_quantize_gpu prints the other choice beside
// each; docs/perf/quantize.md, v10).
//
// Values: MXFP8 stored as bf16 values (quantize_outputs::values_as_bf16), 64 bytes a block
// (block_values, the tiled kernel's), so a rowwise copy of values streams as the codes do.
// Grid-stride over segments; the threads of a segment past its row's last block idle.
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
  // CTAs an SM the registers are held to: staging raised the 16-bit kernels' registers to two
  // CTAs an SM; three keep the unstaged kernel's warps (ptxas: a spill of a few bytes at most).
  // Float input keeps two.
  template <class T>
  static constexpr int min_blocks = sizeof(T) == 4 ? 2 : 3;
};

// Where 16-byte chunk c of a warp's stage lies: c ^ ((c >> 3) & 7). Eight lanes (a quarter warp,
// one shared-memory wavefront of 16-byte accesses) then touch eight distinct 16-byte bank groups
// both when lane l takes chunks 32 r + l (the contiguous global runs) and when lane i takes
// chunks K i + j of its own block for K = 1, 2, 4 or 8 chunks a block.
__device__ inline int staged_chunk(int c) { return c ^ ((c >> 3) & 7); }

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

template <class Fmt, class T, bool Rotate, bool RandomSigns, bool Staged, bool Values = false>
MXKIT_GLOBAL void __launch_bounds__(rowwise_shape::threads, rowwise_shape::min_blocks<T>) quantize_rowwise_kernel(const quantize_params<T> p) {
  static_assert(Fmt::block_size == mx_block_size, "a segment's threads each take one 32-element MX block");
  static_assert(!Values || (takes_bf16_values<Fmt> && !Rotate), "bf16 values are for MXFP8 without the rotation");
  constexpr int seg = rowwise_shape::segment_blocks;
  constexpr int block_bytes = Values ? 2 * mx_block_size : mx_block_size * Fmt::storage_bits / 8;
  constexpr int epc = 16 / static_cast<int>(sizeof(T));
  constexpr int in_chunks = raw_block<T>::chunks;          // 16-byte chunks of a block: input
  constexpr bool stage_out = Staged && block_bytes % 16 == 0;
  constexpr int out_chunks = block_bytes / 16;              // output (staged formats)
  constexpr int stage_chunks = seg * (in_chunks > out_chunks ? in_chunks : out_chunks);
  __shared__ uint4 stage[Staged ? rowwise_shape::threads / seg * stage_chunks : 1];
  uint4* const mine = stage + (Staged ? static_cast<int>(threadIdx.x) / seg * stage_chunks : 0);
  const std::size_t row_blocks = (p.cols + mx_block_size - 1) / mx_block_size;
  const std::size_t whole_blocks = p.cols / mx_block_size;  // blocks without padding
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

  for (std::size_t s = thread / seg; s < segments; s += groups) {
    const std::size_t row = s / segments_per_row;
    const std::size_t first = (s - row * segments_per_row) * seg;  // the segment's first block
    const std::size_t blk = first + static_cast<std::size_t>(slot);
    // The same for the 32 threads of the segment: staging is theirs together.
    const bool staged = Staged && p.vector_loads && first + seg <= whole_blocks;
    raw_block<T> raw;
    if (staged) {
      const uint4* src = reinterpret_cast<const uint4*>(p.in + row * p.ld + first * mx_block_size);
      uint4 c[in_chunks];
      for (int r = 0; r < in_chunks; ++r) c[r] = src[r * seg + slot];
      for (int r = 0; r < in_chunks; ++r) mine[staged_chunk(r * seg + slot)] = c[r];
      team_sync();
      for (int j = 0; j < in_chunks; ++j) raw.c[j] = mine[staged_chunk(slot * in_chunks + j)];
      team_sync();  // the stage is read before the outputs take it
    } else if (blk < row_blocks) {
      raw = load_raw_block(p, row, blk);
    }
    std::uint32_t words[block_words<Fmt>];
    e8m0 scale{};
    if (blk < row_blocks) {
      float v[mx_block_size];
      for (int j = 0; j < in_chunks; ++j) unpack_chunk<T>(raw.c[j], v + j * epc);
      if (p.amax)
        for (int i = 0; i < mx_block_size; ++i) amax = amax_bits(amax, v[i]);
      scale = quantize_block_packed<Fmt>(v, o, signs, (row * row_blocks + blk) * mx_block_size, words);
    }
    if constexpr (stage_out) {
      if (staged) {
        uint4 out[out_chunks];
        if constexpr (Values) block_values<Fmt>(words, scale, out, p.beyond_exact_range);
        else
          for (int j = 0; j < out_chunks; ++j) out[j] = make_uint4(words[4 * j], words[4 * j + 1], words[4 * j + 2], words[4 * j + 3]);
        for (int j = 0; j < out_chunks; ++j) mine[staged_chunk(slot * out_chunks + j)] = out[j];
        team_sync();
        uint4* dst = reinterpret_cast<uint4*>(p.row_data + row * line_bytes + first * block_bytes);
        for (int r = 0; r < out_chunks; ++r) dst[r * seg + slot] = mine[staged_chunk(r * seg + slot)];
        store_scale(p.row_scales, p.row_layout, p.rows, row_blocks, row, blk, scale);
        team_sync();  // the stage is read before the next segment's input takes it
        continue;
      }
    }
    if (blk < row_blocks) {
      block_cursor c{p.row_data + row * line_bytes + blk * block_bytes, 0, row, 0, blk};
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
