// SPDX-License-Identifier: Apache-2.0
// Layouts take their block size from the format, and the tensor-scale slot of the views is empty
// for every MX format (none of them has a tensor scale): an mx_tensor holds no tensor scale and
// its views pass a null pointer, so nothing an MX consumer reads changes.
#include <utility>

#include <mxkit/tensor/mx_tensor.hpp>

#include "../catch.hpp"

TEST_CASE("block_layout: the block size, padding and block count come from the format", "[tensor_scale]") {
  for (const mxkit::mx_type t : mxkit::all_mx_types) {
    INFO(mxkit::name_of(t));
    const std::size_t k = static_cast<std::size_t>(mxkit::format_of(t).block_size());
    const mxkit::block_layout l{mxkit::format_of(t), mxkit::block_axis::rowwise, 3, 70};
    CHECK(l.block_size() == k);
    CHECK(l.padded_length() == (70 + k - 1) / k * k);
    CHECK(l.blocks_per_line() == l.padded_length() / k);
    CHECK(l.scale_count() == 3 * l.blocks_per_line());
    const mxkit::block_layout c{mxkit::format_of(t), mxkit::block_axis::columnwise, 70, 3};
    CHECK(c.padded_length() == l.padded_length());
  }
  CHECK(mxkit::round_up_to_block(17, 16) == 32);
  CHECK(mxkit::round_up_to_block(33) == 64);
}

TEST_CASE("mx_tensor: no MX format has a tensor scale, and the views say so with a null pointer", "[tensor_scale]") {
  for (const mxkit::mx_type t : mxkit::all_mx_types) {
    INFO(mxkit::name_of(t));
    mxkit::mx_tensor q({mxkit::format_of(t), mxkit::block_axis::rowwise, 4, 64}, {});
    CHECK(q.tensor_scale().empty());
    CHECK(q.view().tensor_scale == nullptr);
    CHECK(std::as_const(q).view().tensor_scale == nullptr);
    const mxkit::mx_const_view v{q.layout(), q.options(), q.data().data(), q.scales().data()};  // the four-field spelling
    CHECK(v.tensor_scale == nullptr);
    CHECK(v.scales_layout == mxkit::scale_layout::row_major);
  }
}
