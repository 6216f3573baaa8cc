// SPDX-License-Identifier: Apache-2.0
// The kernel library (gpu/kernel_library.hpp) and the header-only path give the same bits: this
// file calls gpu::quantize, gpu::quantize_nvfp4, gpu::cast_fp8 and gpu::gemm through the library (where the build
// links one), kernel_library_header_only.cu the same calls compiled from the headers alone; every
// output byte must agree. mxkit:sm90a (both halves take the same GEMM path).
#include <mxkit/gpu/fp8_cast.hpp>
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/quantize_nvfp4.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../catch.hpp"
#include "gpu_test_util.hpp"
#include "kernel_library_header_only.hpp"

namespace {
namespace gpu = mxkit::gpu;

// Index of the first byte where a and b differ, or -1.
template <class T>
long first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long>(i);
  return -1;
}
}  // namespace

TEST_CASE("kernel library: quantize gives the header-only bytes, every format, plain and rotated", "[gpu]") {
  const std::size_t rows = 96, cols = 160;
  const std::vector<float> x = gpu_test::adversarial_matrix(rows, cols, cols, 29);
  const gpu::device_buffer<float> in{std::span<const float>(x)};
  for (int t = 0; t < 6; ++t)
    for (const bool rotate : {false, true}) {
      const mxkit::mx_type type = mxkit::all_mx_types[t];
      const mxkit::block_layout lr{mxkit::format_of(type), mxkit::block_axis::rowwise, rows, cols}, lc{mxkit::format_of(type), mxkit::block_axis::columnwise, rows, cols};
      const std::size_t sr = lr.lines() * lr.blocks_per_line(), sc = lc.lines() * lc.blocks_per_line();
      gpu::device_buffer<std::uint8_t> lib_rd(lr.data_bytes()), lib_rs(sr), lib_cd(lc.data_bytes()), lib_cs(sc);
      gpu::device_buffer<std::uint8_t> hdr_rd(lr.data_bytes()), hdr_rs(sr), hdr_cd(lc.data_bytes()), hdr_cs(sc);
      mxkit::quantize_options o;
      o.hadamard = rotate;
      gpu::quantize(mxkit::matrix_view<const float>{in.data(), rows, cols}, type, o,
                    {lib_rd.data(), lib_rs.data(), mxkit::scale_layout::row_major, lib_cd.data(), lib_cs.data(),
                     mxkit::scale_layout::row_major});
      header_only::quantize(in.data(), rows, cols, t, rotate, hdr_rd.data(), hdr_rs.data(), hdr_cd.data(), hdr_cs.data());
      INFO(mxkit::name_of(type) << (rotate ? " rotated" : ""));
      CHECK(first_difference(lib_rd.to_host(), hdr_rd.to_host()) == -1);
      CHECK(first_difference(lib_rs.to_host(), hdr_rs.to_host()) == -1);
      CHECK(first_difference(lib_cd.to_host(), hdr_cd.to_host()) == -1);
      CHECK(first_difference(lib_cs.to_host(), hdr_cs.to_host()) == -1);
      // The compile-time format entry writes the same bytes as the run-time one.
      if (type == mxkit::mx_type::mxfp4) {
        gpu::device_buffer<std::uint8_t> one_rd(lr.data_bytes()), one_rs(sr);
        gpu::quantize<mxkit::mx_type::mxfp4>(mxkit::matrix_view<const float>{in.data(), rows, cols}, o, {one_rd.data(), one_rs.data()});
        CHECK(first_difference(one_rd.to_host(), hdr_rd.to_host()) == -1);
        CHECK(first_difference(one_rs.to_host(), hdr_rs.to_host()) == -1);
      }
    }
}

TEST_CASE("kernel library: NVFP4 quantize gives the header-only bytes, 1 x 16 and 16 x 16 blocks, plain and rotated", "[gpu]") {
  const std::size_t rows = 96, cols = 160;
  const std::vector<float> x = gpu_test::adversarial_matrix(rows, cols, cols, 31);
  const gpu::device_buffer<float> in{std::span<const float>(x)};
  for (const bool two_d : {false, true})
    for (const bool rotate : {false, true}) {
      const mxkit::block_format f = two_d ? mxkit::formats::nvfp4_2d : mxkit::formats::nvfp4;
      const mxkit::block_layout lr{f, mxkit::block_axis::rowwise, rows, cols}, lc{f, mxkit::block_axis::columnwise, rows, cols};
      gpu::device_buffer<std::uint8_t> lib_rd(lr.data_bytes()), lib_rs(lr.scale_count()), lib_cd(lc.data_bytes()), lib_cs(lc.scale_count());
      gpu::device_buffer<std::uint8_t> hdr_rd(lr.data_bytes()), hdr_rs(lr.scale_count()), hdr_cd(lc.data_bytes()), hdr_cs(lc.scale_count());
      gpu::device_buffer<float> lib_t(2), hdr_t(2);
      mxkit::nvfp4_options o;
      o.hadamard = rotate;
      o.hadamard_signs = rotate ? 0x5A3Cu : 0u;
      gpu::quantize_nvfp4(mxkit::matrix_view<const float>{in.data(), rows, cols}, f, o,
                          {lib_rd.data(), lib_rs.data(), mxkit::scale_layout::row_major, lib_t.data(), lib_cd.data(), lib_cs.data(),
                           mxkit::scale_layout::row_major, lib_t.data() + 1});
      header_only::quantize_nvfp4(in.data(), rows, cols, two_d, rotate, hdr_rd.data(), hdr_rs.data(), hdr_t.data(), hdr_cd.data(),
                                  hdr_cs.data(), hdr_t.data() + 1);
      INFO((two_d ? "16 x 16" : "1 x 16") << (rotate ? " rotated" : ""));
      CHECK(first_difference(lib_rd.to_host(), hdr_rd.to_host()) == -1);
      CHECK(first_difference(lib_rs.to_host(), hdr_rs.to_host()) == -1);
      CHECK(first_difference(lib_cd.to_host(), hdr_cd.to_host()) == -1);
      CHECK(first_difference(lib_cs.to_host(), hdr_cs.to_host()) == -1);
      const std::vector<float> lt = lib_t.to_host(), ht = hdr_t.to_host();
      CHECK(first_difference(lt, ht) == -1);
      CHECK(lt[0] > 0.0f);  // a tensor scale was written
    }
}

TEST_CASE("kernel library: FP8 cast and MX GEMM give the header-only bits", "[gpu]") {
  const std::size_t rows = 128, cols = 256;
  std::vector<float> x = gpu_test::adversarial_matrix(rows, cols, cols, 30);
  for (float& v : x)  // finite inputs for the GEMM
    if (!(std::abs(v) < 1.0e30f)) v = 1.0f;
  const gpu::device_buffer<float> in{std::span<const float>(x)};

  gpu::device_buffer<std::uint8_t> lib_d(rows * cols), lib_t(rows * cols), hdr_d(rows * cols), hdr_t(rows * cols);
  gpu::cast_fp8(mxkit::matrix_view<const float>{in.data(), rows, cols}, mxkit::fp8_type::e4m3, 0.5f, {lib_d.data(), lib_t.data()});
  header_only::cast_fp8(in.data(), rows, cols, 0.5f, hdr_d.data(), hdr_t.data());
  CHECK(first_difference(lib_d.to_host(), hdr_d.to_host()) == -1);
  CHECK(first_difference(lib_t.to_host(), hdr_t.to_host()) == -1);

  // D[rows, rows] = X . X^T from X's MXFP8 rowwise copy (the header-only quantizer's bytes,
  // equal to the library's above), through each build's GEMM.
  const int e4m3 = 3;
  REQUIRE(mxkit::all_mx_types[e4m3] == mxkit::mx_type::mxfp8_e4m3);
  const mxkit::block_layout l{mxkit::formats::mxfp8_e4m3, mxkit::block_axis::rowwise, rows, cols};
  gpu::device_buffer<std::uint8_t> data(l.data_bytes()), scales(l.lines() * l.blocks_per_line());
  header_only::quantize(in.data(), rows, cols, e4m3, false, data.data(), scales.data(), nullptr, nullptr);
  gpu::device_buffer<float> lib_out(rows * rows), hdr_out(rows * rows);
  const mxkit::mx_const_view v{l, {}, data.data(), scales.data(), mxkit::scale_layout::row_major};
  gpu::gemm(v, v, mxkit::matrix_view<float>{lib_out.data(), rows, rows});
  header_only::gemm_mxfp8(data.data(), scales.data(), data.data(), scales.data(), rows, rows, cols, hdr_out.data());
  const std::vector<float> a = lib_out.to_host(), b = hdr_out.to_host();
  CHECK(first_difference(a, b) == -1);
  CHECK(a[0] != 0.0f);  // a product was computed
}
