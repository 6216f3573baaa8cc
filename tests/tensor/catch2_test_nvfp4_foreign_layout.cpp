// SPDX-License-Identifier: Apache-2.0
// NVFP4 copies in mxkit's storage and in foreign ones (tensor/nvfp4_tensor.hpp,
// tensor/nvfp4_foreign_layout.hpp): sizes follow the 16-element block, every storage mx_storage
// describes (transposed or not, a larger leading dimension, either nibble order, strided or padded
// row-major scales, cuBLAS's tiles) reads back the codes and scales it was written with, and bad
// descriptions are refused with the checks MX views get, naming the NVFP4 copy.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/tensor/nvfp4_foreign_layout.hpp>

#include "../catch.hpp"

namespace nvfp4_foreign_test {
using mxkit::block_axis;

// A copy with distinct codes and scales everywhere (what they mean does not matter here).
mxkit::nvfp4_tensor patterned(block_axis axis, std::size_t rows, std::size_t cols) {
  mxkit::nvfp4_tensor t({mxkit::formats::nvfp4, axis, rows, cols}, {}, 0.25f);
  const mxkit::block_layout& l = t.layout();
  for (std::size_t line = 0; line < l.lines(); ++line) {
    for (std::size_t p = 0; p < l.padded_length(); ++p)
      mxkit::store_code(t.data().data() + line * l.line_bytes(), p, static_cast<std::uint8_t>((line * 7 + p * 3) & 0xF), 4);
    for (std::size_t b = 0; b < l.blocks_per_line(); ++b) t.scales()[line * l.blocks_per_line() + b] = static_cast<std::uint8_t>((line * 5 + b) & 0x7E);
  }
  return t;
}

}  // namespace nvfp4_foreign_test

TEST_CASE("nvfp4 layout: sizes follow the 16-element block", "[nvfp4_foreign]") {
  const mxkit::block_layout l{mxkit::formats::nvfp4_2d, mxkit::block_axis::columnwise, 37, 5};
  CHECK(l.lines() == 5);
  CHECK(l.block_size() == 16);
  CHECK(l.tile_lines() == 16);
  CHECK(l.padded_length() == 48);
  CHECK(l.blocks_per_line() == 3);
  CHECK(l.line_bytes() == 24);
  CHECK(l.data_bytes() == 120);
  CHECK(l.scale_count() == 15);
  const mxkit::nvfp4_tensor t(l, {});
  CHECK(t.data().size() == 120);
  CHECK(t.scales().size() == 15);
  using mxkit_test::contains;
  CHECK_THROWS_WITH(mxkit::nvfp4_tensor(l, {}, 0.0f), contains("nvfp4_tensor: tensor scale 0"));
  CHECK_THROWS_WITH(mxkit::nvfp4_tensor({mxkit::formats::mxfp8_e4m3, mxkit::block_axis::rowwise, 2, 2}, {}), contains("is not NVFP4"));
}

TEST_CASE("nvfp4 foreign storage: every description reads back what it was written with", "[nvfp4_foreign]") {
  using namespace nvfp4_foreign_test;
  for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
    const std::size_t rows = 35, cols = 40;
    const mxkit::nvfp4_tensor own = patterned(axis, rows, cols);
    const mxkit::block_layout& l = own.layout();
    std::vector<mxkit::mx_storage> storages;
    for (const mxkit::nibble_order n : {mxkit::nibble_order::low_first, mxkit::nibble_order::high_first})
      for (const mxkit::scale_layout s : mxkit::all_scale_layouts)
        for (const bool padding : {true, false}) {
          mxkit::mx_storage st;
          st.nibbles = n;
          st.scales = s;
          st.padding_stored = padding;
          storages.push_back(st);
        }
    mxkit::mx_storage wide;  // a larger leading dimension, strided scales with the block index slow
    wide.data_ld = 64;
    wide.scale_line_stride = 1;
    wide.scale_block_stride = 64;
    storages.push_back(wide);
    if (axis == block_axis::columnwise) {
      mxkit::mx_storage flat;
      flat.columnwise = mxkit::columnwise_storage::not_transposed;
      flat.scale_padded = {128, 4};
      storages.push_back(flat);
    }
    for (const mxkit::mx_storage& st : storages) {
      INFO(mxkit::name_of(axis) << ", " << mxkit::name_of(st.nibbles) << ", " << mxkit::name_of(st.scales) << ", padding stored "
                                << st.padding_stored << ", data_ld " << st.data_ld << ", " << mxkit::name_of(st.columnwise));
      const mxkit::nvfp4_foreign_buffers b = mxkit::store_foreign(own, st);
      const mxkit::nvfp4_foreign_view v = b.view();
      mxkit::detail::check_nvfp4_foreign_view(v, "test");
      CHECK(v.tensor_scale == 0.25f);
      for (std::size_t line = 0; line < l.lines(); ++line) {
        for (std::size_t p = 0; p < v.stored_length(); ++p) REQUIRE(v.code(line, p) == own.view().code(line, p));
        for (std::size_t blk = 0; blk < l.blocks_per_line(); ++blk) REQUIRE(v.scale(line, blk) == own.view().scale(line, blk));
      }
    }
  }
}

TEST_CASE("nvfp4 foreign storage: bad descriptions and short buffers are refused by name", "[nvfp4_foreign]") {
  using namespace nvfp4_foreign_test;
  using mxkit_test::contains;
  const mxkit::nvfp4_tensor own = patterned(block_axis::rowwise, 20, 48);
  mxkit::nvfp4_foreign_view v = mxkit::foreign_view(own);
  mxkit::detail::check_nvfp4_foreign_view(v, "validate");
  mxkit::nvfp4_foreign_view bad = v;
  bad.storage.data_ld = 23;
  CHECK_THROWS_WITH(mxkit::detail::check_nvfp4_foreign_view(bad, "validate"),
                    contains("data_ld 23 bytes is smaller than a stored row of 24 bytes (nvfp4 rowwise 20x48)"));
  bad = v;
  bad.data = bad.data.first(100);
  CHECK_THROWS_WITH(mxkit::detail::check_nvfp4_foreign_view(bad, "validate"), contains("data buffer of 100 bytes for a 20x48 nvfp4 rowwise copy"));
  bad = v;
  bad.storage.scale_line_stride = 1;
  bad.storage.scale_block_stride = 1;
  CHECK_THROWS_WITH(mxkit::detail::check_nvfp4_foreign_view(bad, "validate"), contains("overlap"));
  bad = v;
  bad.storage.scales = mxkit::scale_layout::cublas_128x4;
  bad.storage.scale_padded = {128, 4};
  CHECK_THROWS_WITH(mxkit::detail::check_nvfp4_foreign_view(bad, "validate"), contains("apply to row_major scales only"));
  bad = v;
  bad.layout.format = mxkit::formats::mxfp4;
  CHECK_THROWS_WITH(mxkit::detail::check_nvfp4_foreign_view(bad, "validate"), contains("is not NVFP4"));
  bad = v;
  bad.options.hadamard_signs = 1u << 20;
  CHECK_THROWS_WITH(mxkit::detail::check_nvfp4_foreign_view(bad, "validate"), contains("hadamard_signs"));
}
