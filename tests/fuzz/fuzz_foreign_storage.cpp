// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: bytes -> a foreign storage description (tensor/foreign_layout.hpp) with
// arbitrary mx_storage values (leading dimensions, scale strides and padded extents up to 2^64 - 1,
// enum values out of range) and element and scale buffers of arbitrary size and content, fed to
// validate, to_mx_tensor and store_foreign. A failed check prints the case and aborts (a finding).
//   1. No crash, leak or sanitizer report: every description either throws
//      std::invalid_argument or is read within the buffers (they are exact-size heap blocks, so
//      AddressSanitizer sees one byte too far).
//   2. validate returns only when both buffers hold the spans the description addresses, and its
//      counts add up (one scale per block, at most max_reported mismatches listed).
//   3. When the description is valid and small enough to allocate, the reference copy stored that
//      way by store_foreign validates clean, and to_mx_tensor reads back its scales (and, with
//      the padding stored, its bytes).
// Input: [0] type, [1] flags (bit 0 columnwise, bit 1 not transposed, bit 2 high nibble first,
// bit 3 padding not stored, bits 4-5 scale layout, bit 6 no padding_scale, bit 7 strict NaN
// blocks), [2] out-of-range enum selector, [3] options (bits 0-1 rule, 2-3 rounding, 4 Hadamard,
// 5 random signs), [4..5] rows, [6..7] cols, then five sizes of 9 bytes each (data_ld, scale line
// stride, scale block stride, scale_padded lines, scale_padded blocks; a selector byte and 8 value
// bytes), two buffer sizes of 3 bytes each (a selector and 2 value bytes), then the input values
// and the buffers' bytes (reused cyclically).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include <mxkit/mxkit.hpp>

namespace {

using namespace mxkit;
using namespace mxkit::ref;  // the host reference: quantize, validate and their reports

// Allocations the target makes itself stay far below libFuzzer's -rss_limit_mb.
constexpr std::size_t max_buffer_bytes = std::size_t{1} << 22;
constexpr std::size_t max_small_dim = 80;

[[noreturn]] void finding(const char* what, const mx_foreign_view& v) {
  const block_layout& l = v.layout;
  const mx_storage& s = v.storage;
  std::fprintf(stderr,
               "fuzz_foreign_storage: %s\n  %s %s %zux%zu; data_ld %zu, scale strides %zu/%zu, scale_padded %zux%zu, scales %u, "
               "buffers %zu/%zu bytes\n",
               what, format_name(l.format), name_of(l.axis), l.rows, l.cols, s.data_ld, s.scale_line_stride, s.scale_block_stride,
               s.scale_padded.lines, s.scale_padded.blocks, static_cast<unsigned>(s.scales), v.data.size(), v.scales.size());
  std::abort();
}

struct reader {
  const std::uint8_t* p;
  std::size_t n, at = 0;
  std::uint8_t byte() { return at < n ? p[at++] : 0; }
  std::uint64_t bytes(int k) {
    std::uint64_t v = 0;
    for (int i = 0; i < k; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }
  // A size: 0, small, a power of two (near the top of std::size_t too), or any 64-bit value.
  std::size_t size() {
    const std::uint8_t sel = byte();
    const std::uint64_t v = bytes(8);
    switch (sel % 4) {
      case 0: return 0;
      case 1: return v % 300;
      case 2: return (std::uint64_t{1} << (v % 64)) + (v >> 8) % 3;
      default: return v;
    }
  }
  // A matrix extent: mostly 1..80, sometimes 0 or a power of two up to 2^63.
  std::size_t dim() {
    const std::uint16_t v = static_cast<std::uint16_t>(bytes(2));
    if (v & 0x8000) return (v & 0x40) ? 0 : std::size_t{1} << (v % 64);
    return 1 + v % max_small_dim;
  }
};

// A buffer size relative to the span the description needs (when it has one).
std::size_t buffer_size(reader& r, std::size_t span, bool span_known) {
  const std::uint8_t sel = r.byte();
  const std::size_t v = r.bytes(2);
  if (!span_known || span > max_buffer_bytes) return v % 4096;
  switch (sel % 4) {
    case 0: return span;
    case 1: return span - std::min(span, 1 + v % 8);  // short
    case 2: return span + v % 64;                     // longer (a view into a larger allocation)
    default: return v % 4096;
  }
}

template <class E>
E pick(std::uint8_t value, unsigned count) {
  return static_cast<E>(value % count);
}

void run(const std::uint8_t* data, std::size_t size) {
  reader r{data, size};
  const std::uint8_t type_byte = r.byte(), flags = r.byte(), raw = r.byte(), opts = r.byte();
  mx_foreign_view v;
  v.layout.format = format_of(pick<mx_type>(type_byte, 6));
  v.layout.axis = flags & 1 ? block_axis::columnwise : block_axis::rowwise;
  v.layout.rows = r.dim();
  v.layout.cols = r.dim();
  v.options.rule = pick<scale_rule>(opts, 4);
  v.options.round = pick<rounding>(opts >> 2, 3);
  v.options.hadamard = (opts >> 4) & 1;
  v.options.random_signs = (opts >> 5) & 1;
  v.options.seed = 0x5EED0000u + opts;
  mx_storage& s = v.storage;
  s.columnwise = flags & 2 ? columnwise_storage::not_transposed : columnwise_storage::transposed;
  s.nibbles = flags & 4 ? nibble_order::high_first : nibble_order::low_first;
  s.padding_stored = !(flags & 8);
  s.scales = pick<scale_layout>(flags >> 4, 3);
  if (flags & 64) s.padding_scale.reset();
  s.data_ld = r.size();
  s.scale_line_stride = r.size();
  s.scale_block_stride = r.size();
  s.scale_padded.lines = r.size();
  s.scale_padded.blocks = r.size();
  // Now and then one enum far out of range (a corrupt description or a bad cast).
  switch (raw % 16) {
    case 1:  // a format value that is not MX: an unknown element, another block, or NVFP4
      if (raw % 3 == 0) v.layout.format.element = static_cast<element_kind>(raw);
      else if (raw % 3 == 1) v.layout.format.block.cols = raw;
      else v.layout.format = formats::nvfp4;
      break;
    case 2: v.layout.axis = static_cast<block_axis>(raw); break;
    case 3: s.columnwise = static_cast<columnwise_storage>(raw); break;
    case 4: s.nibbles = static_cast<nibble_order>(raw); break;
    case 5: s.scales = static_cast<scale_layout>(raw); break;
    case 6: v.options.rule = static_cast<scale_rule>(raw); break;
    case 7: v.options.round = static_cast<rounding>(raw); break;
    default: break;
  }

  // The spans, where the description is valid (the check is what makes them exact).
  bool valid = true;
  try {
    detail::check_foreign_storage(v, "fuzz");
    detail::check_options(v.options, "fuzz");
  } catch (const std::invalid_argument&) {
    valid = false;
  }
  const std::size_t data_span = valid ? v.data_span() : 0, scale_span = valid ? v.scale_span() : 0;
  std::vector<std::uint8_t> data_buffer(buffer_size(r, data_span, valid)), scale_buffer(buffer_size(r, scale_span, valid));

  // Input values (small extents only: a huge one is never read) and buffer bytes from the rest.
  const block_layout& l = v.layout;
  const bool small = l.rows <= max_small_dim && l.cols <= max_small_dim;
  std::vector<float> x(small ? l.rows * l.cols : 1);
  const std::uint8_t* rest = data + std::min(r.at, size);
  const std::size_t nrest = size - std::min(r.at, size);
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint8_t b = nrest ? rest[i % nrest] : 0;
    x[i] = std::ldexp(static_cast<float>(static_cast<std::int8_t>(b)), static_cast<int>(b % 23) - 11);
    if (b == 0x7F) x[i] = std::numeric_limits<float>::quiet_NaN();
  }
  for (std::size_t i = 0; i < data_buffer.size(); ++i) data_buffer[i] = nrest ? rest[(i * 7 + 3) % nrest] : 0;
  for (std::size_t i = 0; i < scale_buffer.size(); ++i) scale_buffer[i] = nrest ? static_cast<std::uint8_t>(0x70 + rest[i % nrest] % 24) : 0x7F;
  v.data = data_buffer;
  v.scales = scale_buffer;
  // An empty shape (0 x 2^63 too) is given as it is, with no data; a huge one is given an input of
  // another (small) shape, which validate must refuse before reading anything.
  const bool empty = l.rows == 0 || l.cols == 0;
  const matrix_view<const float> in = empty ? matrix_view<const float>{nullptr, l.rows, l.cols}
                                    : matrix_view<const float>{x.data(), small ? l.rows : 1, small ? l.cols : 1};

  validate_options o;
  o.max_reported = 4;
  o.strict_nan_blocks = flags & 128;
  o.threads = 1;
  bool returned = false;
  try {
    const mx_validation_report rep = validate(in, v, o);
    returned = true;
    if (!valid || data_buffer.size() < data_span || scale_buffer.size() < scale_span)
      finding("validate accepted a description or buffer it should refuse", v);
    if (rep.scales_checked != l.lines() * l.blocks_per_line()) finding("validate checked the wrong number of scales", v);
    if (rep.mismatches.size() > o.max_reported) finding("validate listed more mismatches than asked", v);
    if (rep.ok() != (rep.mismatch_count() == 0)) finding("validate's verdict disagrees with its counts", v);
    (void)rep.summary();
    (void)to_string(rep);
  } catch (const std::invalid_argument&) {
  }
  try {
    (void)to_mx_tensor(v);
    if (!valid || data_buffer.size() < data_span || scale_buffer.size() < scale_span)
      finding("to_mx_tensor accepted a description or buffer it should refuse", v);
  } catch (const std::invalid_argument&) {
  }
  if (!returned && valid && (small || empty) && data_buffer.size() >= data_span && scale_buffer.size() >= scale_span)
    finding("validate refused a valid description with large enough buffers", v);

  // 3. The reference copy stored this way validates clean and reads back.
  if (!valid || !(small || empty) || data_span > max_buffer_bytes || scale_span > max_buffer_bytes) return;
  const mx_tensor t = empty ? mx_tensor(l, v.options)
                      : l.axis == block_axis::rowwise ? quantize_rowwise(in, l.mx(), v.options)
                                                      : quantize_columnwise(in, l.mx(), v.options);
  const mx_foreign_buffers stored = store_foreign(t.view(), s);
  if (stored.data.size() != data_span || stored.scales.size() != scale_span) finding("store_foreign allocated other sizes than the spans", v);
  validate_options plain;
  plain.threads = 1;
  const mx_validation_report back = validate(in, stored, plain);
  if (!back.ok()) {
    std::fprintf(stderr, "%s\n", to_string(back).c_str());
    finding("the reference copy stored this way does not validate", v);
  }
  const mx_tensor again = to_mx_tensor(stored.view());
  if (!std::ranges::equal(again.scales(), t.scales())) finding("to_mx_tensor read other scales than were stored", v);
  if (s.padding_stored && !std::ranges::equal(again.data(), t.data())) finding("to_mx_tensor read other codes than were stored", v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  run(data, size);
  return 0;
}
