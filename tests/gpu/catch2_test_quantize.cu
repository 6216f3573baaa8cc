// SPDX-License-Identifier: Apache-2.0
// The fused GPU quantizer writes exactly the host reference's bytes: every format x scale rule x
// rotation (none, Hadamard, Hadamard with random signs) x input type, adversarial inputs on
// ragged shapes with leading dimensions, both copies from one launch, every scale layout
// (padding included), every rounding mode, and the per-tensor amax. Outputs are poisoned
// before each launch, so an unwritten byte fails too.
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/ref/quantize.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "../catch.hpp"
#include "gpu_test_util.hpp"

namespace {

using mxkit::block_axis;
using mxkit::mx_type;
using mxkit::quantize_options;
using mxkit::scale_layout;

struct shape {
  std::size_t rows, cols, ld;
};

struct one_case {
  mx_type type;
  quantize_options options;
  shape s;
  scale_layout row_layout, col_layout;
  bool rowwise = true, columnwise = true, amax = true;
  std::size_t offset = 0;  // elements the input starts past an aligned allocation
};

// Runs one case on the device and checks every output byte against the host; returns "" or
// a description of the first difference.
template <class T>
std::string run_case(const one_case& k, std::uint64_t seed) {
  namespace gpu = mxkit::gpu;
  const shape s = k.s;
  const std::vector<T> host = gpu_test::convert<T>(gpu_test::adversarial_matrix(s.rows, s.cols, s.ld, seed));
  std::vector<T> padded(k.offset + host.size());
  std::copy(host.begin(), host.end(), padded.begin() + static_cast<std::ptrdiff_t>(k.offset));
  gpu::device_buffer<T> in{std::span<const T>(padded)};
  const mxkit::matrix_view<const T> dev_view{in.data() + k.offset, s.rows, s.cols, s.ld};
  const mxkit::matrix_view<const T> host_view{host.data(), s.rows, s.cols, s.ld};

  const mxkit::block_layout rl{mxkit::format_of(k.type), block_axis::rowwise, s.rows, s.cols}, cl{mxkit::format_of(k.type), block_axis::columnwise, s.rows, s.cols};
  auto rd = gpu_test::poisoned(rl.data_bytes()), rs = gpu_test::poisoned(mxkit::scale_storage_size(k.row_layout, rl.lines(), rl.blocks_per_line()));
  auto cd = gpu_test::poisoned(cl.data_bytes()), cs = gpu_test::poisoned(mxkit::scale_storage_size(k.col_layout, cl.lines(), cl.blocks_per_line()));
  gpu::device_buffer<float> amax(1);
  amax.fill_bytes(0xFF);
  gpu::quantize(dev_view, k.type, k.options,
                {k.rowwise ? rd.data() : nullptr, rs.data(), k.row_layout, k.columnwise ? cd.data() : nullptr, cs.data(),
                 k.col_layout, k.amax ? amax.data() : nullptr});
  MXKIT_GPU_CHECK(gpu::device_synchronize());

  std::ostringstream what;
  what << gpu_test::type_name<T>() << " " << mxkit::name_of(k.type) << " " << s.rows << "x" << s.cols << " ld " << s.ld
       << " rule " << static_cast<int>(k.options.rule) << " round " << static_cast<int>(k.options.round) << " hadamard "
       << k.options.hadamard << " signs " << k.options.random_signs << ": ";
  auto compare = [&](const mxkit::mx_tensor& want, gpu::device_buffer<std::uint8_t>& data, gpu::device_buffer<std::uint8_t>& scales,
                     scale_layout l, const char* name) -> std::string {
    const mxkit::block_layout& ml = want.layout();
    std::string d = gpu_test::first_difference(data.to_host(), want.data(), ml.line_bytes());
    if (!d.empty()) return what.str() + name + " data: " + d;
    d = gpu_test::first_difference(scales.to_host(), mxkit::to_scale_layout(want.scales().data(), ml.lines(), ml.blocks_per_line(), l));
    if (!d.empty()) return what.str() + name + " scales (" + mxkit::name_of(l) + "): " + d;
    return "";
  };
  if (k.rowwise) {
    const std::string d = compare(mxkit::ref::quantize(host_view, k.type, block_axis::rowwise, k.options), rd, rs, k.row_layout, "rowwise");
    if (!d.empty()) return d;
  } else if (rd.to_host() != std::vector<std::uint8_t>(rd.size(), 0xA5)) {
    return what.str() + "rowwise data written although not requested";
  }
  if (k.columnwise) {
    const std::string d = compare(mxkit::ref::quantize(host_view, k.type, block_axis::columnwise, k.options), cd, cs, k.col_layout, "columnwise");
    if (!d.empty()) return d;
  } else if (cd.to_host() != std::vector<std::uint8_t>(cd.size(), 0xA5)) {
    return what.str() + "columnwise data written although not requested";
  }
  if (k.amax) {
    const float got = amax.to_host()[0], want = gpu_test::host_amax(host, s.rows, s.cols, s.ld);
    if (!gpu_test::same_amax(got, want)) return what.str() + "amax " + std::to_string(got) + " vs host " + std::to_string(want);
  }
  return "";
}

constexpr shape shapes[] = {{97, 161, 170}, {64, 128, 128}, {33, 65, 65}, {130, 300, 304}, {1, 1, 1}, {200, 40, 48}};
constexpr mxkit::scale_rule rules[] = {mxkit::scale_rule::floor, mxkit::scale_rule::even, mxkit::scale_rule::round_up,
                                       mxkit::scale_rule::ceil};

template <class T>
void every_format_rule_rotation() {
  int n = 0;
  for (const mx_type type : mxkit::all_mx_types)
    for (const mxkit::scale_rule rule : rules)
      for (int rot = 0; rot < 3; ++rot) {
        one_case k{type, {}, shapes[n % 6], mxkit::all_scale_layouts[n % 3], mxkit::all_scale_layouts[(n + 1) % 3]};
        k.options.rule = rule;
        k.options.hadamard = rot > 0;
        k.options.random_signs = rot == 2;
        k.options.seed = 0x1234u + static_cast<unsigned>(n);
        const std::string d = run_case<T>(k, 1000u + static_cast<unsigned>(n));
        INFO(d);
        CHECK(d.empty());
        ++n;
      }
}

}  // namespace

TEST_CASE("gpu quantize: float input, every format, rule and rotation equals the host byte for byte", "[gpu]") {
  every_format_rule_rotation<float>();
}
TEST_CASE("gpu quantize: bfloat16 input, every format, rule and rotation equals the host byte for byte", "[gpu]") {
  every_format_rule_rotation<mxkit::bfloat16>();
}
TEST_CASE("gpu quantize: float16 input, every format, rule and rotation equals the host byte for byte", "[gpu]") {
  every_format_rule_rotation<mxkit::float16>();
}

TEST_CASE("gpu quantize: every rounding mode, stochastic reproducible per seed", "[gpu]") {
  int n = 0;
  for (const mx_type type : mxkit::all_mx_types)
    for (const mxkit::rounding r : {mxkit::rounding::nearest_away, mxkit::rounding::toward_zero, mxkit::rounding::stochastic})
      for (const bool rotate : {false, true}) {
        one_case k{type, {}, shapes[n % 4], scale_layout::row_major, scale_layout::cublas_128x4};
        k.options.round = r;
        k.options.hadamard = rotate;
        k.options.seed = 77 + static_cast<unsigned>(n);
        k.options.stream = 5;
        const std::string d = run_case<mxkit::bfloat16>(k, 2000u + static_cast<unsigned>(n));
        INFO(d);
        CHECK(d.empty());
        ++n;
      }
}

TEST_CASE("gpu quantize: many tiles (persistent loop), both copies through quantize_both", "[gpu]") {
  const std::size_t rows = 1030, cols = 2100, ld = 2112;
  const std::vector<mxkit::bfloat16> host = gpu_test::convert<mxkit::bfloat16>(gpu_test::adversarial_matrix(rows, cols, ld, 5));
  mxkit::gpu::device_buffer<mxkit::bfloat16> in{std::span<const mxkit::bfloat16>(host)};
  quantize_options o;
  o.hadamard = true;
  o.rule = mxkit::scale_rule::even;
  mxkit::gpu::device_buffer<float> amax(1);
  const mxkit::gpu::device_mx_pair q = mxkit::gpu::quantize_both(mxkit::matrix_view<const mxkit::bfloat16>{in.data(), rows, cols, ld},
                                                                  mx_type::mxfp4, o, scale_layout::aiter_shuffle, amax.data());
  const mxkit::matrix_view<const mxkit::bfloat16> hv{host.data(), rows, cols, ld};
  const mxkit::ref::mx_tensor_pair want = mxkit::ref::quantize_both(hv, mx_type::mxfp4, o);
  const mxkit::mx_tensor got_r = q.rowwise.to_host(), got_c = q.columnwise.to_host();
  CHECK(gpu_test::first_difference(got_r.data(), want.rowwise.data()) == "");
  CHECK(gpu_test::first_difference(got_r.scales(), want.rowwise.scales()) == "");
  CHECK(gpu_test::first_difference(got_c.data(), want.columnwise.data()) == "");
  CHECK(gpu_test::first_difference(got_c.scales(), want.columnwise.scales()) == "");
  CHECK(gpu_test::same_amax(amax.to_host()[0], gpu_test::host_amax(host, rows, cols, ld)));
}

// More tiles than the grid has teams, by a few: the last round's tiles are split into parts of
// their block steps across teams (quantize_kernel's work items), edge tiles included.
TEST_CASE("gpu quantize: a last partial round split across teams", "[gpu]") {
  namespace gpu = mxkit::gpu;
  using tile = gpu::detail::quantize_tile<mxkit::bfloat16, 64>;
  using fp4 = mxkit::mx_format<mxkit::mx_type::mxfp4>;
  constexpr auto kernel = gpu::detail::quantize_kernel<fp4, mxkit::bfloat16, true, false, tile::min_blocks>;
  const std::size_t teams = static_cast<std::size_t>(gpu::detail::persistent_grid<kernel>(tile::threads, std::size_t{1} << 30)) *
                            tile::teams_per_cta;
  // 16 tile columns (the last one partial) and teams / 16 + 2 tile rows (the last one partial):
  // 17 ... 32 tiles past a whole round, each split in 4 when the grid has 128 teams or more.
  const std::size_t rows = 64 * (teams / 16 + 2) - 17, cols = 64 * 16 - 24;
  INFO("teams " << teams << ", " << rows << " x " << cols);
  for (const bool hadamard : {true, false}) {
    one_case k{mx_type::mxfp4, {}, {rows, cols, cols}, scale_layout::row_major, scale_layout::cublas_128x4};
    k.options.hadamard = hadamard;
    const std::string d = run_case<mxkit::bfloat16>(k, 77u);
    INFO(d);
    CHECK(d.empty());
  }
}

TEST_CASE("gpu quantize: unaligned input and odd leading dimensions take the element path", "[gpu]") {
  for (const std::size_t offset : {1u, 3u}) {
    one_case k{mx_type::mxfp8_e4m3, {}, {70, 150, 151}, scale_layout::cublas_128x4, scale_layout::row_major};
    k.offset = offset;
    k.options.hadamard = true;
    const std::string d = run_case<mxkit::float16>(k, 31 + offset);
    INFO(d);
    CHECK(d.empty());
  }
  one_case k{mx_type::mxfp4, {}, {256, 256, 263}, scale_layout::aiter_shuffle, scale_layout::aiter_shuffle};
  const std::string d = run_case<float>(k, 33);
  INFO(d);
  CHECK(d.empty());
}

TEST_CASE("gpu quantize: one copy at a time", "[gpu]") {
  one_case k{mx_type::mxfp6_e3m2, {}, {100, 70, 70}, scale_layout::cublas_128x4, scale_layout::aiter_shuffle};
  k.columnwise = false;
  std::string d = run_case<mxkit::bfloat16>(k, 41);
  INFO(d);
  CHECK(d.empty());
  k.columnwise = true;
  k.rowwise = false;
  k.amax = false;
  d = run_case<mxkit::bfloat16>(k, 42);
  INFO(d);
  CHECK(d.empty());
}

// The rowwise copy alone takes the row-streaming kernel (gpu/quantize/rowwise_kernel.hpp): rows
// of one segment (32 blocks), of several with a partial last segment and a partial last block,
// of fewer blocks than a segment's threads, and more segments than the grid takes in one round
// (its stride loop), for short rows and for whole segments (the staged path); aligned rows
// (16-byte loads, whole segments staged) and not (element loads).
TEST_CASE("gpu quantize: the rowwise copy alone, every format, rotation, rounding and scale layout", "[gpu]") {
  constexpr shape row_shapes[] = {{37, 2100, 2112}, {300, 1024, 1024}, {5, 4128, 4136}, {2, 33, 40}, {9, 1, 1}};
  int n = 0;
  for (const mx_type type : mxkit::all_mx_types)
    for (int rot = 0; rot < 3; ++rot)
      for (const mxkit::rounding r : {mxkit::rounding::nearest_even, mxkit::rounding::stochastic}) {
        one_case k{type, {}, row_shapes[n % 5], mxkit::all_scale_layouts[n % 3], scale_layout::row_major};
        k.columnwise = false;
        k.options.rule = rules[n % 4];
        k.options.hadamard = rot > 0;
        k.options.random_signs = rot == 2;
        k.options.round = r;
        k.options.seed = 0x77u + static_cast<unsigned>(n);
        k.offset = n % 4 == 3 ? 1 : 0;  // not 16-byte aligned: element loads
        const std::string d = n % 3 == 0   ? run_case<float>(k, 3000u + static_cast<unsigned>(n))
                              : n % 3 == 1 ? run_case<mxkit::bfloat16>(k, 3000u + static_cast<unsigned>(n))
                                           : run_case<mxkit::float16>(k, 3000u + static_cast<unsigned>(n));
        INFO(d);
        CHECK(d.empty());
        ++n;
      }
  // More segments than one round of the grid takes (several hundred thousand threads at most):
  // rows of three blocks, and rows of two whole segments (staged).
  for (const shape sh : {shape{40000, 96, 96}, shape{6000, 2048, 2048}})
    for (const mx_type type : {mx_type::mxfp4, mx_type::mxfp8_e4m3}) {
      one_case k{type, {}, sh, scale_layout::cublas_128x4, scale_layout::row_major};
      k.columnwise = false;
      k.options.hadamard = type == mx_type::mxfp4;
      const std::string d = run_case<mxkit::bfloat16>(k, 4000u);
      INFO(d);
      CHECK(d.empty());
    }
}

TEST_CASE("gpu quantize: empty input, bad arguments", "[gpu]") {
  namespace gpu = mxkit::gpu;
  gpu::device_buffer<float> in(64 * 64), amax(1);
  gpu::device_buffer<std::uint8_t> data(64 * 64), scales(256);
  amax.fill_bytes(0xFF);
  gpu::quantize(mxkit::matrix_view<const float>{in.data(), 0, 64}, mx_type::mxfp4, {}, {data.data(), scales.data()}, nullptr);
  gpu::quantize(mxkit::matrix_view<const float>{in.data(), 0, 64}, mx_type::mxfp4, {}, {.amax = amax.data()});
  CHECK(amax.to_host()[0] == 0.0f);  // amax of nothing
  const mxkit::matrix_view<const float> v{in.data(), 64, 64};
  CHECK_THROWS_AS(gpu::quantize(v, mx_type::mxfp4, {}, {}), std::invalid_argument);
  CHECK_THROWS_WITH(gpu::quantize(v, mx_type::mxfp4, {}, {data.data() + 1, scales.data()}), mxkit_test::contains("16-byte aligned"));
  CHECK_THROWS_WITH(gpu::quantize(v, mx_type::mxfp4, {}, {data.data(), nullptr}), mxkit_test::contains("without rowwise scales"));
  CHECK_THROWS_WITH(gpu::quantize(mxkit::matrix_view<const float>{in.data(), 64, 64, 32}, mx_type::mxfp4, {}, {data.data(), scales.data()}),
                    mxkit_test::contains("leading dimension 32"));
}

// Tagged [api-error]: it makes a runtime call fail on purpose, which compute-sanitizer reports;
// scripts/gpu.sh memcheck leaves it out of the sanitizer run.
TEST_CASE("gpu runtime: errors become exceptions naming the call", "[gpu][api-error]") {
  void* p = nullptr;
  try {
    MXKIT_GPU_CHECK(mxkit::gpu::malloc_device(&p, ~std::size_t{0} / 2));  // far beyond any device
    FAIL("no exception");
  } catch (const mxkit::gpu::error& e) {
    CHECK(std::string(e.what()).find("malloc_device") != std::string::npos);
    CHECK(std::string(e.what()).find("catch2_test_quantize.cu") != std::string::npos);
    CHECK(e.line() > 0);
  }
  CHECK(mxkit::gpu::device_count() > 0);
  CHECK(mxkit::gpu::properties().warp_size == mxkit::gpu::warp_size);
}
