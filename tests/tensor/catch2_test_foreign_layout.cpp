// SPDX-License-Identifier: Apache-2.0
// tensor/foreign_layout.hpp: addressing of every storage a peer uses (checked against offsets
// worked out by hand from each peer's description), the store_foreign / to_mx_tensor round trip,
// validate on mxkit's own output re-stored in every layout (ragged shapes included), and the
// argument checks.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/validation/validate.hpp>
#include <mxkit/tensor/foreign_layout.hpp>

#include "../catch.hpp"

namespace {
using mxkit::block_axis;
using mxkit::matrix_view;
using mxkit::mx_storage;
using mxkit::mx_type;

std::vector<float> make_matrix(std::size_t rows, std::size_t cols, std::uint64_t seed) {
  std::vector<float> x(rows * cols);
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, 3.0f);
  for (float& v : x) v = n(g);
  return x;
}

// Storage variants: (columnwise storage, nibbles, data_ld extra, scale layout, strides/padding).
std::vector<mx_storage> storages(const mxkit::block_layout& l) {
  std::vector<mx_storage> out;
  for (const auto cw : {mxkit::columnwise_storage::transposed, mxkit::columnwise_storage::not_transposed})
    for (const auto nib : {mxkit::nibble_order::low_first, mxkit::nibble_order::high_first})
      for (const bool padding_stored : {true, false})
        for (int sc = 0; sc < 5; ++sc) {
          mx_storage s;
          s.columnwise = cw;
          s.nibbles = nib;
          s.padding_stored = padding_stored;
          const mxkit::mx_foreign_view probe{l, {}, s};
          s.data_ld = sc % 2 ? probe.min_data_ld() + 7 : 0;
          switch (sc) {
            case 0: break;  // packed row-major
            case 1:         // row-major, padded allocation (TE's rowwise scale_inv)
              s.scale_padded = {mxkit::detail::round_up_to(l.lines(), 128), mxkit::detail::round_up_to(l.blocks_per_line(), 4)};
              break;
            case 2:  // block-major (TE's columnwise scale_inv) with a leading dimension
              s.scale_line_stride = 1;
              s.scale_block_stride = l.lines() + 3;
              s.padding_scale = std::nullopt;
              break;
            case 3: s.scales = mxkit::scale_layout::cublas_128x4; break;
            case 4:
              s.scales = mxkit::scale_layout::aiter_shuffle;
              s.padding_scale = 127;
              break;
          }
          out.push_back(s);
        }
  return out;
}

}  // namespace

TEST_CASE("foreign layout: addressing matches each peer's description", "[tensor][foreign]") {
  // TE's MXFP8 columnwise copy of a [64, 96] matrix: data [64, 96] as the input; scale_inv
  // [roundup(64/32, 4), roundup(96, 128)] = [4, 128] with (column c, block b) at b * 128 + c.
  mx_storage te;
  te.columnwise = mxkit::columnwise_storage::not_transposed;
  te.scale_line_stride = 1;
  te.scale_block_stride = 128;
  te.scale_padded = {128, 4};
  const mxkit::mx_foreign_view v{{mxkit::formats::mxfp8_e4m3, block_axis::columnwise, 64, 96}, {}, te};
  CHECK_FALSE(v.line_major());
  CHECK(v.min_data_ld() == 96);
  CHECK(v.data_span() == 64 * 96);
  CHECK(v.scale_offset_of(70, 1) == 1 * 128 + 70);
  CHECK(v.scale_span() == 3 * 128 + 127 + 1);
  CHECK(v.stored_scale_extent().lines == 128);
  CHECK(v.stored_scale_extent().blocks == 4);
  // Element (row 45, col 9) of that copy: line 9, position 45, byte 45 * ld + 9.
  std::vector<std::uint8_t> data(v.data_span()), scales(v.scale_span());
  data[45 * 96 + 9] = 0x5A;
  const mxkit::mx_foreign_view w{v.layout, {}, te, data, scales};
  CHECK(w.code(9, 45) == 0x5A);

  // FP4, rowwise, high nibble first, ld 40: element (row 2, col 7) is the low nibble of byte 2 * 40 + 3.
  mx_storage fp4;
  fp4.nibbles = mxkit::nibble_order::high_first;
  fp4.data_ld = 40;
  std::vector<std::uint8_t> d4(3 * 40);
  d4[2 * 40 + 3] = 0x9C;
  const mxkit::mx_foreign_view f{{mxkit::formats::mxfp4, block_axis::rowwise, 3, 64}, {}, fp4, d4, scales};
  CHECK(f.code(2, 7) == 0xC);
  CHECK(f.code(2, 6) == 0x9);
  // A not-transposed FP4 columnwise copy packs neighbouring columns: (row 5, col 3) is the high
  // nibble (low-first order, odd column) of byte 5 * ld + 1.
  mx_storage nt;
  nt.columnwise = mxkit::columnwise_storage::not_transposed;
  std::vector<std::uint8_t> dn(32 * 4);
  dn[5 * 4 + 1] = 0x70;
  const mxkit::mx_foreign_view n{{mxkit::formats::mxfp4, block_axis::columnwise, 32, 8}, {}, nt, dn, scales};
  CHECK(n.min_data_ld() == 4);
  CHECK(n.code(3, 5) == 0x7);
  // mxkit's own storage is the default of every field.
  const mxkit::block_layout own{mxkit::formats::mxfp4, block_axis::columnwise, 45, 70};
  const mxkit::mx_foreign_view o{own, {}, {}};
  CHECK(o.line_major());
  CHECK(o.data_ld() == own.line_bytes());
  CHECK(o.data_span() == own.data_bytes());
  CHECK(o.scale_span() == own.scale_count());
  CHECK(o.scale_offset_of(3, 1) == 3 * own.blocks_per_line() + 1);
}

TEST_CASE("foreign layout: store_foreign and to_mx_tensor round-trip every storage", "[tensor][foreign]") {
  constexpr std::size_t rows = 45, cols = 70;  // ragged both ways
  const std::vector<float> x = make_matrix(rows, cols, 1);
  const matrix_view<const float> in{x.data(), rows, cols};
  for (const mx_type type : {mx_type::mxfp4, mx_type::mxfp8_e5m2})
    for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
      const mxkit::mx_tensor t = mxkit::ref::quantize(in, type, axis);
      for (const mx_storage& s : storages(t.layout())) {
        const mxkit::mx_foreign_buffers b = mxkit::store_foreign(t.view(), s);
        const mxkit::mx_foreign_view v = b.view();
        INFO(mxkit::name_of(type) << " " << mxkit::name_of(axis) << " " << mxkit::name_of(s.columnwise) << " "
                                  << mxkit::name_of(s.scales) << " padding " << s.padding_stored);
        CHECK(b.data.size() == v.data_span());
        CHECK(b.scales.size() == v.scale_span());
        const mxkit::mx_tensor back = mxkit::to_mx_tensor(v);
        CHECK(std::ranges::equal(back.scales(), t.scales()));
        if (s.padding_stored) CHECK(std::ranges::equal(back.data(), t.data()));
        // validate reads the same bytes: the copy passes, and one changed byte in the foreign
        // buffer is one mismatch.
        const mxkit::ref::mx_validation_report r = mxkit::ref::validate(in, v);
        CHECK(r.ok());
        if (s.padding_stored) CHECK(r.padding_checked > 0);
        mxkit::mx_foreign_buffers bad = b;
        bad.scales[v.scale_offset_of(t.layout().lines() - 1, 1)] ^= 0x04;
        const mxkit::ref::mx_validation_report rb = mxkit::ref::validate(in, bad.view());
        CHECK(rb.scale_mismatches == 1);
        REQUIRE(rb.mismatches.size() == 1);
        CHECK(rb.mismatches[0].line == t.layout().lines() - 1);
        CHECK(rb.mismatches[0].block == 1);
      }
      // A subset of lines, in the order asked.
      const mxkit::mx_foreign_view own = mxkit::foreign_view(t.view());
      const mxkit::mx_tensor two = mxkit::to_mx_tensor(own, {5, 2});
      CHECK(two.layout().lines() == 2);
      for (std::size_t b = 0; b < t.layout().blocks_per_line(); ++b) CHECK(two.scales()[b] == t.view().scale(5, b));
      CHECK_THROWS_WITH(mxkit::to_mx_tensor(own, {t.layout().lines()}), mxkit_test::contains("line " + std::to_string(t.layout().lines())));
    }
}

TEST_CASE("foreign layout: bad descriptions raise errors naming the value and the limit", "[tensor][foreign]") {
  const mxkit::block_layout l{mxkit::formats::mxfp8_e4m3, block_axis::rowwise, 64, 96};
  std::vector<std::uint8_t> buf(1 << 16);
  const auto view = [&](const mx_storage& s) { return mxkit::mx_foreign_view{l, {}, s, buf, buf}; };
  const auto check = [&](const mx_storage& s) { mxkit::detail::check_foreign_view(view(s), "validate"); };
  mx_storage s;
  s.data_ld = 95;
  CHECK_THROWS_WITH(check(s), mxkit_test::contains("data_ld 95 bytes is smaller than a stored row of 96 bytes"));
  s = {};
  s.scale_line_stride = 3;
  CHECK_THROWS_WITH(check(s), mxkit_test::contains("scale strides must both be set or both 0, got line 3 and block 0"));
  {  // a copy with no scale entry: no stride places anything (TE's columnwise scales of a copy with no lines)
    const mxkit::block_layout empty{mxkit::formats::mxfp8_e4m3, block_axis::columnwise, 64, 0};
    CHECK_NOTHROW(mxkit::detail::check_foreign_view(mxkit::mx_foreign_view{empty, {}, s, buf, buf}, "validate"));
  }
  s.scale_block_stride = 2;  // 64 lines x 3 blocks: lines 3 apart, blocks 2 apart overlap
  CHECK_THROWS_WITH(check(s), mxkit_test::contains("make the scales of a 64x3 extent overlap"));
  s = {};
  s.scales = mxkit::scale_layout::cublas_128x4;
  s.scale_line_stride = s.scale_block_stride = 1;
  CHECK_THROWS_WITH(check(s), mxkit_test::contains("apply to row_major scales only, not cublas_128x4"));
  s = {};
  s.scale_padded = {63, 3};
  CHECK_THROWS_WITH(check(s), mxkit_test::contains("scale_padded.lines 63 is smaller than the 64 lines"));
  s = {};
  s.scales = static_cast<mxkit::scale_layout>(7);
  CHECK_THROWS_WITH(check(s), mxkit_test::contains("unknown scale_layout value 7"));
  s = {};
  s.columnwise = static_cast<mxkit::columnwise_storage>(2);
  CHECK_THROWS_WITH(check(s), mxkit_test::contains("unknown columnwise_storage value 2"));
  s = {};
  s.nibbles = static_cast<mxkit::nibble_order>(9);
  CHECK_THROWS_WITH(check(s), mxkit_test::contains("unknown nibble_order value 9"));
  mxkit::mx_foreign_view v = view({});
  v.data = {};
  CHECK_THROWS_WITH(mxkit::detail::check_foreign_view(v, "validate"), mxkit_test::contains("null element data for a 64x96"));
  v = view({});
  v.scales = {};
  CHECK_THROWS_WITH(mxkit::detail::check_foreign_view(v, "validate"), mxkit_test::contains("null scales"));
  // The view is every block-scaled format's, with a tensor-scale slot: an MX copy has no tensor
  // scale, and one set there is refused rather than ignored.
  v = view({});
  v.tensor_scale = 2.0f;
  CHECK_THROWS_WITH(mxkit::detail::check_foreign_view(v, "validate"), mxkit_test::contains("validate: an MX copy has no tensor scale, got 2"));
  v = view({});
  v.tensor_scale_from_amax = false;
  CHECK_THROWS_WITH(mxkit::detail::check_foreign_view(v, "validate"), mxkit_test::contains("no tensor scale, got 1 (given)"));
  // NVFP4's format in an MX view is refused by name, before its 16-element blocks are read with E8M0 scales.
  v = view({});
  v.layout.format = mxkit::formats::nvfp4;
  CHECK_THROWS_WITH(mxkit::detail::check_foreign_view(v, "validate"), mxkit_test::contains("validate: nvfp4 (e2m1 elements, 1 x 16 blocks"));
  CHECK_NOTHROW(check({}));
  // store_foreign checks the description, not pointers.
  const mxkit::mx_tensor t({mxkit::formats::mxfp4, block_axis::rowwise, 4, 64}, {});
  s = {};
  s.data_ld = 1;
  CHECK_THROWS_WITH(mxkit::store_foreign(std::as_const(t).view(), s), mxkit_test::contains("store_foreign: data_ld 1 bytes"));
}

// ---- Issue #33: sizes that wrap, buffers shorter than the description (fail on 144c4cb) ----------

TEST_CASE("foreign layout: spans that overflow std::size_t are refused before anything is allocated", "[tensor][foreign]") {
  // 64x64 MXFP8 rowwise: 64 lines of 64 bytes, 2 blocks per line. Each description below makes
  // data_span() or scale_span() wrap around 2^64 to a small number.
  const mxkit::block_layout l{mxkit::formats::mxfp8_e4m3, block_axis::rowwise, 64, 64};
  const mxkit::mx_tensor t(l, {});
  constexpr std::size_t huge = std::size_t{1} << 63;
  const auto check = [&](const mx_storage& s) { mxkit::detail::check_foreign_storage({l, {}, s}, "validate"); };
  mx_storage s;
  s.data_ld = huge;  // 63 x 2^63 + 64 wraps to 2^63 + 64
  REQUIRE_THROWS_WITH(check(s), mxkit_test::contains("data_ld 9223372036854775808") && mxkit_test::contains("exceeds"));
  REQUIRE_THROWS_WITH(mxkit::store_foreign(t.view(), s), mxkit_test::contains("store_foreign: ") &&
                                                             mxkit_test::contains("data_ld 9223372036854775808"));
  s = {};
  s.scale_line_stride = huge;  // lines 2^63 apart: 63 x 2^63 + 1 + 1 wraps
  s.scale_block_stride = 1;
  REQUIRE_THROWS_WITH(check(s), mxkit_test::contains("scale_line_stride 9223372036854775808") && mxkit_test::contains("exceeds"));
  REQUIRE_THROWS_WITH(mxkit::store_foreign(t.view(), s), mxkit_test::contains("scale_line_stride 9223372036854775808"));
  s = {};
  s.scale_padded = {huge, 2};  // 2^63 x 2 = 2^64 entries: wraps to 0
  REQUIRE_THROWS_WITH(check(s), mxkit_test::contains("scale_padded.lines 9223372036854775808") && mxkit_test::contains("exceeds"));
  REQUIRE_THROWS_WITH(mxkit::store_foreign(t.view(), s), mxkit_test::contains("scale_padded.lines 9223372036854775808"));
  s = {};
  s.data_ld = std::size_t{1} << 58;  // 63 x 2^58 + 64 fits std::size_t, but no object is that large
  REQUIRE_THROWS_WITH(check(s), mxkit_test::contains("largest object size"));
  // A caller who sized the buffers by the wrapped data_span() (2^63 + 64) must not be read past them.
  s = {};
  s.data_ld = huge;
  const mxkit::mx_foreign_buffers wrapped{l, {}, s, std::vector<std::uint8_t>(64), std::vector<std::uint8_t>(128)};
  const std::vector<float> x(64 * 64, 1.0f);
  REQUIRE_THROWS_WITH(mxkit::ref::validate(matrix_view<const float>{x.data(), 64, 64}, wrapped.view()),
                      mxkit_test::contains("data_ld 9223372036854775808"));
}

TEST_CASE("foreign layout: a buffer shorter than its description is refused, naming both sizes", "[tensor][foreign]") {
  constexpr std::size_t rows = 4, cols = 64;
  const std::vector<float> x = make_matrix(rows, cols, 33);
  const matrix_view<const float> in{x.data(), rows, cols};
  const mxkit::mx_tensor t = mxkit::ref::quantize_rowwise(in, mx_type::mxfp8_e4m3);
  mx_storage s;
  s.data_ld = 80;  // 3 x 80 + 64 = 304 bytes of data; 4 x 2 = 8 scales
  mxkit::mx_foreign_buffers b = mxkit::store_foreign(t.view(), s);
  REQUIRE(b.data.size() == 304);
  REQUIRE(b.scales.size() == 8);
  REQUIRE(mxkit::ref::validate(in, b.view()).ok());
  // view() keeps the sizes of the vectors it points into: validate and to_mx_tensor see them.
  mxkit::mx_foreign_buffers short_scales = b;
  short_scales.scales.resize(1);
  CHECK_THROWS_WITH(mxkit::ref::validate(in, short_scales.view()),
                    mxkit_test::contains("validate: ") && mxkit_test::contains("scale buffer of 1 byte") &&
                        mxkit_test::contains("8 bytes"));
  CHECK_THROWS_WITH(mxkit::to_mx_tensor(short_scales.view()), mxkit_test::contains("to_mx_tensor: ") &&
                                                                   mxkit_test::contains("scale buffer of 1 byte"));
  mxkit::mx_foreign_buffers short_data = b;
  short_data.data.resize(303);
  CHECK_THROWS_WITH(mxkit::ref::validate(in, short_data.view()),
                    mxkit_test::contains("data buffer of 303 bytes") && mxkit_test::contains("304 bytes"));
  // A longer buffer is fine (a view into a larger allocation).
  mxkit::mx_foreign_buffers longer = b;
  longer.data.resize(400);
  longer.scales.resize(20);
  CHECK(mxkit::ref::validate(in, longer.view()).ok());
}
