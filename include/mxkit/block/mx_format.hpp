// SPDX-License-Identifier: Apache-2.0
#pragma once
// MX format descriptors: the compile-time face of a block_format value (block/block_format.hpp,
// where the formats are defined as values: OCP MX v1.0 section 5, Table 1). `mx_type` names an MX
// format at run time, `mx_format<mx_type::...>` is its descriptor (block_format_desc of its
// value: element type, block size, storage bits) and `visit_mx_type` dispatches on it. Device code
// reads the descriptors' scalar members, never a block_format object at run time (nvcc allows a
// constexpr namespace-scope object in device code only through constant expressions).
#include <concepts>
#include <numeric>

#include <mxkit/block/block_format.hpp>
#include <mxkit/enum_names.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e2m3.hpp>
#include <mxkit/format/e3m2.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/format/int8_fixed.hpp>

MXKIT_BEGIN_NAMESPACE

// The MX block size, k = 32 (OCP MX v1.0 section 5): every MX format's block_size. Code that is
// generic over formats takes Fmt::block_size or block_layout::block_size() instead; this constant is
// for code that genuinely specializes on 32-element blocks (the GPU quantizer's tiles, the GEMMs'
// K slices), which says so where it uses it.
inline constexpr int mx_block_size = formats::mx_block.cols;

enum class mx_type : std::uint8_t { mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2, mxint8 };

// The format value of each MX type: the one map from the run-time name to the value.
constexpr block_format format_of(mx_type t) noexcept {
  switch (t) {
    case mx_type::mxfp6_e2m3: return formats::mxfp6_e2m3;
    case mx_type::mxfp6_e3m2: return formats::mxfp6_e3m2;
    case mx_type::mxfp8_e4m3: return formats::mxfp8_e4m3;
    case mx_type::mxfp8_e5m2: return formats::mxfp8_e5m2;
    case mx_type::mxint8: return formats::mxint8;
    case mx_type::mxfp4: break;
  }
  return formats::mxfp4;
}
namespace detail {
// The element type of each element_kind.
template <element_kind K>
struct element_of;
template <>
struct element_of<element_kind::e2m1> {
  using type = e2m1;
};
template <>
struct element_of<element_kind::e2m3> {
  using type = e2m3;
};
template <>
struct element_of<element_kind::e3m2> {
  using type = e3m2;
};
template <>
struct element_of<element_kind::e4m3> {
  using type = e4m3;
};
template <>
struct element_of<element_kind::e5m2> {
  using type = e5m2;
};
template <>
struct element_of<element_kind::int8> {
  using type = int8_fixed;
};
}  // namespace detail

// A format value at compile time: what quantize_block and the kernels are templated on.
template <block_format F>
struct block_format_desc {
  static constexpr block_format format = F;
  using element_type = typename detail::element_of<F.element>::type;
  static constexpr int block_size = F.block_size();      // elements per scale, along the block axis
  static constexpr int storage_bits = F.storage_bits();  // bits one element occupies in memory
  static constexpr int elements_per_byte = 8 / storage_bits;
};

// The descriptor of each MX format, named by its mx_type: mx_format<mx_type::mxfp4>, ...
template <mx_type Type>
struct mx_format : block_format_desc<format_of(Type)> {
  static constexpr mx_type type = Type;
};

// A descriptor the block functions take: a format value whose scale they implement (E8M0, by
// shared_scale), a storage they pack (4 or 8 bits), and blocks of whole 16-element Hadamard groups
// along one axis.
template <class F>
concept mx_format_descriptor = requires {
  typename F::element_type;
  { F::format } -> std::convertible_to<block_format>;
  { F::type } -> std::convertible_to<mx_type>;
  { F::storage_bits } -> std::convertible_to<int>;
  { F::block_size } -> std::convertible_to<int>;
} && (F::storage_bits == 4 || F::storage_bits == 8) && F::block_size == F::format.block_size() && F::format.block.rows == 1 &&
    F::block_size % 16 == 0 && F::format.scale == block_scale_type::e8m0 && !F::format.has_tensor_scale();

// Calls f(mx_format<t>{}) with the descriptor for t; with format_of (name to value), the only
// switches over formats in the library.
#if defined(__NVCC__)
#pragma nv_exec_check_disable  // f may be host-only (a kernel launcher): nvcc then checks f's call site
#endif
template <class F>
MXKIT_HD constexpr decltype(auto) visit_mx_type(mx_type t, F&& f) {
  switch (t) {
    case mx_type::mxfp6_e2m3: return f(mx_format<mx_type::mxfp6_e2m3>{});
    case mx_type::mxfp6_e3m2: return f(mx_format<mx_type::mxfp6_e3m2>{});
    case mx_type::mxfp8_e4m3: return f(mx_format<mx_type::mxfp8_e4m3>{});
    case mx_type::mxfp8_e5m2: return f(mx_format<mx_type::mxfp8_e5m2>{});
    case mx_type::mxint8: return f(mx_format<mx_type::mxint8>{});
    case mx_type::mxfp4: break;
  }
  return f(mx_format<mx_type::mxfp4>{});
}

template <>
struct enum_names<mx_type> {
  static constexpr const char* names[] = {"mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8"};
  static constexpr mx_type last = mx_type::mxint8;
};
inline constexpr mx_type all_mx_types[] = {mx_type::mxfp4,      mx_type::mxfp6_e2m3, mx_type::mxfp6_e3m2,
                                           mx_type::mxfp8_e4m3, mx_type::mxfp8_e5m2, mx_type::mxint8};
// The inverse of format_of: whether `f` is an MX format, and which (`*t`). NVFP4 is not: it is named by its
// value (formats::nvfp4), never by an mx_type (see block/block_format.hpp).
constexpr bool mx_type_of(const block_format& f, mx_type* t) noexcept {
  for (const mx_type c : all_mx_types)
    if (format_of(c) == f) {
      if (t) *t = c;
      return true;
    }
  return false;
}
// A format value's name in messages: its mx_type's ("mxfp4", ...), NVFP4's ("nvfp4", "nvfp4_2d"),
// or "unknown block format" for a value that is neither.
constexpr const char* format_name(const block_format& f) noexcept {
  mx_type t{};
  return mx_type_of(f, &t) ? name_of(t) : is_nvfp4(f) ? nvfp4_format_name(f) : "unknown block format";
}
namespace detail {
struct storage_bits_fn {
  template <class Fmt>
  MXKIT_HD constexpr int operator()(Fmt) const noexcept {
    return Fmt::storage_bits;
  }
};
struct block_size_fn {
  template <class Fmt>
  MXKIT_HD constexpr int operator()(Fmt) const noexcept {
    return Fmt::block_size;
  }
};
}  // namespace detail
// The format's storage bits and block size by run-time name, on host and device alike.
MXKIT_HD constexpr int storage_bits_of(mx_type t) noexcept { return visit_mx_type(t, detail::storage_bits_fn{}); }
MXKIT_HD constexpr int block_size_of(mx_type t) noexcept { return visit_mx_type(t, detail::block_size_fn{}); }

// Elements a flat buffer aligns to so that every format's blocks start on a block boundary: the
// least common multiple of the formats' block sizes (32 while every format is MX).
inline constexpr int common_block_size = [] {
  int l = 1;
  for (const mx_type t : all_mx_types) l = std::lcm(l, format_of(t).block_size());
  return l;
}();

MXKIT_END_NAMESPACE
