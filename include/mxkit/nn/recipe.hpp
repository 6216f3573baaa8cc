// SPDX-License-Identifier: Apache-2.0
#pragma once
// Training recipes as plain values: for each of the three GEMMs of a linear layer (gemm_product,
// gemm/product.hpp), the format of both operands.
//   fprop  Y[M,N]  = X[M,K] . W[N,K]^T     operand a = X,  b = W
//   dgrad  dX[M,K] = dY[M,N] . W[N,K]      operand a = dY, b = W
//   wgrad  dW[N,K] = dY[M,N]^T . X[M,K]    operand a = dY, b = X
// Each operand is one alternative of operand_spec (nn/operand.hpp): `native` (no rounding: the
// oracle used by the gradient check), `bf16` (values rounded to bfloat16, fp32 accumulation), `fp8`
// (per-tensor scaled, delayed scaling) or block-scaled with a format F (mxkit's quantizers: an MX
// format or NVFP4; check_config refuses any other). The Hadamard rotation and random signs belong to a GEMM,
// not an operand: the rotation along the reduction axis cancels only when both operands get the
// same one (H.H = I), and ref/gemm.hpp refuses operands rotated differently.
//
// Presets (namespace recipes): bf16, fp8_delayed (HYBRID: E4M3 forward tensors, E5M2 gradients),
// mxfp8 (E4M3, round-up scale rule), mxfp4 with per-GEMM switches and the known placements of the
// rotation: every operand (AMD's MLPerf recipe, shared/reference), only the wgrad operands
// (Primus-Turbo), only the wgrad operands with random signs and stochastic rounding of the
// gradients (the placement of NVIDIA's NVFP4 pretraining recipe, here with MX blocks); nvfp4,
// that recipe itself (NVFP4 operands, 2-D weight blocks, bf16 last layers).
// Every preset stores activations in f32; set `activations = dtype::bf16` for bf16 activations
// and activation gradients (the storage of TransformerEngine/Megatron bf16 training).
#include <cstddef>
#include <cstdint>
#include <string>

#include <mxkit/block/block_format.hpp>
#include <mxkit/block/mx_format.hpp>
#include <mxkit/block/scale_rule.hpp>
#include <mxkit/error.hpp>
#include <mxkit/format/rounding.hpp>
#include <mxkit/gemm/product.hpp>
#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/nn/operand.hpp>
#include <mxkit/nn/tensor.hpp>
#include <mxkit/tensor/fp8_tensor.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

struct gemm_spec {
  operand_spec a, b;          // see the table at the top of this file
  bool hadamard = false;      // block-scaled: 16-point rotation of both operands along the reduction axis
  bool random_signs = false;  // with hadamard: H.D, D from `seed` (the same D on both operands)
  std::uint64_t seed = 0;     // Philox key of both operands: random signs and stochastic rounding

  friend bool operator==(const gemm_spec&, const gemm_spec&) = default;
};

struct recipe {
  std::string name;
  gemm_spec fprop, dgrad, wgrad;
  // "Higher precision" of this recipe: LoRA adapter GEMMs and the LM head use it (native or bf16).
  operand_spec high;
  delayed_scaling_config scaling;  // FP8 operands
  // Storage of activations and activation gradients between kernels: f32 or bf16 (masters,
  // weight gradients and optimizer state stay f32; an f64 model keeps f64 everywhere).
  dtype activations = dtype::f32;
  // The first and the last layers of a model whose linears train in bf16 whatever the GEMM specs
  // say (NVIDIA's NVFP4 pretraining report keeps the first and last blocks in BF16; the ablation
  // of issue 31). layer_recipe() gives the recipe of one layer.
  std::size_t bf16_first_layers = 0, bf16_last_layers = 0;

  const gemm_spec& gemm(gemm_product g) const noexcept { return g == gemm_product::fprop ? fprop : g == gemm_product::dgrad ? dgrad : wgrad; }
  gemm_spec& gemm(gemm_product g) noexcept { return g == gemm_product::fprop ? fprop : g == gemm_product::dgrad ? dgrad : wgrad; }
  bool uses(precision p) const noexcept {
    return fprop.a.kind() == p || fprop.b.kind() == p || dgrad.a.kind() == p || dgrad.b.kind() == p || wgrad.a.kind() == p ||
           wgrad.b.kind() == p;
  }
};

namespace internal {
inline void check_fp8_tensor(const operand_spec& x, const operand_spec& y, const char* tensor_name, const char* recipe_name) {
  if (x.is<fp8_spec>() && y.is<fp8_spec>())
    mxkit::detail::require(x.fp8() == y.fp8(), "recipe '", recipe_name, "': ", tensor_name, " is FP8 in two GEMMs with different types (",
                           name_of(x.fp8().type), ", ", name_of(y.fp8().type), "); one per-tensor scale needs one type");
}
}  // namespace internal

// Throws std::invalid_argument naming the GEMM and the bad field.
inline void check_config(const recipe& r) {
  using mxkit::detail::require;
  for (gemm_product g : {gemm_product::fprop, gemm_product::dgrad, gemm_product::wgrad}) {
    const gemm_spec& s = r.gemm(g);
    require(s.a.kind() == s.b.kind(), "recipe '", r.name, "': ", name_of(g), " mixes ", name_of(s.a.kind()), " and ", name_of(s.b.kind()),
            " operands; both operands of a GEMM must be in the same family");
    require(!s.hadamard || s.a.is<block_scaled_spec>(), "recipe '", r.name, "': ", name_of(g),
            " has the Hadamard rotation on ", name_of(s.a.kind()), " operands; it is an MX quantizer option");
    require(!s.random_signs || s.hadamard, "recipe '", r.name, "': ", name_of(g), " has random signs without the Hadamard rotation");
    // Only block-scaled operands carry a rounding (a non-default one on another kind cannot be
    // written). Of the block-scaled formats, the MX ones and NVFP4 train; both operands of a GEMM
    // are of one family, as the GEMMs take (an MX x NVFP4 product has no kernel or oracle).
    for (const operand_spec* o : {&s.a, &s.b})
      if (o->is<block_scaled_spec>()) {
        const block_scaled_spec& b = o->block_scaled();
        require(b.is_mx() || b.is_nvfp4(), "recipe '", r.name, "': ", name_of(g), " has ", b.format_name(),
                " operands, which no backend trains with (the MX formats and NVFP4 do)");
      }
    if (s.a.is<block_scaled_spec>() && s.b.is<block_scaled_spec>())
      require(s.a.block_scaled().is_nvfp4() == s.b.block_scaled().is_nvfp4(), "recipe '", r.name, "': ", name_of(g), " multiplies ",
              s.a.block_scaled().format_name(), " by ", s.b.block_scaled().format_name(), "; both operands must be MX or both NVFP4");
  }
  internal::check_fp8_tensor(r.fprop.a, r.wgrad.b, "X", r.name.c_str());
  internal::check_fp8_tensor(r.fprop.b, r.dgrad.b, "W", r.name.c_str());
  internal::check_fp8_tensor(r.dgrad.a, r.wgrad.a, "dY", r.name.c_str());
  require(r.high.is<native_spec>() || r.high.is<bf16_spec>(), "recipe '", r.name, "': the high precision must be native or bf16, got ",
          name_of(r.high.kind()));
  require(r.activations == dtype::f32 || r.activations == dtype::bf16, "recipe '", r.name, "': activations must be f32 or bf16, got ",
          name_of(r.activations));
  check_config(r.scaling);
}

// The recipe of layer `layer` of `n_layers`: `r`, or its bf16 form (every operand bf16, the same
// high precision, activations and name with " (bf16 layer)") inside the bf16 first/last layers.
inline recipe layer_recipe(const recipe& r, std::size_t layer, std::size_t n_layers) {
  mxkit::detail::require(layer < n_layers, "layer_recipe: layer ", layer, " of ", n_layers);
  if (layer >= r.bf16_first_layers && layer + r.bf16_last_layers < n_layers) return r;
  recipe b = r;
  b.name = r.name + " (bf16 layer)";
  const operand_spec bf = bf16_spec{};
  b.fprop = b.dgrad = b.wgrad = gemm_spec{bf, bf};
  return b;
}

namespace recipes {

// Every GEMM with both operands in `o`.
inline recipe uniform(std::string name, const operand_spec& o) {
  recipe r;
  r.name = std::move(name);
  r.fprop = r.dgrad = r.wgrad = gemm_spec{o, o};
  r.high = o.is<native_spec>() ? native_operand() : bf16_operand();
  return r;
}

// No rounding anywhere: the exact reference of the layer's math (gradient check, oracles).
inline recipe native() { return uniform("native", native_operand()); }

// The baseline: operands rounded to bfloat16 (RNE), fp32 accumulation; fp32 everywhere else.
inline recipe bf16() { return uniform("bf16", bf16_operand()); }

// FP8 delayed scaling, HYBRID format: E4M3 for X and W, E5M2 for dY.
inline recipe fp8_delayed(const delayed_scaling_config& scaling = {}) {
  recipe r;
  r.name = "fp8 delayed";
  r.fprop = {mma_operand(fp8_type::e4m3), mma_operand(fp8_type::e4m3)};
  r.dgrad = {mma_operand(fp8_type::e5m2), mma_operand(fp8_type::e4m3)};
  r.wgrad = {mma_operand(fp8_type::e5m2), mma_operand(fp8_type::e4m3)};
  r.high = bf16_operand();
  r.scaling = scaling;
  return r;
}

// MXFP8: E4M3 elements in 32-blocks on every operand; round-up scale rule (nothing clips).
inline recipe mxfp8(scale_rule rule = scale_rule::round_up) {
  return uniform("mxfp8", mx_operand(mx_type::mxfp8_e4m3, rule));
}

// Where the 16-point Hadamard rotation is applied.
enum class hadamard_placement : std::uint8_t { none, wgrad_only, all };

struct mxfp4_config {
  hadamard_placement hadamard = hadamard_placement::all;
  bool random_signs = false;          // on the rotated GEMMs
  bool stochastic_gradients = false;  // stochastic rounding of the dY operands (dgrad and wgrad)
  scale_rule rule = scale_rule::even;
  bool fprop_mx = true, dgrad_mx = true, wgrad_mx = true;  // false: that GEMM in bf16
  std::uint64_t seed = 0x4D58465034ull;                     // Philox key ("MXFP4")
};

inline recipe mxfp4(const mxfp4_config& c = {}, std::string name = "mxfp4") {
  recipe r;
  r.name = std::move(name);
  r.high = bf16_operand();
  const operand_spec fwd = mx_operand(mx_type::mxfp4, c.rule);
  const operand_spec grad = mx_operand(mx_type::mxfp4, c.rule, c.stochastic_gradients ? rounding::stochastic : rounding::nearest_even);
  auto make = [&](bool on, const operand_spec& a, const operand_spec& b, bool rotate, std::uint64_t salt) {
    if (!on) return gemm_spec{bf16_operand(), bf16_operand()};
    gemm_spec g{a, b};
    g.hadamard = rotate;
    g.random_signs = rotate && c.random_signs;
    g.seed = c.seed + salt;
    return g;
  };
  const bool all = c.hadamard == hadamard_placement::all, any = c.hadamard != hadamard_placement::none;
  r.fprop = make(c.fprop_mx, fwd, fwd, all, 0);
  r.dgrad = make(c.dgrad_mx, grad, fwd, all, 1);
  r.wgrad = make(c.wgrad_mx, grad, fwd, any, 2);
  return r;
}

// AMD's MLPerf recipe: every operand of every GEMM rotated, deterministic signs, `even` rule.
inline recipe mxfp4_amd() { return mxfp4({}, "mxfp4 (hadamard all)"); }
inline recipe mxfp4_no_hadamard() {
  mxfp4_config c;
  c.hadamard = hadamard_placement::none;
  return mxfp4(c, "mxfp4 (no hadamard)");
}
// Primus-Turbo: the rotation on the wgrad operands only.
inline recipe mxfp4_primus_turbo() {
  mxfp4_config c;
  c.hadamard = hadamard_placement::wgrad_only;
  return mxfp4(c, "mxfp4 (hadamard wgrad)");
}
// NVIDIA's NVFP4 placement on MX blocks: random-sign rotation on the wgrad operands only,
// stochastic rounding of the gradients.
inline recipe mxfp4_nvidia_style() {
  mxfp4_config c;
  c.hadamard = hadamard_placement::wgrad_only;
  c.random_signs = true;
  c.stochastic_gradients = true;
  return mxfp4(c, "mxfp4 (random hadamard wgrad, SR)");
}

// NVIDIA's NVFP4 pretraining recipe (arXiv 2509.25149, "Pretraining Large Language Models with
// NVFP4": the four techniques its abstract names), on this stack's linear layers:
//  - every linear layer's three GEMMs (fprop, dgrad, wgrad) take NVFP4 inputs: E2M1 elements, an
//    E4M3 scale per 16 elements, an fp32 tensor scale;
//  - weights in 16 x 16 blocks (formats::nvfp4_2d: "two-dimensional" scaling), so that the
//    weight's rowwise (fprop) and columnwise (dgrad) copies hold the same values, as the chain
//    rule wants of the W in both products; activations and gradients in 1 x 16 blocks;
//  - a random Hadamard transform of size 16 (H16 . D, one sign vector D for every layer: the
//    `seed` of the GEMM) on both inputs of the wgrad GEMM only, never fprop or dgrad;
//  - stochastic rounding of the gradients, the dY operands of dgrad and wgrad; weights and
//    activations round to nearest even;
//  - some layers in bf16 ("selective high-precision layers"): about 16 % of the linear layers,
//    at the two ends of the 12B model, the first 2 and the last 8 of its 62 blocks:
//    nvfp4_bf16_first_layers, nvfp4_bf16_last_layers.
// Embeddings, the LM head (`high`), attention and the norms stay as in every recipe here.
// The stochastic rounding draws per step (Philox streams), so the step graph of the device
// backend is refused for it as for every stochastic recipe (train/step_replay.hpp).
inline constexpr std::uint64_t nvfp4_seed = 0x4E56465034ull;  // Philox key ("NVFP4")

// The 12B model's bf16 share of `n_layers` at each end, rounded to nearest; a model of 2 or more
// layers keeps at least its last one in bf16 (the ones next to the head).
constexpr std::size_t nvfp4_bf16_first_layers(std::size_t n_layers) noexcept { return (n_layers * 2 + 31) / 62; }
constexpr std::size_t nvfp4_bf16_last_layers(std::size_t n_layers) noexcept {
  const std::size_t share = (n_layers * 8 + 31) / 62;
  return n_layers >= 2 && share == 0 ? 1 : share;
}

// n_layers: the model's transformer layers (0: none in bf16, the recipe of a lone linear layer).
inline recipe nvfp4(std::size_t n_layers = 0) {
  recipe r;
  r.name = "nvfp4";
  r.high = bf16_operand();
  const operand_spec act = block_scaled_operand(formats::nvfp4, scale_rule::floor);
  const operand_spec weight = block_scaled_operand(formats::nvfp4_2d, scale_rule::floor);
  const operand_spec grad = block_scaled_operand(formats::nvfp4, scale_rule::floor, rounding::stochastic);
  r.fprop = {act, weight};
  r.dgrad = {grad, weight};
  r.wgrad = {grad, act};
  r.wgrad.hadamard = r.wgrad.random_signs = true;
  r.fprop.seed = nvfp4_seed;
  r.dgrad.seed = nvfp4_seed + 1;
  r.wgrad.seed = nvfp4_seed + 2;
  r.bf16_first_layers = nvfp4_bf16_first_layers(n_layers);
  r.bf16_last_layers = nvfp4_bf16_last_layers(n_layers);
  return r;
}

// The healing target of the Llama 2 70B LoRA recipe: FP8 delayed scaling, HYBRID, amax history
// of 4, most-recent algorithm.
inline recipe fp8_healing() {
  recipe r = fp8_delayed({4, amax_algorithm::most_recent, 0});
  r.name = "fp8 delayed (history 4, most recent)";
  return r;
}

}  // namespace recipes
}  // namespace nn
MXKIT_END_NAMESPACE
