// SPDX-License-Identifier: Apache-2.0
// The linear layer's GEMMs equal direct calls of mxkit's quantizer and reference GEMM, bit for
// bit, for every recipe; weight copies are cached per optimizer step (or made per GEMM); a frozen
// LoRA base is never touched and its wgrad operands are never quantized.
#include <algorithm>
#include <cstring>
#include <vector>

#include <mxkit/train/adamw.hpp>
#include <mxkit/nn/linear.hpp>
#include <mxkit/ref/gemm.hpp>
#include <mxkit/ref/nvfp4_gemm.hpp>
#include <mxkit/ref/nvfp4_quantize.hpp>
#include <mxkit/ref/quantize.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;

namespace {

constexpr std::size_t M = 64, K = 96, N = 64;

struct pass {
  std::vector<float> x, w, dy;  // inputs, row-major
  std::vector<float> y, dx, dw;  // the layer's outputs
};

// One forward/backward of a fresh layer with random X, W, dY.
pass run_layer(recording_backend& be, linear& l, std::uint64_t seed) {
  pass p;
  tensor x = random_tensor(be, M, K, seed), dy = random_tensor(be, M, N, seed + 1, 1e-3);
  tensor y = be.alloc(M, N, dtype::f32, mem_tag::activation), dx = be.alloc(M, K, dtype::f32, mem_tag::activation);
  be.fill(l.weight().grad, 0.0);
  l.forward(x, y, true);
  l.backward(dy, &dx);
  p.x = floats(be, x);
  p.w = floats(be, l.weight().value);
  p.dy = floats(be, dy);
  p.y = floats(be, y);
  p.dx = floats(be, dx);
  p.dw = floats(be, l.weight().grad);
  return p;
}

matrix_view<const float> view(const std::vector<float>& v, std::size_t rows, std::size_t cols) { return {v.data(), rows, cols}; }

void check_same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];  // bitwise up to the sign of zero
  CHECK(bad == 0);
}

// The options the layer should have used for operand `use` under recipe r.
void check_options(const quant_request& q, const recipe& r, gemm_product g, bool operand_b) {
  const gemm_spec& s = r.gemm(g);
  const operand_spec& o = operand_b ? s.b : s.a;
  INFO(name_of(q.use));
  CHECK(q.spec == o);
  if (o.kind() == precision::mx) {
    const quantize_options m = q.mx_options();
    CHECK(m.rule == o.block_scaled().rule);
    CHECK(m.round == o.block_scaled().round);
    CHECK(m.hadamard == s.hadamard);
    CHECK(m.random_signs == s.random_signs);
    CHECK(m.seed == s.seed);
  }
}

void check_mx_recipe(const recipe& r) {
  recording_backend be;
  linear l(be, "layer", K, N, 5, r, dtype::f32);
  l.init_normal(3, 0.05);
  const pass p = run_layer(be, l, 11);
  const quant_request &qx = be.last(operand_use::fprop_x), &qw = be.last(operand_use::fprop_w),
                      &qdy = be.last(operand_use::dgrad_dy), &qwd = be.last(operand_use::dgrad_w),
                      &qdyw = be.last(operand_use::wgrad_dy), &qxw = be.last(operand_use::wgrad_x);
  check_options(qx, r, gemm_product::fprop, false);
  check_options(qw, r, gemm_product::fprop, true);
  check_options(qdy, r, gemm_product::dgrad, false);
  check_options(qwd, r, gemm_product::dgrad, true);
  check_options(qdyw, r, gemm_product::wgrad, false);
  check_options(qxw, r, gemm_product::wgrad, true);

  // The same products from direct calls (the options carry the Philox stream the layer drew).
  const mx_tensor w_row = ref::quantize_rowwise(view(p.w, N, K), qw.spec.block_scaled().mx(), qw.mx_options());
  const mx_tensor w_col = ref::quantize_columnwise(view(p.w, N, K), qwd.spec.block_scaled().mx(), qwd.mx_options());
  CHECK(std::ranges::equal(w_row.data(), host_backend::mx(l.cached_rowwise()).data()));  // the cached copies, byte for byte
  CHECK(std::ranges::equal(w_row.scales(), host_backend::mx(l.cached_rowwise()).scales()));
  CHECK(std::ranges::equal(w_col.data(), host_backend::mx(l.cached_columnwise()).data()));
  check_same(p.y, ref::fprop(ref::quantize_rowwise(view(p.x, M, K), qx.spec.block_scaled().mx(), qx.mx_options()), w_row), "fprop");
  check_same(p.dx, ref::dgrad(ref::quantize_rowwise(view(p.dy, M, N), qdy.spec.block_scaled().mx(), qdy.mx_options()), w_col), "dgrad");
  check_same(p.dw,
             ref::wgrad(ref::quantize_columnwise(view(p.dy, M, N), qdyw.spec.block_scaled().mx(), qdyw.mx_options()),
                             ref::quantize_columnwise(view(p.x, M, K), qxw.spec.block_scaled().mx(), qxw.mx_options())),
             "wgrad");
}

// The NVFP4 options of the paper's recipe (arXiv 2509.25149), written out here rather
// than read from the recipe: rounding, the random-sign Hadamard (wgrad only), the GEMM's Philox key
// and the tensor's stream (the one the layer drew, as the recording shows).
nvfp4_options nvfp4_rule(rounding round, bool hadamard, std::uint64_t seed, std::uint32_t stream) {
  return {round, hadamard, hadamard ? hadamard_sign_mask(seed) : 0u, seed, stream};
}

}  // namespace

TEST_CASE("linear: the nvfp4 recipe's GEMMs are the paper's NVFP4 rules through ref's quantizer and GEMM", "[nn][linear][nvfp4]") {
  const recipe r = recipes::nvfp4();
  REQUIRE_NOTHROW(check_config(r));
  recording_backend be;
  linear l(be, "layer", K, N, 5, r, dtype::f32);
  l.init_normal(3, 0.05);
  const pass p = run_layer(be, l, 11);
  const quant_request &qx = be.last(operand_use::fprop_x), &qw = be.last(operand_use::fprop_w),
                      &qdy = be.last(operand_use::dgrad_dy), &qwd = be.last(operand_use::dgrad_w),
                      &qdyw = be.last(operand_use::wgrad_dy), &qxw = be.last(operand_use::wgrad_x);
  const std::uint64_t sf = r.fprop.seed, sd = r.dgrad.seed, sw = r.wgrad.seed;
  CHECK(sw != 0);
  // fprop and dgrad: no rotation; X and W round to nearest, dY stochastically; W in 16 x 16 blocks.
  const nvfp4_tensor w_row = ref::quantize(view(p.w, N, K), formats::nvfp4_2d, block_axis::rowwise,
                                           nvfp4_rule(rounding::nearest_even, false, sf, qw.block.stream));
  const nvfp4_tensor w_col = ref::quantize(view(p.w, N, K), formats::nvfp4_2d, block_axis::columnwise,
                                           nvfp4_rule(rounding::nearest_even, false, sd, qwd.block.stream));
  CHECK(std::ranges::equal(w_row.data(), host_backend::nvfp4(l.cached_rowwise()).data()));  // the cached copies, byte for byte
  CHECK(std::ranges::equal(w_row.scales(), host_backend::nvfp4(l.cached_rowwise()).scales()));
  CHECK(std::ranges::equal(w_col.data(), host_backend::nvfp4(l.cached_columnwise()).data()));
  CHECK(std::ranges::equal(w_col.scales(), host_backend::nvfp4(l.cached_columnwise()).scales()));
  // 2-D scaling: the weight's two copies are the same matrix, one tensor scale.
  CHECK(ref::dequantize(w_row) == ref::dequantize(w_col));
  CHECK(w_row.tensor_scale() == w_col.tensor_scale());
  const nvfp4_tensor x_row = ref::quantize(view(p.x, M, K), formats::nvfp4, block_axis::rowwise,
                                           nvfp4_rule(rounding::nearest_even, false, sf, qx.block.stream));
  const nvfp4_tensor dy_row = ref::quantize(view(p.dy, M, N), formats::nvfp4, block_axis::rowwise,
                                            nvfp4_rule(rounding::stochastic, false, sd, qdy.block.stream));
  check_same(p.y, ref::product(gemm_product::fprop, x_row, w_row), "fprop");
  check_same(p.dx, ref::product(gemm_product::dgrad, dy_row, w_col), "dgrad");
  // wgrad: both operands rotated by H16 . D (one D, from the GEMM's key); dY stochastic, X nearest.
  const nvfp4_tensor dy_col = ref::quantize(view(p.dy, M, N), formats::nvfp4, block_axis::columnwise,
                                            nvfp4_rule(rounding::stochastic, true, sw, qdyw.block.stream));
  const nvfp4_tensor x_col = ref::quantize(view(p.x, M, K), formats::nvfp4, block_axis::columnwise,
                                           nvfp4_rule(rounding::nearest_even, true, sw, qxw.block.stream));
  check_same(p.dw, ref::product(gemm_product::wgrad, dy_col, x_col), "wgrad");
  // The other rules would give other bits: the check above can fail (round to nearest for dY).
  const nvfp4_tensor dy_rne = ref::quantize(view(p.dy, M, N), formats::nvfp4, block_axis::rowwise,
                                            nvfp4_rule(rounding::nearest_even, false, sd, qdy.block.stream));
  CHECK_FALSE(std::ranges::equal(dy_rne.data(), dy_row.data()));
  // Full sharding gathers these copies (rounded to nearest; each slab with the weight's amax,
  // parallel/gathered_copies.hpp), not the weights.
  CHECK(l.weight_copies_gatherable());
}

TEST_CASE("linear: MX recipes match mxkit's quantizer and reference GEMMs", "[nn][linear]") {
  SECTION("mxfp4, Hadamard on every operand") { check_mx_recipe(recipes::mxfp4_amd()); }
  SECTION("mxfp4, no Hadamard") { check_mx_recipe(recipes::mxfp4_no_hadamard()); }
  SECTION("mxfp4, Hadamard on wgrad") { check_mx_recipe(recipes::mxfp4_primus_turbo()); }
  SECTION("mxfp4, random-sign Hadamard on wgrad, stochastic gradients") { check_mx_recipe(recipes::mxfp4_nvidia_style()); }
  SECTION("mxfp8") { check_mx_recipe(recipes::mxfp8()); }
}

TEST_CASE("linear: stochastic rounding draws fresh bits every step", "[nn][linear]") {
  recording_backend be;
  linear l(be, "layer", K, N, 5, recipes::mxfp4_nvidia_style(), dtype::f32);
  l.init_normal(3, 0.05);
  run_layer(be, l, 11);
  const std::uint32_t first = be.last(operand_use::wgrad_dy).block.stream;
  run_layer(be, l, 11);
  CHECK(be.last(operand_use::wgrad_dy).block.stream != first);
}

TEST_CASE("linear: bf16 recipe matches ref::gemm on bfloat16 operands", "[nn][linear]") {
  recording_backend be;
  linear l(be, "layer", K, N, 5, recipes::bf16(), dtype::f32);
  l.init_normal(3, 0.05);
  const pass p = run_layer(be, l, 11);
  auto bf = [](const std::vector<float>& v) {
    std::vector<bfloat16> out;
    for (float x : v) out.push_back(bfloat16::from_float(x, rounding::nearest_even, overflow::propagate));
    return out;
  };
  auto transposed = [](const std::vector<bfloat16>& v, std::size_t rows, std::size_t cols) {
    std::vector<bfloat16> out(v.size());
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) out[c * rows + r] = v[r * cols + c];
    return out;
  };
  const std::vector<bfloat16> x = bf(p.x), w = bf(p.w), dy = bf(p.dy);
  const std::vector<bfloat16> wt = transposed(w, N, K), dyt = transposed(dy, M, N), xt = transposed(x, M, K);
  std::vector<float> y(M * N), dx(M * K), dw(N * K);
  ref::gemm(matrix_view<const bfloat16>{x.data(), M, K}, matrix_view<const bfloat16>{w.data(), N, K}, matrix_view<float>{y.data(), M, N});
  ref::gemm(matrix_view<const bfloat16>{dy.data(), M, N}, matrix_view<const bfloat16>{wt.data(), K, N},
                 matrix_view<float>{dx.data(), M, K});
  ref::gemm(matrix_view<const bfloat16>{dyt.data(), N, M}, matrix_view<const bfloat16>{xt.data(), K, M},
                 matrix_view<float>{dw.data(), N, K});
  check_same(p.y, y, "fprop");
  check_same(p.dx, dx, "dgrad");
  check_same(p.dw, dw, "wgrad");
}

TEST_CASE("linear: FP8 delayed scaling matches quantize_fp8 and the FP8 reference GEMM", "[nn][linear]") {
  recording_backend be;
  const recipe r = recipes::fp8_delayed({2, amax_algorithm::max, 0});
  linear l(be, "layer", K, N, 5, r, dtype::f32);
  l.init_normal(3, 0.05);
  // Three steps: the scales move from 1 to fp8_max / amax of the earlier steps.
  float sx = 0, sw = 0, sdy = 0;
  pass p;
  std::vector<float> amax_x;
  for (int step = 0; step < 3; ++step) {
    sx = read_scale(be, l.x_scaling());
    sw = read_scale(be, l.w_scaling());
    sdy = read_scale(be, l.dy_scaling());
    p = run_layer(be, l, 100 + static_cast<std::uint64_t>(step));
    float a = 0;
    for (float v : p.x) a = std::max(a, std::fabs(v));
    amax_x.push_back(a);
    l.end_step();
  }
  CHECK(sx == 448.0f / std::max(amax_x[0], amax_x[1]));  // step 2 used the window {step 1, step 0}
  CHECK(read_scale(be, l.x_scaling()) == 448.0f / std::max(amax_x[1], amax_x[2]));
  CHECK(sw != 1.0f);
  CHECK(sdy != 1.0f);
  // The X request names X's row of the layer's scaling table (whose scale was sx in that step).
  CHECK(be.last(operand_use::fprop_x).fp8.table == l.x_scaling().table);
  CHECK(be.last(operand_use::fprop_x).fp8.row == l.x_scaling().row);
  CHECK(be.last(operand_use::fprop_x).fp8.record_amax);
  const fp8_tensor x = quantize_fp8(view(p.x, M, K), fp8_type::e4m3, sx);
  const fp8_tensor w = quantize_fp8(view(p.w, N, K), fp8_type::e4m3, sw);
  const fp8_tensor dy = quantize_fp8(view(p.dy, M, N), fp8_type::e5m2, sdy);
  CHECK(w.data == host_backend::fp8(l.cached_rowwise()).data);
  CHECK(transpose(w).data == host_backend::fp8(l.cached_columnwise()).data);
  std::vector<float> y(M * N), dx(M * K), dw(N * K);
  ref::gemm(x, w, matrix_view<float>{y.data(), M, N});
  ref::gemm(dy, transpose(w), matrix_view<float>{dx.data(), M, K});
  ref::gemm(transpose(dy), transpose(x), matrix_view<float>{dw.data(), N, K});
  check_same(p.y, y, "fprop");
  check_same(p.dx, dx, "dgrad");
  check_same(p.dw, dw, "wgrad");
}

TEST_CASE("linear: weights are quantized once per optimizer step", "[nn][linear]") {
  for (const recipe& r : {recipes::mxfp4_amd(), recipes::bf16(), recipes::fp8_delayed()}) {
    INFO(r.name);
    host_backend be;
    linear l(be, "layer", K, N, 5, r, dtype::f32);
    l.init_normal(3, 0.05);
    tensor x = random_tensor(be, M, K, 1), y = be.alloc(M, N, dtype::f32, mem_tag::activation);
    tensor dy = random_tensor(be, M, N, 2), dx = be.alloc(M, K, dtype::f32, mem_tag::activation);
    l.forward(x, y, false);
    l.forward(x, y, false);
    l.forward(x, y, true);
    l.backward(dy, &dx);
    CHECK(l.weight_quantizations() == 1);
    CHECK(be.counters().copies(operand_use::fprop_w) == 1);
    CHECK(be.counters().copies(operand_use::dgrad_w) == 1);  // the transpose cache serves dgrad
    CHECK(be.counters().copies(operand_use::fprop_x) == 3);  // inputs: every call
    // The optimizer's version bump makes the copies stale.
    adamw opt(be, {&l.weight()}, {});
    opt.step(1e-3);
    l.forward(x, y, false);
    CHECK(l.weight_quantizations() == 2);
    l.forward(x, y, false);
    CHECK(l.weight_quantizations() == 2);
  }
}

TEST_CASE("linear: weight copies per GEMM are made for each pass and never held", "[nn][linear]") {
  // linear_memory::weight_copies_per_gemm: the fprop copy in forward, the dgrad copy in backward,
  // each freed after its GEMM; a weight without a master keeps its copies; switching between
  // forward and backward, either way, gives the default's gradients.
  for (const recipe& r : {recipes::mxfp4_amd(), recipes::fp8_delayed()}) {
    INFO(r.name);
    std::vector<std::vector<double>> want;  // dx, dW of the default
    for (int mode = 0; mode < 3; ++mode) {  // default; per GEMM; per GEMM in forward, cached in backward
      host_backend be;
      linear l(be, "layer", K, N, 5, r, dtype::f32);
      l.init_normal(3, 0.05);
      if (mode > 0) l.set_memory({true, false});
      tensor x = random_tensor(be, M, K, 1), y = be.alloc(M, N, dtype::f32, mem_tag::activation);
      tensor dy = random_tensor(be, M, N, 2), dx = be.alloc(M, K, dtype::f32, mem_tag::activation);
      mark_grads_zero({&l.weight()});
      l.forward(x, y, true);
      CHECK((be.memory().live(mem_tag::quantized_weight) == 0) == (mode > 0));
      if (mode == 2) l.set_memory({});
      l.backward(dy, &dx);
      const std::vector<std::vector<double>> got{be.read(y), be.read(dx), be.read(l.weight().grad)};
      if (mode == 0) want = got;
      CHECK(got == want);
      CHECK(l.weight_quantizations() == (mode == 0 ? 1u : 2u));  // per GEMM: fprop and dgrad
      CHECK((be.memory().live(mem_tag::quantized_weight) == 0) == (mode == 1));
      if (mode == 1) {
        l.freeze();
        l.release_master();  // no master: the copies stay, whatever the setting
        CHECK(be.memory().live(mem_tag::quantized_weight) > 0);
        l.forward(x, y, false);
        CHECK(be.read(y) == want[0]);
      }
    }
  }
}

TEST_CASE("linear: bf16 weight copies are gathered as the rowwise copy and its transpose, installed as the layer's own", "[nn][linear]") {
  // Full sharding's gather of W as its copies (parallel/data_parallel.hpp): bf16 for fprop and dgrad
  // qualifies like MX rounded to nearest; stochastic rounding, mixed kinds and copies per GEMM do not.
  recipes::mxfp4_config bf16_fprop;
  bf16_fprop.fprop_mx = false;  // fprop's W in bf16, dgrad's in MXFP4
  recipe stochastic_w = recipes::mxfp4();
  stochastic_w.name = "mxfp4, dgrad's W rounded stochastically";
  stochastic_w.dgrad.b.block_scaled().round = rounding::stochastic;
  for (const auto& [r, gatherable] : {std::pair{recipes::bf16(), true}, std::pair{recipes::mxfp4_amd(), true},
                                      std::pair{recipes::mxfp4_nvidia_style(), true},  // (only dY rounds stochastically)
                                      std::pair{recipes::nvfp4(), true},               // (each slab with the weight's amax)
                                      std::pair{stochastic_w, false}, std::pair{recipes::mxfp4(bf16_fprop, "mxfp4, bf16 fprop"), false}}) {
    host_backend be;
    INFO(r.name);
    CHECK(linear(be, "layer", K, N, 5, r, dtype::f32).weight_copies_gatherable() == gatherable);
  }
  host_backend be;
  linear own(be, "own", K, N, 5, recipes::bf16(), dtype::f32), installed(be, "installed", K, N, 5, recipes::bf16(), dtype::f32);
  own.init_normal(3, 0.05);
  installed.init_normal(3, 0.05);
  linear per_gemm(be, "per GEMM", K, N, 5, recipes::bf16(), dtype::f32);
  per_gemm.set_memory({true, false});
  CHECK_FALSE(per_gemm.weight_copies_gatherable());
  // What the ranks assemble: the rowwise bf16 copy (as pack/assemble give it back), its transpose.
  const quant_plan plan = installed.weight_plan(false);
  const qtensor row = be.quantize(installed.weight().value, plan.rowwise);
  const qtensor col = be.transpose(row, operand_use::dgrad_w, mem_tag::quantized_weight);
  CHECK_THROWS_AS(installed.install_weight_copies(row, row), std::invalid_argument);  // the dgrad copy is columnwise
  quant_request mx = plan.rowwise;
  mx.spec = recipes::mx_operand(mx_type::mxfp4, scale_rule::even);
  CHECK_THROWS_AS(installed.install_weight_copies(be.quantize(installed.weight().value, mx), col), std::invalid_argument);
  installed.install_weight_copies(row, col);
  const std::uint64_t made = be.counters().copies(operand_use::fprop_w);
  CHECK_FALSE(installed.backward_reads_master());  // the installed copies serve dgrad
  tensor x = random_tensor(be, M, K, 1), dy = random_tensor(be, M, N, 2);
  std::vector<std::vector<double>> results[2];
  for (linear* l : {&own, &installed}) {
    tensor y = be.alloc(M, N, dtype::f32, mem_tag::activation), dx = be.alloc(M, K, dtype::f32, mem_tag::activation);
    mark_grads_zero({&l->weight()});
    l->forward(x, y, true);
    l->backward(dy, &dx);
    results[l == &installed] = {be.read(y), be.read(dx), be.read(l->weight().grad)};
  }
  CHECK(be.counters().copies(operand_use::fprop_w) == made + 1);  // only `own` quantized W
  CHECK(installed.weight_quantizations() == 1);
  const auto bits = [](const qtensor& q) {
    std::vector<std::uint16_t> out;
    for (const bfloat16 v : host_backend::bf16(q)) out.push_back(v.bits());
    return out;
  };
  CHECK(bits(installed.cached_rowwise()) == bits(own.cached_rowwise()));  // byte for byte
  CHECK(bits(installed.cached_columnwise()) == bits(own.cached_columnwise()));
  CHECK(results[1] == results[0]);
}

TEST_CASE("linear: an FP8 weight copy is remade when W's delayed scale moves", "[nn][linear]") {
  host_backend be;
  linear l(be, "layer", K, N, 5, recipes::fp8_delayed({1, amax_algorithm::most_recent, 0}), dtype::f32);
  l.init_normal(3, 0.05);
  l.freeze();
  tensor x = random_tensor(be, M, K, 1), y = be.alloc(M, N, dtype::f32, mem_tag::activation);
  l.forward(x, y, true);
  l.end_step();  // W's scale: 1 -> 448 / amax(W)
  l.forward(x, y, true);
  CHECK(l.weight_quantizations() == 2);
  CHECK(host_backend::fp8(l.cached_rowwise()).scale == read_scale(be, l.w_scaling()));
  l.end_step();  // same amax, same scale
  l.forward(x, y, true);
  l.end_step();  // nothing recorded (cached): the scale stays
  l.forward(x, y, true);
  CHECK(l.weight_quantizations() == 2);
}

TEST_CASE("linear: LoRA leaves the frozen base bit-identical and skips its wgrad quantization", "[nn][linear][lora]") {
  for (const recipe& r : {recipes::mxfp4_amd(), recipes::fp8_delayed(), recipes::bf16()}) {
    INFO(r.name);
    host_backend be;
    linear l(be, "layer", K, N, 5, r, dtype::f32);
    l.init_normal(3, 0.05);
    l.freeze();
    l.add_lora({8, 16.0}, 9);
    std::vector<parameter*> params;
    l.collect(params);
    REQUIRE(params.size() == 3);
    const std::vector<double> base = be.read(l.weight().value);
    const std::vector<double> b0 = be.read(l.lora()->b().value);
    adamw opt(be, params, {});  // only the adapters train
    CHECK(opt.slots().size() == 2);
    for (int step = 0; step < 4; ++step) {
      tensor x = random_tensor(be, M, K, 10 + static_cast<std::uint64_t>(step)), y = be.alloc(M, N, dtype::f32, mem_tag::activation);
      tensor dy = random_tensor(be, M, N, 20 + static_cast<std::uint64_t>(step)), dx = be.alloc(M, K, dtype::f32, mem_tag::activation);
      be.fill(l.lora()->a().grad, 0.0);
      be.fill(l.lora()->b().grad, 0.0);
      l.forward(x, y, true);
      l.backward(dy, &dx);
      opt.step(1e-2);
      l.end_step();
    }
    CHECK(be.read(l.weight().value) == base);  // bit-identical
    CHECK_FALSE(l.weight().grad.defined());
    CHECK(be.read(l.lora()->b().value) != b0);  // the adapters did train
    CHECK(be.counters().copies(operand_use::wgrad_x) == 0);
    CHECK(be.counters().copies(operand_use::wgrad_dy) == 0);
    CHECK(be.counters().copies(operand_use::dgrad_dy) == 4);  // dX still flows through the base
    CHECK(be.counters().gemm_calls(gemm_product::wgrad) == 4 * 2);  // the adapters' dA and dB only
  }
}

TEST_CASE("linear: LoRA output is the base plus the scaled low-rank product", "[nn][linear][lora]") {
  host_backend be;
  linear l(be, "layer", K, N, 5, recipes::native(), dtype::f64);
  l.init_normal(3, 0.05);
  l.freeze();
  l.add_lora({4, 8.0}, 9);
  be.write(l.lora()->b().value, normal_values(N * 4, 5, 1, 0.1));
  tensor x = random_tensor(be, M, K, 1, 1.0, dtype::f64), y = be.alloc(M, N, dtype::f64, mem_tag::activation);
  l.forward(x, y, false);
  const auto X = be.read(x), W = be.read(l.weight().value), A = be.read(l.lora()->a().value), B = be.read(l.lora()->b().value),
             Y = be.read(y);
  double worst = 0;
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double want = 0;
      for (std::size_t k = 0; k < K; ++k) want += X[i * K + k] * W[j * K + k];
      for (std::size_t q = 0; q < 4; ++q) {
        double h = 0;
        for (std::size_t k = 0; k < K; ++k) h += X[i * K + k] * A[q * K + k];
        want += 2.0 * h * B[j * 4 + q];  // alpha / rank = 2
      }
      worst = std::max(worst, std::fabs(Y[i * N + j] - want));
    }
  CHECK(worst < 1e-12);
}

TEST_CASE("linear: bad shapes and recipes are refused with the dimension named", "[nn][linear]") {
  host_backend be;
  CHECK_THROWS_WITH(linear(be, "odd", 48, 64, 0, recipes::mxfp4_amd(), dtype::f32), mxkit_test::contains("K=48"));
  CHECK_THROWS_WITH(linear(be, "odd", 64, 40, 0, recipes::mxfp4_amd(), dtype::f32), mxkit_test::contains("N=40"));
  linear l(be, "layer", 64, 64, 0, recipes::mxfp4_amd(), dtype::f32);
  tensor x = be.alloc(40, 64, dtype::f32, mem_tag::activation), y = be.alloc(40, 64, dtype::f32, mem_tag::activation);
  CHECK_THROWS_WITH(l.forward(x, y, true), mxkit_test::contains("M=40"));
  CHECK_NOTHROW(l.forward(x, y, false));  // no wgrad, no constraint on M
  tensor bad = be.alloc(40, 32, dtype::f32, mem_tag::activation);
  CHECK_THROWS_WITH(l.forward(bad, y, false), mxkit_test::contains("input"));
  CHECK_THROWS_WITH(l.backward(y, &x), mxkit_test::contains("backward without a training forward"));
}
