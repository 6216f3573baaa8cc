// SPDX-License-Identifier: Apache-2.0
// Host layer kernels: properties that pin down each one (RoPE is a rotation by position,
// attention is causal and grouped, RMSNorm normalizes, SwiGLU and cross-entropy values), and
// the host backend's quantization bookkeeping.
#include <cmath>
#include <vector>

#include <mxkit/nn/transformer_layer.hpp>
#include <mxkit/host/host_backend.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;

TEST_CASE("layers: RoPE rotates q and k by position, leaves v, and inverts", "[nn][layers]") {
  host_backend be;
  const head_shape s{2, 5, 2, 1, 8};
  tensor qkv = random_tensor(be, s.tokens(), s.qkv_dim(), 3);
  const std::vector<double> before = be.read(qkv);
  be.rope(qkv, s, 10000.0, false);
  const std::vector<double> after = be.read(qkv);
  for (std::size_t row = 0; row < s.tokens(); ++row) {
    const std::size_t t = row % s.seq;
    for (std::size_t h = 0; h < 3; ++h)  // 2 q heads, 1 k head, then the v head
      for (std::size_t i = 0; i < 4; ++i) {
        const std::size_t a = row * s.qkv_dim() + h * 8 + i, b = a + 4;
        // Pair norms are preserved.
        CHECK(std::hypot(after[a], after[b]) == Approx(std::hypot(before[a], before[b])).epsilon(1e-5));
        const double angle = static_cast<double>(t) * std::pow(10000.0, -2.0 * static_cast<double>(i) / 8.0);
        CHECK(after[a] == Approx(before[a] * std::cos(angle) - before[b] * std::sin(angle)).margin(1e-5));
      }
    for (std::size_t c = 24; c < 32; ++c) CHECK(after[row * s.qkv_dim() + c] == before[row * s.qkv_dim() + c]);  // v
  }
  be.rope(qkv, s, 10000.0, true);
  const std::vector<double> back = be.read(qkv);
  for (std::size_t i = 0; i < back.size(); ++i) CHECK(back[i] == Approx(before[i]).margin(1e-5));
}

TEST_CASE("layers: attention is causal and reads the right kv head", "[nn][layers]") {
  host_backend be;
  const head_shape s{1, 6, 4, 2, 8};
  tensor qkv = random_tensor(be, s.tokens(), s.qkv_dim(), 5);
  tensor out = be.alloc(s.tokens(), s.q_dim(), dtype::f32, mem_tag::activation);
  tensor lse = be.alloc(s.n_heads, s.seq, dtype::f32, mem_tag::activation);
  be.attention_forward(qkv, out, lse, s);
  const std::vector<double> o = be.read(out), q = be.read(qkv), l = be.read(lse);
  // Token 0 attends to itself only: its output is its v row of the head's kv group.
  for (std::size_t h = 0; h < 4; ++h)
    for (std::size_t i = 0; i < 8; ++i) CHECK(o[h * 8 + i] == Approx(q[32 + 16 + (h / 2) * 8 + i]).epsilon(1e-6));
  // The saved log-sum-exp normalizes each causal row: sum_{u <= t} exp(s_tu - lse_t) = 1.
  for (std::size_t h = 0; h < 4; ++h)
    for (std::size_t t = 0; t < 6; ++t) {
      double sum = 0;
      for (std::size_t u = 0; u <= t; ++u) {
        double d = 0;
        for (std::size_t i = 0; i < 8; ++i) d += q[t * s.qkv_dim() + h * 8 + i] * q[u * s.qkv_dim() + 32 + (h / 2) * 8 + i];
        sum += std::exp(d / std::sqrt(8.0) - l[h * 6 + t]);
      }
      CHECK(sum == Approx(1.0).epsilon(1e-6));
    }
  // Changing the last token changes no earlier output.
  std::vector<double> changed = q;
  for (std::size_t c = 0; c < s.qkv_dim(); ++c) changed[5 * s.qkv_dim() + c] += 1.0;
  be.write(qkv, changed);
  be.attention_forward(qkv, out, lse, s);
  const std::vector<double> o2 = be.read(out);
  for (std::size_t i = 0; i < 5 * s.q_dim(); ++i) CHECK(o2[i] == o[i]);
  bool last_changed = false;
  for (std::size_t i = 5 * s.q_dim(); i < 6 * s.q_dim(); ++i) last_changed = last_changed || o2[i] != o[i];
  CHECK(last_changed);
}

TEST_CASE("layers: RMSNorm, SwiGLU and cross-entropy values", "[nn][layers]") {
  host_backend be;
  tensor x = be.alloc(1, 4, dtype::f64, mem_tag::activation), w = be.alloc(1, 4, dtype::f64, mem_tag::parameter);
  tensor y = be.alloc(1, 4, dtype::f64, mem_tag::activation), rstd = be.alloc(1, 1, dtype::f64, mem_tag::activation);
  be.write(x, {1, -2, 3, -4});
  be.write(w, {1, 1, 2, 0.5});
  be.rmsnorm_forward(x, w, y, rstd, 0.0);
  const double r = 1.0 / std::sqrt((1 + 4 + 9 + 16) / 4.0);
  CHECK(be.read(rstd)[0] == Approx(r));
  CHECK(be.read(y) == std::vector<double>{1 * r, -2 * r, 6 * r, -2 * r});

  tensor gu = be.alloc(1, 4, dtype::f64, mem_tag::activation), s = be.alloc(1, 2, dtype::f64, mem_tag::activation);
  be.write(gu, {0.0, 2.0, 5.0, -3.0});  // gate (0, 2), up (5, -3)
  be.swiglu_forward(gu, s);
  const std::vector<double> sv = be.read(s);
  CHECK(sv[0] == 0.0);
  CHECK(sv[1] == Approx(2.0 / (1.0 + std::exp(-2.0)) * -3.0));

  tensor logits = be.alloc(2, 8, dtype::f64, mem_tag::activation), loss = be.scalar();
  tensor targets = be.alloc(2, 1, dtype::i32, mem_tag::activation);
  be.write_tokens(targets, {3, 5}, 8);
  be.cross_entropy(logits, targets, loss, false);
  CHECK(be.read_scalar(loss) == Approx(std::log(8.0)));  // uniform
  CHECK(be.read(logits) == std::vector<double>(16, 0.0));  // no gradient asked for: untouched
  be.cross_entropy(logits, targets, loss, true);
  CHECK(be.read_scalar(loss) == Approx(std::log(8.0)));
  const std::vector<double> dv = be.read(logits);  // the gradient, in place
  CHECK(dv[3] == Approx((1.0 / 8 - 1.0) / 2));
  CHECK(dv[4] == Approx(1.0 / 8 / 2));
  CHECK_THROWS_WITH(be.write_tokens(targets, {3, 8}, 8), mxkit_test::contains("outside the vocabulary"));
  CHECK_THROWS_WITH(be.write_tokens(targets, {-1, 0}, 8), mxkit_test::contains("outside the vocabulary"));
}

TEST_CASE("layers: quantized copies are tracked while alive", "[nn][layers]") {
  host_backend be;
  tensor x = random_tensor(be, 64, 64, 1);
  const std::size_t base = be.memory().live(mem_tag::activation);
  CHECK(base == 64 * 64 * 4);
  quant_request r;
  r.spec = recipes::mx_operand(mx_type::mxfp4, scale_rule::even);
  r.tag = mem_tag::quantized_weight;
  {
    const qtensor q = be.quantize(x, r);
    CHECK(be.live_copies(precision::mx) == 1);
    CHECK(q.bytes() == 64 * 32 + 64 * 2);  // packed FP4 codes + E8M0 scales
    CHECK(be.memory().live(mem_tag::quantized_weight) == q.bytes());
    CHECK(be.memory().peak_weight_bytes() >= q.bytes());
  }
  CHECK(be.live_copies(precision::mx) == 0);
  CHECK(be.memory().live(mem_tag::quantized_weight) == 0);
  // Operands of different kinds, or of different reduction lengths, are refused.
  quant_request b;
  b.spec = recipes::bf16_operand();
  tensor d = be.alloc(64, 64, dtype::f32, mem_tag::activation);
  CHECK_THROWS_WITH(be.gemm(gemm_product::fprop, be.quantize(x, r), be.quantize(x, b), d), mxkit_test::contains("operands are mx and bf16"));
  tensor narrow = random_tensor(be, 64, 32, 2);
  CHECK_THROWS_WITH(be.gemm(gemm_product::fprop, be.quantize(x, b), be.quantize(narrow, b), d), mxkit_test::contains("reduction lengths differ"));
}

namespace {
// d_ff 4x d_model, as in Llama: the (M, 2F) SwiGLU gradient and its copies are what a layer's
// backward peaks on.
layer_config llama_shaped_layer() {
  layer_config c;
  c.d_model = 64;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 256;
  return c;
}
}  // namespace

TEST_CASE("layers: the SwiGLU gradient is written over its input, and backward frees what it has read", "[nn][layers]") {
  // d_ff 4x d_model, as in Llama: were the (M, 2F) gradient allocated beside the saved gate/up
  // output, backward would rise above the end of forward by at least its bytes; were a saved
  // tensor kept past its last reader, activations would stay live after backward.
  const layer_config c = llama_shaped_layer();
  const batch_shape shape{2, 32};
  const std::size_t M = shape.tokens();
  for (const recipe& r : {recipes::bf16(), recipes::fp8_delayed(), recipes::mxfp4_amd()})
  for (const dtype weights : {dtype::f32, dtype::bf16}) {  // fp32 masters, or a layer held in bf16
    INFO(r.name << ", " << name_of(weights) << " weights");
    host_backend be;
    transformer_layer layer(be, "layer", c, 0, r, weights);
    layer.init(1, 0.02, 2);
    const tensor x = random_tensor(be, M, c.d_model, 2), dy = random_tensor(be, M, c.d_model, 3, 1e-2);
    tensor y = be.alloc(M, c.d_model, dtype::f32, mem_tag::activation), dx = be.alloc(M, c.d_model, dtype::f32, mem_tag::activation);
    const std::size_t before = be.memory().live(mem_tag::activation);
    layer.forward(x, y, shape, true);
    const std::size_t after_forward = be.memory().total();
    be.memory().reset_peak();
    layer.backward(dy, &dx, shape);
    const std::size_t gradient_bytes = M * 2 * c.d_ff * sizeof(float);
    CHECK(be.memory().peak_total() < after_forward + gradient_bytes);
    CHECK(be.memory().live(mem_tag::activation) == before);
    CHECK(be.memory().live(mem_tag::quantized_activation) == 0);
    std::size_t at_peak = 0;
    for (std::size_t t = 0; t < mem_tag_count; ++t) at_peak += be.memory().live_at_peak(static_cast<mem_tag>(t));
    CHECK(at_peak == be.memory().peak_total());
  }
}

TEST_CASE("layers: lean memory trains the same bits below the default's peak", "[nn][layers]") {
  // Weight copies per GEMM and dY's copies one at a time (linear_memory) make the same requests,
  // so the same bytes; where the copies are bytes of their own (FP8, MX) each lowers a backward's
  // peak, and with copies per GEMM no weight copy outlives its GEMM.
  const layer_config c = llama_shaped_layer();
  const batch_shape shape{2, 32};
  const std::size_t M = shape.tokens();
  const linear_memory modes[] = {{}, {true, false}, {false, true}, linear_memory::lean()};
  for (const recipe& r : {recipes::bf16(), recipes::fp8_delayed(), recipes::mxfp8(), recipes::mxfp4_amd()})
  for (const dtype weights : {dtype::f32, dtype::bf16}) {
    INFO(r.name << ", " << name_of(weights) << " weights");
    struct run {
      std::vector<std::vector<double>> outputs;
      std::size_t backward_peak = 0, weight_copies_after = 0;
    };
    std::vector<run> runs;
    for (const linear_memory& m : modes) {
      host_backend be;
      transformer_layer layer(be, "layer", c, 0, r, weights);
      layer.init(1, 0.02, 2);
      layer.set_memory(m);
      // bf16 activations, as the device runs them: the (M, 2F) gradient then weighs what its two
      // FP8 copies do, and gate/up's backward is where the default peaks.
      const tensor x = random_tensor(be, M, c.d_model, 2, 1.0, dtype::bf16), dy = random_tensor(be, M, c.d_model, 3, 1e-2, dtype::bf16);
      tensor y = be.alloc(M, c.d_model, dtype::bf16, mem_tag::activation), dx = be.alloc(M, c.d_model, dtype::bf16, mem_tag::activation);
      std::vector<parameter*> params;
      layer.collect(params);
      run u;
      for (int step = 0; step < 2; ++step) {  // the second step: moved scales and a new weight version
        mark_grads_zero(params);
        layer.forward(x, y, shape, true);
        be.memory().reset_peak();
        layer.backward(dy, &dx, shape);
        u.backward_peak = be.memory().peak_total();
        u.weight_copies_after = be.memory().live(mem_tag::quantized_weight);
        u.outputs.push_back(be.read(y));
        u.outputs.push_back(be.read(dx));
        for (parameter* p : params) u.outputs.push_back(be.read(p->grad));
        for (parameter* p : params) {  // a plain SGD step, the version bumped as the optimizer does
          be.axpy(-0.5, p->grad, p->value);
          ++p->version;
        }
        layer.end_step();
      }
      runs.push_back(std::move(u));
    }
    const run &fast = runs[0], &per_gemm = runs[1], &one_at_a_time = runs[2], &lean = runs[3];
    for (const run& u : runs) {
      REQUIRE(u.outputs.size() == fast.outputs.size());
      for (std::size_t i = 0; i < fast.outputs.size(); ++i) {
        INFO("output " << i);
        CHECK(u.outputs[i] == fast.outputs[i]);
      }
    }
    CHECK(per_gemm.weight_copies_after == 0);
    CHECK(lean.weight_copies_after == 0);
    CHECK(fast.weight_copies_after > 0);
    CHECK(lean.backward_peak <= one_at_a_time.backward_peak);
    CHECK(lean.backward_peak < fast.backward_peak);
    CHECK(one_at_a_time.backward_peak <= fast.backward_peak);
    if (r.name == "bf16") continue;  // bf16 copies: the same peaks or lower
    CHECK(per_gemm.backward_peak < fast.backward_peak);
    // 8-bit dY copies: the default peaks in gate/up's backward, with both copies of its gradient.
    if (r.dgrad.a.kind() == precision::fp8 || (r.dgrad.a.is<block_scaled_spec>() && r.dgrad.a.block_scaled().format == formats::mxfp8_e4m3)) CHECK(one_at_a_time.backward_peak < fast.backward_peak);
  }
}

TEST_CASE("layers: host_backend alloc refuses a shape whose byte count wraps around", "[nn][layers]") {
  host_backend be;
  // 2^62 x 4 f32 elements is 2^66 bytes: the product wraps to 0 in 64 bits.
  const std::size_t rows = std::size_t{1} << (sizeof(std::size_t) * 8 - 2);
  CHECK_THROWS_WITH(be.alloc(rows, 4, dtype::f32, mem_tag::activation), mxkit_test::contains("does not fit in memory"));
  CHECK_THROWS_AS(be.alloc(3, rows, dtype::f64, mem_tag::activation), std::invalid_argument);
  // The message names the operands before they wrapped, and the limit.
  CHECK_THROWS_WITH(be.alloc(rows, 4, dtype::f32, mem_tag::activation),
                    mxkit_test::contains("rows 4611686018427387904 x cols 4 exceeds the largest std::size_t 18446744073709551615"));
  CHECK_THROWS_WITH(be.alloc(3, rows, dtype::f64, mem_tag::activation),
                    mxkit_test::contains("rows x cols 13835058055282163712 x 8 bytes exceeds the largest object size"));
  CHECK(be.memory().live(mem_tag::activation) == 0);
  CHECK(be.alloc(0, rows, dtype::f64, mem_tag::activation).size() == 0);
  CHECK(be.alloc(rows, 0, dtype::f64, mem_tag::activation).size() == 0);
}

TEST_CASE("layers: host_backend import_fp8 refuses codes that do not fill rows x cols", "[nn][layers]") {
  host_backend be;
  mxkit::fp8_tensor t{mxkit::fp8_type::e4m3, 4, 8, 1.0f, 0.0f, std::vector<std::uint8_t>(20)};
  CHECK_THROWS_WITH(be.import_fp8(t, operand_use::fprop_w, mem_tag::quantized_weight),
                    mxkit_test::contains("import_fp8: 20 codes for a 4x8 FP8 tensor, expected 32"));
  t.data.assign(32, 0x38);
  CHECK(be.import_fp8(t, operand_use::fprop_w, mem_tag::quantized_weight).rows() == 4);
}

TEST_CASE("model: the layers' weight copies per GEMM train the same bits and hold no layer copy between steps", "[nn][layers]") {
  // model::set_layer_memory, what the training program's --weight-copies per-gemm sets: the
  // head keeps its cache (its chunks read its copy twice each), the layers make theirs per GEMM.
  for (const recipe& r : {recipes::fp8_delayed(), recipes::mxfp4_amd()}) {
    INFO(r.name);
    std::vector<std::vector<double>> runs[2];
    std::size_t copies_after[2] = {0, 0};
    for (int per_gemm = 0; per_gemm < 2; ++per_gemm) {
      host_backend be;
      model_config c = tiny_model();
      c.n_layers = 2;
      model m(be, c, r, 4);
      m.set_recompute(per_gemm == 1);  // recomputed forwards read the weights once more
      if (per_gemm) m.set_layer_memory({.weight_copies_per_gemm = true});
      const batch_shape b{1, 32};
      std::vector<std::int32_t> tokens(b.tokens()), targets(b.tokens());
      for (std::size_t i = 0; i < b.tokens(); ++i) tokens[i] = static_cast<std::int32_t>(i * 7 % c.vocab), targets[i] = static_cast<std::int32_t>(i * 5 % c.vocab);
      m.zero_grad();
      m.forward(tokens, targets, b, true);
      m.backward();
      for (parameter* p : m.parameters()) {
        materialize_grad(be, *p);
        runs[per_gemm].push_back(be.read(p->grad));
      }
      for (transformer_layer& l : m.layers())
        for (linear* q : l.linears()) copies_after[per_gemm] += q->cached_rowwise().bytes() + q->cached_columnwise().bytes();
    }
    REQUIRE(runs[0].size() == runs[1].size());
    for (std::size_t i = 0; i < runs[0].size(); ++i) {
      INFO("parameter " << i);
      CHECK(runs[0][i] == runs[1][i]);
    }
    CHECK(copies_after[0] > 0);
    CHECK(copies_after[1] == 0);
  }
}
