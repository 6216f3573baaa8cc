// SPDX-License-Identifier: Apache-2.0
#pragma once
// A "foreign" MX quantizer for the validation tests, written from the peers' published rules and
// sharing no code with mxkit (it includes no mxkit header): element values come from the format
// definitions (OCP MX v1.0 section 5.3, OCP 8-bit FP), the scale from the rule's formula in
// double arithmetic, the element by a nearest search over the format's values, and each storage
// layout from its published description (cuBLAS "1D Block Scaling Factors Layout", AITER's
// e8m0_shuffle permutation). It is deliberately plain and slow. Whatever it writes must pass
// mxkit::ref::validate when described by the matching mx_storage; planted errors must be pinpointed.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace foreign {

enum class element { e2m1, e4m3, e5m2 };
enum class scale_mode { floor, rceil, ceil, even };  // torchao's ScaleCalculationMode names
enum class scale_placement { row_major, block_major, cublas_128x4, aiter_shuffle };

struct format {
  int ebits, mbits, bias;
  bool ieee_specials;  // E5M2: top exponent is Inf/NaN; E4M3: only S.1111.111 is NaN; E2M1: none
};
inline format format_of(element e) {
  switch (e) {
    case element::e2m1: return {2, 1, 1, false};
    case element::e4m3: return {4, 3, 7, false};
    case element::e5m2: return {5, 2, 15, true};
  }
  return {2, 1, 1, false};
}

// Value of a magnitude code (sign bit clear), NaN for the codes that are not finite numbers.
inline double magnitude_value(element e, unsigned code) {
  const format f = format_of(e);
  const unsigned exp = code >> f.mbits, man = code & ((1u << f.mbits) - 1);
  const unsigned top = (1u << f.ebits) - 1;
  if (f.ieee_specials && exp == top) return std::numeric_limits<double>::quiet_NaN();
  if (e == element::e4m3 && exp == top && man == (1u << f.mbits) - 1) return std::numeric_limits<double>::quiet_NaN();
  if (exp == 0) return std::ldexp(static_cast<double>(man), 1 - f.bias - f.mbits);  // subnormal
  return std::ldexp(static_cast<double>((1u << f.mbits) + man), static_cast<int>(exp) - f.bias - f.mbits);
}
inline unsigned magnitude_codes(element e) { return 1u << (format_of(e).ebits + format_of(e).mbits); }
inline double max_value(element e) {
  double m = 0;
  for (unsigned c = 0; c < magnitude_codes(e); ++c)
    if (!std::isnan(magnitude_value(e, c))) m = std::max(m, magnitude_value(e, c));
  return m;
}
inline int emax(element e) { return static_cast<int>(std::floor(std::log2(max_value(e)))); }

enum class rounding { nearest_even, nearest_away, stochastic_add_carry };

// y (already divided by the block scale) to a code: the nearest finite magnitude (ties to the
// even code, or away from zero), saturating at max; stochastic: round up when floor(fraction *
// 2^32) + random >= 2^32 (the "add and carry" rule of hardware SR conversions).
inline unsigned encode(element e, double y, rounding r, std::uint32_t random = 0) {
  const unsigned sign_bit = 1u << (format_of(e).ebits + format_of(e).mbits);
  const unsigned sign = std::signbit(y) ? sign_bit : 0u;
  const double a = std::fabs(y);
  // Finite magnitudes in increasing order are the codes 0, 1, ... up to max.
  unsigned lo = 0;
  while (lo + 1 < magnitude_codes(e) && !std::isnan(magnitude_value(e, lo + 1)) && magnitude_value(e, lo + 1) <= a) ++lo;
  const double vlo = magnitude_value(e, lo);
  if (vlo == a || lo + 1 == magnitude_codes(e) || std::isnan(magnitude_value(e, lo + 1))) return sign | lo;  // exact or >= max
  const double vhi = magnitude_value(e, lo + 1);
  bool up = false;
  if (r == rounding::stochastic_add_carry) {
    const double fraction32 = std::floor((a - vlo) / (vhi - vlo) * 4294967296.0);  // the step is a power of two: exact
    up = fraction32 + static_cast<double>(random) >= 4294967296.0;
  } else if (a - vlo != vhi - a) {
    up = a - vlo > vhi - a;
  } else {
    up = r == rounding::nearest_away || (lo & 1u);  // a tie: away, or to the even code
  }
  return sign | (up ? lo + 1 : lo);
}

// The block scale exponent by the rule, in double arithmetic (amax finite, > 0).
inline int scale_exponent(element e, scale_mode m, double amax) {
  int k = 0;
  const double f = std::frexp(amax, &k);  // amax = f * 2^k, f in [0.5, 1): floor(log2 amax) = k - 1
  const int floor_log2 = k - 1;
  int x = 0;
  switch (m) {
    case scale_mode::floor: x = floor_log2 - emax(e); break;
    case scale_mode::ceil: x = (f == 0.5 ? floor_log2 : floor_log2 + 1) - emax(e); break;
    case scale_mode::even: {  // round amax to the element's mantissa width, half up, then floor
      const int mbits = format_of(e).mbits;
      const double rounded = std::floor(2 * f * std::ldexp(1.0, mbits) + 0.5);  // 2f in [1, 2) to mbits bits
      x = floor_log2 + (rounded == std::ldexp(2.0, mbits) ? 1 : 0) - emax(e);
      break;
    }
    case scale_mode::rceil:  // the smallest s = 2^x with amax / s <= max
      x = floor_log2 - emax(e) - 2;
      while (amax > std::ldexp(max_value(e), x)) ++x;
      break;
  }
  return std::clamp(x, -127, 127);
}

// How the foreign kernel stores a copy.
struct layout {
  bool columnwise = false;     // blocks along the rows
  bool transposed = true;      // columnwise: stored [cols, rows] (else like the input, [rows, cols])
  bool high_nibble_first = false;
  std::size_t data_ld = 0;     // bytes per stored row; 0: packed
  scale_placement scales = scale_placement::row_major;
  std::size_t scale_ld = 0;    // row_major: bytes per line; block_major: bytes per block row; 0: packed
  std::uint8_t scale_padding = 0;  // value of padded scale entries (tiled layouts)
};

struct options {
  element type = element::e4m3;
  scale_mode mode = scale_mode::floor;
  rounding round = rounding::nearest_even;
  bool hadamard = false;            // 16-point Walsh-Hadamard on each half block, normalized by 1/4
  std::uint8_t zero_scale = 0x7F;   // scale byte of an all-zero block
  std::uint64_t seed = 1;           // stochastic rounding
};

// The kernel's random bits for element (row, col): splitmix64 of its index.
inline std::uint32_t random_bits(std::uint64_t seed, std::size_t row, std::size_t col) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + (static_cast<std::uint64_t>(row) << 32) + col;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::uint32_t>((z ^ (z >> 31)) >> 16);
}

inline std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }

struct output {
  std::vector<std::uint8_t> data, scales;
  std::size_t lines = 0, blocks = 0, data_ld = 0;
};

// Offset of scale (line, block) in a [lines, blocks] scale matrix stored as l says.
inline std::size_t scale_index(const layout& l, std::size_t lines, std::size_t blocks, std::size_t line, std::size_t block) {
  switch (l.scales) {
    case scale_placement::row_major: return line * (l.scale_ld ? l.scale_ld : blocks) + block;
    case scale_placement::block_major: return block * (l.scale_ld ? l.scale_ld : lines) + line;
    case scale_placement::cublas_128x4: {
      // cuBLAS: 128x4 tiles of 512 bytes, row-major over the padded matrix; inside a tile,
      // row r and column c at (r % 32) * 16 + (r / 32) * 4 + c.
      const std::size_t tiles_per_row = round_up(blocks, 4) / 4;
      const std::size_t tile = (line / 128) * tiles_per_row + block / 4;
      return tile * 512 + (line % 32) * 16 + ((line % 128) / 32) * 4 + block % 4;
    }
    case scale_placement::aiter_shuffle: {
      // AITER e8m0_shuffle: view the padded [L, B] matrix as (L/32, 2, 16, B/8, 2, 4), permute
      // the axes to (0, 3, 5, 2, 4, 1) and flatten.
      const std::size_t B = round_up(blocks, 8);
      const std::size_t i0 = line / 32, i1 = (line % 32) / 16, i2 = line % 16;
      const std::size_t i3 = block / 8, i4 = (block % 8) / 4, i5 = block % 4;
      const std::size_t d3 = B / 8;  // extents of the permuted axes: (L/32, B/8, 4, 16, 2, 2)
      return ((((i0 * d3 + i3) * 4 + i5) * 16 + i2) * 2 + i4) * 2 + i1;
    }
  }
  return 0;
}
inline std::size_t scale_bytes(const layout& l, std::size_t lines, std::size_t blocks) {
  switch (l.scales) {
    case scale_placement::row_major: return (lines - 1) * (l.scale_ld ? l.scale_ld : blocks) + blocks;
    case scale_placement::block_major: return (blocks - 1) * (l.scale_ld ? l.scale_ld : lines) + lines;
    case scale_placement::cublas_128x4: return round_up(lines, 128) * round_up(blocks, 4);
    case scale_placement::aiter_shuffle: return round_up(lines, 256) * round_up(blocks, 8);
  }
  return 0;
}

// Quantizes row-major x [rows, cols] (both multiples of 32) as options o say, stored as l says.
inline output quantize(const std::vector<float>& x, std::size_t rows, std::size_t cols, const options& o, const layout& l) {
  output out;
  const std::size_t length = l.columnwise ? rows : cols;  // the block axis
  out.lines = l.columnwise ? cols : rows;
  out.blocks = length / 32;
  const bool line_major = !l.columnwise || l.transposed;
  const unsigned bits = o.type == element::e2m1 ? 4 : 8;
  const std::size_t stored_rows = line_major ? out.lines : length;
  const std::size_t row_elements = line_major ? length : out.lines;
  out.data_ld = l.data_ld ? l.data_ld : row_elements * bits / 8;
  out.data.assign((stored_rows - 1) * out.data_ld + row_elements * bits / 8, 0);
  out.scales.assign(scale_bytes(l, out.lines, out.blocks), l.scale_padding);
  for (std::size_t line = 0; line < out.lines; ++line)
    for (std::size_t b = 0; b < out.blocks; ++b) {
      float v[32];
      for (std::size_t i = 0; i < 32; ++i) {
        const std::size_t pos = b * 32 + i;
        v[i] = l.columnwise ? x[pos * cols + line] : x[line * cols + pos];
      }
      if (o.hadamard)
        for (int g = 0; g < 32; g += 16) {
          for (int h = 1; h < 16; h *= 2)  // the in-place fast Walsh-Hadamard transform
            for (int i = 0; i < 16; i += 2 * h)
              for (int j = i; j < i + h; ++j) {
                const float p = v[g + j], q = v[g + j + h];
                v[g + j] = p + q;
                v[g + j + h] = p - q;
              }
          for (int i = 0; i < 16; ++i) v[g + i] *= 0.25f;  // 1 / sqrt(16)
        }
      double amax = 0;
      bool nan = false;
      for (const float e : v) {
        if (!std::isfinite(e)) nan = true;
        amax = std::max(amax, std::fabs(static_cast<double>(e)));
      }
      std::uint8_t scale = 0xFF;
      int exponent = 0;
      if (!nan) {
        exponent = amax == 0 ? 0 : scale_exponent(o.type, o.mode, amax);
        scale = amax == 0 ? o.zero_scale : static_cast<std::uint8_t>(exponent + 127);
      }
      out.scales[scale_index(l, out.lines, out.blocks, line, b)] = scale;
      for (std::size_t i = 0; i < 32; ++i) {
        const std::size_t pos = b * 32 + i;
        const std::size_t row = l.columnwise ? pos : line, col = l.columnwise ? line : pos;
        // A NaN block: this kernel leaves the all-ones pattern in its codes (they carry no information).
        const unsigned code = nan ? (1u << bits) - 1
                                  : encode(o.type, std::ldexp(static_cast<double>(v[i]), -exponent), o.round,
                                           random_bits(o.seed, row, col));
        const std::size_t srow = line_major ? line : pos, index = line_major ? pos : line;
        std::uint8_t* r = &out.data[srow * out.data_ld];
        if (bits == 8) {
          r[index] = static_cast<std::uint8_t>(code);
        } else {
          const bool high = (index % 2 == 1) != l.high_nibble_first;
          r[index / 2] = static_cast<std::uint8_t>(high ? (r[index / 2] & 0x0F) | (code << 4) : (r[index / 2] & 0xF0) | code);
        }
      }
    }
  return out;
}

}  // namespace foreign
