// SPDX-License-Identifier: Apache-2.0
// Recipe presets say what the issue and the published recipes say; check_config() refuses
// inconsistent recipes with a message naming the GEMM.
#include <mxkit/nn/recipe.hpp>

#include "../catch.hpp"

using namespace mxkit;
using namespace mxkit::nn;

TEST_CASE("recipe presets: bf16, FP8 HYBRID, MXFP8", "[nn][recipe]") {
  const recipe b = recipes::bf16();
  for (gemm_product g : {gemm_product::fprop, gemm_product::dgrad, gemm_product::wgrad}) {
    CHECK(b.gemm(g).a.kind == precision::bf16);
    CHECK(b.gemm(g).b.kind == precision::bf16);
  }
  const recipe f = recipes::fp8_delayed();
  CHECK(f.fprop.a.fp8 == fp8_type::e4m3);  // X
  CHECK(f.fprop.b.fp8 == fp8_type::e4m3);  // W
  CHECK(f.dgrad.a.fp8 == fp8_type::e5m2);  // dY
  CHECK(f.dgrad.b.fp8 == fp8_type::e4m3);  // W
  CHECK(f.wgrad.a.fp8 == fp8_type::e5m2);  // dY
  CHECK(f.wgrad.b.fp8 == fp8_type::e4m3);  // X
  CHECK(f.scaling.history_length == 1024);
  CHECK(f.scaling.algorithm == amax_algorithm::max);
  const recipe h = recipes::fp8_healing();
  CHECK(h.scaling.history_length == 4);
  CHECK(h.scaling.algorithm == amax_algorithm::most_recent);
  CHECK(h.dgrad.a.fp8 == fp8_type::e5m2);
  const recipe m = recipes::mxfp8();
  CHECK(m.fprop.a.kind == precision::mx);
  CHECK(m.fprop.a.mx == mx_type::mxfp8_e4m3);
  CHECK(m.wgrad.b.rule == scale_rule::round_up);
  for (const recipe& r : {b, f, h, m, recipes::native()}) CHECK_NOTHROW(check_config(r));
}

TEST_CASE("recipe presets: MXFP4 rotation placements", "[nn][recipe]") {
  const recipe amd = recipes::mxfp4_amd();
  for (gemm_product g : {gemm_product::fprop, gemm_product::dgrad, gemm_product::wgrad}) {
    const gemm_spec& s = amd.gemm(g);
    CHECK(s.a.mx == mx_type::mxfp4);
    CHECK(s.b.mx == mx_type::mxfp4);
    CHECK(s.a.rule == scale_rule::even);
    CHECK(s.hadamard);
    CHECK_FALSE(s.random_signs);
    CHECK(s.a.round == rounding::nearest_even);
  }
  const recipe pt = recipes::mxfp4_primus_turbo();
  CHECK_FALSE(pt.fprop.hadamard);
  CHECK_FALSE(pt.dgrad.hadamard);
  CHECK(pt.wgrad.hadamard);
  const recipe nv = recipes::mxfp4_nvidia_style();
  CHECK_FALSE(nv.fprop.hadamard);
  CHECK_FALSE(nv.dgrad.hadamard);
  CHECK(nv.wgrad.hadamard);
  CHECK(nv.wgrad.random_signs);
  CHECK(nv.dgrad.a.round == rounding::stochastic);  // dY
  CHECK(nv.wgrad.a.round == rounding::stochastic);  // dY
  CHECK(nv.wgrad.b.round == rounding::nearest_even);  // X
  const recipe none = recipes::mxfp4_no_hadamard();
  CHECK_FALSE(none.fprop.hadamard);
  CHECK_FALSE(none.wgrad.hadamard);

  recipes::mxfp4_config c;
  c.wgrad_mx = false;  // ablation: wgrad in higher precision
  const recipe hp = recipes::mxfp4(c);
  CHECK(hp.wgrad.a.kind == precision::bf16);
  CHECK(hp.fprop.a.kind == precision::mx);
  for (const recipe& r : {amd, pt, nv, none, hp}) CHECK_NOTHROW(check_config(r));
}

TEST_CASE("recipe validation names the bad GEMM", "[nn][recipe]") {
  recipe r = recipes::mxfp4_amd();
  r.dgrad.b = recipes::bf16_operand();
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("dgrad mixes mx and bf16"));

  r = recipes::bf16();
  r.fprop.hadamard = true;
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("fprop has the Hadamard rotation on bf16"));

  r = recipes::mxfp4_no_hadamard();
  r.wgrad.random_signs = true;
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("random signs without the Hadamard"));

  r = recipes::fp8_delayed();
  r.wgrad.b.fp8 = fp8_type::e5m2;  // X in E4M3 for fprop but E5M2 for wgrad: one scale cannot serve both
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("X is FP8 in two GEMMs"));

  r = recipes::fp8_delayed();
  r.fprop.a.round = rounding::stochastic;
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("only MX operands"));

  r = recipes::mxfp8();
  r.high = recipes::mx_operand(mx_type::mxfp4, scale_rule::even);
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("high precision"));

  r = recipes::fp8_delayed({0, amax_algorithm::max, 0});
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("history_length"));
}
