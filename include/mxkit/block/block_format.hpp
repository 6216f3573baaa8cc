// SPDX-License-Identifier: Apache-2.0
#pragma once
// A block-scaled format as a value: the element encoding, the block's shape, the type of the
// per-block scale (which says how the scale is picked), and an optional per-tensor scale. The MX
// formats of OCP MX v1.0 (section 5, Table 1) are instances: 1 x 32 blocks, one E8M0 scale per
// block (a power of two, section 5.4.1), no tensor scale. The value is constexpr and structural,
// so it is a template argument too (block_format_desc<formats::mxfp4>): one description serves the
// run-time switch, the compile-time descriptor and the device code alike.
//
// Storage of elements, a choice of mxkit's and not of the spec: FP4 packs two elements per byte
// (element 2i in the low nibble); FP6, FP8 and INT8 take one byte per element (FP6 in the low 6
// bits, unpacked, for simple addressing).
#include <cstdint>

#include <mxkit/config.hpp>
#include <mxkit/enum_names.hpp>

MXKIT_BEGIN_NAMESPACE

// The element encodings of OCP MX v1.0 Table 1 (format/: e2m1 ... int8_fixed).
enum class element_kind : std::uint8_t { e2m1, e2m3, e3m2, e4m3, e5m2, int8 };

// The per-block scale's type, which fixes how a block's scale is picked from its amax:
//   e8m0  a power of two 2^(b - 127) (OCP MX v1.0 section 5.4.1), its exponent chosen by a
//         scale_rule (block/scale_rule.hpp, shared_scale: the one definition of the rules).
// A format whose scale is another type (NVFP4's E4M3 scale times an fp32 tensor scale) adds its
// enumerator and its rule beside shared_scale (docs/ARCHITECTURE.md "Adding a block-scaled format").
enum class block_scale_type : std::uint8_t { e8m0 };

// A scale over the whole tensor, applied on top of the block scales. None of the MX formats has
// one; the views carry a slot for it (mx_basic_view::tensor_scale) that they leave empty.
enum class tensor_scale_type : std::uint8_t { none, fp32 };

// The block: `rows` x `cols` elements of the stored copy share one scale; cols runs along the
// block axis (the contiguous one of a stored copy, tensor/mx_tensor.hpp). MX blocks are 1 x 32.
struct block_shape {
  int rows = 1;
  int cols = 32;
  MXKIT_HD constexpr int size() const noexcept { return rows * cols; }
  friend constexpr bool operator==(const block_shape&, const block_shape&) = default;
};

struct block_format {
  element_kind element = element_kind::e2m1;
  block_shape block{};
  block_scale_type scale = block_scale_type::e8m0;
  tensor_scale_type tensor_scale = tensor_scale_type::none;

  // Elements that share one scale, along the block axis (the length every stored line is padded to
  // a multiple of).
  MXKIT_HD constexpr int block_size() const noexcept { return block.cols; }
  // Bits one element occupies in memory (see the storage note above).
  MXKIT_HD constexpr int storage_bits() const noexcept { return element == element_kind::e2m1 ? 4 : 8; }
  MXKIT_HD constexpr bool has_tensor_scale() const noexcept { return tensor_scale != tensor_scale_type::none; }
  friend constexpr bool operator==(const block_format&, const block_format&) = default;
};

// The MX formats (OCP MX v1.0 section 5, Table 1): k = 32, scale E8M0, no tensor scale.
namespace formats {
inline constexpr block_shape mx_block{1, 32};  // OCP MX v1.0 section 5: k = 32 for every concrete MX format
inline constexpr block_format mxfp4{element_kind::e2m1, mx_block, block_scale_type::e8m0, tensor_scale_type::none};
inline constexpr block_format mxfp6_e2m3{element_kind::e2m3, mx_block, block_scale_type::e8m0, tensor_scale_type::none};
inline constexpr block_format mxfp6_e3m2{element_kind::e3m2, mx_block, block_scale_type::e8m0, tensor_scale_type::none};
inline constexpr block_format mxfp8_e4m3{element_kind::e4m3, mx_block, block_scale_type::e8m0, tensor_scale_type::none};
inline constexpr block_format mxfp8_e5m2{element_kind::e5m2, mx_block, block_scale_type::e8m0, tensor_scale_type::none};
inline constexpr block_format mxint8{element_kind::int8, mx_block, block_scale_type::e8m0, tensor_scale_type::none};
}  // namespace formats

template <>
struct enum_names<element_kind> {
  static constexpr const char* names[] = {"e2m1", "e2m3", "e3m2", "e4m3", "e5m2", "int8"};
  static constexpr element_kind last = element_kind::int8;
};
template <>
struct enum_names<block_scale_type> {
  static constexpr const char* names[] = {"e8m0"};
  static constexpr block_scale_type last = block_scale_type::e8m0;
};
template <>
struct enum_names<tensor_scale_type> {
  static constexpr const char* names[] = {"none", "fp32"};
  static constexpr tensor_scale_type last = tensor_scale_type::fp32;
};

MXKIT_END_NAMESPACE
