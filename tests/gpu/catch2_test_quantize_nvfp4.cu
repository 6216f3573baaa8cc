// SPDX-License-Identifier: Apache-2.0
// The GPU NVFP4 quantizer writes exactly the host reference's bytes (ref::quantize of
// ref/nvfp4_quantize.hpp): both copies, both block shapes (1 x 16, 16 x 16), every input type,
// the Hadamard rotation with and without a sign mask, every rounding mode (stochastic included),
// a computed and a given tensor scale, the row-major and the padded scale layouts, adversarial
// inputs (NaN, Inf, zero, subnormal and huge blocks) on ragged shapes with leading dimensions.
// Outputs are poisoned before each call, so an unwritten byte fails too. Inputs come from seeds
// printed with every failure. The kernels' 64 x 64 tiles meet their edges (partial tiles, rows
// that take 16-byte loads or not, several tiles per CTA); the kernels' own code also runs on the
// host, without a device (nvfp4_kernel_steps.cu).
#include <mxkit/gpu/quantize_nvfp4.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "gpu_test_util.hpp"

namespace {

using mxkit::block_axis;
using mxkit::nvfp4_options;
using mxkit::scale_layout;

struct shape {
  std::size_t rows, cols, ld;
};

struct one_case {
  mxkit::block_format format;
  nvfp4_options options;
  shape s;
  scale_layout row_layout = scale_layout::row_major, col_layout = scale_layout::row_major;
  std::optional<float> tensor_scale = std::nullopt;
  bool rowwise = true, columnwise = true, amax = true;
};

std::string describe(const one_case& k, const char* type, std::uint64_t seed) {
  std::ostringstream what;
  what << type << " " << mxkit::nvfp4_format_name(k.format) << " " << k.s.rows << "x" << k.s.cols << " ld " << k.s.ld << " round "
       << static_cast<int>(k.options.round) << " hadamard " << k.options.hadamard << " signs 0x" << std::hex << k.options.hadamard_signs
       << std::dec << " seed " << k.options.seed << " stream " << k.options.stream << " scales " << mxkit::name_of(k.row_layout) << "/"
       << mxkit::name_of(k.col_layout) << " tensor scale " << (k.tensor_scale ? std::to_string(*k.tensor_scale) : "amax")
       << " input seed " << seed << ": ";
  return what.str();
}

// Runs one case on the device over `host` ([rows, ld]) and checks every output against the host;
// returns "" or a description of the first difference.
template <class T>
std::string run_on(const one_case& k, const std::vector<T>& host, const std::string& what) {
  namespace gpu = mxkit::gpu;
  const shape s = k.s;
  gpu::device_buffer<T> in{std::span<const T>(host)};
  // A contiguous matrix is passed as a view without ld (0 means cols), as callers write it.
  const mxkit::matrix_view<const T> dev_view{in.data(), s.rows, s.cols, s.ld == s.cols ? 0 : s.ld};
  const mxkit::matrix_view<const T> host_view{host.data(), s.rows, s.cols, s.ld};

  const mxkit::block_layout rl{k.format, block_axis::rowwise, s.rows, s.cols}, cl{k.format, block_axis::columnwise, s.rows, s.cols};
  auto rd = gpu_test::poisoned(rl.data_bytes()), rs = gpu_test::poisoned(mxkit::scale_storage_size(k.row_layout, rl.lines(), rl.blocks_per_line()));
  auto cd = gpu_test::poisoned(cl.data_bytes()), cs = gpu_test::poisoned(mxkit::scale_storage_size(k.col_layout, cl.lines(), cl.blocks_per_line()));
  auto scalars = gpu_test::poisoned<float>(3);  // rowwise t, columnwise t, amax
  gpu::quantize_nvfp4(dev_view, k.format, k.options,
                      {k.rowwise ? rd.data() : nullptr, rs.data(), k.row_layout, scalars.data(), k.columnwise ? cd.data() : nullptr,
                       cs.data(), k.col_layout, scalars.data() + 1, k.amax ? scalars.data() + 2 : nullptr},
                      k.tensor_scale);
  MXKIT_GPU_CHECK(gpu::device_synchronize());
  const std::vector<float> got_scalars = scalars.to_host();

  auto compare = [&](block_axis axis, gpu::device_buffer<std::uint8_t>& data, gpu::device_buffer<std::uint8_t>& scales, scale_layout l,
                     float t, const char* name) -> std::string {
    const mxkit::nvfp4_tensor want = mxkit::ref::quantize(host_view, k.format, axis, k.options, k.tensor_scale);
    const mxkit::block_layout& ml = want.layout();
    std::string d = gpu_test::first_difference(data.to_host(), want.data(), ml.line_bytes());
    if (!d.empty()) return what + name + " data: " + d;
    d = gpu_test::first_difference(scales.to_host(), mxkit::to_scale_layout(want.scales().data(), ml.lines(), ml.blocks_per_line(), l));
    if (!d.empty()) return what + name + " scales (" + mxkit::name_of(l) + "): " + d;
    if (mxkit::bit_cast<std::uint32_t>(t) != mxkit::bit_cast<std::uint32_t>(want.tensor_scale()))
      return what + name + " tensor scale " + std::to_string(t) + " vs host " + std::to_string(want.tensor_scale());
    return "";
  };
  auto unwritten = [&](gpu::device_buffer<std::uint8_t>& b) { return b.to_host() == std::vector<std::uint8_t>(b.size(), 0xA5); };
  if (k.rowwise) {
    const std::string d = compare(block_axis::rowwise, rd, rs, k.row_layout, got_scalars[0], "rowwise");
    if (!d.empty()) return d;
  } else if (!unwritten(rd) || !unwritten(rs)) {
    return what + "rowwise copy written although not requested";
  }
  if (k.columnwise) {
    const std::string d = compare(block_axis::columnwise, cd, cs, k.col_layout, got_scalars[1], "columnwise");
    if (!d.empty()) return d;
  } else if (!unwritten(cd) || !unwritten(cs)) {
    return what + "columnwise copy written although not requested";
  }
  if (k.amax) {
    const float want = gpu_test::host_amax(host, s.rows, s.cols, s.ld);
    if (!gpu_test::same_amax(got_scalars[2], want)) return what + "amax " + std::to_string(got_scalars[2]) + " vs host " + std::to_string(want);
  }
  return "";
}

template <class T>
std::string run_case(const one_case& k, std::uint64_t seed) {
  return run_on<T>(k, gpu_test::convert<T>(gpu_test::adversarial_matrix(k.s.rows, k.s.cols, k.s.ld, seed)),
                   describe(k, gpu_test::type_name<T>(), seed));
}

// Ragged shapes (lines and lengths no multiple of 16, the last 16 x 16 tile short), padded
// leading dimensions, one element, and shapes of whole tiles.
constexpr shape shapes[] = {{97, 161, 170}, {64, 128, 128}, {33, 65, 65}, {130, 300, 304}, {1, 1, 1}, {200, 40, 48}, {16, 16, 16}, {17, 31, 33}};
constexpr std::uint64_t base_seed = 0x4E5646503446ull;  // the input seed of case n is base_seed + n

template <class T>
void every_shape_option(int first_case) {
  const mxkit::block_format formats[] = {mxkit::formats::nvfp4, mxkit::formats::nvfp4_2d};
  int n = first_case;
  for (const mxkit::block_format& format : formats)
    for (int rot = 0; rot < 3; ++rot)
      for (const mxkit::rounding r : {mxkit::rounding::nearest_even, mxkit::rounding::stochastic})
        for (const bool given : {false, true}) {
          one_case k{format, {}, shapes[n % 8], mxkit::all_scale_layouts[n % 3], mxkit::all_scale_layouts[(n + 1) % 3]};
          k.options.round = r;
          k.options.hadamard = rot > 0;
          k.options.hadamard_signs = rot == 2 ? mxkit::hadamard_sign_mask(0x51u + static_cast<unsigned>(n)) : 0u;
          k.options.seed = 0x1234u + static_cast<unsigned>(n);
          k.options.stream = static_cast<std::uint32_t>(n % 3);
          if (given) k.tensor_scale = n % 2 ? 0.0078125f : 3.5e-3f;  // small: large blocks' scales saturate at 448
          const std::string d = run_case<T>(k, base_seed + static_cast<unsigned>(n));
          INFO(d);
          CHECK(d.empty());
          ++n;
        }
}

}  // namespace

TEST_CASE("gpu nvfp4 quantize: float input, both block shapes, rotations, roundings and tensor scales equal the host", "[gpu]") {
  every_shape_option<float>(0);
}
TEST_CASE("gpu nvfp4 quantize: bfloat16 input equals the host", "[gpu]") { every_shape_option<mxkit::bfloat16>(100); }
TEST_CASE("gpu nvfp4 quantize: float16 input equals the host", "[gpu]") { every_shape_option<mxkit::float16>(200); }

TEST_CASE("gpu nvfp4 quantize: every rounding mode, one copy at a time", "[gpu]") {
  int n = 300;
  for (const mxkit::rounding r : {mxkit::rounding::nearest_away, mxkit::rounding::toward_zero, mxkit::rounding::stochastic})
    for (const bool rowwise : {false, true}) {
      one_case k{n % 2 ? mxkit::formats::nvfp4_2d : mxkit::formats::nvfp4, {}, {100, 70, 72}, scale_layout::cublas_128x4,
                 scale_layout::row_major};
      k.options.round = r;
      k.options.hadamard = true;
      k.options.seed = 99;
      k.rowwise = rowwise;
      k.columnwise = !rowwise;
      k.amax = rowwise;
      const std::string d = run_case<mxkit::bfloat16>(k, base_seed + static_cast<unsigned>(n));
      INFO(d);
      CHECK(d.empty());
      ++n;
    }
}

TEST_CASE("gpu nvfp4 quantize: all-zero, all-NaN, Inf and tiny inputs", "[gpu]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const shape s{40, 50, 50};
  for (const float fill : {0.0f, -0.0f, nan, inf, 1.0e-40f, 3.0e38f})
    for (const mxkit::block_format& format : {mxkit::formats::nvfp4, mxkit::formats::nvfp4_2d})
      for (const bool rotate : {false, true}) {
        std::vector<float> x(s.rows * s.ld, fill);
        x[7 * s.ld + 3] = 2.5f;  // one ordinary value among them
        one_case k{format, {}, s, scale_layout::row_major, scale_layout::cublas_128x4};
        k.options.hadamard = rotate;
        const std::string d = run_on<float>(k, x, describe(k, "float", 0) + "fill " + std::to_string(fill) + ": ");
        INFO(d);
        CHECK(d.empty());
      }
}

TEST_CASE("gpu nvfp4 quantize: many blocks (grid-stride loops)", "[gpu]") {
  one_case k{mxkit::formats::nvfp4_2d, {}, {1030, 2100, 2112}, scale_layout::cublas_128x4, scale_layout::cublas_128x4};
  k.options.hadamard = true;
  k.options.hadamard_signs = mxkit::hadamard_sign_mask(7);
  const std::string d = run_case<mxkit::bfloat16>(k, base_seed + 400);
  INFO(d);
  CHECK(d.empty());
  k.format = mxkit::formats::nvfp4;
  k.options.round = mxkit::rounding::stochastic;
  const std::string e = run_case<mxkit::bfloat16>(k, base_seed + 401);
  INFO(e);
  CHECK(e.empty());
}

// The fused kernels' tiles (64 x 64, gpu/quantize/nvfp4_kernel.hpp): whole and partial tiles,
// rows aligned for 16-byte loads (ld > cols included) and not, both copies with and without the
// rotation, both block shapes, several tiles per CTA.
TEST_CASE("gpu nvfp4 quantize: tile edges of the fused kernels", "[gpu]") {
  constexpr shape tile_shapes[] = {{128, 192, 200}, {192, 128, 128}, {65, 129, 136}, {64, 64, 72}, {130, 70, 72}, {63, 200, 201}};
  int n = 600;
  for (const shape& s : tile_shapes)
    for (const mxkit::block_format& format : {mxkit::formats::nvfp4, mxkit::formats::nvfp4_2d})
      for (int rot = 0; rot < 3; ++rot) {
        one_case k{format, {}, s, mxkit::all_scale_layouts[n % 3], mxkit::all_scale_layouts[(n + 2) % 3]};
        k.options.hadamard = rot > 0;
        k.options.hadamard_signs = rot == 2 ? mxkit::hadamard_sign_mask(0x77u + static_cast<unsigned>(n)) : 0u;
        if (n % 4 == 3) k.options.round = mxkit::rounding::stochastic;
        const std::uint64_t seed = base_seed + static_cast<unsigned>(n);
        for (const std::string& d : {run_case<mxkit::bfloat16>(k, seed), run_case<float>(k, seed), run_case<mxkit::float16>(k, seed)}) {
          INFO(d);
          CHECK(d.empty());
        }
        ++n;
      }
  // More tiles than resident CTAs (each CTA loops, loading its next tile while quantizing one).
  for (const mxkit::block_format& format : {mxkit::formats::nvfp4, mxkit::formats::nvfp4_2d}) {
    one_case k{format, {}, {2048, 1024, 1032}, scale_layout::row_major, scale_layout::cublas_128x4};
    k.options.hadamard = true;
    k.options.hadamard_signs = mxkit::hadamard_sign_mask(3);
    const std::string d = run_case<mxkit::bfloat16>(k, base_seed + static_cast<unsigned>(n++));
    INFO(d);
    CHECK(d.empty());
  }
  // 2,145 tiles of 64 x 64, ragged at both edges, against a persistent grid of a few CTAs an SM:
  // every CTA loops over several tiles, the last ones partial.
  for (const mxkit::rounding r : {mxkit::rounding::nearest_even, mxkit::rounding::stochastic}) {
    one_case k{r == mxkit::rounding::stochastic ? mxkit::formats::nvfp4 : mxkit::formats::nvfp4_2d, {}, {4100, 2050, 2056},
               scale_layout::cublas_128x4, scale_layout::row_major};
    k.options.round = r;
    const std::string d = run_case<mxkit::bfloat16>(k, base_seed + static_cast<unsigned>(n++));
    INFO(d);
    CHECK(d.empty());
  }
}

// The owning device copies (device_nvfp4_tensor) and their host copies, scales converted back to
// row-major: as ref::quantize_both writes them.
TEST_CASE("gpu nvfp4 quantize: both copies through quantize_nvfp4_both and to_host", "[gpu]") {
  namespace gpu = mxkit::gpu;
  const std::size_t rows = 150, cols = 90, ld = 96;
  const std::uint64_t seed = base_seed + 500;
  INFO("input seed " << seed);
  const std::vector<mxkit::float16> host = gpu_test::convert<mxkit::float16>(gpu_test::adversarial_matrix(rows, cols, ld, seed));
  gpu::device_buffer<mxkit::float16> in{std::span<const mxkit::float16>(host)};
  const mxkit::matrix_view<const mxkit::float16> dv{in.data(), rows, cols, ld}, hv{host.data(), rows, cols, ld};
  nvfp4_options o;
  o.hadamard = true;
  o.hadamard_signs = mxkit::hadamard_sign_mask(11);
  gpu::device_buffer<float> amax(1);
  for (const std::optional<float> given : {std::optional<float>{}, std::optional<float>{0.25f}}) {
    const gpu::device_nvfp4_pair q = gpu::quantize_nvfp4_both(dv, mxkit::formats::nvfp4_2d, o, scale_layout::cublas_128x4, given, amax.data());
    const mxkit::ref::nvfp4_tensor_pair want = mxkit::ref::quantize_both(hv, mxkit::formats::nvfp4_2d, o, given);
    const mxkit::nvfp4_tensor r = q.rowwise.to_host(), c = q.columnwise.to_host();
    CHECK(gpu_test::first_difference(r.data(), want.rowwise.data()) == "");
    CHECK(gpu_test::first_difference(r.scales(), want.rowwise.scales()) == "");
    CHECK(gpu_test::first_difference(c.data(), want.columnwise.data()) == "");
    CHECK(gpu_test::first_difference(c.scales(), want.columnwise.scales()) == "");
    CHECK(r.tensor_scale() == want.rowwise.tensor_scale());
    CHECK(c.tensor_scale() == want.columnwise.tensor_scale());
    CHECK(r.tensor_scale_from_amax() == !given);
    CHECK(gpu_test::same_amax(amax.to_host()[0], gpu_test::host_amax(host, rows, cols, ld)));
  }
  // No element: no byte, tensor scale 1.
  const gpu::device_nvfp4_pair e = gpu::quantize_nvfp4_both(mxkit::matrix_view<const mxkit::float16>{in.data(), 0, 20},
                                                            mxkit::formats::nvfp4);
  CHECK(e.rowwise.to_host().tensor_scale() == 1.0f);
  CHECK(e.columnwise.to_host().tensor_scale() == 1.0f);
}

// A part of a tensor (rows [first, first + n)) quantized with the whole tensor's amax (nvfp4_amax
// of each part, their maximum, nvfp4_tensor_scale_source::from_amax: full sharding's slabs) is the
// host's copy of that part under the whole tensor's tensor scale; the parts' amaxes reach the
// whole's (both copies', which differ when rotated). tests/host's backend conformance checks on
// the host that such parts assemble into the whole copy.
TEST_CASE("gpu nvfp4 quantize: parts of a tensor with the whole tensor's amax", "[gpu]") {
  namespace gpu = mxkit::gpu;
  using bf16 = mxkit::bfloat16;
  const std::size_t rows = 112, cols = 72, ld = 80;
  const std::size_t cuts[] = {0, 32, 80, 112};  // parts of 32, 48 and 32 rows: whole 16 x 16 tiles
  std::uint64_t seed = base_seed + 600;
  for (const mxkit::block_format& f : {mxkit::formats::nvfp4, mxkit::formats::nvfp4_2d})
    for (const bool rotate : {false, true}) {
      INFO(mxkit::nvfp4_format_name(f) << (rotate ? ", rotated" : "") << ", input seed " << seed);
      const std::vector<bf16> host = gpu_test::convert<bf16>(gpu_test::adversarial_matrix(rows, cols, ld, seed++));
      gpu::device_buffer<bf16> in{std::span<const bf16>(host)};
      nvfp4_options o;
      o.hadamard = rotate;
      o.hadamard_signs = rotate ? mxkit::hadamard_sign_mask(5) : 0u;
      auto amaxes = gpu_test::poisoned<float>(2 * 3);  // each part's rowwise and columnwise amax
      for (std::size_t k = 0; k < 3; ++k)
        gpu::nvfp4_amax(mxkit::matrix_view<const bf16>{in.data() + cuts[k] * ld, cuts[k + 1] - cuts[k], cols, ld}, f, o, amaxes.data() + 2 * k,
                        amaxes.data() + 2 * k + 1);
      const std::vector<float> a = amaxes.to_host();
      float most[2] = {0.0f, 0.0f};
      for (std::size_t k = 0; k < 3; ++k)
        for (std::size_t c = 0; c < 2; ++c) most[c] = a[2 * k + c] > most[c] ? a[2 * k + c] : most[c];
      const block_axis axes[2] = {block_axis::rowwise, block_axis::columnwise};
      for (std::size_t c = 0; c < 2; ++c)
        CHECK(most[c] == mxkit::detail::nvfp4_copy_amax(mxkit::matrix_view<const bf16>{host.data(), rows, cols, ld},
                                                         mxkit::block_layout{f, axes[c], rows, cols}, o, false, 0));
      if (!rotate) CHECK(most[0] == most[1]);
      gpu::device_buffer<float> whole{std::span<const float>(most, 2)};
      for (std::size_t k = 0; k < 3; ++k)
        for (std::size_t c = 0; c < 2; ++c) {
          INFO("part " << k << ", " << mxkit::name_of(axes[c]));
          const std::size_t n = cuts[k + 1] - cuts[k];
          const mxkit::block_layout l{f, axes[c], n, cols};
          auto data = gpu_test::poisoned(l.data_bytes()), scales = gpu_test::poisoned(l.scale_count());
          auto t = gpu_test::poisoned<float>(1);
          gpu::nvfp4_outputs out;
          (c == 0 ? out.rowwise_data : out.columnwise_data) = data.data();
          (c == 0 ? out.rowwise_scales : out.columnwise_scales) = scales.data();
          (c == 0 ? out.rowwise_tensor_scale : out.columnwise_tensor_scale) = t.data();
          gpu::quantize_nvfp4(mxkit::matrix_view<const bf16>{in.data() + cuts[k] * ld, n, cols, ld}, f, o, out,
                              gpu::nvfp4_tensor_scale_source::from_amax(whole.data() + c));
          const mxkit::nvfp4_tensor want = mxkit::ref::quantize(mxkit::matrix_view<const bf16>{host.data() + cuts[k] * ld, n, cols, ld}, f,
                                                                axes[c], o, mxkit::nvfp4_tensor_scale(most[c]));
          CHECK(gpu_test::first_difference(data.to_host(), want.data(), l.line_bytes()) == "");
          CHECK(gpu_test::first_difference(scales.to_host(), want.scales()) == "");
          CHECK(mxkit::bit_cast<std::uint32_t>(t.to_host()[0]) == mxkit::bit_cast<std::uint32_t>(want.tensor_scale()));
        }
    }
  // An empty part: amax 0; no output, or a scale and an amax both given, are refused.
  auto a = gpu_test::poisoned<float>(2);
  gpu::device_buffer<bf16> in(64 * 64);
  gpu::nvfp4_amax(mxkit::matrix_view<const bf16>{in.data(), 0, 64}, mxkit::formats::nvfp4, {}, a.data(), a.data() + 1);
  CHECK(a.to_host() == std::vector<float>{0.0f, 0.0f});
  const mxkit::matrix_view<const bf16> v{in.data(), 64, 64};
  CHECK_THROWS_WITH(gpu::nvfp4_amax(v, mxkit::formats::nvfp4, {}, nullptr, nullptr), mxkit_test::contains("gpu::nvfp4_amax: no output requested"));
  CHECK_THROWS_WITH(gpu::nvfp4_amax(v, mxkit::formats::mxfp4, {}, a.data(), nullptr), mxkit_test::contains("is not NVFP4"));
  gpu::device_buffer<std::uint8_t> data(64 * 64), scales(256);
  gpu::nvfp4_tensor_scale_source both = gpu::nvfp4_tensor_scale_source::from_amax(a.data());
  both.given = 0.5f;
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(v, mxkit::formats::nvfp4, {},
                                        {.rowwise_data = data.data(), .rowwise_scales = scales.data(), .rowwise_tensor_scale = a.data() + 1},
                                        both),
                    mxkit_test::contains("both a tensor scale and an amax"));
}

TEST_CASE("gpu nvfp4 quantize: empty input, bad arguments", "[gpu]") {
  namespace gpu = mxkit::gpu;
  gpu::device_buffer<float> in(64 * 64), scalars(3);
  gpu::device_buffer<std::uint8_t> data(64 * 64), scales(256);
  const mxkit::block_format f = mxkit::formats::nvfp4;
  scalars.fill_bytes(0xFF);
  gpu::quantize_nvfp4(mxkit::matrix_view<const float>{in.data(), 0, 64}, f, {},
                      {.rowwise_data = data.data(), .rowwise_scales = scales.data(), .rowwise_tensor_scale = scalars.data(),
                       .columnwise_data = data.data(), .columnwise_scales = scales.data(), .columnwise_tensor_scale = scalars.data() + 1,
                       .amax = scalars.data() + 2},
                      std::optional<float>{0.5f});
  CHECK(scalars.to_host() == std::vector<float>{0.5f, 0.5f, 0.0f});  // the given scale, the amax of nothing
  gpu::quantize_nvfp4(mxkit::matrix_view<const float>{in.data(), 5, 0}, f, {},
                      {.rowwise_data = data.data(), .rowwise_scales = scales.data(), .rowwise_tensor_scale = scalars.data()});
  CHECK(scalars.to_host()[0] == 1.0f);  // the tensor scale of amax 0

  const mxkit::matrix_view<const float> v{in.data(), 64, 64};
  const gpu::nvfp4_outputs row{.rowwise_data = data.data(), .rowwise_scales = scales.data(), .rowwise_tensor_scale = scalars.data()};
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(v, f, {}, {}), mxkit_test::contains("no output requested"));
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(v, mxkit::formats::mxfp4, {}, row), mxkit_test::contains("is not NVFP4"));
  gpu::nvfp4_outputs bad = row;
  bad.rowwise_data = data.data() + 4;
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(v, f, {}, bad), mxkit_test::contains("8-byte aligned"));
  bad = row;
  bad.rowwise_scales = nullptr;
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(v, f, {}, bad), mxkit_test::contains("rowwise data without rowwise scales"));
  bad = row;
  bad.rowwise_tensor_scale = nullptr;
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(v, f, {}, bad), mxkit_test::contains("without a rowwise tensor scale"));
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(v, f, {}, row, std::optional<float>{0.0f}), mxkit_test::contains("tensor scale 0"));
  nvfp4_options o;
  o.hadamard_signs = 0x10000u;
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(v, f, o, row), mxkit_test::contains("hadamard_signs 0x10000"));
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(mxkit::matrix_view<const float>{in.data(), 64, 64, 32}, f, {}, row),
                    mxkit_test::contains("leading dimension 32"));
  CHECK_THROWS_AS(gpu::quantize_nvfp4(v, f, {}, row, std::optional<float>{std::numeric_limits<float>::infinity()}), std::invalid_argument);
  // 2^34 tiles of 64 x 64 (a view's sizes, not its memory: refused before any launch).
  CHECK_THROWS_WITH(gpu::quantize_nvfp4(mxkit::matrix_view<const float>{in.data(), std::size_t{1} << 33, std::size_t{1} << 13}, f, {}, row),
                    mxkit_test::contains("2^32 tiles"));
}
