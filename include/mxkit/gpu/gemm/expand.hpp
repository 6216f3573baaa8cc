#pragma once
// Re-encodes the element codes of an MX copy as E4M3 bytes, keeping its scales: every E2M1,
// E2M3 and E3M2 value is exactly an E4M3 value (fewer exponent and mantissa bits), so the FP8
// tensor-core path computes MXFP4/MXFP6 products exactly. One pass over the operand
// ([lines, K] codes in, [lines, K] bytes out, a few microseconds at the benchmark shapes) instead
// of a conversion inside the GEMM, where it would take issue slots from the scale promotion that
// bounds the Hopper kernel (sm90_gemm.hpp; bench/NOTES_gemm.md has the count).
#include <cstddef>
#include <cstdint>

#include <mxkit/gpu/platform.hpp>  // first: the vendor runtime before any MXKIT_HD code
#include <mxkit/format/e4m3.hpp>
#include <mxkit/gpu/gemm/operand.hpp>
#include <mxkit/gpu/runtime.hpp>

MXKIT_BEGIN_NAMESPACE
namespace gpu {
namespace expand {

inline constexpr int threads = 256;

// E4M3 code of element code c of type t (exact for E2M1, E2M3, E3M2, E4M3).
MXKIT_HD constexpr std::uint8_t to_e4m3(mx_type t, std::uint8_t c) noexcept {
  return e4m3::from_float(decode_mx_element(t, c)).bits();
}
static_assert(to_e4m3(mx_type::mxfp4, 0x7) == 0x4C && to_e4m3(mx_type::mxfp4, 0x9) == 0xB0);  // 6, -0.5

// Thread i writes the 16 output bytes [16 i, 16 i + 16) of the [lines, k] result (k % 32 == 0).
__global__ void __launch_bounds__(threads) to_e4m3_kernel(const std::uint8_t* src, std::size_t src_line_bytes, mx_type t,
                                                          std::uint8_t* dst, std::size_t lines, std::size_t k) {
  __shared__ std::uint8_t lut[256];
  for (int c = static_cast<int>(threadIdx.x); c < 256; c += threads) lut[c] = to_e4m3(t, static_cast<std::uint8_t>(c));
  __syncthreads();
  const std::size_t chunks_per_line = k / 16;
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * threads + threadIdx.x;
  if (i >= lines * chunks_per_line) return;
  const std::size_t line = i / chunks_per_line, chunk = i % chunks_per_line;
  std::uint32_t out[4];
  if (t == mx_type::mxfp4) {  // 16 elements in 8 bytes, element 2j in the low nibble of byte j
    const uint2 in = *reinterpret_cast<const uint2*>(src + line * src_line_bytes + chunk * 8);
    const std::uint32_t w[2] = {in.x, in.y};
    for (int h = 0; h < 2; ++h)
      for (int b = 0; b < 2; ++b) {
        const std::uint32_t x = w[h] >> (16 * b);
        out[2 * h + b] = lut[x & 0xF] | (lut[(x >> 4) & 0xF] << 8) | (lut[(x >> 8) & 0xF] << 16) |
                         (static_cast<std::uint32_t>(lut[(x >> 12) & 0xF]) << 24);
      }
  } else {
    const uint4 in = *reinterpret_cast<const uint4*>(src + line * src_line_bytes + chunk * 16);
    const std::uint32_t w[4] = {in.x, in.y, in.z, in.w};
    for (int j = 0; j < 4; ++j)
      out[j] = lut[w[j] & 0xFF] | (lut[(w[j] >> 8) & 0xFF] << 8) | (lut[(w[j] >> 16) & 0xFF] << 16) |
               (static_cast<std::uint32_t>(lut[w[j] >> 24]) << 24);
  }
  *reinterpret_cast<uint4*>(dst + line * k + chunk * 16) = make_uint4(out[0], out[1], out[2], out[3]);
}

// Does operand o need this pass before an FP8 tensor-core path?
inline bool needed(const gemm_operand& o) noexcept {
  return o.kind == operand_kind::mx && (o.type == mx_type::mxfp4 || o.type == mx_type::mxfp6_e2m3 || o.type == mx_type::mxfp6_e3m2);
}
inline std::size_t bytes(const gemm_operand& o) noexcept { return needed(o) ? o.lines * o.length : 0; }

// dst: [o.lines, o.length] bytes, 16-byte aligned. Source lines must be 8-byte (FP4) or 16-byte
// (FP6) aligned, as the quantizer's padded lines are.
inline void launch(const gemm_operand& o, std::uint8_t* dst, stream_t stream) {
  mxkit::detail::require(needed(o) && o.length % 32 == 0, "expand: operand is not an MXFP4/MXFP6 copy");
  const std::size_t align = o.type == mx_type::mxfp4 ? 8 : 16;
  mxkit::detail::require(reinterpret_cast<std::uintptr_t>(o.data) % align == 0 && o.line_bytes % align == 0 &&
                             reinterpret_cast<std::uintptr_t>(dst) % 16 == 0,
                         "expand: operand rows are not ", align, "-byte aligned");
  const std::size_t work = o.lines * (o.length / 16);
  if (work == 0) return;
  const std::size_t grid = (work + threads - 1) / threads;
  mxkit::detail::require(grid <= 0x7FFFFFFF, "expand: operand too large");
  to_e4m3_kernel<<<static_cast<unsigned>(grid), threads, 0, stream>>>(o.data, o.line_bytes, o.type, dst, o.lines, o.length);
  MXKIT_GPU_CHECK_LAUNCH();
}

}  // namespace expand
}  // namespace gpu
MXKIT_END_NAMESPACE
