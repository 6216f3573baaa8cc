// SPDX-License-Identifier: Apache-2.0
#pragma once
// How another library stores an NVFP4 copy: the description validate (validation/nvfp4_validate.hpp)
// reads a foreign copy through. It is the view of every block-scaled copy (tensor/foreign_layout.hpp's
// foreign_copy_view: mx_storage's fields, transposed or not, leading dimension, nibble order,
// stored padding, row-major scales with strides and padded extents, cuBLAS's 128x4 tiles, padding
// bytes; the same accessors and checks) with NVFP4's options and 16-element blocks. Its tensor
// scale is as the library stores it: mxkit and torchao keep the decode scale (mxkit's t,
// torchao's per_tensor_scale), TransformerEngine the copy's amax; the validation options say which
// formula reads it (validation/nvfp4_quirks.hpp). TE and torchao both store E2M1 codes low nibble
// first (TE's reference cast_to_fp4x2, torchao's pack_uint4) and hand cuBLAS the scales in its
// 128x4 tiles (scale_layout::cublas_128x4).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <mxkit/block/pack.hpp>
#include <mxkit/error.hpp>
#include <mxkit/tensor/foreign_layout.hpp>
#include <mxkit/tensor/nvfp4_tensor.hpp>
#include <mxkit/tensor/scale_layout.hpp>

MXKIT_BEGIN_NAMESPACE

// A stored NVFP4 copy in any of the layouts mx_storage describes, with the caller's buffers and
// their sizes (validate refuses buffers shorter than data_span() or scale_span()) and its tensor
// scale: the view every block-scaled copy has (foreign_copy_view), with NVFP4's options.
template <>
inline constexpr block_format foreign_copy_default_format<nvfp4_options> = formats::nvfp4;
using nvfp4_foreign_view = foreign_copy_view<nvfp4_options>;

// mxkit's own copies as foreign views (every mx_storage field at its default but the scale layout).
template <class Byte>
nvfp4_foreign_view foreign_view(const nvfp4_basic_view<Byte>& v) noexcept {
  const block_layout& l = v.layout;
  return {l,
          v.options,
          own_storage(v.scales_layout),
          {v.data, v.data ? l.data_bytes() : 0},
          {v.scales, v.scales ? scale_storage_size(v.scales_layout, l.lines(), l.blocks_per_line()) : 0},
          v.tensor_scale,
          v.tensor_scale_from_amax};
}
inline nvfp4_foreign_view foreign_view(const nvfp4_tensor& t) noexcept { return foreign_view(t.view()); }
inline const nvfp4_foreign_view& foreign_view(const nvfp4_foreign_view& v) noexcept { return v; }

namespace detail {
// The description (layout, options and storage; pointers aside) and, with the buffers, the whole
// view: the checks of MX foreign views (tensor/foreign_layout.hpp) on an NVFP4 layout.
inline void check_nvfp4_foreign_storage(const nvfp4_foreign_view& v, const char* what) {
  check_nvfp4_layout(v.layout, what);
  check_nvfp4_options(v.options, what);
  check_foreign_storage_fields(v, what);
}
inline void check_nvfp4_foreign_view(const nvfp4_foreign_view& v, const char* what) {
  check_nvfp4_foreign_storage(v, what);
  check_foreign_buffers(v, what);
}
}  // namespace detail

// A copy's bytes in a foreign layout (what a peer's kernel would have written): padded scale
// entries hold storage.padding_scale (0 when unchecked), bytes between rows of a larger data_ld 0.
using nvfp4_foreign_buffers = foreign_copy_buffers<nvfp4_options>;
inline nvfp4_foreign_view foreign_view(const nvfp4_foreign_buffers& b) noexcept { return b.view(); }

// `copy` (mxkit's storage) rewritten as `storage` describes; the tensor scale is copied as it is.
template <class Byte>
nvfp4_foreign_buffers store_foreign(const nvfp4_basic_view<Byte>& copy, const mx_storage& storage) {
  return detail::store_foreign_copy<nvfp4_options>(copy, storage, copy.tensor_scale, copy.tensor_scale_from_amax,
                                                   [](const nvfp4_foreign_view& v, const char* what) { detail::check_nvfp4_foreign_storage(v, what); });
}
inline nvfp4_foreign_buffers store_foreign(const nvfp4_tensor& t, const mx_storage& storage) { return store_foreign(t.view(), storage); }

MXKIT_END_NAMESPACE
