// SPDX-License-Identifier: Apache-2.0
// MXFP8 copies held as bf16 values (gpu::quantize with quantize_outputs::values_as_bf16; the rule
// is block/bf16_values.hpp) against the copies of codes the same quantizer writes from the same
// input (those equal the host reference: catch2_test_quantize.cu):
//  - every value is element_bits of its code and scale, bit for bit (NaNs as NaNs), in both
//    copies (a rowwise copy alone takes the row-streaming kernel, both copies the tiled one,
//    and the two kernels' values are compared), on ragged shapes, from bfloat16 and float16
//    inputs, E4M3 and E5M2; the scales are
//    the same bytes; the flag is raised exactly when a non-zero block lies beyond +-48 binades;
//    and each value divided by its scale gives its code's value back (code_of), the claim the
//    GEMM's fallback rests on, over inputs whose blocks reach bf16's least subnormals;
//  - the GEMM of the values (both sides, or one side beside a copy of codes) gives the bits of
//    the GEMM of the codes on every path this device
//    offers (the bf16 route on mxkit's kernel and on cuBLASLt, its gated fallback, the FP8
//    block-scaled route, the portable kernel), rowwise and wgrad's columnwise copies;
//  - bad requests are refused by name.
// Built for arch-specific targets (mxkit:sm90a, tests/gpu/CMakeLists.txt) so the sm90 path exists.
// Without a GPU the program exits 77 before Catch starts (gpu_skip.cu) and ctest reports a skip.
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <mxkit/block/bf16_values.hpp>
#include <mxkit/gpu/gemm/gemm.hpp>
#include <mxkit/gpu/quantize.hpp>
#include <mxkit/gpu/runtime.hpp>

#include "../catch.hpp"
#include "../ref/gemm_test_util.hpp"
#include "gpu_test_util.hpp"

namespace {
using namespace mxkit;
namespace g = mxkit::gpu;

std::uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::uint32_t element_bits(mx_type t, std::uint8_t c, std::uint8_t s) {
  const float scale = e8m0::from_bits(s).to_float();
  return t == mx_type::mxfp8_e4m3 ? bf16_values::element_bits<true>(c, scale) : bf16_values::element_bits<false>(c, scale);
}
float code_value(mx_type t, std::uint8_t c) {
  return t == mx_type::mxfp8_e4m3 ? e4m3::from_bits(c).to_float() : e5m2::from_bits(c).to_float();
}
std::uint8_t code_of(mx_type t, std::uint16_t bits, std::uint8_t s) {
  return t == mx_type::mxfp8_e4m3 ? bf16_values::code_of<true>(bits, s) : bf16_values::code_of<false>(bits, s);
}
bool is_nan_bf16(std::uint32_t bits) { return (bits & 0x7F80u) == 0x7F80u && (bits & 0x7Fu) != 0; }

// One copy (axis) of a device matrix, quantized twice by the device quantizer: as codes and as
// bf16 values, each with its own scales; the values' flag.
struct copy_pair {
  block_layout layout;
  g::device_buffer<std::uint8_t> codes, code_scales, values, value_scales;
  g::device_buffer<int> flag;
  mx_const_view codes_view() const { return {layout, {}, codes.data(), code_scales.data()}; }
  mx_values_view values_view() const {
    return {layout, {}, reinterpret_cast<const bfloat16*>(values.data()), value_scales.data(), flag.data()};
  }
};

template <class T>
copy_pair quantize_pair(matrix_view<const T> in, mx_type t, block_axis axis) {
  const block_layout l{format_of(t), axis, in.rows, in.cols};
  copy_pair p{l, gpu_test::poisoned(l.data_bytes()), gpu_test::poisoned(l.scale_count()), gpu_test::poisoned(g::values_bytes(l)),
              gpu_test::poisoned(l.scale_count()), g::device_buffer<int>(1)};
  p.flag.fill_bytes(0xA5);  // the quantizer zeroes it first
  const bool row = axis == block_axis::rowwise;
  g::quantize(in, t, {},
              {row ? p.codes.data() : nullptr, p.code_scales.data(), scale_layout::row_major, row ? nullptr : p.codes.data(),
               p.code_scales.data(), scale_layout::row_major, nullptr});
  g::quantize_outputs vo{row ? p.values.data() : nullptr, p.value_scales.data(), scale_layout::row_major, row ? nullptr : p.values.data(),
                         p.value_scales.data(), scale_layout::row_major, nullptr};
  vo.values_as_bf16 = true;
  vo.beyond_exact_range = p.flag.data();
  g::quantize(in, t, {}, vo);
  return p;
}

// Compares one copy of values with its copy of codes element by element; returns "" or the first
// difference, and sets `beyond` when a non-zero block lies beyond +-48 binades.
std::string compare_copy(const copy_pair& p, bool& beyond) {
  MXKIT_GPU_CHECK(g::device_synchronize());
  const block_layout& l = p.layout;
  const mx_type t = l.mx();
  const std::vector<std::uint8_t> codes = p.codes.to_host(), scales = p.code_scales.to_host(), vscales = p.value_scales.to_host();
  const std::vector<std::uint8_t> raw = p.values.to_host();
  if (vscales != scales) return "the values' scales differ from the codes' scales";
  const std::size_t padded = l.padded_length(), blocks = l.blocks_per_line();
  beyond = false;
  for (std::size_t line = 0; line < l.lines(); ++line)
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::uint8_t s = scales[line * blocks + b];
      std::uint32_t codes_or = 0;
      for (std::size_t i = 32 * b; i < 32 * b + 32; ++i) {
        const std::uint8_t c = codes[line * l.line_bytes() + i];
        codes_or |= c;
        const std::uint32_t want = element_bits(t, c, s);
        const std::size_t at = 2 * (line * padded + i);
        const std::uint32_t got = static_cast<std::uint32_t>(raw[at]) | static_cast<std::uint32_t>(raw[at + 1]) << 8;
        const std::string where = "line " + std::to_string(line) + " element " + std::to_string(i) + " code " + std::to_string(c) +
                                  " scale " + std::to_string(s) + ": ";
        if (is_nan_bf16(want) ? !is_nan_bf16(got) : got != want)
          return where + "value bits " + std::to_string(got) + ", want " + std::to_string(want);
        if (s == 0xFF || is_nan_bf16(got)) continue;  // a NaN's code is not recoverable (nor needed: the result is NaN)
        const std::uint8_t back = code_of(t, static_cast<std::uint16_t>(got), s);
        if (bit_cast<std::uint32_t>(code_value(t, back)) != bit_cast<std::uint32_t>(code_value(t, c)))
          return where + "code_of gives " + std::to_string(back);
      }
      if (bf16_values::beyond_exact_range(s, codes_or)) beyond = true;
    }
  return "";
}

template <class T>
void check_quantizer(const std::vector<float>& x, std::size_t rows, std::size_t cols, std::size_t ld, const std::string& what) {
  const std::vector<T> host = gpu_test::convert<T>(x);
  const g::device_buffer<T> in = gpu_test::upload(host);
  const matrix_view<const T> v{in.data(), rows, cols, ld};
  for (const mx_type t : {mx_type::mxfp8_e4m3, mx_type::mxfp8_e5m2})
    for (const block_axis axis : {block_axis::rowwise, block_axis::columnwise}) {
      INFO(what << " " << gpu_test::type_name<T>() << " " << name_of(t) << " " << (axis == block_axis::rowwise ? "rowwise" : "columnwise")
                << " " << rows << " x " << cols << " ld " << ld);
      const copy_pair p = quantize_pair(v, t, axis);
      bool beyond = false;
      const std::string d = compare_copy(p, beyond);
      INFO(d);
      CHECK(d.empty());
      CHECK(p.flag.to_host()[0] == (beyond ? 1 : 0));
    }
}

// Both copies from one launch: the values of each equal those of the copy written alone.
template <class T>
void check_both_copies(const std::vector<float>& x, std::size_t rows, std::size_t cols) {
  const std::vector<T> host = gpu_test::convert<T>(x);
  const g::device_buffer<T> in = gpu_test::upload(host);
  const matrix_view<const T> v{in.data(), rows, cols, cols};
  const block_layout rl{format_of(mx_type::mxfp8_e4m3), block_axis::rowwise, rows, cols}, cl{format_of(mx_type::mxfp8_e4m3), block_axis::columnwise, rows, cols};
  auto rv = gpu_test::poisoned(g::values_bytes(rl)), rs = gpu_test::poisoned(rl.scale_count());
  auto cv = gpu_test::poisoned(g::values_bytes(cl)), cs = gpu_test::poisoned(cl.scale_count());
  g::device_buffer<int> flag(1);
  g::quantize_outputs o{rv.data(), rs.data(), scale_layout::row_major, cv.data(), cs.data(), scale_layout::row_major, nullptr};
  o.values_as_bf16 = true;
  o.beyond_exact_range = flag.data();
  g::quantize(v, mx_type::mxfp8_e4m3, {}, o);
  const copy_pair alone_r = quantize_pair(v, mx_type::mxfp8_e4m3, block_axis::rowwise);
  const copy_pair alone_c = quantize_pair(v, mx_type::mxfp8_e4m3, block_axis::columnwise);
  MXKIT_GPU_CHECK(g::device_synchronize());
  INFO(gpu_test::type_name<T>() << " both copies " << rows << " x " << cols);
  CHECK(rv.to_host() == alone_r.values.to_host());
  CHECK(rs.to_host() == alone_r.value_scales.to_host());
  CHECK(cv.to_host() == alone_c.values.to_host());
  CHECK(cs.to_host() == alone_c.value_scales.to_host());
  CHECK(flag.to_host()[0] == (alone_r.flag.to_host()[0] | alone_c.flag.to_host()[0]));
}

}  // namespace

TEST_CASE("gpu quantize: MXFP8 as bf16 values is each code times its scale, and gives the code back", "[gpu][quantize]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  // Adversarial blocks (gpu_test::adversarial_matrix: 40 binades, zeros, float subnormals that
  // bf16 keeps and float16 flushes, magnitudes near FLT_MAX, ties, NaN, Inf): the flag goes up.
  // {40, 2080, 2088}: rows of three 32-block segments, the last partial, for the rowwise kernel.
  for (const auto& [rows, cols, ld] :
       {std::array<std::size_t, 3>{128, 128, 128}, {100, 70, 72}, {33, 300, 301}, {256, 64, 64}, {40, 2080, 2088}}) {
    const std::vector<float> x = gpu_test::adversarial_matrix(rows, cols, ld, seed);
    check_quantizer<bfloat16>(x, rows, cols, ld, "adversarial");
    check_quantizer<float16>(x, rows, cols, ld, "adversarial");
  }
  // Ordinary values (a few binades): the flag stays down.
  const std::vector<float> y = gemm_test::random_matrix(160, 96, seed ^ 0x5, 2);
  check_quantizer<bfloat16>(y, 160, 96, 96, "random");
  // bf16's least values: blocks whose scales fall below 2^-124, where a code's value times its
  // scale would leave bf16's grid if the input were not on it already.
  std::vector<float> tiny(64 * 64);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < tiny.size(); ++i)
    tiny[i] = std::ldexp(static_cast<float>(rng() % 255) - 127.0f, -133 - static_cast<int>(i / 64 % 4)) * (i % 7 == 0 ? 0x1p6f : 1.0f);
  check_quantizer<bfloat16>(tiny, 64, 64, 64, "bf16 subnormals");
  check_both_copies<bfloat16>(gpu_test::adversarial_matrix(192, 160, 160, seed), 192, 160);
  check_both_copies<float16>(y, 160, 96);
}

TEST_CASE("gpu quantize: values_as_bf16 refuses what it cannot write exactly", "[gpu][quantize]") {
  const std::vector<float> x(64 * 64, 1.0f);
  const g::device_buffer<float> f = gpu_test::upload(x);
  const g::device_buffer<bfloat16> b = gpu_test::upload(gpu_test::convert<bfloat16>(x));
  auto data = gpu_test::poisoned(2 * 64 * 64), scales = gpu_test::poisoned(64 * 2);
  g::device_buffer<int> flag(1);
  g::quantize_outputs o{data.data(), scales.data()};
  o.values_as_bf16 = true;
  o.beyond_exact_range = flag.data();
  const matrix_view<const bfloat16> vb{b.data(), 64, 64, 64};
  CHECK_THROWS_WITH(g::quantize(matrix_view<const float>{f.data(), 64, 64, 64}, mx_type::mxfp8_e4m3, {}, o),
                    Catch::Contains("bfloat16 or float16 input"));
  CHECK_THROWS_WITH(g::quantize(vb, mx_type::mxfp4, {}, o), Catch::Contains("MXFP8"));
  quantize_options rotated;
  rotated.hadamard = true;
  CHECK_THROWS_WITH(g::quantize(vb, mx_type::mxfp8_e4m3, rotated, o), Catch::Contains("rotation"));
  o.beyond_exact_range = nullptr;
  CHECK_THROWS_WITH(g::quantize(vb, mx_type::mxfp8_e4m3, {}, o), Catch::Contains("beyond_exact_range"));
}

namespace {
// D of the codes and D of the values (both sides, and one side of each kind either way round),
// for one path and options, compared bit for bit.
template <class Out>
void same_product(const copy_pair& a, const copy_pair& b, g::gemm_path path, g::gemm_options o, const std::string& what) {
  o.path = path;
  const std::size_t p = a.layout.lines(), q = b.layout.lines();
  gpu_test::device_out<Out> d1(p, q, q + 3), d2(p, q, q + 3), d3(p, q, q + 3), d4(p, q, q + 3);
  const g::gemm_path took1 = g::gemm(a.codes_view(), b.codes_view(), d1.view(), {1.5f, 0.0f}, nullptr, o);
  const g::gemm_path took2 = g::gemm(a.values_view(), b.values_view(), d2.view(), {1.5f, 0.0f}, nullptr, o);
  const g::gemm_path took3 = g::gemm(a.values_view(), b.codes_view(), d3.view(), {1.5f, 0.0f}, nullptr, o);
  const g::gemm_path took4 = g::gemm(a.codes_view(), b.values_view(), d4.view(), {1.5f, 0.0f}, nullptr, o);
  MXKIT_GPU_CHECK(g::device_synchronize());
  INFO(what << ", path " << g::name_of(path) << " (took " << g::name_of(took1) << "), vendor " << o.vendor << ", via bf16 "
            << o.mxfp8_via_bf16 << ", " << (sizeof(Out) == 4 ? "fp32" : "bf16") << " D");
  CHECK(took1 == took2);
  CHECK(took1 == took3);
  CHECK(took1 == took4);
  const auto want = d1.buf.to_host();
  CHECK(gpu_test::same_bits(want, d2.buf.to_host()));
  INFO("A values, B codes");
  CHECK(gpu_test::same_bits(want, d3.buf.to_host()));
  INFO("A codes, B values");
  CHECK(gpu_test::same_bits(want, d4.buf.to_host()));
}
}  // namespace

TEST_CASE("gpu gemm: MXFP8 held as bf16 values gives the bits of its codes on every path", "[gpu][gemm]") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed " << seed);
  std::vector<g::gemm_path> paths{g::gemm_path::automatic, g::gemm_path::portable};
  g::gemm_options no_vendor, fp8_only;
  no_vendor.vendor = false;
  fp8_only.mxfp8_via_bf16 = false;
  struct shape {
    std::size_t p, q, k;
    block_axis axis;  // columnwise: wgrad's copies, [k, p] and [k, q] inputs
  };
  {
    const g::device_buffer<bfloat16> probe = gpu_test::upload(gpu_test::convert<bfloat16>(std::vector<float>(32 * 32, 1.0f)));
    const copy_pair c = quantize_pair(matrix_view<const bfloat16>{probe.data(), 32, 32, 32}, mx_type::mxfp8_e4m3, block_axis::rowwise);
    if (g::automatic_path(c.codes_view(), c.codes_view()) == g::gemm_path::sm90) paths.push_back(g::gemm_path::sm90);
    else WARN("not an sm90 device: the bf16 route is not run");
  }
  for (const shape s : {shape{136, 264, 320, block_axis::rowwise}, shape{40, 72, 64, block_axis::rowwise},
                        shape{96, 64, 256, block_axis::columnwise}}) {
    const bool row = s.axis == block_axis::rowwise;
    const std::size_t ar = row ? s.p : s.k, ac = row ? s.k : s.p, br = row ? s.q : s.k, bc = row ? s.k : s.q;
    std::vector<float> xa = gemm_test::random_matrix(ar, ac, seed ^ s.k, 3), xb = gemm_test::random_matrix(br, bc, seed ^ 0xB, 3);
    for (const bool far : {false, true}) {
      if (far) xa[9 * ac + 7] = 0x1p60f;  // its block's exponent 52: the bf16 route's gate closes
      const g::device_buffer<bfloat16> da = gpu_test::upload(gpu_test::convert<bfloat16>(xa)), db = gpu_test::upload(gpu_test::convert<bfloat16>(xb));
      for (const mx_type tb : {mx_type::mxfp8_e4m3, mx_type::mxfp8_e5m2}) {
        const copy_pair a = quantize_pair(matrix_view<const bfloat16>{da.data(), ar, ac, ac}, mx_type::mxfp8_e4m3, s.axis);
        const copy_pair b = quantize_pair(matrix_view<const bfloat16>{db.data(), br, bc, bc}, tb, s.axis);
        bool beyond = false;
        REQUIRE(compare_copy(a, beyond).empty());
        CHECK(a.flag.to_host()[0] == (far ? 1 : 0));
        const std::string what = std::to_string(s.p) + " x " + std::to_string(s.q) + " x " + std::to_string(s.k) + " " +
                                 (row ? "rowwise" : "columnwise") + " e4m3 x " + name_of(tb) + (far ? ", a block at 2^60" : "");
        for (const g::gemm_path path : paths)
          for (const g::gemm_options& o : {g::gemm_options{}, no_vendor, fp8_only}) {
            same_product<float>(a, b, path, o, what);
            same_product<bfloat16>(a, b, path, o, what);
          }
      }
    }
  }
  // An empty product and bad operands.
  const g::device_buffer<bfloat16> e = gpu_test::upload(gpu_test::convert<bfloat16>(std::vector<float>(64 * 32, 1.0f)));
  const copy_pair a = quantize_pair(matrix_view<const bfloat16>{e.data(), 64, 32, 32}, mx_type::mxfp8_e4m3, block_axis::rowwise);
  gpu_test::device_out<float> d(64, 64, 64);
  mx_values_view bad = a.values_view();
  bad.beyond_exact_range = nullptr;
  CHECK_THROWS_WITH(g::gemm(a.values_view(), bad, d.view()), Catch::Contains("beyond_exact_range"));
  mx_values_view fp4 = a.values_view();
  fp4.layout.format = formats::mxfp4;
  CHECK_THROWS_WITH(g::gemm(fp4, a.values_view(), d.view()), Catch::Contains("not MXFP8"));
  CHECK_THROWS_WITH(g::gemm(a.codes_view(), fp4, d.view()), Catch::Contains("gemm: B holds bf16 values but is mxfp4"));
  CHECK_THROWS_WITH(g::gemm(bad, a.codes_view(), d.view()), Catch::Contains("gemm: A has null values, scales or beyond_exact_range"));
  mx_const_view null_codes = a.codes_view();
  null_codes.scales = nullptr;
  CHECK_THROWS_WITH(g::gemm(a.values_view(), null_codes, d.view()), Catch::Contains("gemm: B has null data or scales"));
}
