// SPDX-License-Identifier: Apache-2.0
// Short training runs: the loss goes down for every recipe, a seeded run repeats exactly, and
// the LoRA + healing run trains through the switch.
#include <algorithm>
#include <cmath>
#include <vector>

#include <mxkit/train/schedule.hpp>
#include <mxkit/train/training.hpp>

#include "../catch.hpp"
#include "../nn/nn_test_helpers.hpp"

using namespace nn_test;

namespace {

train_config training_run(std::size_t steps) {
  train_config c;
  c.steps = steps;
  c.shape = {2, 32};
  c.schedule = {1e-2, 1e-3, 3, steps};
  return c;
}

std::vector<double> run(const recipe& r, std::size_t steps) {
  host_backend be;
  model m(be, tiny_model(), r, 17);
  trainer t(m, text_tokens(), training_run(steps));
  t.run();
  return t.losses();
}

double mean(const std::vector<double>& v, std::size_t from, std::size_t n) {
  double s = 0;
  for (std::size_t i = from; i < from + n; ++i) s += v[i];
  return s / static_cast<double>(n);
}

}  // namespace

TEST_CASE("training: the loss goes down for every recipe", "[nn][training]") {
  for (const recipe& r : {recipes::bf16(), recipes::fp8_delayed({16, amax_algorithm::max, 0}), recipes::mxfp8(), recipes::mxfp4_amd(),
                          recipes::mxfp4_no_hadamard(), recipes::mxfp4_primus_turbo(), recipes::mxfp4_nvidia_style(),
                          recipes::nvfp4()}) {
    const std::vector<double> losses = run(r, 30);
    const double first = mean(losses, 0, 3), last = mean(losses, 27, 3);
    INFO(r.name << ": first " << first << ", last " << last);
    CHECK(std::isfinite(last));
    CHECK(first > 5.0);  // ln 256 = 5.55 at random init
    CHECK(last < first - 2.0);
  }
}

TEST_CASE("training: zero_grad writes nothing; the backward overwrites each gradient, the optimizer zeros the rest",
          "[nn][training]") {
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 17);
  const batch_shape b{2, 32};
  std::vector<std::int32_t> tokens, targets;
  for (std::size_t i = 0; i < b.tokens(); ++i) {
    tokens.push_back(static_cast<std::int32_t>((37 * i + 11) % 256));
    targets.push_back(static_cast<std::int32_t>((53 * i + 5) % 256));
  }
  const std::vector<parameter*> params = m.parameters();
  auto grads = [&] {
    std::vector<std::vector<double>> g;
    for (parameter* p : params) g.push_back(be.read(p->grad));
    return g;
  };
  auto poison = [&] {  // a gradient that is read or added to instead of overwritten shows as NaN
    for (parameter* p : params) be.fill(p->grad, std::nan(""));
  };
  // The gradients as written zeros and accumulating products give them.
  for (parameter* p : params) be.fill(p->grad, 0.0);
  m.forward(tokens, targets, b, true);
  m.backward();
  const std::vector<std::vector<double>> want = grads();

  poison();
  const std::uint64_t fills = be.counters().op_calls(backend_op::fill);
  m.zero_grad();
  CHECK(be.counters().op_calls(backend_op::fill) == fills);
  for (parameter* p : params) CHECK(p->grad_is_zero);
  m.forward(tokens, targets, b, true);
  m.backward();
  for (parameter* p : params) CHECK_FALSE(p->grad_is_zero);
  const std::vector<std::vector<double>> got = grads();
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i]->name);
    CHECK(got[i] == want[i]);  // bit for bit, and no NaN from the poison
  }

  // A second backward adds to the first (gradient accumulation over micro-batches): twice the
  // gradient, up to the float rounding of sums that add the same terms in another order (the
  // norm gains' column sums), bounded against the tensor's largest entry.
  m.forward(tokens, targets, b, true);
  m.backward();
  const std::vector<std::vector<double>> twice = grads();
  for (std::size_t i = 0; i < params.size(); ++i) {
    double largest = 0;
    for (double g : want[i]) largest = std::max(largest, std::abs(g));
    for (std::size_t j = 0; j < want[i].size(); ++j) {
      INFO(params[i]->name << "[" << j << "]");
      CHECK(std::abs(twice[i][j] - 2.0 * want[i][j]) <= 1e-5 * largest);
    }
  }

  // An optimizer step with no backward since zero_grad reads zeros: the step is taken (a NaN
  // would skip it), the norm is 0, and only the weight decay moves the weights.
  poison();
  m.zero_grad();
  adamw opt(be, params, {0.9, 0.95, 1e-8, 0.0, 1.0});
  const std::vector<double> before = be.read(params[0]->value);
  opt.step(1e-3);
  CHECK(opt.skipped_steps() == 0);
  CHECK(opt.last_grad_norm() == 0.0);
  CHECK(be.read(params[0]->value) == before);  // weight decay 0, zero gradient: no update
  for (parameter* p : params) {
    CHECK_FALSE(p->grad_is_zero);
    for (double g : be.read(p->grad)) CHECK(g == 0.0);
  }
}

TEST_CASE("training: bf16 activations train and halve the activation memory", "[nn][training]") {
  std::vector<double> losses[2];
  std::size_t peak[2] = {};
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    recipe r = recipes::mxfp8();
    if (bf16) r.activations = dtype::bf16;
    host_backend be;
    model m(be, tiny_model(), r, 17);
    CHECK(m.activation_type() == (bf16 ? dtype::bf16 : dtype::f32));
    trainer t(m, text_tokens(), training_run(30));
    t.run();
    losses[bf16] = t.losses();
    peak[bf16] = be.memory().peak(mem_tag::activation);
  }
  const double first = mean(losses[1], 0, 3), last = mean(losses[1], 27, 3);
  INFO("bf16 activations: first " << first << ", last " << last << "; f32 activations: last " << mean(losses[0], 27, 3));
  CHECK(last < first - 2.0);
  CHECK(std::fabs(last - mean(losses[0], 27, 3)) < 0.1);  // close to the f32-activation run
  INFO("activation peak: f32 " << peak[0] << " bytes, bf16 " << peak[1] << " bytes");
  CHECK(peak[1] < peak[0] * 55 / 100);  // every (M, *) activation halves; the (1, 1) f64 scalars and i32 tokens do not
  recipe bad = recipes::bf16();
  bad.activations = dtype::i32;
  CHECK_THROWS_WITH(check_config(bad), mxkit_test::contains("activations must be f32 or bf16"));
}

TEST_CASE("training: the nvfp4 recipe trains a model whose last layer stays bf16", "[nn][training][nvfp4]") {
  // recipes::nvfp4() above trains every layer in NVFP4; here the paper's share of bf16 last
  // layers (nvfp4_bf16_last_layers) on a 2-layer model: layer 0 NVFP4, layer 1 bf16.
  model_config c = tiny_model();
  c.n_layers = 2;
  const recipe r = recipes::nvfp4(c.n_layers);
  REQUIRE(r.bf16_last_layers == 1);
  REQUIRE(layer_recipe(r, 0, 2).fprop.a.block_scaled().is_nvfp4());
  REQUIRE(layer_recipe(r, 1, 2).fprop.a.is<bf16_spec>());
  host_backend be;
  model m(be, c, r, 17);
  trainer t(m, text_tokens(), training_run(30));
  t.run();
  const std::vector<double>& losses = t.losses();
  const double first = mean(losses, 0, 3), last = mean(losses, 27, 3);
  INFO("first " << first << ", last " << last);
  CHECK(std::isfinite(last));
  CHECK(last < first - 2.0);
  CHECK(be.live_copies(precision::mx) > 0);  // layer 0's cached NVFP4 weight copies
}

TEST_CASE("training: a seeded run gives the same losses twice", "[nn][training]") {
  for (const recipe& r : {recipes::bf16(), recipes::mxfp4_nvidia_style(), recipes::fp8_delayed(), recipes::nvfp4()}) {
    INFO(r.name);
    const std::vector<double> a = run(r, 6), b = run(r, 6);
    CHECK(a == b);
  }
}

TEST_CASE("training: LoRA fine-tune healing from MXFP4 to FP8", "[nn][training][healing]") {
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 17);
  {
    trainer pre(m, text_tokens(), training_run(20));  // a base worth fine-tuning
    pre.run();
  }
  const std::vector<double> base_head = be.read(m.head().weight().value);
  m.set_recipe(recipes::mxfp4_amd());
  m.freeze_all();
  m.add_lora({}, {8, 16.0}, 3);
  train_config c = training_run(16);
  c.heal_step = 10;
  trainer t(m, text_tokens(), c);
  t.run();
  REQUIRE(t.healing().has_value());
  CHECK(t.healing()->restored_linears == 4);
  CHECK(std::isfinite(t.losses().back()));
  CHECK(mean(t.losses(), 13, 3) < mean(t.losses(), 0, 3));
  CHECK(be.read(m.head().weight().value) == base_head);  // frozen
  CHECK(be.live_copies(precision::mx) == 0);
}

TEST_CASE("training: warmup + cosine schedule", "[nn][training]") {
  const warmup_cosine s{1e-3, 1e-4, 10, 110};
  CHECK(s(0) == Approx(1e-4));
  CHECK(s(9) == Approx(1e-3));
  CHECK(s(10) == Approx(1e-3));
  CHECK(s(60) == Approx(0.55e-3));  // halfway through the cosine
  CHECK(s(110) == Approx(1e-4));
  CHECK(s(500) == Approx(1e-4));
  CHECK_THROWS_WITH((warmup_cosine{1e-3, 1e-4, 10, 10}(0)), mxkit_test::contains("must exceed warmup"));
}

TEST_CASE("training: AdamW step, clipping and a non-finite gradient", "[nn][training]") {
  host_backend be;
  parameter p = make_parameter(be, "p", 1, 2, dtype::f32);
  be.write(p.value, {1.0, -2.0});
  be.write(p.grad, {3.0, -4.0});  // norm 5
  adamw opt(be, {&p}, {0.9, 0.99, 1e-8, 0.1, 1.0});
  opt.step(0.01);
  CHECK(opt.last_grad_norm() == Approx(5.0));
  CHECK(opt.steps() == 1);
  // Clipped gradient g' = g / 5; first step: m / (1 - b1) = g', v / (1 - b2) = g'^2, update = sign(g') + wd p.
  const std::vector<double> v = be.read(p.value);
  CHECK(v[0] == Approx(1.0 - 0.01 * (1.0 + 0.1 * 1.0)).epsilon(1e-6));
  CHECK(v[1] == Approx(-2.0 - 0.01 * (-1.0 + 0.1 * -2.0)).epsilon(1e-6));
  CHECK(p.version == 1);
  be.write(p.grad, {std::nan(""), 0.0});
  opt.step(0.01);
  CHECK(opt.skipped_steps() == 1);
  CHECK(opt.steps() == 1);           // the bias-correction counter did not move
  CHECK(be.read(p.value) == v);      // untouched
  // The skip is decided on the device, so the host bumped the version anyway: the next forward
  // re-quantizes unchanged values (same bytes), it never reads a stale copy.
  CHECK(p.version == 2);
}

TEST_CASE("training: optimizer and schedule settings and the init std are validated", "[nn][training]") {
  const double nan = std::nan(""), inf = HUGE_VAL;
  host_backend be;
  parameter p = make_parameter(be, "p", 1, 2, dtype::f32);
  be.write(p.value, {1.0, -2.0});
  auto config = [](auto set) {
    adamw_config c;
    set(c);
    return c;
  };
  SECTION("adamw_config") {
    // eps = 0 turned a zero gradient (m = v = 0) into 0 / 0: NaN weights.
    for (double eps : {0.0, -1e-8, nan, inf}) {
      INFO("eps " << eps);
      CHECK_THROWS_WITH(adamw(be, {&p}, config([&](adamw_config& c) { c.eps = eps; })), mxkit_test::contains("adamw: eps must be"));
    }
    for (double wd : {-0.1, nan, inf}) {
      INFO("weight_decay " << wd);
      CHECK_THROWS_WITH(adamw(be, {&p}, config([&](adamw_config& c) { c.weight_decay = wd; })),
                        mxkit_test::contains("adamw: weight_decay must be"));
    }
    for (double b : {-0.1, 1.0, nan}) {
      INFO("beta " << b);
      CHECK_THROWS_WITH(adamw(be, {&p}, config([&](adamw_config& c) { c.beta1 = b; })), mxkit_test::contains("beta"));
      CHECK_THROWS_WITH(adamw(be, {&p}, config([&](adamw_config& c) { c.beta2 = b; })), mxkit_test::contains("beta"));
    }
    for (double clip : {-1.0, nan}) {
      INFO("clip_norm " << clip);
      CHECK_THROWS_WITH(adamw(be, {&p}, config([&](adamw_config& c) { c.clip_norm = clip; })), mxkit_test::contains("clip_norm"));
    }
    CHECK_THROWS_WITH(adamw(be, {&p}, config([&](adamw_config& c) { c.eps = 0.0; })), mxkit_test::contains("got 0"));
    CHECK_NOTHROW(adamw(be, {&p}, config([](adamw_config& c) { c.weight_decay = 0.0; })));
  }
  SECTION("the learning rate of every step") {
    adamw opt(be, {&p}, {});
    be.write(p.grad, {3.0, -4.0});
    for (double lr : {nan, -1e-3, inf}) {
      INFO("lr " << lr);
      CHECK_THROWS_WITH(opt.step(lr), mxkit_test::contains("adamw: lr must be finite and >= 0, got"));
    }
    CHECK(opt.steps() == 0);  // nothing happened
    CHECK(be.read(p.value) == std::vector<double>{1.0, -2.0});
    CHECK(p.version == 0);
    CHECK_NOTHROW(opt.step(0.0));
  }
  SECTION("warmup_cosine") {
    auto schedule = [](double max_lr, double min_lr) { return warmup_cosine{max_lr, min_lr, 2, 10}; };
    for (double lr : {nan, -1e-3, inf}) {
      INFO("lr " << lr);
      CHECK_THROWS_WITH(schedule(lr, 1e-4), mxkit_test::contains("warmup_cosine: max_lr must be finite and >= 0, got"));
      CHECK_THROWS_WITH(schedule(1e-3, lr), mxkit_test::contains("warmup_cosine: min_lr must be finite and >= 0, got"));
    }
    CHECK_THROWS_WITH(schedule(1e-4, 1e-3), mxkit_test::contains("min_lr 0.001 must not exceed max_lr 0.0001"));
    warmup_cosine s = schedule(1e-3, 1e-4);
    s.max_lr = nan;  // a public field changed after construction: caught at the next call
    CHECK_THROWS_WITH(s(5), mxkit_test::contains("max_lr must be finite"));
    host_backend be2;
    model m(be2, tiny_model(), recipes::bf16(), 1);
    train_config c = training_run(4);
    c.schedule.min_lr = nan;
    CHECK_THROWS_WITH(trainer(m, text_tokens(), c), mxkit_test::contains("min_lr must be finite"));
    c = training_run(4);
    c.optimizer.eps = 0.0;
    CHECK_THROWS_WITH(trainer(m, text_tokens(), c), mxkit_test::contains("eps must be"));
    c = training_run(4);
    c.shape = {0, 32};
    CHECK_THROWS_WITH(trainer(m, text_tokens(), c), mxkit_test::contains("batch must be positive"));
  }
  SECTION("model_config::init_std") {
    for (double std_dev : {nan, -0.02, inf}) {
      INFO("init_std " << std_dev);
      model_config c = tiny_model();
      c.init_std = std_dev;
      CHECK_THROWS_WITH(model(be, c, recipes::bf16(), 1), mxkit_test::contains("init_std must be finite and >= 0, got"));
    }
    CHECK_THROWS_WITH(normal_values(4, 1, 1, nan), mxkit_test::contains("stddev must be finite and >= 0"));
  }
}

TEST_CASE("training: adamw_hyper is validated before an update", "[nn][training]") {
  const double nan = std::nan("");
  auto hyper = [](auto set) {
    adamw_hyper h;
    set(h);
    return h;
  };
  CHECK_NOTHROW(check_config(adamw_hyper{}));
  CHECK_THROWS_WITH(check_config(hyper([&](adamw_hyper& h) { h.lr = nan; })), mxkit_test::contains("lr must be finite"));
  CHECK_THROWS_WITH(check_config(hyper([&](adamw_hyper& h) { h.eps = 0.0; })), mxkit_test::contains("eps must be finite and > 0, got 0"));
  CHECK_THROWS_WITH(check_config(hyper([&](adamw_hyper& h) { h.weight_decay = nan; })), mxkit_test::contains("weight_decay must be"));
  CHECK_THROWS_WITH(check_config(hyper([&](adamw_hyper& h) { h.beta1 = 1.0; })), mxkit_test::contains("beta1"));
  CHECK_THROWS_WITH(check_config(hyper([&](adamw_hyper& h) { h.beta2 = nan; })), mxkit_test::contains("beta2"));
  CHECK_THROWS_WITH(check_config(hyper([&](adamw_hyper& h) { h.grad_scale = nan; })), mxkit_test::contains("grad_scale"));
  // Step 0: the bias corrections 1 - beta^0 are 0, and the update divides by them.
  CHECK_THROWS_WITH(check_config(hyper([&](adamw_hyper& h) { h.step = 0; })), mxkit_test::contains("step must be >= 1, got 0"));
}

namespace {
// Batches of a token stream with a vocabulary of `vocab`: a repeating pattern that uses the top
// token, so the embedding's and the head's last rows are trained (batch n starts at token 7 n).
class pattern_batches : public batch_source {
 public:
  pattern_batches(std::size_t vocab, batch_shape shape) : vocab_(vocab), shape_(shape) {}
  batch at(std::uint64_t n) const override {
    batch b{shape_, std::vector<std::int32_t>(shape_.tokens()), std::vector<std::int32_t>(shape_.tokens())};
    auto token = [&](std::uint64_t i) { return static_cast<std::int32_t>(i % 11 == 10 ? vocab_ - 1 : (i * 5) % 13); };
    for (std::size_t i = 0; i < shape_.tokens(); ++i) {
      b.inputs[i] = token(7 * n + i);
      b.targets[i] = token(7 * n + i + 1);
    }
    return b;
  }
  const batch_shape& shape() const noexcept override { return shape_; }

 private:
  std::size_t vocab_;
  batch_shape shape_;
};
}  // namespace

TEST_CASE("training: any vocabulary size, from a batch source", "[nn][training]") {
  for (const std::size_t vocab : {std::size_t{19}, std::size_t{300}, std::size_t{1001}}) {
    for (const recipe& r : {recipes::bf16(), recipes::mxfp4_amd(), recipes::fp8_delayed()}) {
      INFO("vocab " << vocab << ", " << r.name);
      host_backend be;
      model_config c = tiny_model();
      c.vocab = vocab;
      model m(be, c, r, 17);
      train_config tc = training_run(30);
      tc.shape = {2, 16};
      trainer t(m, std::make_shared<const pattern_batches>(vocab, tc.shape), tc);
      t.run();
      const std::vector<double>& losses = t.losses();
      CHECK(std::abs(losses.front() - std::log(static_cast<double>(vocab))) < 0.5);  // a random head: about ln V
      CHECK(mean(losses, 27, 3) < losses.front() - 1.0);
      // A token at the top of the vocabulary evaluates; one past it is refused, naming it.
      batch b = pattern_batches(vocab, tc.shape).at(0);
      CHECK(std::isfinite(evaluate(m, {b})));
      b.targets[3] = static_cast<std::int32_t>(vocab);
      CHECK_THROWS_WITH(evaluate(m, {b}), mxkit_test::contains("token 3 is " + std::to_string(vocab) + ", outside the vocabulary [0, " +
                                                               std::to_string(vocab) + ")"));
    }
  }
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 17);
  CHECK_THROWS_WITH(trainer(m, std::make_shared<const pattern_batches>(256, batch_shape{2, 8}), training_run(30)),
                    mxkit_test::contains("the batch source's batches are 2 x 8, the configuration's 2 x 32"));
}
