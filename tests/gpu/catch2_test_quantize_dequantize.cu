// SPDX-License-Identifier: Apache-2.0
// GPU dequantize equals the host's dequantize (converted to the output type the same way), for
// both copies, every format, with and without rotation, every scale layout.
#include <mxkit/gpu/dequantize.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/ref/quantize.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "gpu_test_util.hpp"

namespace {

template <class Out>
void check_round_trip(mxkit::mx_type type, mxkit::block_axis axis, bool rotate, mxkit::scale_layout sl, std::uint64_t seed) {
  namespace gpu = mxkit::gpu;
  const std::size_t rows = 75, cols = 140, ld = 144;
  const std::vector<float> x = gpu_test::adversarial_matrix(rows, cols, ld, seed);
  gpu::device_buffer<float> in{std::span<const float>(x)};
  mxkit::quantize_options o;
  o.hadamard = rotate;
  const mxkit::block_layout l{format_of(type), axis, rows, cols};
  gpu::device_mx_tensor q(l, o, sl);
  const mxkit::matrix_view<const float> dv{in.data(), rows, cols, ld};
  gpu::quantize(dv, type, o,
                axis == mxkit::block_axis::rowwise ? gpu::quantize_outputs{q.data().data(), q.scales().data(), sl}
                                                   : gpu::quantize_outputs{.columnwise_data = q.data().data(),
                                                                           .columnwise_scales = q.scales().data(),
                                                                           .columnwise_scales_layout = sl});
  const std::size_t out_ld = cols + 3;
  gpu::device_buffer<Out> out(rows * out_ld);
  out.fill_bytes(0x7F);
  gpu::dequantize(q.view(), mxkit::matrix_view<Out>{out.data(), rows, cols, out_ld});
  const std::vector<Out> got = out.to_host();

  const mxkit::mx_tensor h = mxkit::ref::quantize(mxkit::matrix_view<const float>{x.data(), rows, cols, ld}, type, axis, o);
  const std::vector<float> want = mxkit::ref::dequantize(h);
  // Equal bits, except that a NaN matches any NaN: IEEE 754 leaves the payload and sign of a NaN
  // produced by arithmetic to the implementation (x86 and NVIDIA differ), and a NaN block
  // dequantizes through such arithmetic.
  std::size_t bad = 0;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const float h = want[r * cols + c];
      const Out w = mxkit::gpu::detail::store_float<Out>(h), g = got[r * out_ld + c];
      const bool same = std::isnan(h) ? std::isnan(mxkit::load_float(g)) : std::memcmp(&g, &w, sizeof(Out)) == 0;
      if (!same && bad++ == 0) {
        INFO("first difference at (" << r << ", " << c << "): host " << h << ", device " << mxkit::load_float(g));
        CHECK(false);
      }
    }
  INFO(mxkit::name_of(type) << " " << mxkit::name_of(axis) << " rotate " << rotate << " " << mxkit::name_of(sl) << " "
                            << gpu_test::type_name<Out>());
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("gpu dequantize: equals the host for every format, axis, rotation and layout", "[gpu]") {
  int n = 0;
  for (const mxkit::mx_type type : mxkit::all_mx_types)
    for (const mxkit::block_axis axis : {mxkit::block_axis::rowwise, mxkit::block_axis::columnwise})
      for (const bool rotate : {false, true}) {
        const mxkit::scale_layout sl = mxkit::all_scale_layouts[n % 3];
        check_round_trip<float>(type, axis, rotate, sl, 100u + static_cast<unsigned>(n));
        if (n % 2 == 0) check_round_trip<mxkit::bfloat16>(type, axis, rotate, sl, 200u + static_cast<unsigned>(n));
        else check_round_trip<mxkit::float16>(type, axis, rotate, sl, 300u + static_cast<unsigned>(n));
        ++n;
      }
}

TEST_CASE("gpu dequantize: shape mismatch is rejected", "[gpu]") {
  namespace gpu = mxkit::gpu;
  const gpu::device_mx_tensor q({mxkit::formats::mxfp4, mxkit::block_axis::rowwise, 4, 64}, {});
  gpu::device_buffer<float> out(4 * 64);
  CHECK_THROWS_WITH(gpu::dequantize(q.view(), mxkit::matrix_view<float>{out.data(), 4, 32}), mxkit_test::contains("output is 4x32"));
}
