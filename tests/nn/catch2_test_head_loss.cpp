// SPDX-License-Identifier: Apache-2.0
// The LM head and its loss a chunk of rows at a time (nn/head_loss.hpp), and the loss mask
// (ref/nn/cross_entropy.hpp), on the host reference backend:
//   - cross_entropy_rows in chunks gives the whole batch's loss and gradient bit for bit;
//   - a row the mask does not count changes nothing (its logits and target may be anything), and
//     the loss is the mean over the counted rows (max(1, count): a batch that counts none has
//     loss 0 and no gradient);
//   - a model whose head runs in chunks (an odd vocabulary, chunks that do not divide the rows)
//     gives the unchunked model's loss and every gradient but the head's bit for bit, and the
//     head's weight gradient within the summation bound of nn/head_loss.hpp.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <mxkit/ref/nn/cross_entropy.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

namespace head_loss_test {
using namespace nn_test;

std::vector<std::int32_t> random_ids(std::size_t n, std::size_t vocab, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = static_cast<std::int32_t>(gen() % vocab);
  return v;
}
// About a third of the rows not counted (row 0 always counted, so that no batch counts none).
std::vector<std::int32_t> random_mask(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::int32_t> m(n);
  for (auto& x : m) x = gen() % 3 == 0 ? 0 : 1;
  m[0] = 1;
  return m;
}
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}
tensor tokens_tensor(backend& be, const std::vector<std::int32_t>& v, std::size_t vocab) {
  tensor t = be.alloc(v.size(), 1, dtype::i32, mem_tag::activation);
  be.write_tokens(t, v, vocab);
  return t;
}


TEST_CASE("cross_entropy_rows: any chunking gives the whole batch's loss and gradient, bit for bit", "[nn][loss]") {
  const std::size_t M = 29, V = 37;  // an odd vocabulary; chunks that do not divide the rows
  for (const dtype t : {dtype::f32, dtype::bf16, dtype::f64})
    for (const bool masked : {false, true}) {
      INFO(name_of(t) << (masked ? " with a loss mask" : ""));
      host_backend be;
      const tensor z0 = random_tensor(be, M, V, 11, 3.0, t);
      const tensor targets = tokens_tensor(be, random_ids(M, V, 12), V);
      const tensor mask = tokens_tensor(be, random_mask(M, 13), 2);
      const tensor* m = masked ? &mask : nullptr;
      tensor whole = be.alloc(M, V, t, mem_tag::activation), loss = be.scalar();
      be.copy(z0, whole);
      be.cross_entropy(whole, targets, loss, true, m);
      const std::vector<double> z = be.read(z0), want_grad = be.read(whole);
      const double want_loss = be.read_scalar(loss);
      for (const std::size_t chunk : {std::size_t{1}, std::size_t{4}, std::size_t{7}, std::size_t{28}}) {
        INFO("chunks of " << chunk);
        tensor row_loss = be.alloc(M, 1, dtype::f64, mem_tag::activation), chunked_loss = be.scalar(), loss_only = be.scalar();
        std::vector<double> grad;
        for (std::size_t r0 = 0; r0 < M; r0 += chunk) {
          const std::size_t rows = std::min(chunk, M - r0);
          tensor zc = be.alloc(rows, V, t, mem_tag::activation);
          be.write(zc, std::vector<double>(z.begin() + static_cast<std::ptrdiff_t>(r0 * V), z.begin() + static_cast<std::ptrdiff_t>((r0 + rows) * V)));
          be.cross_entropy_rows(zc, targets, m, r0, &row_loss, r0 + rows == M ? &loss_only : nullptr, false);
          CHECK(be.read(zc) == std::vector<double>(z.begin() + static_cast<std::ptrdiff_t>(r0 * V),
                                                   z.begin() + static_cast<std::ptrdiff_t>((r0 + rows) * V)));  // no gradient: untouched
          be.cross_entropy_rows(zc, targets, m, r0, &row_loss, r0 + rows == M ? &chunked_loss : nullptr, true);
          const std::vector<double> g = be.read(zc);
          grad.insert(grad.end(), g.begin(), g.end());
        }
        CHECK(be.read_scalar(loss_only) == want_loss);
        CHECK(be.read_scalar(chunked_loss) == want_loss);
        CHECK(same_bits(grad, want_grad));
      }
    }
}

TEST_CASE("loss mask: a row that does not count changes nothing; the loss is the mean over the counted rows", "[nn][loss]") {
  const std::size_t M = 12, V = 9;
  for (const dtype t : {dtype::f32, dtype::bf16}) {
    INFO(name_of(t));
    host_backend be;
    const std::vector<std::int32_t> mv = random_mask(M, 5), tg = random_ids(M, V, 6);
    const tensor mask = tokens_tensor(be, mv, 2);
    std::vector<double> z = be.read(random_tensor(be, M, V, 7, 2.0, t));
    auto run = [&](const std::vector<double>& logits, const std::vector<std::int32_t>& targets, double& loss_out) {
      tensor zt = be.alloc(M, V, t, mem_tag::activation), loss = be.scalar();
      be.write(zt, logits);
      be.cross_entropy(zt, tokens_tensor(be, targets, V), loss, true, &mask);
      loss_out = be.read_scalar(loss);
      return be.read(zt);
    };
    double loss = 0.0;
    const std::vector<double> grad = run(z, tg, loss);
    // The mean over the counted rows, each row's loss formed apart (the row kernel), in row order.
    double sum = 0.0, count = 0.0;
    for (std::size_t r = 0; r < M; ++r)
      if (mv[r]) {
        std::vector<float> zr(z.begin() + static_cast<std::ptrdiff_t>(r * V), z.begin() + static_cast<std::ptrdiff_t>((r + 1) * V));
        sum += ref::cross_entropy_row(zr.data(), static_cast<std::size_t>(tg[r]), static_cast<float*>(nullptr), V, 1.0);
        count += 1.0;
      }
    CHECK(count < static_cast<double>(M));  // (the mask leaves some out)
    CHECK(loss == sum / count);
    // Rows that do not count: a zero gradient.
    for (std::size_t r = 0; r < M; ++r)
      if (!mv[r])
        for (std::size_t j = 0; j < V; ++j) CHECK(grad[r * V + j] == 0.0);
    // Their logits (NaN included) and targets changed: the same loss and gradient, bit for bit.
    std::vector<double> z2 = z;
    std::vector<std::int32_t> tg2 = tg;
    for (std::size_t r = 0; r < M; ++r)
      if (!mv[r]) {
        tg2[r] = static_cast<std::int32_t>((static_cast<std::size_t>(tg[r]) + 1) % V);
        for (std::size_t j = 0; j < V; ++j) z2[r * V + j] = j == 0 ? std::nan("") : 50.0 * static_cast<double>(j);
      }
    double loss2 = 0.0;
    const std::vector<double> grad2 = run(z2, tg2, loss2);
    CHECK(loss2 == loss);
    CHECK(same_bits(grad2, grad));
    // Every row counted by the mask: the same bits as no mask at all.
    {
      tensor zt = be.alloc(M, V, t, mem_tag::activation), zu = be.alloc(M, V, t, mem_tag::activation), l1 = be.scalar(), l2 = be.scalar();
      be.write(zt, z);
      be.write(zu, z);
      const tensor all = tokens_tensor(be, std::vector<std::int32_t>(M, 1), 2), targets = tokens_tensor(be, tg, V);
      be.cross_entropy(zt, targets, l1, true, &all);
      be.cross_entropy(zu, targets, l2, true);
      CHECK(be.read_scalar(l1) == be.read_scalar(l2));
      CHECK(same_bits(be.read(zt), be.read(zu)));
    }
    // No row counted: loss 0 and no gradient (N = max(1, 0)), not NaN.
    {
      tensor zt = be.alloc(M, V, t, mem_tag::activation), l = be.scalar();
      be.write(zt, z);
      const tensor none = tokens_tensor(be, std::vector<std::int32_t>(M, 0), 2);
      be.cross_entropy(zt, tokens_tensor(be, tg, V), l, true, &none);
      CHECK(be.read_scalar(l) == 0.0);
      for (double g : be.read(zt)) CHECK(g == 0.0);
    }
  }
  host_backend be;
  tensor z = random_tensor(be, 4, 5, 1), loss = be.scalar(), targets = tokens_tensor(be, {0, 1, 2, 3}, 5);
  const tensor short_mask = tokens_tensor(be, {1, 1, 0}, 2);
  CHECK_THROWS_WITH(be.cross_entropy(z, targets, loss, true, &short_mask), mxkit_test::contains("cross_entropy loss mask: tensor is 3x1, expected 4x1"));
  tensor rows = be.alloc(3, 5, dtype::f32, mem_tag::activation);
  CHECK_THROWS_WITH(be.cross_entropy_rows(rows, targets, nullptr, 2, nullptr, nullptr, true), mxkit_test::contains("rows 2 .. 5 of a batch of 4"));
  CHECK_THROWS_WITH(be.cross_entropy_rows(rows, targets, nullptr, 0, nullptr, &loss, true), mxkit_test::contains("give row_loss"));
  tensor mask3 = be.alloc(3, 1, dtype::i32, mem_tag::activation);
  CHECK_THROWS_WITH(be.write_tokens(mask3, {0, 2, 1}, 2), mxkit_test::contains("token 1 is 2, outside the vocabulary [0, 2)"));  // a mask's upload
}


struct head_run {
  double loss = 0.0, eval_loss = 0.0;
  std::vector<std::vector<double>> grads;  // parameters() order
  std::vector<double> head_input;          // the head's wgrad copy of its input, (C, M) stored (unchunked runs)
};

// One training forward and backward of a 2-layer model, and an evaluation forward.
head_run run_model(const recipe& r, std::size_t chunk, const std::vector<std::int32_t>& mask) {
  host_backend be;
  model_config c = tiny_model();
  c.vocab = 37;  // odd
  c.n_layers = 2;
  c.loss_chunk = chunk;
  model m(be, c, r, 9);
  const batch_shape b{2, 13};  // M = 26
  const std::vector<std::int32_t> tokens = random_ids(b.tokens(), c.vocab, 21), targets = random_ids(b.tokens(), c.vocab, 22);
  head_run out;
  out.eval_loss = m.forward(tokens, targets, b, false, mask);
  m.zero_grad();
  out.loss = m.forward(tokens, targets, b, true, mask);
  CHECK(m.loss_chunks().chunked(b.tokens()) == (chunk > 0 && chunk < b.tokens()));
  if (!m.loss_chunks().chunked(b.tokens())) {
    const qtensor& x = m.head().saved_wgrad_input();
    if (x.kind() == precision::bf16)
      for (const bfloat16 v : host_backend::bf16(x)) out.head_input.push_back(v.to_float());
    else
      for (const float v : std::get<std::vector<float>>(host_backend::get(x).data)) out.head_input.push_back(v);
  }
  m.backward();
  for (parameter* p : m.parameters()) {
    materialize_grad(be, *p);
    out.grads.push_back(be.read(p->grad));
  }
  return out;
}


TEST_CASE("model: the head and its loss in chunks give the unchunked loss and gradients", "[nn][loss]") {
  const std::size_t M = 26, C = 32, V = 37;
  const std::vector<std::int32_t> mask = random_mask(M, 31);
  for (const recipe& r : {recipes::bf16(), with_bf16(recipes::bf16()), recipes::native(), with_bf16(recipes::fp8_delayed())})
    for (const bool masked : {false, true}) {
      INFO(r.name << ", " << name_of(r.activations) << " activations" << (masked ? ", with a loss mask" : ""));
      const std::vector<std::int32_t> m = masked ? mask : std::vector<std::int32_t>{};
      const head_run whole = run_model(r, 0, m);
      REQUIRE(whole.head_input.size() == C * M);
      double N = 0.0;
      for (std::size_t i = 0; i < M; ++i) N += m.empty() || m[i] ? 1.0 : 0.0;
      // |dlogits| <= (1 + 2^-7) / N (|softmax - onehot| <= 1, then a bf16 rounding at most), so
      // S_vc <= (1 + 2^-7) / N sum_r |y_rc|; the bound of nn/head_loss.hpp: (2 (M - 1) + 2) u S.
      std::vector<double> column_sum(C, 0.0);
      for (std::size_t c = 0; c < C; ++c)
        for (std::size_t row = 0; row < M; ++row) column_sum[c] += std::fabs(whole.head_input[c * M + row]);
      for (const std::size_t chunk : {std::size_t{4}, std::size_t{7}, std::size_t{25}, std::size_t{26}, std::size_t{100}}) {
        INFO("chunks of " << chunk);
        const head_run chunked = run_model(r, chunk, m);
        CHECK(chunked.loss == whole.loss);
        CHECK(chunked.eval_loss == whole.eval_loss);
        REQUIRE(chunked.grads.size() == whole.grads.size());
        const std::size_t head = whole.grads.size() - 1;  // the head's weight comes last (model::parameters)
        for (std::size_t i = 0; i < head; ++i) {
          INFO("parameter " << i);
          CHECK(same_bits(chunked.grads[i], whole.grads[i]));
        }
        const std::vector<double>& got = chunked.grads[head];
        const std::vector<double>& want = whole.grads[head];
        REQUIRE(got.size() == V * C);
        std::size_t outside = 0;
        double worst = 0.0;
        for (std::size_t v = 0; v < V; ++v)
          for (std::size_t c = 0; c < C; ++c) {
            const double bound = (2.0 * static_cast<double>(M - 1) + 2.0) * 0x1p-24 * (1.0 + 0x1p-7) / N * column_sum[c];
            const double err = std::fabs(got[v * C + c] - want[v * C + c]);
            worst = std::max(worst, err / bound);
            outside += !(err <= bound);
          }
        INFO("worst error / bound " << worst);
        CHECK(outside == 0);
        if (chunk >= M) CHECK(same_bits(got, want));  // one chunk: the unchunked path itself
      }
    }
}

// nn/head_loss.hpp's contract: in chunks, the head's gradients are made by the training forward
// (the logits once a step), an evaluation forward makes none, and backward hands over the dy the
// forward made; a second backward is refused.
TEST_CASE("model: in chunks, a training forward makes the head's weight gradient and backward only hands over dy", "[nn][loss]") {
  host_backend be;
  model_config c = tiny_model();
  c.vocab = 37;
  c.n_layers = 1;
  c.loss_chunk = 5;
  model m(be, c, recipes::bf16(), 3);
  const batch_shape b{1, 12};
  const std::vector<std::int32_t> tokens = random_ids(b.tokens(), c.vocab, 5), targets = random_ids(b.tokens(), c.vocab, 6);
  REQUIRE(m.loss_chunks().chunked(b.tokens()));
  parameter& head = m.head().weight();
  m.zero_grad();
  m.forward(tokens, targets, b, false);
  materialize_grad(be, head);
  for (double g : be.read(head.grad)) REQUIRE(g == 0.0);  // an evaluation makes no gradient
  m.forward(tokens, targets, b, true);
  materialize_grad(be, head);
  const std::vector<double> after_forward = be.read(head.grad);
  CHECK(std::any_of(after_forward.begin(), after_forward.end(), [](double g) { return g != 0.0; }));
  m.backward();
  CHECK(same_bits(be.read(head.grad), after_forward));  // backward did not touch it
  CHECK_THROWS_WITH(m.backward(), mxkit_test::contains("backward without a training forward"));
}

TEST_CASE("model: the automatic loss chunk keeps chunk x V x 4 bytes within 1 GiB, in whole 128-row tiles", "[nn][loss]") {
  CHECK(loss_chunk_rows(auto_loss_chunk, 128256) == 2048);  // Llama 3: 2048 x 128256 x 4 = 1,050,673,152 bytes
  CHECK(2048ull * 128256 * 4 <= (1ull << 30));
  CHECK(2176ull * 128256 * 4 > (1ull << 30));  // the next whole tile would not fit
  CHECK(loss_chunk_rows(auto_loss_chunk, 32000) == 8320);  // Llama 2: the 4096-token batches of one sequence stay whole
  CHECK(loss_chunk_rows(auto_loss_chunk, 256) >= (std::size_t{1} << 20));  // bytes: every batch whole
  CHECK(loss_chunk_rows(0, 128256) == 0);
  CHECK(loss_chunk_rows(5, 128256) == 5);
  const head_loss h(loss_chunk_rows(auto_loss_chunk, 128256), dtype::bf16);
  CHECK(h.chunked(8192));
  CHECK_FALSE(h.chunked(2048));
  CHECK_FALSE(head_loss(0, dtype::bf16).chunked(8192));
}

}  // namespace head_loss_test
