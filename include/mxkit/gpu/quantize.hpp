#pragma once
// Fused MX quantization on the GPU, one launch: a row-major [rows, cols] float, bfloat16 or
// float16 matrix (with a leading dimension) is read once and written as the rowwise copy (blocks
// along cols), the columnwise copy (blocks along rows, stored transposed), or both, each with its
// scales in any scale_layout, plus the per-tensor amax. Every block goes through the host's
// quantize_block (optional 16-point Hadamard, amax, scale rule, RNE or stochastic rounding), so
// each byte equals the host reference (tensor/quantize.hpp); this file only moves data.
//
// Kernel shape: a CTA of 256 threads (bf16/fp16 input; 128 for float) owns a 128-row x 128-byte
// tile of the input. Tiles stream through a 3-stage shared-memory ring with 16-byte coalesced
// copies (cp.async on sm_80+: two tiles in flight while one is quantized, no registers held),
// then each thread quantizes one rowwise block (a row's 32 columns) and one columnwise block (a
// column's 32 rows) from shared memory with quantize_block_packed and stores its 16 or 32 bytes.
// Persistent grid: CTAs loop over tiles. 16-byte chunks are XOR-swizzled in shared memory so the
// row reads (16 bytes a thread) and the column reads (2 or 4 bytes) are bank-conflict-free.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <mxkit/block/quantize_block.hpp>
#include <mxkit/gpu/runtime.hpp>
#include <mxkit/tensor/matrix_view.hpp>
#include <mxkit/tensor/mx_tensor.hpp>
#include <mxkit/tensor/quantize.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {

// One stored MX copy in device memory (non-owning, read-only). data: [lines, line_bytes] as in
// mx_layout; scales: scale_storage_size(scales_layout, lines, blocks_per_line) bytes.
struct mx_device_view {
  mx_layout layout;
  quantize_options options;  // how it was quantized (dequantize undoes the rotation)
  scale_layout scales_layout = scale_layout::row_major;
  const std::uint8_t* data = nullptr;
  const std::uint8_t* scales = nullptr;
};

// What one quantize call writes; a null data pointer skips that copy, a null amax skips it.
struct quantize_outputs {
  std::uint8_t* rowwise_data = nullptr;
  std::uint8_t* rowwise_scales = nullptr;
  scale_layout rowwise_scales_layout = scale_layout::row_major;
  std::uint8_t* columnwise_data = nullptr;
  std::uint8_t* columnwise_scales = nullptr;
  scale_layout columnwise_scales_layout = scale_layout::row_major;
  float* amax = nullptr;  // max |x| over the input (bits of the integer max, as the host's)
};

namespace detail {

// Tile geometry for input type T: 128 rows x 128 bytes (64 bf16/fp16 or 32 float columns),
// 16 KB. One thread per rowwise block (128 rows x cols/32 blocks) = one per columnwise block
// (cols columns x 4 blocks): 256 threads for 16-bit inputs, 128 for float. The 4 columnwise
// blocks of a column go to 4 adjacent lanes, so a warp writes each of 8 columnwise lines 64
// (FP4) or 128 (8-bit) contiguous bytes. Shared memory holds `stages` tiles; tiles are copied
// `stages - 1` ahead of the one being quantized.
template <class T>
struct quantize_tile {
  static constexpr int rows = 128;
  static constexpr int cols = 128 / static_cast<int>(sizeof(T));
  static constexpr int threads = rows * cols / mx_block_size;
  static constexpr int row_blocks = cols / mx_block_size;  // rowwise blocks per tile row: 2 or 1
  static constexpr int col_blocks = rows / mx_block_size;  // columnwise blocks per tile column: 4
  static constexpr int elems_per_chunk = 16 / static_cast<int>(sizeof(T));
  static constexpr int chunks_per_row = 8;                                  // 128 bytes: all 32 banks
  static constexpr int chunks_per_block = mx_block_size / elems_per_chunk;  // 4 (16-bit) or 8 (float)
  static constexpr int chunks = rows * chunks_per_row;
  static constexpr int chunks_per_thread = chunks / threads;
  static constexpr int stages = 3;
  // CTAs per SM the NVIDIA build is register-capped for: 3 x 256 threads, 80 registers (64 would
  // spill: ptxas -v), 3 x 48 KB of shared memory; bench_quantize_gpu compares 2, 3 and 4.
  static constexpr int min_blocks = MXKIT_GPU_CUDA ? 768 / threads : 1;
  static_assert(row_blocks * rows == threads && col_blocks * cols == threads);
};

template <class T>
struct quantize_params {
  const T* in;  // [rows, ld]
  std::size_t rows, cols, ld;
  bool vector_loads;  // in and every row start are 16-byte aligned
  quantize_options row_options, col_options;  // stream already set per copy (stochastic_stream)
  std::uint32_t sign_mask;
  std::uint8_t *row_data, *row_scales, *col_data, *col_scales;
  scale_layout row_layout, col_layout;
  unsigned* amax;  // float bits, atomicMax
  std::size_t tiles_m, tiles_k;
};

// Shared-memory position (in 16-byte chunks, 8 per 128-byte row) of chunk `chunk` of tile row
// `row`: XOR-swizzled so that the 16-byte row reads (8 threads: 4 or 8 consecutive rows) and the
// 2-byte column reads (a warp: 8 columns x 4 rows 32 apart) each hit distinct banks.
MXKIT_HD constexpr int swizzle_chunk(int row, int chunk) { return chunk ^ ((row ^ (row >> 5)) & 7); }

// Elements of one 16-byte chunk as floats.
template <class T>
__device__ inline void unpack_chunk(uint4 c, float* v) {
  const std::uint32_t w[4] = {c.x, c.y, c.z, c.w};
  if constexpr (sizeof(T) == 4) {
    for (int k = 0; k < 4; ++k) v[k] = mxkit::bit_cast<float>(w[k]);
  } else {  // two 16-bit elements a word, the first in the low half
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = load_float(T::from_bits(static_cast<std::uint16_t>(w[k] & 0xFFFFu)));
      v[2 * k + 1] = load_float(T::from_bits(static_cast<std::uint16_t>(w[k] >> 16)));
    }
  }
}

template <class Fmt>
__device__ inline void store_words(std::uint8_t* dst, const std::uint32_t* w) {
  for (int j = 0; j < block_words<Fmt>; j += 4) reinterpret_cast<uint4*>(dst)[j / 4] = make_uint4(w[j], w[j + 1], w[j + 2], w[j + 3]);
}

// An edge tile (or rows that are not 16-byte aligned): this thread's chunks element by element,
// zero outside the matrix (block padding). Out of line: its index arithmetic stays off the
// interior tiles' path.
template <class T>
__device__ __attribute__((noinline)) void copy_edge_tile(const T* in, std::size_t rows, std::size_t cols, std::size_t ld, uint4* dst,
                                                         std::size_t r0, std::size_t c0, int copy_row0, int copy_chunk) {
  using tile = quantize_tile<T>;
  constexpr int epc = tile::elems_per_chunk, cpr = tile::chunks_per_row, copy_row_step = tile::threads / cpr;
  for (int j = 0; j < tile::chunks_per_thread; ++j) {
    const int row = copy_row0 + j * copy_row_step;
    const T* s = in + (r0 + static_cast<std::size_t>(row)) * ld + c0 + static_cast<std::size_t>(copy_chunk * epc);
    union {
      uint4 v;
      T e[epc];
    } u{};
    for (int k = 0; k < epc; ++k)
      if (r0 + static_cast<std::size_t>(row) < rows && c0 + static_cast<std::size_t>(copy_chunk * epc + k) < cols) u.e[k] = s[k];
    dst[row * cpr + swizzle_chunk(row, copy_chunk)] = u.v;
  }
}

template <class Fmt, class T, int MinBlocks = quantize_tile<T>::min_blocks>
__global__ void __launch_bounds__(quantize_tile<T>::threads, MinBlocks) quantize_kernel(const quantize_params<T> p) {
  using tile = quantize_tile<T>;
  constexpr int tr = tile::rows, tc = tile::cols, epc = tile::elems_per_chunk, cpr = tile::chunks_per_row;
  constexpr int cpb = tile::chunks_per_block, nthreads = tile::threads, stages = tile::stages;
  constexpr int block_bytes = mx_block_size * Fmt::storage_bits / 8;
  constexpr int stage_chunks = tile::chunks;
  __shared__ uint4 smem[stages * stage_chunks];

  const int t = static_cast<int>(threadIdx.x);
  const std::size_t row_blocks = (p.cols + mx_block_size - 1) / mx_block_size;  // rowwise blocks per line
  const std::size_t col_blocks = (p.rows + mx_block_size - 1) / mx_block_size;  // columnwise blocks per line
  const std::size_t row_line_bytes = packed_bytes(row_blocks * mx_block_size, Fmt::storage_bits);
  const std::size_t col_line_bytes = packed_bytes(col_blocks * mx_block_size, Fmt::storage_bits);
  std::uint32_t amax = 0;

  // Tiles in row-major order over a [tiles_m, tiles_k] grid; a CTA visits blockIdx.x,
  // blockIdx.x + gridDim.x, ... Positions advance with a carry instead of a 64-bit division.
  struct position {
    unsigned m, k;
  };
  const unsigned tiles_k = static_cast<unsigned>(p.tiles_k), tiles_m = static_cast<unsigned>(p.tiles_m);
  const unsigned step_m = gridDim.x / tiles_k, step_k = gridDim.x % tiles_k;
  auto advance = [&](position& q) {
    q.k += step_k;
    q.m += step_m;
    if (q.k >= tiles_k) {
      q.k -= tiles_k;
      ++q.m;
    }
  };

  // Copy-in: this thread moves chunk t % 8 of tile rows t/8 + j * (threads/8), j < chunks_per_thread.
  const int copy_row0 = t / cpr, copy_chunk = t % cpr;
  constexpr int copy_row_step = nthreads / cpr;
  auto issue = [&](position q, int stage) {  // starts copying tile q into `stage`
    if (q.m >= tiles_m) return;
    uint4* dst = smem + stage * stage_chunks;
    const std::size_t r0 = static_cast<std::size_t>(q.m) * tr, c0 = static_cast<std::size_t>(q.k) * tc;
    if (p.vector_loads && r0 + tr <= p.rows && c0 + tc <= p.cols) {
      const T* src = p.in + (r0 + static_cast<std::size_t>(copy_row0)) * p.ld + c0 + static_cast<std::size_t>(copy_chunk * epc);
      for (int j = 0; j < tile::chunks_per_thread; ++j) {
        const int row = copy_row0 + j * copy_row_step;
        async_copy16(dst + row * cpr + swizzle_chunk(row, copy_chunk), src + static_cast<std::size_t>(j * copy_row_step) * p.ld);
      }
    } else {
      copy_edge_tile(p.in, p.rows, p.cols, p.ld, dst, r0, c0, copy_row0, copy_chunk);
    }
  };

  // Rowwise: tile row t / row_blocks, block t % row_blocks. Columnwise: column t / 4, block t % 4.
  const int rrow = t / tile::row_blocks, rkb = t % tile::row_blocks;
  const int ccol = t / tile::col_blocks, crb = t % tile::col_blocks;
  const int cchunk = ccol / epc, cbyte = (ccol % epc) * static_cast<int>(sizeof(T));

  position cur{blockIdx.x / tiles_k, blockIdx.x % tiles_k}, ahead = cur;
  for (int s = 0; s < stages - 1; ++s) {
    issue(ahead, s);
    async_commit();
    advance(ahead);
  }
  for (int k = 0; cur.m < tiles_m; ++k, advance(cur)) {
    async_wait<stages - 2>();  // this thread's copies of tile k have landed
    sync_threads();            // everyone's have, and everyone is done with tile k - 1
    issue(ahead, (k + stages - 1) % stages);
    async_commit();
    advance(ahead);

    const uint4* stage = smem + (k % stages) * stage_chunks;
    const std::size_t r0 = static_cast<std::size_t>(cur.m) * tr, c0 = static_cast<std::size_t>(cur.k) * tc;
    float v[mx_block_size];
    std::uint32_t words[block_words<Fmt>];
    if (p.row_data) {
      const std::size_t line = r0 + static_cast<std::size_t>(rrow), blk = c0 / mx_block_size + static_cast<std::size_t>(rkb);
      if (line < p.rows && blk < row_blocks) {
        for (int j = 0; j < cpb; ++j) unpack_chunk<T>(stage[rrow * cpr + swizzle_chunk(rrow, rkb * cpb + j)], v + j * epc);
        if (p.amax)
          for (int i = 0; i < mx_block_size; ++i) amax = amax_bits(amax, v[i]);
        const e8m0 scale = quantize_block_packed<Fmt>(v, p.row_options, hadamard_signs{p.sign_mask},
                                                      line * row_blocks * mx_block_size + blk * mx_block_size, words);
        store_words<Fmt>(p.row_data + line * row_line_bytes + blk * block_bytes, words);
        p.row_scales[scale_offset(p.row_layout, p.rows, row_blocks, line, blk)] = scale.bits();
      }
    }
    if (p.col_data) {
      const std::size_t line = c0 + static_cast<std::size_t>(ccol), blk = r0 / mx_block_size + static_cast<std::size_t>(crb);
      if (line < p.cols && blk < col_blocks) {
        const unsigned char* base = reinterpret_cast<const unsigned char*>(stage) + cbyte;
        for (int i = 0; i < mx_block_size; ++i) {
          const int row = crb * mx_block_size + i;  // swizzle: (i ^ crb) & 7, i known at compile time
          v[i] = load_float(*reinterpret_cast<const T*>(base + (row * cpr + swizzle_chunk(row, cchunk)) * 16));
        }
        if (p.amax && !p.row_data)
          for (int i = 0; i < mx_block_size; ++i) amax = amax_bits(amax, v[i]);
        const e8m0 scale = quantize_block_packed<Fmt>(v, p.col_options, hadamard_signs{p.sign_mask},
                                                      line * col_blocks * mx_block_size + blk * mx_block_size, words);
        store_words<Fmt>(p.col_data + line * col_line_bytes + blk * block_bytes, words);
        p.col_scales[scale_offset(p.col_layout, p.cols, col_blocks, line, blk)] = scale.bits();
      }
    }
  }
  async_wait<0>();  // no copy may outlive the kernel (the last issues were for tiles past the end: none)

  if (p.amax) {
    amax = warp_max(amax);
    if (lane_id() == 0) atomic_max(p.amax, amax);
  }
  // Padding entries of padded scale layouts: zero, written once by the grid.
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * nthreads;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * nthreads + static_cast<std::size_t>(t);
  auto zero_padding = [&](std::uint8_t* scales, scale_layout l, std::size_t lines, std::size_t blocks) {
    if (!scales || l == scale_layout::row_major) return;
    const scale_extent e = padded_scale_extent(l, lines, blocks);
    const std::size_t extra = e.blocks - blocks;
    const std::size_t right = lines * extra;  // lines x [blocks, padded blocks)
    const std::size_t total = right + (e.lines - lines) * e.blocks;
    for (std::size_t i = first; i < total; i += stride) {
      const std::size_t line = i < right ? i / extra : lines + (i - right) / e.blocks;
      const std::size_t blk = i < right ? blocks + i % extra : (i - right) % e.blocks;
      scales[scale_offset(l, lines, blocks, line, blk)] = 0;
    }
  };
  zero_padding(p.row_data ? p.row_scales : nullptr, p.row_layout, p.rows, row_blocks);
  zero_padding(p.col_data ? p.col_scales : nullptr, p.col_layout, p.cols, col_blocks);
}

// Persistent grid: as many CTAs as fit on the device at once, or fewer if there are fewer tiles.
template <class Kernel>
inline int persistent_grid(Kernel kernel, int threads, std::size_t tiles) {
  int dev = 0, sms = 0, per_sm = 0;
  MXKIT_GPU_CHECK(get_device(&dev));
  MXKIT_GPU_CHECK(get_multiprocessor_count(&sms, dev));
  MXKIT_GPU_CHECK(max_active_blocks_per_multiprocessor(&per_sm, kernel, threads, 0));
  const std::size_t resident = static_cast<std::size_t>(per_sm < 1 ? 1 : per_sm) * static_cast<std::size_t>(sms);
  return static_cast<int>(tiles < resident ? tiles : resident);
}

inline void check_output_pointer(const std::uint8_t* p, const char* what) {
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(p) % 16 == 0, "gpu::quantize: ", what,
                         " must be 16-byte aligned (element rows are written 16 bytes at a time)");
}

}  // namespace detail

namespace detail {
// Checks the arguments and fills the kernel parameters; false: nothing to launch.
template <class U>
bool make_quantize_params(matrix_view<const U> in, const quantize_options& options, const quantize_outputs& out,
                          stream_t stream, quantize_params<U>& p) {
  mxkit::detail::check_matrix(in, "gpu::quantize:");
  if (out.amax) MXKIT_GPU_CHECK(memset_async(out.amax, 0, sizeof(float), stream));
  if (in.rows == 0 || in.cols == 0) return false;  // nothing to write, padding included
  mxkit::detail::require(out.rowwise_data || out.columnwise_data, "gpu::quantize: no output copy requested");
  mxkit::detail::require(!out.rowwise_data || out.rowwise_scales, "gpu::quantize: rowwise data without rowwise scales");
  mxkit::detail::require(!out.columnwise_data || out.columnwise_scales, "gpu::quantize: columnwise data without columnwise scales");
  if (out.rowwise_data) check_output_pointer(out.rowwise_data, "rowwise data");
  if (out.columnwise_data) check_output_pointer(out.columnwise_data, "columnwise data");
  using tile = quantize_tile<U>;
  p = {};
  p.in = in.data;
  p.rows = in.rows;
  p.cols = in.cols;
  p.ld = in.stride();
  p.vector_loads = reinterpret_cast<std::uintptr_t>(in.data) % 16 == 0 && (p.ld * sizeof(U)) % 16 == 0;
  p.row_options = options;
  p.row_options.stream = stochastic_stream(options, block_axis::rowwise);
  p.col_options = options;
  p.col_options.stream = stochastic_stream(options, block_axis::columnwise);
  p.sign_mask = options.sign_mask();
  p.row_data = out.rowwise_data;
  p.row_scales = out.rowwise_scales;
  p.row_layout = out.rowwise_scales_layout;
  p.col_data = out.columnwise_data;
  p.col_scales = out.columnwise_scales;
  p.col_layout = out.columnwise_scales_layout;
  p.amax = reinterpret_cast<unsigned*>(out.amax);
  p.tiles_m = (in.rows + tile::rows - 1) / tile::rows;
  p.tiles_k = (in.cols + tile::cols - 1) / tile::cols;
  return true;
}

template <class Fmt, class U, int MinBlocks = quantize_tile<U>::min_blocks>
void launch_quantize(const quantize_params<U>& p, stream_t stream) {
  const int grid = persistent_grid(quantize_kernel<Fmt, U, MinBlocks>, quantize_tile<U>::threads, p.tiles_m * p.tiles_k);
  quantize_kernel<Fmt, U, MinBlocks><<<grid, quantize_tile<U>::threads, 0, stream>>>(p);
  MXKIT_GPU_CHECK_LAUNCH();
}
}  // namespace detail

// Quantizes `in` (device memory) to MX format `type` as `options` say, into the copies named in
// `out` (device memory, sizes as mx_layout and scale_storage_size give). Asynchronous on `stream`;
// out.amax, when given, is zeroed on the stream first. Throws std::invalid_argument on bad
// arguments and gpu::error on a runtime failure.
template <class T>
  requires quantizer_input<T>
void quantize(matrix_view<const T> in, mx_type type, const quantize_options& options, const quantize_outputs& out,
              stream_t stream = nullptr) {
  using U = std::remove_const_t<T>;
  detail::quantize_params<U> p;
  if (!detail::make_quantize_params<U>({in.data, in.rows, in.cols, in.ld}, options, out, stream, p)) return;
  visit_mx_type(type, [&](auto fmt) { detail::launch_quantize<decltype(fmt), U>(p, stream); });
}

// Owning device copy: data, scales (in any layout) and how it was quantized.
class device_mx_tensor {
 public:
  device_mx_tensor() = default;
  device_mx_tensor(mx_layout layout, const quantize_options& options, scale_layout scales_layout = scale_layout::row_major)
      : layout_(layout),
        options_(options),
        scales_layout_(scales_layout),
        data_(layout.data_bytes()),
        scales_(scale_storage_size(scales_layout, layout.lines(), layout.blocks_per_line())) {}

  const mx_layout& layout() const noexcept { return layout_; }
  const quantize_options& options() const noexcept { return options_; }
  scale_layout scales_layout() const noexcept { return scales_layout_; }
  device_buffer<std::uint8_t>& data() noexcept { return data_; }
  device_buffer<std::uint8_t>& scales() noexcept { return scales_; }
  const device_buffer<std::uint8_t>& data() const noexcept { return data_; }
  const device_buffer<std::uint8_t>& scales() const noexcept { return scales_; }
  mx_device_view view() const noexcept { return {layout_, options_, scales_layout_, data_.data(), scales_.data()}; }
  // The copy as mxkit's GEMMs take it (gpu/gemm: row-major scales); device pointers.
  mx_const_view gemm_view() const {
    mxkit::detail::require(scales_layout_ == scale_layout::row_major, "device_mx_tensor::gemm_view: scales are stored ",
                           name_of(scales_layout_), "; mxkit's GEMMs read row_major scales");
    return {layout_, options_, data_.data(), scales_.data()};
  }

  // Host copy with row-major scales (converted from the stored layout). Synchronous.
  mx_tensor to_host(stream_t s = nullptr) const {
    mx_tensor h(layout_, options_);
    h.data() = data_.to_host(s);
    const std::vector<std::uint8_t> stored = scales_.to_host(s);
    h.scales() = to_row_major_scales(stored.data(), layout_.lines(), layout_.blocks_per_line(), scales_layout_);
    return h;
  }

 private:
  mx_layout layout_;
  quantize_options options_;
  scale_layout scales_layout_ = scale_layout::row_major;
  device_buffer<std::uint8_t> data_;
  device_buffer<std::uint8_t> scales_;
};

// The pair the training recipes consume, allocated for `in`'s shape and quantized in one launch.
struct device_mx_pair {
  device_mx_tensor rowwise, columnwise;
};

template <class T>
  requires quantizer_input<T>
device_mx_pair quantize_both(matrix_view<const T> in, mx_type type, const quantize_options& options = {},
                             scale_layout scales_layout = scale_layout::row_major, float* amax = nullptr,
                             stream_t stream = nullptr) {
  device_mx_pair r{device_mx_tensor({type, block_axis::rowwise, in.rows, in.cols}, options, scales_layout),
                   device_mx_tensor({type, block_axis::columnwise, in.rows, in.cols}, options, scales_layout)};
  quantize(in, type, options,
           {r.rowwise.data().data(), r.rowwise.scales().data(), scales_layout, r.columnwise.data().data(),
            r.columnwise.scales().data(), scales_layout, amax},
           stream);
  return r;
}

}  // namespace gpu
MXKIT_END_NAMESPACE
