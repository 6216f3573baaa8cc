// SPDX-License-Identifier: Apache-2.0
// Scale layouts: each is a bijection of the padded [lines, blocks] extent onto its storage, the
// cuBLAS mapping reproduces the offsets NVIDIA documents, and the AITER shuffle equals its
// definition (a view, a permutation and a flatten) evaluated independently here.
#include <mxkit/tensor/scale_layout.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../catch.hpp"

namespace {

// Offset of index `idx` of a row-major array of `shape` after permuting its axes by `perm`
// (torch's x.view(shape).permute(perm).contiguous()): the generic definition, no formula.
template <std::size_t N>
std::size_t permuted_offset(const std::array<std::size_t, N>& shape, const std::array<std::size_t, N>& perm,
                            const std::array<std::size_t, N>& idx) {
  std::size_t off = 0;
  for (std::size_t k = 0; k < N; ++k) off = off * shape[perm[k]] + idx[perm[k]];
  return off;
}

std::size_t aiter_definition(std::size_t lines, std::size_t blocks, std::size_t i, std::size_t j) {
  const std::size_t sm = (lines + 255) / 256 * 256, sn = (blocks + 7) / 8 * 8;
  const std::array<std::size_t, 6> shape{sm / 32, 2, 16, sn / 8, 2, 4};
  const std::array<std::size_t, 6> idx{i / 32, i / 16 % 2, i % 16, j / 8, j / 4 % 2, j % 4};
  return permuted_offset(shape, {0, 3, 5, 2, 4, 1}, idx);
}

// cuBLAS: nvmath-python describes the layout as a 5-D strided view, (line tiles, 4, 32) x
// (block tiles, 4) with strides (512 * block tiles, 4, 16) and (512, 1); line = t*128 + q*32 + r.
std::size_t cublas_definition(std::size_t blocks, std::size_t line, std::size_t block) {
  const std::size_t block_tiles = (blocks + 3) / 4;
  return (line / 128) * 512 * block_tiles + (line / 32 % 4) * 4 + (line % 32) * 16 + (block / 4) * 512 + block % 4;
}

void check_bijection(mxkit::scale_layout l, std::size_t lines, std::size_t blocks) {
  const mxkit::scale_extent e = mxkit::padded_scale_extent(l, lines, blocks);
  REQUIRE(e.size() == mxkit::scale_storage_size(l, lines, blocks));
  std::vector<int> hits(e.size(), 0);
  for (std::size_t i = 0; i < e.lines; ++i)
    for (std::size_t b = 0; b < e.blocks; ++b) {
      const std::size_t off = mxkit::scale_offset(l, lines, blocks, i, b);
      REQUIRE(off < e.size());
      ++hits[off];
    }
  for (int h : hits) REQUIRE(h == 1);
}

}  // namespace

TEST_CASE("scale layouts: padded extents", "[tensor]") {
  using mxkit::scale_layout;
  CHECK(mxkit::scale_storage_size(scale_layout::row_major, 3, 5) == 15);
  CHECK(mxkit::padded_scale_extent(scale_layout::cublas_128x4, 129, 5).lines == 256);
  CHECK(mxkit::padded_scale_extent(scale_layout::cublas_128x4, 129, 5).blocks == 8);
  CHECK(mxkit::padded_scale_extent(scale_layout::aiter_shuffle, 1, 9).lines == 256);
  CHECK(mxkit::padded_scale_extent(scale_layout::aiter_shuffle, 1, 9).blocks == 16);
  CHECK(mxkit::scale_storage_size(scale_layout::aiter_shuffle, 0, 0) == 0);
  static_assert(mxkit::scale_offset(scale_layout::row_major, 4, 7, 2, 3) == 17);
}

TEST_CASE("scale layouts: every layout is a bijection of its padded extent", "[tensor]") {
  for (const mxkit::scale_layout l : mxkit::all_scale_layouts)
    for (const std::size_t lines : {1u, 31u, 128u, 130u, 257u})
      for (const std::size_t blocks : {1u, 4u, 7u, 9u, 16u}) {
        CAPTURE(mxkit::name_of(l), lines, blocks);
        check_bijection(l, lines, blocks);
      }
}

TEST_CASE("scale layouts: cuBLAS 128x4 matches NVIDIA's documented offsets", "[tensor]") {
  using mxkit::scale_layout;
  // nvmath-python's get_block_scale_offset example (128 lines, 8 blocks): (5, 2) -> 82, (5, 5) -> 593.
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::cublas_128x4, 128, 8, 5, 2) == 82);
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::cublas_128x4, 128, 8, 5, 5) == 593);
  // A tile's first 16 bytes are line 0 of each 32-line quarter, blocks 0..3.
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::cublas_128x4, 128, 4, 32, 0) == 4);
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::cublas_128x4, 128, 4, 1, 0) == 16);
  for (const std::size_t lines : {128u, 200u, 384u})
    for (const std::size_t blocks : {4u, 6u, 12u}) {
      const mxkit::scale_extent e = mxkit::padded_scale_extent(scale_layout::cublas_128x4, lines, blocks);
      for (std::size_t i = 0; i < e.lines; ++i)
        for (std::size_t b = 0; b < e.blocks; ++b)
          REQUIRE(mxkit::scale_offset(scale_layout::cublas_128x4, lines, blocks, i, b) == cublas_definition(blocks, i, b));
    }
}

TEST_CASE("scale layouts: AITER shuffle equals view(L/32,2,16,B/8,2,4).permute(0,3,5,2,4,1)", "[tensor]") {
  using mxkit::scale_layout;
  for (const std::size_t lines : {1u, 256u, 300u})
    for (const std::size_t blocks : {1u, 8u, 13u, 24u}) {
      const mxkit::scale_extent e = mxkit::padded_scale_extent(scale_layout::aiter_shuffle, lines, blocks);
      for (std::size_t i = 0; i < e.lines; ++i)
        for (std::size_t b = 0; b < e.blocks; ++b)
          REQUIRE(mxkit::scale_offset(scale_layout::aiter_shuffle, lines, blocks, i, b) ==
                  aiter_definition(lines, blocks, i, b));
    }
  // Hand-checked: line 16 is the "b" bit (stride 1), block 4 the "f" bit (stride 2), line 1 stride 4.
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::aiter_shuffle, 256, 8, 16, 0) == 1);
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::aiter_shuffle, 256, 8, 0, 4) == 2);
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::aiter_shuffle, 256, 8, 1, 0) == 4);
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::aiter_shuffle, 256, 8, 0, 1) == 64);
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::aiter_shuffle, 256, 16, 0, 8) == 256);
  STATIC_REQUIRE(mxkit::scale_offset(scale_layout::aiter_shuffle, 256, 16, 32, 0) == 512);
}

TEST_CASE("scale layouts: host conversion round-trips and zero-fills padding", "[tensor]") {
  const std::size_t lines = 131, blocks = 5;
  std::vector<std::uint8_t> rm(lines * blocks);
  for (std::size_t i = 0; i < rm.size(); ++i) rm[i] = static_cast<std::uint8_t>(1 + i % 250);
  for (const mxkit::scale_layout l : mxkit::all_scale_layouts) {
    CAPTURE(mxkit::name_of(l));
    const std::vector<std::uint8_t> stored = mxkit::to_scale_layout(rm.data(), lines, blocks, l);
    REQUIRE(stored.size() == mxkit::scale_storage_size(l, lines, blocks));
    REQUIRE(mxkit::to_row_major_scales(stored.data(), lines, blocks, l) == rm);
    std::size_t zeros = 0;
    for (std::uint8_t s : stored) zeros += s == 0;
    REQUIRE(zeros == stored.size() - rm.size());  // rm holds no zero
  }
}

TEST_CASE("scale layouts: host conversions refuse a null matrix", "[tensor]") {
  for (const mxkit::scale_layout l : mxkit::all_scale_layouts) {
    CAPTURE(mxkit::name_of(l));
    REQUIRE_THROWS_AS(mxkit::to_scale_layout(nullptr, 3, 2, l), std::invalid_argument);
    REQUIRE_THROWS_AS(mxkit::to_row_major_scales(nullptr, 3, 2, l), std::invalid_argument);
    REQUIRE(mxkit::to_row_major_scales(nullptr, 0, 2, l).empty());
  }
}
