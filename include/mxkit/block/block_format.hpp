// SPDX-License-Identifier: Apache-2.0
#pragma once
// A block-scaled format as a value: the element encoding, the block's shape, the type of the
// per-block scale (which says how the scale is picked), and an optional per-tensor scale. The MX
// formats of OCP MX v1.0 (section 5, Table 1) are instances: 1 x 32 blocks, one E8M0 scale per
// block (a power of two, section 5.4.1), no tensor scale. NVIDIA's NVFP4 is one too (arXiv
// 2509.25149, "Pretraining Large Language Models with NVFP4"): E2M1 elements, 1 x 16 blocks (16 x 16
// for weights, the paper's 2-D scaling), one E4M3 scale per block and an fp32 scale per tensor. The
// value is constexpr and structural, so it is a template argument too (block_format_desc<
// formats::mxfp4>): one description serves the run-time switch, the compile-time descriptor and the
// device code alike.
//
// Run-time names: mx_type (block/mx_format.hpp) names the MX formats, the ones the GPU kernels and
// the Python module dispatch on (visit_mx_type). NVFP4 is named by its value (formats::nvfp4,
// formats::nvfp4_2d), which its host reference and validation take (tensor/nvfp4_tensor.hpp).
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
//   e4m3  an OCP E4M3 value (format/e4m3.hpp) that multiplies the block together with the fp32
//         tensor scale: NVFP4's, rounded to nearest from the block's amax over E2M1's max and the
//         tensor scale (block/nvfp4_scale.hpp, beside shared_scale).
// A format with yet another scale adds its enumerator and its rule beside those two
// (docs/ARCHITECTURE.md "Adding a block-scaled format").
enum class block_scale_type : std::uint8_t { e8m0, e4m3 };

// A scale over the whole tensor, applied on top of the block scales. None of the MX formats has
// one; the views carry a slot for it (mx_basic_view::tensor_scale) that they leave empty.
enum class tensor_scale_type : std::uint8_t { none, fp32 };

// The block: `rows` x `cols` elements of the stored copy share one scale; cols runs along the
// block axis (the contiguous one of a stored copy, tensor/mx_tensor.hpp), rows across its lines.
// MX blocks are 1 x 32; NVFP4's 1 x 16, or 16 x 16 for weights (one scale per tile, so that a
// matrix and its transpose quantize alike). A stored copy keeps one scale per `cols` elements of
// a line either way: the lines of a 16 x 16 tile repeat its scale.
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

// NVFP4 (arXiv 2509.25149; TransformerEngine's NVFP4BlockScaling, torchao's NVFP4Tensor): E2M1
// elements, one E4M3 scale per 16, one fp32 tensor scale. nvfp4_2d: 16 x 16 blocks, the paper's
// 2-D scaling of weights (TransformerEngine's with_2d_quantization).
inline constexpr block_shape nvfp4_block{1, 16};
inline constexpr block_shape nvfp4_2d_block{16, 16};
inline constexpr block_format nvfp4{element_kind::e2m1, nvfp4_block, block_scale_type::e4m3, tensor_scale_type::fp32};
inline constexpr block_format nvfp4_2d{element_kind::e2m1, nvfp4_2d_block, block_scale_type::e4m3, tensor_scale_type::fp32};
}  // namespace formats

// An NVFP4 format: E2M1 elements, E4M3 block scales with an fp32 tensor scale, blocks of 16 along
// the block axis and 1 or 16 lines (formats::nvfp4, formats::nvfp4_2d).
MXKIT_HD constexpr bool is_nvfp4(const block_format& f) noexcept {
  return f.element == element_kind::e2m1 && f.scale == block_scale_type::e4m3 && f.tensor_scale == tensor_scale_type::fp32 &&
         f.block.cols == 16 && (f.block.rows == 1 || f.block.rows == 16);
}
// Its name in messages: "nvfp4", "nvfp4_2d", or "not NVFP4" for any other value.
constexpr const char* nvfp4_format_name(const block_format& f) noexcept {
  return !is_nvfp4(f) ? "not NVFP4" : f.block.rows == 1 ? "nvfp4" : "nvfp4_2d";
}

template <>
struct enum_names<element_kind> {
  static constexpr const char* names[] = {"e2m1", "e2m3", "e3m2", "e4m3", "e5m2", "int8"};
  static constexpr element_kind last = element_kind::int8;
};
template <>
struct enum_names<block_scale_type> {
  static constexpr const char* names[] = {"e8m0", "e4m3"};
  static constexpr block_scale_type last = block_scale_type::e4m3;
};
template <>
struct enum_names<tensor_scale_type> {
  static constexpr const char* names[] = {"none", "fp32"};
  static constexpr tensor_scale_type last = tensor_scale_type::fp32;
};

MXKIT_END_NAMESPACE
