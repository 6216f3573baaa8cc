// SPDX-License-Identifier: Apache-2.0
// GPU per-tensor FP8 cast equals the host's quantize_fp8 (codes, transposed codes, amax) for
// E4M3 and E5M2, saturating and not, every input type, adversarial inputs on ragged shapes.
#include <mxkit/gpu/fp8_cast.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "gpu_test_util.hpp"

namespace {

template <class T>
void check_cast(mxkit::fp8_type type, mxkit::overflow o, float scale, std::size_t rows, std::size_t cols, std::size_t ld,
                std::uint64_t seed) {
  namespace gpu = mxkit::gpu;
  const std::vector<T> x = gpu_test::convert<T>(gpu_test::adversarial_matrix(rows, cols, ld, seed));
  gpu::device_buffer<T> in{std::span<const T>(x)};
  auto data = gpu_test::poisoned(rows * cols), tr = gpu_test::poisoned(rows * cols);
  gpu::device_buffer<float> amax(1);
  gpu::cast_fp8(mxkit::matrix_view<const T>{in.data(), rows, cols, ld}, type, scale, {data.data(), tr.data(), amax.data()}, o);
  const mxkit::fp8_tensor want = mxkit::quantize_fp8(mxkit::matrix_view<const T>{x.data(), rows, cols, ld}, type, scale, o);
  INFO(gpu_test::type_name<T>() << " " << mxkit::name_of(type) << " overflow " << static_cast<int>(o) << " scale " << scale << " "
                                << rows << "x" << cols);
  CHECK(gpu_test::first_difference(data.to_host(), want.data, cols) == "");
  CHECK(gpu_test::first_difference(tr.to_host(), mxkit::transpose(want).data, rows) == "");
  CHECK(gpu_test::same_amax(amax.to_host()[0], want.amax));
}

}  // namespace

TEST_CASE("gpu fp8 cast: equals the host for both formats, both overflow modes, every input type", "[gpu]") {
  int n = 0;
  for (const mxkit::fp8_type type : {mxkit::fp8_type::e4m3, mxkit::fp8_type::e5m2})
    for (const mxkit::overflow o : {mxkit::overflow::saturate, mxkit::overflow::propagate})
      for (const float scale : {1.0f, 0.0078125f, 3.0e-30f, 1.7f}) {
        check_cast<float>(type, o, scale, 100, 130, 133, 500u + static_cast<unsigned>(n));
        check_cast<mxkit::bfloat16>(type, o, scale, 64, 64, 64, 600u + static_cast<unsigned>(n));
        check_cast<mxkit::float16>(type, o, scale, 129, 31, 40, 700u + static_cast<unsigned>(n));
        // Interior tiles (the path without bounds tests) beside edge tiles, in one call: aligned
        // rows with a padded stride, full 64 x 64 tiles and a ragged last row and column of tiles.
        check_cast<float>(type, o, scale, 200, 136, 140, 800u + static_cast<unsigned>(n));
        check_cast<mxkit::bfloat16>(type, o, scale, 130, 192, 196, 900u + static_cast<unsigned>(n));
        ++n;
      }
}

TEST_CASE("gpu fp8 cast: bad scale is rejected", "[gpu]") {
  mxkit::gpu::device_buffer<float> in(16);
  mxkit::gpu::device_buffer<std::uint8_t> out(16);
  CHECK_THROWS_WITH(mxkit::gpu::cast_fp8(mxkit::matrix_view<const float>{in.data(), 4, 4}, mxkit::fp8_type::e4m3, 0.0f, {out.data()}),
                    mxkit_test::contains("scale must be finite and positive"));
  // A fixed-scale cast has no scale to keep: the copies' scale outputs belong to the delayed cast.
  mxkit::gpu::device_buffer<float> kept(1);
  mxkit::gpu::fp8_outputs o{out.data()};
  o.data_scale = kept.data();
  CHECK_THROWS_WITH(mxkit::gpu::cast_fp8(mxkit::matrix_view<const float>{in.data(), 4, 4}, mxkit::fp8_type::e4m3, 1.0f, o),
                    mxkit_test::contains("data_scale and transposed_scale are cast_fp8_delayed's"));
}
