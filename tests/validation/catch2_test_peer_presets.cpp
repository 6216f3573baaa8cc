// SPDX-License-Identifier: Apache-2.0
// validation/peer_presets.hpp: each peer configuration reproduces bytes worked out by hand from the
// peer's published rule (the expected bytes below are literals, with the arithmetic in the
// comments), the peers' float RCEIL formula departs from the documented rule exactly where the
// header says, and each preset describes the peer's storage.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <mxkit/validation/peer_presets.hpp>

#include "../catch.hpp"

namespace {
using mxkit::block_axis;
using mxkit::matrix_view;
using mxkit::mx_type;

struct pinned_block {
  std::vector<float> values;       // the block's first values; the rest of its 32 are zero
  std::uint8_t scale;              // expected scale byte
  std::vector<std::uint8_t> codes;  // expected codes of those values; the rest are 0x0
};

// Rows of one block each (rowwise copy, 32 columns). Checks that the preset's reference writes
// exactly these bytes (quantize_like), and that validate accepts them stored the peer's way.
void check_pinned(const mxkit::ref::peer_preset& p, const std::vector<pinned_block>& blocks, int fill_code = 0) {
  const std::size_t rows = blocks.size(), cols = 32;
  std::vector<float> x(rows * cols, 0.0f);
  mxkit::mx_tensor want({mxkit::format_of(p.type), block_axis::rowwise, rows, cols}, p.options);
  const int bits = want.layout().storage_bits();
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t i = 0; i < blocks[r].values.size(); ++i) x[r * cols + i] = blocks[r].values[i];
    want.scales()[r] = blocks[r].scale;
    for (std::size_t i = 0; i < cols; ++i) {
      const int code = i < blocks[r].codes.size() ? blocks[r].codes[i] : fill_code;
      mxkit::store_code(want.data().data() + r * want.layout().line_bytes(), i, static_cast<std::uint8_t>(code), bits);
    }
  }
  const matrix_view<const float> in{x.data(), rows, cols};
  INFO(p.name);
  const mxkit::mx_foreign_buffers got = mxkit::ref::quantize_like(p, in, block_axis::rowwise);
  const mxkit::mx_tensor back = mxkit::to_mx_tensor(got.view());
  CHECK(std::ranges::equal(back.scales(), want.scales()));
  CHECK(std::ranges::equal(back.data(), want.data()));
  const mxkit::mx_foreign_buffers stored = mxkit::store_foreign(std::as_const(want).view(), p.storage(block_axis::rowwise, rows, cols));
  const mxkit::ref::mx_validation_report r = mxkit::ref::validate(in, stored.view(), p.validation());
  INFO(mxkit::ref::to_string(r));
  CHECK(r.ok());
}

float nextup(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }

}  // namespace

TEST_CASE("peer presets: torchao to_mx, four modes, pinned FP4 blocks", "[peers]") {
  // Block A = {6.5, 5, -2.75, 0.3}: amax 6.5. Block B = {7, -3.5}: amax 7. Block Z: zeros.
  // E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 are codes 0..7, sign 0x8; emax 2.
  //   FLOOR  A: floor(log2 6.5) - 2 = 0 -> 0x7F; 6.5 clips to 6 (7), 5 ties 4|6 -> even 4 (6),
  //             -2.75 -> -3 (0xD), 0.3 -> 0.5 (1).   B: 0x7F; 7 -> 6 (7), -3.5 ties 3|4 -> 4 (0xE).
  //   CEIL   A: ceil(log2 6.5) - 2 = 1 -> 0x80; /2: 3.25 -> 3 (5), 2.5 ties 2|3 -> 2 (4),
  //             -1.375 -> -1.5 (0xB), 0.15 -> 0 (0).  B: 0x80; 3.5 ties -> 4 (6), -1.75 ties 1.5|2 -> 2 (0xC).
  //   EVEN   A: 6.5 = 1.625 * 4 rounds (1 bit, half up) to 1.5 * 4 -> floor 2 -> 0x7F, as FLOOR.
  //          B: 7 = 1.75 * 4 ties up to 8 -> 3 - 2 = 1 -> 0x80, as CEIL.
  //   RCEIL  A: 6.5 / 6 > 1 -> 2^1 (0x80); B: 0x80; elements as CEIL.
  //   Z: torchao writes 0x00 in every mode.
  const pinned_block floor_a{{6.5f, 5.0f, -2.75f, 0.3f}, 0x7F, {0x7, 0x6, 0xD, 0x1}};
  const pinned_block floor_b{{7.0f, -3.5f}, 0x7F, {0x7, 0xE}};
  const pinned_block ceil_a{{6.5f, 5.0f, -2.75f, 0.3f}, 0x80, {0x5, 0x4, 0xB, 0x0}};
  const pinned_block ceil_b{{7.0f, -3.5f}, 0x80, {0x6, 0xC}};
  const pinned_block zero{{}, 0x00, {}};
  using mode = mxkit::ref::torchao_scale_mode;
  check_pinned(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp4, mode::floor), {floor_a, floor_b, zero});
  check_pinned(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp4, mode::ceil), {ceil_a, ceil_b, zero});
  check_pinned(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp4, mode::even), {floor_a, ceil_b, zero});
  check_pinned(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp4, mode::rceil), {ceil_a, ceil_b, zero});
}

TEST_CASE("peer presets: E4M3 RCEIL in torchao and TE, and where their float formula departs", "[peers]") {
  // Block C = {449, -300, 0.01}. E4M3 binade [128, 256) has step 16 (128 = 0x70), [256, 448]
  // step 32 (256 = 0x78), subnormals m * 2^-9.
  //   RCEIL: 449 / 448 > 1 -> 2^1 (0x80); /2: 224.5 -> 224 = 0x76, -150 -> -144 = 0xF1,
  //          0.005 = 2.56 * 2^-9 -> 3 (0x03).
  //   FLOOR: floor(log2 449) - 8 = 0 (0x7F); 449 clips to 448 (0x7E), -300 -> -288 (0xF9),
  //          0.01 = 5.12 * 2^-9 -> 5 (0x05).
  // Block D = {a}, a = nextup(448 * 2^-127). The rule: a / 2^-127 > 448, so 2^-126 (0x01) and
  //   a / 2^-126 = 224(1 + e) -> 224 (0x76). The peers' code: descale = fl(a * fl(1/448)) is
  //   the float subnormal 2^-127 (the excess is below half its last place), round-up keeps byte
  //   0x00. torchao then multiplies by the exact reciprocal 2^127: 448(1 + e) saturates to 448
  //   (0x7E); TE multiplies by exp2f_rcp(0x00) = 1: a itself, far below E4M3's least step: 0x00.
  const float a = nextup(std::ldexp(448.0f, -127));
  const pinned_block c_rceil{{449.0f, -300.0f, 0.01f}, 0x80, {0x76, 0xF1, 0x03}};
  const pinned_block c_floor{{449.0f, -300.0f, 0.01f}, 0x7F, {0x7E, 0xF9, 0x05}};
  const pinned_block d_rule{{a}, 0x01, {0x76}};
  const pinned_block d_torchao{{a}, 0x00, {0x7E}};
  const pinned_block d_te{{a}, 0x00, {0x00}};
  const pinned_block zero{{}, 0x00, {}};
  using mode = mxkit::ref::torchao_scale_mode;
  using mxkit::ref::peer_formula;
  check_pinned(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp8_e4m3, mode::rceil), {c_rceil, d_torchao, zero});
  check_pinned(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp8_e4m3, mode::rceil, mxkit::scale_layout::row_major,
                                           peer_formula::documented_rule),
               {c_rceil, d_rule, zero});
  check_pinned(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp8_e4m3, mode::floor), {c_floor, {{a}, 0x00, {0x7E}}, zero});
  check_pinned(mxkit::ref::peers::te_mxfp8(), {c_rceil, d_te, zero});
  check_pinned(mxkit::ref::peers::te_mxfp8(mx_type::mxfp8_e4m3, mxkit::scale_layout::row_major, peer_formula::documented_rule),
               {c_rceil, d_rule, zero});
  // E5M2: 60000 / 57344 > 1 -> 0x80; 30000 lies in [16384, 32768) (step 4096): 28672 = 1.75 * 2^14
  // = (29 << 2) | 3 = 0x77.
  check_pinned(mxkit::ref::peers::te_mxfp8(mx_type::mxfp8_e5m2), {{{60000.0f}, 0x80, {0x77}}, zero});

  // The documented rule and the peers' code disagree on block D only.
  const mxkit::ref::peer_preset te = mxkit::ref::peers::te_mxfp8();
  const std::vector<float> x = [&] {
    std::vector<float> v(3 * 32, 0.0f);
    v[0] = 449.0f;
    v[32] = a;
    return v;
  }();
  const matrix_view<const float> in{x.data(), 3, 32};
  const mxkit::mx_foreign_buffers peer_bytes = mxkit::ref::quantize_like(te, in, block_axis::rowwise);
  const mxkit::ref::peer_preset rule = mxkit::ref::peers::te_mxfp8(mx_type::mxfp8_e4m3, mxkit::scale_layout::row_major,
                                                         peer_formula::documented_rule);
  const mxkit::ref::mx_validation_report r = mxkit::ref::validate(in, peer_bytes.view(), rule.validation());
  INFO(mxkit::ref::to_string(r));
  CHECK(r.scale_mismatches == 1);
  CHECK(r.element_mismatches == 1);
  REQUIRE(r.mismatches.size() == 2);
  CHECK(r.mismatches[0].row == 1);
  CHECK(r.mismatches[0].expected == 0x01);
  CHECK(r.mismatches[0].actual == 0x00);
}

TEST_CASE("peer presets: the float RCEIL formula is the rule except at nextup(max * 2^-127)", "[peers]") {
  // Every binade edge max * 2^k (k = -150 .. 127) and the 8 floats on either side, for every
  // float element type: the only difference is the one the header documents.
  const auto sweep = [](auto element, float max) {
    using E = decltype(element);
    int differences = 0;
    for (int k = -150; k <= 127; ++k) {
      const float edge = std::ldexp(max, k);
      if (edge == 0.0f || !std::isfinite(edge)) continue;
      const std::uint32_t e = mxkit::bit_cast<std::uint32_t>(edge);
      for (int d = -8; d <= 8; ++d) {
        const std::uint32_t amax = e + static_cast<std::uint32_t>(d);
        if (amax == 0 || amax >= 0x7F800000u) continue;
        const std::uint8_t peer = mxkit::detail::rceil_float_formula_scale<E>(amax).bits();
        const std::uint8_t rule = mxkit::shared_scale<E>(mxkit::float_bits{amax}, mxkit::scale_rule::round_up).bits();
        if (peer == rule) continue;
        ++differences;
        INFO("max " << max << " k " << k << " d " << d << ": peer 0x" << std::hex << int{peer} << " rule 0x" << int{rule});
        CHECK(k == -127);
        CHECK(d == 1);
        CHECK(peer == 0x00);
        CHECK(rule == 0x01);
      }
    }
    CHECK(differences == 1);
  };
  sweep(mxkit::e2m1{}, 6.0f);
  sweep(mxkit::e2m3{}, 7.5f);
  sweep(mxkit::e3m2{}, 28.0f);
  sweep(mxkit::e4m3{}, 448.0f);
  sweep(mxkit::e5m2{}, 57344.0f);
  // The integer product rounds like the float multiply (subnormal results included).
  for (const float x : {1.0f, 3.0f, 449.0f, 1e-38f, 3e-39f, std::ldexp(1.0f, -140), 6e37f})
    for (const float y : {1.0f / 448.0f, 1.0f / 6.0f, 0.1f, 3.0f, std::ldexp(1.0f, -20)})
      CHECK(mxkit::detail::multiply_rne_bits(mxkit::bit_cast<std::uint32_t>(x), mxkit::bit_cast<std::uint32_t>(y)) ==
            mxkit::bit_cast<std::uint32_t>(x * y));
}

TEST_CASE("peer presets: ROCm TE MXFP4, Hadamard and EVEN, both element paths", "[peers]") {
  // Block F = {10, 0, ...}: H16 of 10 e_0 is 10 in all 16 places; normalized by 1/4: 2.5 each in
  // the first group, zeros in the second. amax 2.5 = 1.25 * 2 ties up (EVEN, 1 bit) to 3 ->
  // floor(log2 3) - 2 = -1 (0x7E). Elements 2.5 / 2^-1 = 5, a tie of 4 and 6: the software
  // path rounds away (6, code 7), the hardware conversion to even (4, code 6). Zero block: 0x7F.
  const auto block_f = [](std::uint8_t code) {
    return pinned_block{{10.0f}, 0x7E, std::vector<std::uint8_t>(16, code)};
  };
  const pinned_block zero{{}, 0x7F, {}};
  check_pinned(mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::software), {block_f(0x7), zero});
  check_pinned(mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::hardware), {block_f(0x6), zero});
  check_pinned(mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::hardware, mxkit::scale_layout::aiter_shuffle),
               {block_f(0x6), zero});
}

TEST_CASE("peer presets: each preset describes its peer's storage", "[peers]") {
  const std::size_t M = 96, K = 160;
  // TE: rowwise scale_inv [roundup(M, 128), roundup(K/32, 4)]; columnwise data [M, K] not
  // transposed, scale_inv [roundup(M/32, 4), roundup(K, 128)] with (column, block) at block * 256 + column.
  const mxkit::ref::peer_preset te = mxkit::ref::peers::te_mxfp8();
  const mxkit::mx_storage row = te.storage(block_axis::rowwise, M, K);
  CHECK(row.scale_padded.lines == 128);
  CHECK(row.scale_padded.blocks == 8);
  CHECK_FALSE(row.padding_scale.has_value());
  const mxkit::mx_foreign_view col = te.view(block_axis::columnwise, M, K, {}, {});
  CHECK(col.storage.columnwise == mxkit::columnwise_storage::not_transposed);
  CHECK(col.scale_offset_of(70, 2) == 2 * 256 + 70);
  CHECK(col.data_ld() == K);
  CHECK(te.options.rule == mxkit::scale_rule::round_up);
  CHECK(te.quirks.zero_block_scale == 0x00);
  const mxkit::ref::peer_preset te_cublas = mxkit::ref::peers::te_mxfp8(mx_type::mxfp8_e4m3, mxkit::scale_layout::cublas_128x4);
  CHECK(te_cublas.storage(block_axis::columnwise, M, K).scales == mxkit::scale_layout::cublas_128x4);
  // torchao: transposed columnwise copy, low nibble first, to_blocked pads with 0.
  const mxkit::ref::peer_preset ao = mxkit::ref::peers::torchao_to_mx(mx_type::mxfp4, mxkit::ref::torchao_scale_mode::floor,
                                                            mxkit::scale_layout::cublas_128x4);
  const mxkit::mx_storage ao_col = ao.storage(block_axis::columnwise, M, K);
  CHECK(ao_col.columnwise == mxkit::columnwise_storage::transposed);
  CHECK(ao_col.nibbles == mxkit::nibble_order::low_first);
  CHECK(ao_col.padding_scale == std::uint8_t{0});
  // ROCm TE: Hadamard without random signs, EVEN; shuffled padding holds 127.
  const mxkit::ref::peer_preset rocm = mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::software, mxkit::scale_layout::aiter_shuffle);
  CHECK(rocm.options.hadamard);
  CHECK_FALSE(rocm.options.random_signs);
  CHECK(rocm.options.round == mxkit::rounding::nearest_away);
  CHECK(rocm.storage(block_axis::rowwise, M, K).padding_scale == std::uint8_t{127});
  CHECK(rocm.quirks.zero_block_scale == 0x7F);
  // Combinations a peer does not have are refused with the value.
  CHECK_THROWS_WITH(mxkit::ref::peers::torchao_to_mx(mx_type::mxint8, mxkit::ref::torchao_scale_mode::floor),
                    mxkit_test::contains("element type 5 is not one of torchao's MX float types"));
  CHECK_THROWS_WITH(mxkit::ref::peers::te_mxfp8(mx_type::mxfp4), mxkit_test::contains("element type 0 is not mxfp8_e4m3 or mxfp8_e5m2"));
  CHECK_THROWS_WITH(mxkit::ref::peers::te_mxfp8(mx_type::mxfp8_e4m3, mxkit::scale_layout::aiter_shuffle),
                    mxkit_test::contains("not aiter_shuffle"));
  CHECK_THROWS_WITH(mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::hardware, mxkit::scale_layout::cublas_128x4),
                    mxkit_test::contains("not cublas_128x4"));
}

TEST_CASE("peer presets: a whole copy in each peer's storage validates, columnwise included", "[peers]") {
  const std::size_t M = 64, K = 96;
  std::vector<float> x(M * K);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * std::ldexp(1.0f, static_cast<int>(i % 23) - 11);
  for (std::size_t r = 0; r < 32; ++r)
    for (std::size_t c = 0; c < 32; ++c) x[r * K + c] = 0.0f;  // zero blocks both ways
  const matrix_view<const float> in{x.data(), M, K};
  const mxkit::ref::peer_preset presets[] = {
      mxkit::ref::peers::te_mxfp8(),
      mxkit::ref::peers::te_mxfp8(mx_type::mxfp8_e5m2, mxkit::scale_layout::cublas_128x4),
      mxkit::ref::peers::torchao_to_mx(mx_type::mxfp6_e2m3, mxkit::ref::torchao_scale_mode::even),
      mxkit::ref::peers::torchao_to_mx(mx_type::mxfp4, mxkit::ref::torchao_scale_mode::rceil, mxkit::scale_layout::cublas_128x4),
      mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::software, mxkit::scale_layout::aiter_shuffle),
  };
  for (const mxkit::ref::peer_preset& p : presets)
    for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
      const mxkit::mx_foreign_buffers b = mxkit::ref::quantize_like(p, in, axis);
      const mxkit::ref::mx_validation_report r = mxkit::ref::validate(in, b.view(), p.validation());
      INFO(p.name << " " << mxkit::name_of(axis) << ": " << mxkit::ref::to_string(r));
      CHECK(r.ok());
      // Validated as mxkit's own quantizer would have written it, only the zero blocks differ.
      const mxkit::ref::mx_validation_report plain = mxkit::ref::validate(in, b.view());
      CHECK(plain.element_mismatches == 0);
      CHECK(plain.scale_mismatches == (p.quirks.zero_block_scale == 0x7F ? 0u : 32u));
    }
}

// ---- Issue #33 item 4: peer enums cast from out-of-range integers (fail on 144c4cb) -------------

TEST_CASE("peer presets: out-of-range peer enums are refused by name", "[peers]") {
  const auto bad_mode = static_cast<mxkit::ref::torchao_scale_mode>(7);
  const auto bad_path = static_cast<mxkit::ref::rocm_fp4_path>(7);
  const auto bad_formula = static_cast<mxkit::ref::peer_formula>(7);
  CHECK_THROWS_WITH(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp8_e4m3, bad_mode),
                    mxkit_test::contains("peers::torchao_to_mx: unknown torchao_scale_mode value 7"));
  CHECK_THROWS_WITH(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp8_e4m3, mxkit::ref::torchao_scale_mode::rceil,
                                                mxkit::scale_layout::row_major, bad_formula),
                    mxkit_test::contains("peers::torchao_to_mx: unknown peer_formula value 7"));
  CHECK_THROWS_WITH(mxkit::ref::peers::te_mxfp8(mx_type::mxfp8_e4m3, mxkit::scale_layout::row_major, bad_formula),
                    mxkit_test::contains("peers::te_mxfp8: unknown peer_formula value 7"));
  CHECK_THROWS_WITH(mxkit::ref::peers::rocm_te_mxfp4(bad_path), mxkit_test::contains("peers::rocm_te_mxfp4: unknown rocm_fp4_path value 7"));
  // The valid values still build (and name themselves).
  CHECK_NOTHROW(mxkit::ref::peers::torchao_to_mx(mx_type::mxfp8_e4m3, mxkit::ref::torchao_scale_mode::even));
  CHECK(mxkit::ref::peers::rocm_te_mxfp4(mxkit::ref::rocm_fp4_path::software).name.find("software") != std::string::npos);
}
