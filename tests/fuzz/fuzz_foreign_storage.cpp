// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: bytes -> a foreign storage description (tensor/foreign_layout.hpp's
// foreign_copy_view, MX or NVFP4) with arbitrary mx_storage values (leading dimensions, scale
// strides and padded extents up to 2^64 - 1, enum and format values out of range, NVFP4 tensor
// scales that are zero, subnormal, Inf or NaN) and element and scale buffers of arbitrary size and
// content, fed to validate, to_mx_tensor (MX) and store_foreign. A failed check prints the case and
// aborts (a finding).
//   1. No crash, leak or sanitizer report: every description either throws
//      std::invalid_argument or is read within the buffers (they are exact-size heap blocks, so
//      AddressSanitizer sees one byte too far).
//   2. validate returns only when both buffers hold the spans the description addresses, and its
//      counts add up (one scale per block, at most max_reported mismatches listed).
//   3. When the description is valid and small enough to allocate, the reference copy stored that
//      way by store_foreign validates clean, and (MX) to_mx_tensor reads back its scales (and, with
//      the padding stored, its bytes).
// Input: [0] format (mod 8: the six MX formats, nvfp4, nvfp4_2d), [1] flags (bit 0 columnwise,
// bit 1 not transposed, bit 2 high nibble first, bit 3 padding not stored, bits 4-5 scale layout,
// bit 6 no padding_scale, bit 7 strict NaN blocks), [2] out-of-range value selector (NVFP4: also
// the tensor scale and whether it is given), [3] options (bits 0-1 rule, 2-3 rounding, 4 Hadamard,
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
#include <optional>
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

template <class Options>
[[noreturn]] void finding(const char* what, const foreign_copy_view<Options>& v) {
  const block_layout& l = v.layout;
  const mx_storage& s = v.storage;
  std::fprintf(stderr,
               "fuzz_foreign_storage: %s\n  %s %s %zux%zu; data_ld %zu, scale strides %zu/%zu, scale_padded %zux%zu, scales %u, "
               "buffers %zu/%zu bytes, tensor scale %g%s\n",
               what, format_name(l.format), name_of(l.axis), l.rows, l.cols, s.data_ld, s.scale_line_stride, s.scale_block_stride,
               s.scale_padded.lines, s.scale_padded.blocks, static_cast<unsigned>(s.scales), v.data.size(), v.scales.size(),
               static_cast<double>(v.tensor_scale), v.tensor_scale_from_amax ? "" : " (given)");
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

// The two families of block-scaled copies the foreign view describes: what differs between them
// is the options, the check of the description, and the reference quantizer and validate.
struct mx_family {
  using options = quantize_options;
  using validation = validate_options;
  static void fill(foreign_copy_view<options>& v, std::uint8_t opts, std::uint8_t) {
    v.options.rule = pick<scale_rule>(opts, 4);
    v.options.round = pick<rounding>(opts >> 2, 3);
    v.options.hadamard = (opts >> 4) & 1;
    v.options.random_signs = (opts >> 5) & 1;
    v.options.seed = 0x5EED0000u + opts;
  }
  static void corrupt_options(foreign_copy_view<options>& v, std::uint8_t raw) {
    if (raw % 2) v.options.rule = static_cast<scale_rule>(raw);
    else v.options.round = static_cast<rounding>(raw);
  }
  static void check(const foreign_copy_view<options>& v) {
    detail::check_foreign_storage(v, "fuzz");
    detail::check_options(v.options, "fuzz");
  }
  static foreign_copy_buffers<options> reference(const matrix_view<const float>& in, const foreign_copy_view<options>& v, const mx_storage& s,
                                                 bool empty) {
    const block_layout& l = v.layout;
    const mx_tensor t = empty ? mx_tensor(l, v.options)
                        : l.axis == block_axis::rowwise ? quantize_rowwise(in, l.mx(), v.options)
                                                        : quantize_columnwise(in, l.mx(), v.options);
    foreign_copy_buffers<options> stored = store_foreign(t.view(), s);
    const mx_tensor again = to_mx_tensor(stored.view());
    if (!std::ranges::equal(again.scales(), t.scales())) finding("to_mx_tensor read other scales than were stored", v);
    if (s.padding_stored && !std::ranges::equal(again.data(), t.data())) finding("to_mx_tensor read other codes than were stored", v);
    return stored;
  }
  static void read_back(const foreign_copy_view<options>& v, bool valid_with_buffers) {
    try {
      (void)to_mx_tensor(v);
      if (!valid_with_buffers) finding("to_mx_tensor accepted a description or buffer it should refuse", v);
    } catch (const std::invalid_argument&) {
    }
  }
};

struct nvfp4_family {
  using options = nvfp4_options;
  using validation = nvfp4_validate_options;
  // NVFP4's options, and its tensor scale as stored: from the amax (validate computes it) or given
  // (then it must be a positive normal float: zero, subnormal, Inf and NaN come up too).
  static void fill(foreign_copy_view<options>& v, std::uint8_t opts, std::uint8_t scale_byte) {
    v.options.round = pick<rounding>(opts >> 2, 3);
    v.options.hadamard = (opts >> 4) & 1;
    v.options.hadamard_signs = (opts >> 5) & 1 ? hadamard_sign_mask(0x5EED0000u + opts) : 0u;
    v.options.seed = 0x5EED0000u + opts;
    v.tensor_scale_from_amax = !(scale_byte & 1);
    switch ((scale_byte >> 1) % 6) {
      case 0: v.tensor_scale = 0.0f; break;
      case 1: v.tensor_scale = std::numeric_limits<float>::denorm_min(); break;
      case 2: v.tensor_scale = std::numeric_limits<float>::infinity(); break;
      case 3: v.tensor_scale = std::numeric_limits<float>::quiet_NaN(); break;
      default: v.tensor_scale = std::ldexp(1.0f + static_cast<float>(scale_byte) / 256.0f, static_cast<int>(scale_byte % 40) - 20); break;
    }
  }
  static void corrupt_options(foreign_copy_view<options>& v, std::uint8_t raw) {
    if (raw % 2) v.options.round = static_cast<rounding>(raw);
    else v.options.hadamard_signs = 0x10000u << (raw % 16);  // bits past the 16 elements of a block
  }
  static void check(const foreign_copy_view<options>& v) {
    detail::check_nvfp4_foreign_storage(v, "fuzz");
    if (!v.tensor_scale_from_amax) detail::check_tensor_scale(v.tensor_scale, "fuzz");
  }
  static foreign_copy_buffers<options> reference(const matrix_view<const float>& in, const foreign_copy_view<options>& v, const mx_storage& s,
                                                 bool empty) {
    const block_layout& l = v.layout;
    const std::optional<float> given = v.tensor_scale_from_amax ? std::nullopt : std::optional<float>(v.tensor_scale);
    const nvfp4_tensor t = empty ? nvfp4_tensor(l, v.options, given.value_or(1.0f), !given) : quantize(in, l.format, l.axis, v.options, given, 1);
    return store_foreign(t.view(), s);
  }
  static void read_back(const foreign_copy_view<options>&, bool) {}  // no to_mx_tensor for NVFP4
};

// validate with the family's options: at most max_reported mismatches listed, one host thread.
template <class Family>
auto validate_copy(const matrix_view<const float>& in, const foreign_copy_view<typename Family::options>& v, std::size_t max_reported,
                   bool strict) {
  typename Family::validation o;
  o.max_reported = max_reported;
  o.strict_nan_blocks = strict;
  o.threads = 1;
  return validate(in, v, o);
}

template <class Family>
void run_family(reader& r, const std::uint8_t* data, std::size_t size, block_format format, std::uint8_t flags, std::uint8_t raw,
                std::uint8_t opts) {
  using view_type = foreign_copy_view<typename Family::options>;
  view_type v;
  v.layout.format = format;
  v.layout.axis = flags & 1 ? block_axis::columnwise : block_axis::rowwise;
  v.layout.rows = r.dim();
  v.layout.cols = r.dim();
  Family::fill(v, opts, raw);
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
  // Now and then one value far out of range (a corrupt description or a bad cast).
  switch (raw % 16) {
    case 1:  // a format value that is not the family's: an unknown element, another block, or the other family's
      if (raw % 3 == 0) v.layout.format.element = static_cast<element_kind>(raw);
      else if (raw % 3 == 1) v.layout.format.block.cols = raw;
      else v.layout.format = is_nvfp4(format) ? formats::mxfp4 : formats::nvfp4;
      break;
    case 2: v.layout.axis = static_cast<block_axis>(raw); break;
    case 3: s.columnwise = static_cast<columnwise_storage>(raw); break;
    case 4: s.nibbles = static_cast<nibble_order>(raw); break;
    case 5: s.scales = static_cast<scale_layout>(raw); break;
    case 6: Family::corrupt_options(v, raw); break;
    case 7:  // a tensor scale on an MX copy, which has none
      if (!is_nvfp4(format)) v.tensor_scale = 2.0f;
      break;
    default: break;
  }

  // The spans, where the description is valid (the check is what makes them exact).
  bool valid = true;
  try {
    Family::check(v);
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

  constexpr std::size_t max_reported = 4;
  const bool buffers_hold = data_buffer.size() >= data_span && scale_buffer.size() >= scale_span;
  bool returned = false;
  try {
    const auto rep = validate_copy<Family>(in, v, max_reported, flags & 128);
    returned = true;
    if (!valid || !buffers_hold) finding("validate accepted a description or buffer it should refuse", v);
    if (rep.scales_checked != l.lines() * l.blocks_per_line()) finding("validate checked the wrong number of scales", v);
    if (rep.mismatches.size() > max_reported) finding("validate listed more mismatches than asked", v);
    if (rep.ok() != (rep.mismatch_count() == 0)) finding("validate's verdict disagrees with its counts", v);
    (void)rep.summary();
    (void)to_string(rep);
  } catch (const std::invalid_argument&) {
  }
  Family::read_back(v, valid && buffers_hold);
  if (!returned && valid && (small || empty) && buffers_hold) finding("validate refused a valid description with large enough buffers", v);

  // 3. The reference copy stored this way validates clean (and, MX, reads back).
  if (!valid || !(small || empty) || data_span > max_buffer_bytes || scale_span > max_buffer_bytes) return;
  const foreign_copy_buffers<typename Family::options> stored = Family::reference(in, v, s, empty);
  if (stored.data.size() != data_span || stored.scales.size() != scale_span) finding("store_foreign allocated other sizes than the spans", v);
  const auto back = validate_copy<Family>(in, stored.view(), 16, false);
  if (!back.ok()) {
    std::fprintf(stderr, "%s\n", to_string(back).c_str());
    finding("the reference copy stored this way does not validate", v);
  }
}

// Byte 0 picks the format: the six MX formats, then NVFP4's two.
void run(const std::uint8_t* data, std::size_t size) {
  reader r{data, size};
  const std::uint8_t type_byte = r.byte(), flags = r.byte(), raw = r.byte(), opts = r.byte();
  const unsigned pick_format = type_byte % 8;
  if (pick_format < 6) run_family<mx_family>(r, data, size, format_of(static_cast<mx_type>(pick_format)), flags, raw, opts);
  else run_family<nvfp4_family>(r, data, size, pick_format == 6 ? formats::nvfp4 : formats::nvfp4_2d, flags, raw, opts);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  run(data, size);
  return 0;
}
