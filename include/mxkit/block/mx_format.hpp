// SPDX-License-Identifier: Apache-2.0
#pragma once
// MX format descriptors (OCP MX v1.0 section 5, Table 1): element type, 32-element blocks, one
// E8M0 scale per block. Storage: FP4 packs two elements per byte (element 2i in the low nibble);
// FP6, FP8 and INT8 take one byte per element (FP6 in the low 6 bits; unpacked, for simple
// addressing). `mx_format<mx_type::...>` describes a format at compile time, `mx_type` names it at
// run time and `visit_mx_type` dispatches on it.
#include <concepts>

#include <mxkit/enum_names.hpp>
#include <mxkit/format/e2m1.hpp>
#include <mxkit/format/e2m3.hpp>
#include <mxkit/format/e3m2.hpp>
#include <mxkit/format/e4m3.hpp>
#include <mxkit/format/e5m2.hpp>
#include <mxkit/format/int8_fixed.hpp>

MXKIT_BEGIN_NAMESPACE

inline constexpr int mx_block_size = 32;

enum class mx_type : std::uint8_t { mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2, mxint8 };

template <class Element, mx_type Type, int StorageBits>
struct mx_format_desc {
  using element_type = Element;
  static constexpr mx_type type = Type;
  static constexpr int block_size = mx_block_size;
  static constexpr int storage_bits = StorageBits;  // bits one element occupies in memory
  static constexpr int elements_per_byte = 8 / StorageBits;
};

// The descriptor of each format, named by its mx_type: mx_format<mx_type::mxfp4>, ...
template <mx_type Type>
struct mx_format;
template <>
struct mx_format<mx_type::mxfp4> : mx_format_desc<e2m1, mx_type::mxfp4, 4> {};
template <>
struct mx_format<mx_type::mxfp6_e2m3> : mx_format_desc<e2m3, mx_type::mxfp6_e2m3, 8> {};
template <>
struct mx_format<mx_type::mxfp6_e3m2> : mx_format_desc<e3m2, mx_type::mxfp6_e3m2, 8> {};
template <>
struct mx_format<mx_type::mxfp8_e4m3> : mx_format_desc<e4m3, mx_type::mxfp8_e4m3, 8> {};
template <>
struct mx_format<mx_type::mxfp8_e5m2> : mx_format_desc<e5m2, mx_type::mxfp8_e5m2, 8> {};
template <>
struct mx_format<mx_type::mxint8> : mx_format_desc<int8_fixed, mx_type::mxint8, 8> {};

template <class F>
concept mx_format_descriptor = requires {
  typename F::element_type;
  { F::type } -> std::convertible_to<mx_type>;
  { F::storage_bits } -> std::convertible_to<int>;
} && (F::storage_bits == 4 || F::storage_bits == 8) && F::block_size == mx_block_size;

// Calls f(mx_format<t>{}) with the descriptor for t; the one switch over formats in the library.
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
MXKIT_HD constexpr int storage_bits_of(mx_type t) noexcept { return t == mx_type::mxfp4 ? 4 : 8; }

MXKIT_END_NAMESPACE
