// SPDX-License-Identifier: Apache-2.0
// Recipe presets say what the issue and the published recipes say; check_config() refuses
// inconsistent recipes with a message naming the GEMM.
#include <string>
#include <type_traits>

#include <mxkit/nn/recipe.hpp>

#include "../catch.hpp"

using namespace mxkit;
using namespace mxkit::nn;

// Whether an operand kind carries an element rounding (only the block-scaled one does).
template <class S>
concept has_rounding = requires(S s) { s.round; };

TEST_CASE("recipe presets: bf16, FP8 HYBRID, MXFP8", "[nn][recipe]") {
  const recipe b = recipes::bf16();
  for (gemm_product g : {gemm_product::fprop, gemm_product::dgrad, gemm_product::wgrad}) {
    CHECK(b.gemm(g).a.kind() == precision::bf16);
    CHECK(b.gemm(g).b.kind() == precision::bf16);
  }
  const recipe f = recipes::fp8_delayed();
  CHECK(f.fprop.a.fp8().type == fp8_type::e4m3);  // X
  CHECK(f.fprop.b.fp8().type == fp8_type::e4m3);  // W
  CHECK(f.dgrad.a.fp8().type == fp8_type::e5m2);  // dY
  CHECK(f.dgrad.b.fp8().type == fp8_type::e4m3);  // W
  CHECK(f.wgrad.a.fp8().type == fp8_type::e5m2);  // dY
  CHECK(f.wgrad.b.fp8().type == fp8_type::e4m3);  // X
  CHECK(f.scaling.history_length == 1024);
  CHECK(f.scaling.algorithm == amax_algorithm::max);
  const recipe h = recipes::fp8_healing();
  CHECK(h.scaling.history_length == 4);
  CHECK(h.scaling.algorithm == amax_algorithm::most_recent);
  CHECK(h.dgrad.a.fp8().type == fp8_type::e5m2);
  const recipe m = recipes::mxfp8();
  CHECK(m.fprop.a.kind() == precision::mx);
  CHECK(m.fprop.a.block_scaled().mx() == mx_type::mxfp8_e4m3);
  CHECK(m.wgrad.b.block_scaled().rule == scale_rule::round_up);
  for (const recipe& r : {b, f, h, m, recipes::native()}) CHECK_NOTHROW(check_config(r));
}

TEST_CASE("recipe presets: MXFP4 rotation placements", "[nn][recipe]") {
  const recipe amd = recipes::mxfp4_amd();
  for (gemm_product g : {gemm_product::fprop, gemm_product::dgrad, gemm_product::wgrad}) {
    const gemm_spec& s = amd.gemm(g);
    CHECK(s.a.block_scaled().mx() == mx_type::mxfp4);
    CHECK(s.b.block_scaled().mx() == mx_type::mxfp4);
    CHECK(s.a.block_scaled().rule == scale_rule::even);
    CHECK(s.hadamard);
    CHECK_FALSE(s.random_signs);
    CHECK(s.a.block_scaled().round == rounding::nearest_even);
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
  CHECK(nv.dgrad.a.block_scaled().round == rounding::stochastic);  // dY
  CHECK(nv.wgrad.a.block_scaled().round == rounding::stochastic);  // dY
  CHECK(nv.wgrad.b.block_scaled().round == rounding::nearest_even);  // X
  const recipe none = recipes::mxfp4_no_hadamard();
  CHECK_FALSE(none.fprop.hadamard);
  CHECK_FALSE(none.wgrad.hadamard);

  recipes::mxfp4_config c;
  c.wgrad_mx = false;  // ablation: wgrad in higher precision
  const recipe hp = recipes::mxfp4(c);
  CHECK(hp.wgrad.a.kind() == precision::bf16);
  CHECK(hp.fprop.a.kind() == precision::mx);
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
  r.wgrad.b.fp8().type = fp8_type::e5m2;  // X in E4M3 for fprop but E5M2 for wgrad: one scale cannot serve both
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("X is FP8 in two GEMMs"));

  // Non-default rounding of an FP8 operand: an fp8_spec has no rounding to set, and asking the
  // operand for its block-scaled part (where the rounding is) throws.
  r = recipes::fp8_delayed();
  STATIC_REQUIRE_FALSE(has_rounding<fp8_spec>);
  STATIC_REQUIRE(has_rounding<block_scaled_spec>);
  CHECK_THROWS_WITH(r.fprop.a.block_scaled().round = rounding::stochastic, mxkit_test::contains("fp8 operand has no mx part"));

  r = recipes::mxfp8();
  r.high = recipes::mx_operand(mx_type::mxfp4, scale_rule::even);
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("high precision"));

  r = recipes::fp8_delayed({0, amax_algorithm::max, 0});
  CHECK_THROWS_WITH(check_config(r), mxkit_test::contains("history_length"));
}

TEST_CASE("operand_spec: one kind at a time, block-scaled with a format value", "[nn][recipe]") {
  const operand_spec mx = recipes::mx_operand(mx_type::mxfp8_e4m3, scale_rule::round_up, rounding::stochastic);
  CHECK(mx.kind() == precision::mx);
  CHECK(mx.is<block_scaled_spec>());
  CHECK(mx.block_scaled().format == formats::mxfp8_e4m3);
  CHECK(mx.block_scaled().mx() == mx_type::mxfp8_e4m3);
  CHECK(mx == recipes::block_scaled_operand(formats::mxfp8_e4m3, scale_rule::round_up, rounding::stochastic));
  CHECK_FALSE(mx == recipes::mx_operand(mx_type::mxfp8_e4m3, scale_rule::round_up));
  CHECK_THROWS_WITH(mx.fp8(), mxkit_test::contains("a mx operand has no fp8 part"));
  CHECK(recipes::mma_operand(fp8_type::e5m2).fp8().type == fp8_type::e5m2);
  CHECK(operand_spec{}.kind() == precision::bf16);  // the default, as before
  CHECK(recipes::native_operand() != recipes::bf16_operand());
  STATIC_REQUIRE(std::is_trivially_copyable_v<operand_spec>);

  // The MX formats' values map back to their mx_type; NVFP4's do not.
  for (const mx_type t : all_mx_types) {
    mx_type back = mx_type::mxint8;
    CHECK(mx_type_of(format_of(t), &back));
    CHECK(back == t);
  }
  CHECK_FALSE(mx_type_of(formats::nvfp4, nullptr));
  CHECK_FALSE(mx_type_of(formats::nvfp4_2d, nullptr));

  // A visit names every kind: each alternative its own handler.
  const auto name = [](const operand_spec& o) {
    return o.visit(overloaded{[](native_spec) { return "native"; }, [](bf16_spec) { return "bf16"; }, [](const fp8_spec&) { return "fp8"; },
                              [](const block_scaled_spec& b) { return b.format_name(); }});
  };
  CHECK(std::string(name(mx)) == "mxfp8_e4m3");
  CHECK(std::string(name(recipes::mma_operand(fp8_type::e4m3))) == "fp8");

  // NVFP4 trains (its own quantizer and GEMM), but is no mx_type: mx() refuses it by name, and
  // check_config a GEMM that multiplies it by an MX operand.
  const operand_spec nv = recipes::block_scaled_operand(formats::nvfp4, scale_rule::floor);
  CHECK(nv.block_scaled().format_name() == std::string("nvfp4"));
  CHECK(nv.block_scaled().is_nvfp4());
  CHECK_FALSE(nv.block_scaled().is_mx());
  CHECK(mx.block_scaled().is_mx());
  CHECK_FALSE(mx.block_scaled().is_nvfp4());
  CHECK_THROWS_WITH(nv.block_scaled().mx(), mxkit_test::contains("block-scaled operand: nvfp4 (e2m1 elements, 1 x 16 blocks, e4m3 scales, "
                                                                 "tensor scale fp32) is not an MX format"));
  CHECK_NOTHROW(check_config(recipes::uniform("nvfp4 everywhere", nv)));
  recipe mixed = recipes::uniform("nvfp4 by mxfp4", nv);
  mixed.dgrad.b = recipes::mx_operand(mx_type::mxfp4, scale_rule::floor);
  CHECK_THROWS_WITH(check_config(mixed), mxkit_test::contains("dgrad multiplies nvfp4 by mxfp4; both operands must be MX or both NVFP4"));
  // A block format that is neither (E8M0 scales on blocks of 16) trains nowhere: refused by name.
  const block_format e8m0_16{element_kind::e2m1, {1, 16}, block_scale_type::e8m0, tensor_scale_type::none};
  const operand_spec odd = recipes::block_scaled_operand(e8m0_16, scale_rule::floor);
  CHECK_THROWS_WITH(check_config(recipes::uniform("odd blocks", odd)),
                    mxkit_test::contains("fprop has unknown block format operands, which no backend trains with (the MX formats and NVFP4 do)"));
  CHECK_THROWS_WITH(odd.block_scaled().check_trainable("quantize"), mxkit_test::contains("quantize: block-scaled operand in unknown block format"));
  // An mx_type past the enum names no format: refused, never taken for MXFP4.
  CHECK_THROWS_WITH(recipes::mx_operand(static_cast<mx_type>(6), scale_rule::floor),
                    mxkit_test::contains("mx_operand: unknown mx_type value 6 (valid: 0 to 5, mxfp4 to mxint8)"));
}

TEST_CASE("recipes::nvfp4: arXiv 2509.25149's rules, GEMM by GEMM", "[nn][recipe][nvfp4]") {
  const recipe r = recipes::nvfp4();
  REQUIRE_NOTHROW(check_config(r));
  const auto spec = [](const operand_spec& o) { return o.block_scaled(); };
  // Every GEMM's inputs NVFP4: activations and gradients 1 x 16, weights 16 x 16.
  CHECK(spec(r.fprop.a).format == formats::nvfp4);
  CHECK(spec(r.fprop.b).format == formats::nvfp4_2d);
  CHECK(spec(r.dgrad.a).format == formats::nvfp4);
  CHECK(spec(r.dgrad.b).format == formats::nvfp4_2d);
  CHECK(spec(r.wgrad.a).format == formats::nvfp4);
  CHECK(spec(r.wgrad.b).format == formats::nvfp4);
  // Stochastic rounding on the gradients only.
  CHECK(spec(r.fprop.a).round == rounding::nearest_even);
  CHECK(spec(r.fprop.b).round == rounding::nearest_even);
  CHECK(spec(r.dgrad.a).round == rounding::stochastic);
  CHECK(spec(r.dgrad.b).round == rounding::nearest_even);
  CHECK(spec(r.wgrad.a).round == rounding::stochastic);
  CHECK(spec(r.wgrad.b).round == rounding::nearest_even);
  // The random Hadamard transform on wgrad only.
  CHECK_FALSE(r.fprop.hadamard);
  CHECK_FALSE(r.dgrad.hadamard);
  CHECK(r.wgrad.hadamard);
  CHECK(r.wgrad.random_signs);
  CHECK(r.high.is<bf16_spec>());
  // Layers at both ends in bf16, the paper's first 2 and last 8 of 62, rounded to nearest; a
  // model of 2 or more layers keeps at least its last one in bf16.
  CHECK(r.bf16_first_layers == 0);
  CHECK(r.bf16_last_layers == 0);
  CHECK(recipes::nvfp4_bf16_first_layers(62) == 2);
  CHECK(recipes::nvfp4_bf16_last_layers(62) == 8);
  CHECK(recipes::nvfp4_bf16_first_layers(32) == 1);
  CHECK(recipes::nvfp4_bf16_last_layers(32) == 4);
  CHECK(recipes::nvfp4_bf16_first_layers(1) == 0);
  CHECK(recipes::nvfp4_bf16_last_layers(1) == 0);
  CHECK(recipes::nvfp4_bf16_last_layers(2) == 1);
  CHECK(recipes::nvfp4(16).bf16_first_layers == 1);
  CHECK(recipes::nvfp4(16).bf16_last_layers == 2);
  CHECK(layer_recipe(recipes::nvfp4(16), 0, 16).fprop.a.is<bf16_spec>());
  CHECK(layer_recipe(recipes::nvfp4(16), 1, 16).fprop.a.block_scaled().is_nvfp4());
  CHECK(layer_recipe(recipes::nvfp4(16), 13, 16).fprop.a.block_scaled().is_nvfp4());
  CHECK(layer_recipe(recipes::nvfp4(16), 14, 16).fprop.a.is<bf16_spec>());
}
