// SPDX-License-Identifier: Apache-2.0
// Data parallelism on host rank threads (ref::thread_communicator): N ranks against one rank
// accumulating N micro-batches (data_parallel.hpp's bound), determinism, ZeRO-1 against unsharded,
// the FP8 amax reduction, activation recomputation, every recipe under data parallelism, a rank
// that throws, full sharding's partial gathers, and gathering the weights as their quantized copies
// (the bits of unsharded data parallelism, the bytes gathered).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <mxkit/parallel/data_parallel.hpp>
#include <mxkit/train/training.hpp>
#include <mxkit/parallel/thread_communicator.hpp>

#include "../catch.hpp"
#include "counting_communicator.hpp"
#include "deferred_communicator.hpp"
#include "../nn/nn_test_helpers.hpp"
#include "same_runs.hpp"

using namespace nn_test;

namespace {

train_config run_config(std::size_t steps, double clip = 1.0) {
  train_config c;
  c.steps = steps;
  c.shape = {1, 32};
  c.schedule = {1e-2, 1e-3, steps > 2 ? std::size_t{2} : std::size_t{0}, steps};
  c.optimizer.clip_norm = clip;
  return c;
}

using grads_t = std::vector<std::vector<double>>;

struct outcome {
  std::vector<double> losses;
  grads_t grads, weights;  // after the last step: the reduced gradients, the weights
  std::vector<std::string> names;
  std::vector<double> scale;  // FP8: the scaling table's scales
  double grad_norm = 0.0;
};

outcome collect(backend& be, model& m, trainer& t) {
  outcome o;
  o.losses = t.losses();
  t.parallel().gather_all();  // full sharding: the whole weights for the comparison
  for (parameter* p : m.trainable_parameters()) {
    o.names.push_back(p->name);
    if (p->grad.defined()) o.grads.push_back(be.read(p->grad));  // (full sharding frees the whole gradients)
    o.weights.push_back(be.read(p->value));
  }
  t.parallel().release_all(false);
  if (m.scaling()) o.scale = be.read(m.scaling()->scale());
  o.grad_norm = t.optimizer().last_grad_norm();
  return o;
}

// One rank's training run; `comm` null for the single-rank run.
outcome train(const recipe& r, const train_config& base, communicator* comm, std::size_t micro, sharding s, bool recompute = false,
              dtype reduce = dtype::f32) {
  host_backend be;
  model m(be, tiny_model(), r, 17);
  m.set_recompute(recompute);
  train_config c = base;
  c.parallel = {comm, micro, s};
  c.parallel.reduce_dtype = reduce;
  trainer t(m, text_tokens(), c);
  t.run();
  return collect(be, m, t);
}

// Every rank's outcome of an N-rank run.
std::vector<outcome> train_ranks(int n, const recipe& r, const train_config& c, sharding s, std::size_t micro = 1,
                                 dtype reduce = dtype::f32) {
  std::vector<outcome> out(static_cast<std::size_t>(n));
  ref::run_ranks(n, [&](communicator& comm) { out[static_cast<std::size_t>(comm.rank())] = train(r, c, &comm, micro, s, false, reduce); });
  return out;
}

// Micro-batch j's gradients alone (batch j of the loader, Philox call j), from the initial weights.
grads_t micro_batch_grads(const recipe& r, const train_config& c, std::size_t j) {
  host_backend be;
  model m(be, tiny_model(), r, 17);
  batch_loader loader(text_tokens(), c.shape, c.data_seed);
  const batch b = loader.at(j);
  m.zero_grad();
  m.set_micro_batch(j);
  m.forward(b.inputs, b.targets, b.shape, true);
  m.backward();
  grads_t g;
  for (parameter* p : m.trainable_parameters()) {
    materialize_grad(be, *p);
    g.push_back(be.read(p->grad));
  }
  return g;
}

bool is_gemm_weight(const std::string& name) {
  return name.find("norm") == std::string::npos && name.find("embedding") == std::string::npos;
}

}  // namespace

TEST_CASE("data parallel: N ranks agree with one rank accumulating N micro-batches within the derived bound",
          "[nn][data_parallel]") {
  for (const recipe& r : {recipes::bf16(), recipes::fp8_delayed({16, amax_algorithm::max, 0}), recipes::mxfp4_nvidia_style()}) {
    for (int n : {2, 3}) {
      INFO(r.name << ", " << n << " ranks");
      const train_config c = run_config(1);
      const std::vector<outcome> ranks = train_ranks(n, r, c, sharding::none);
      const outcome one = train(r, c, nullptr, static_cast<std::size_t>(n), sharding::none);
      std::vector<grads_t> terms;
      for (int j = 0; j < n; ++j) terms.push_back(micro_batch_grads(r, c, static_cast<std::size_t>(j)));
      // The logged loss: the same f64 terms added in the same order.
      for (const outcome& o : ranks) CHECK(o.losses == one.losses);
      const double u = 0x1p-24;
      const std::size_t tokens = c.shape.tokens();
      for (std::size_t p = 0; p < one.grads.size(); ++p) {
        INFO(one.names[p]);
        // Additions per element: one per micro-batch for a GEMM's product; token by token for the
        // embedding rows and the norm gains (each token's term rounded and added in the gradient's
        // type). sum|t| is estimated from below by the micro-batches' sum|g_j| (a stricter check).
        const double m = static_cast<double>(n) * (is_gemm_weight(one.names[p]) ? 1 : tokens);
        std::size_t over = 0, differ = 0;
        for (std::size_t i = 0; i < one.grads[p].size(); ++i) {
          double sum_abs = 0;
          for (const grads_t& t : terms) sum_abs += std::abs(t[p][i]);
          const double bound = 2 * m * u * sum_abs;
          for (const outcome& o : ranks) {
            if (std::abs(o.grads[p][i] - one.grads[p][i]) > bound) ++over;
            if (o.grads[p][i] != one.grads[p][i]) ++differ;
          }
        }
        CHECK(over == 0);
        if (is_gemm_weight(one.names[p])) CHECK(differ == 0);  // the same order of fp32 sums: the same bits
      }
      // Every rank holds the same weights afterwards, and the same FP8 scales as the one rank.
      for (const outcome& o : ranks) {
        CHECK(o.weights == ranks[0].weights);
        CHECK(o.scale == one.scale);
      }
    }
  }
}

TEST_CASE("data parallel: a run repeats bit for bit on the same N; micro-batches on N ranks too", "[nn][data_parallel]") {
  const recipe r = recipes::mxfp8();
  const train_config c = run_config(4);
  const std::vector<outcome> a = train_ranks(3, r, c, sharding::none, 2), b = train_ranks(3, r, c, sharding::none, 2);
  CHECK(a[0].losses.size() == 4);
  CHECK(a[0].losses == b[0].losses);
  CHECK(a[1].weights == b[2].weights);
  CHECK(a[0].weights == b[0].weights);
  // 3 ranks x 2 micro-batches see the samples of 6 micro-batches on one rank: the first loss is the
  // same mean of the same six f64 losses, summed in another grouping (bounded by 2 x 6 u64 sum|l|).
  const outcome one = train(r, c, nullptr, 6, sharding::none);
  CHECK(std::abs(one.losses[0] - a[0].losses[0]) <= 12 * 0x1p-53 * one.losses[0]);
  for (std::size_t i = 1; i < 4; ++i) CHECK(std::abs(one.losses[i] - a[0].losses[i]) <= 1e-3 * one.losses[i]);
}

TEST_CASE("data parallel: ZeRO-1 and full sharding give the unsharded weights bit for bit without clipping, within the norm's bits with it",
          "[nn][data_parallel]") {
  for (const auto& [n, s] : {std::pair{2, sharding::optimizer}, std::pair{4, sharding::optimizer}, std::pair{2, sharding::full},
                             std::pair{3, sharding::full}}) {
    INFO(n << " ranks, sharding " << name_of(s));
    const recipe r = n == 3 ? recipes::fp8_delayed({16, amax_algorithm::max, 0}) : recipes::bf16();
    const train_config free = run_config(3, 0.0);
    const std::vector<outcome> plain = train_ranks(n, r, free, sharding::none), zero = train_ranks(n, r, free, s, 2);
    const std::vector<outcome> plain2 = train_ranks(n, r, free, sharding::none, 2);
    for (int k = 0; k < n; ++k) {
      CHECK(zero[static_cast<std::size_t>(k)].weights == plain2[0].weights);
      CHECK(zero[static_cast<std::size_t>(k)].losses == plain2[0].losses);
      CHECK(zero[static_cast<std::size_t>(k)].scale == plain2[0].scale);
    }
    CHECK(plain2[0].losses != plain[0].losses);  // (another global batch: the comparison above can fail)
    // Clipping active (clip 0.05): the clip factors differ in the last bits of an f64.
    const train_config clipped = run_config(3, 0.05);
    const std::vector<outcome> pc = train_ranks(n, r, clipped, sharding::none), zc = train_ranks(n, r, clipped, s);
    CHECK(std::abs(zc[0].grad_norm - pc[0].grad_norm) <= 1e-12 * pc[0].grad_norm);
    CHECK(pc[0].grad_norm > 0.05);  // clipping was active
    for (std::size_t p = 0; p < pc[0].weights.size(); ++p)
      for (std::size_t i = 0; i < pc[0].weights[p].size(); ++i)
        CHECK(std::abs(zc[1].weights[p][i] - pc[0].weights[p][i]) <= 1e-5 * (std::abs(pc[0].weights[p][i]) + 1e-3));
  }
}

// reduce_dtype bf16 (FSDP2's reduce_dtype): each rank's gradient rounded to bf16, summed in bf16
// in rank order (the host communicator's all_reduce), widened into the f32 gradients.
TEST_CASE("data parallel: a bf16 reduction sums each rank's gradients rounded to bf16, in bf16, in rank order", "[nn][data_parallel]") {
  const auto bf16 = [](double v) {
    return static_cast<double>(bfloat16::from_float(static_cast<float>(v), rounding::nearest_even, overflow::propagate).to_float());
  };
  const recipe r = recipes::bf16();
  for (const int n : {2, 4}) {
    INFO(n << " ranks");
    const train_config c = run_config(1);
    const std::vector<outcome> ranks = train_ranks(n, r, c, sharding::none, 1, dtype::bf16);
    const std::vector<outcome> f32 = train_ranks(n, r, c, sharding::none);
    std::vector<grads_t> terms;  // rank j's gradients: micro-batch j's (the same bits)
    for (int j = 0; j < n; ++j) terms.push_back(micro_batch_grads(r, c, static_cast<std::size_t>(j)));
    std::size_t wrong = 0, elements = 0, differ_f32 = 0, over = 0;
    for (std::size_t p = 0; p < ranks[0].grads.size(); ++p)
      for (std::size_t i = 0; i < ranks[0].grads[p].size(); ++i) {
        double acc = bf16(terms[0][p][i]), sum_abs = std::abs(terms[0][p][i]);
        for (int j = 1; j < n; ++j) {
          acc = bf16(acc + bf16(terms[static_cast<std::size_t>(j)][p][i]));
          sum_abs += std::abs(terms[static_cast<std::size_t>(j)][p][i]);
        }
        for (const outcome& o : ranks) wrong += o.grads[p][i] != acc;
        ++elements;
        const double got = ranks[0].grads[p][i], exact = f32[0].grads[p][i];
        differ_f32 += got != exact;
        // n roundings to bf16 of the terms and n - 1 of the partial sums, each within u = 2^-8 of
        // its value (to first order), and the f32 sum's own: 2 n u sum|t|.
        over += std::abs(got - exact) > 2 * n * 0x1p-8 * sum_abs;
      }
    CHECK(wrong == 0);
    CHECK(over == 0);
    CHECK(differ_f32 > elements / 4);  // (the f32 reduction's gradients: the check above can fail)
  }
}

TEST_CASE("data parallel: with a bf16 reduction a run trains, near the f32 run, and ZeRO-1 and full sharding keep its bits",
          "[nn][data_parallel]") {
  const recipe r = recipes::bf16();
  train_config c = run_config(16, 0.0);
  c.shape = {2, 32};
  const std::vector<outcome> f32 = train_ranks(2, r, c, sharding::none), bf = train_ranks(2, r, c, sharding::none, 1, dtype::bf16);
  const std::size_t last = c.steps - 1;
  INFO("f32: first " << f32[0].losses[0] << ", last " << f32[0].losses[last] << "; bf16: last " << bf[0].losses[last]);
  CHECK(bf[0].losses[0] == f32[0].losses[0]);  // the first step's loss comes before any reduction
  CHECK(bf[0].losses[last] < bf[0].losses[0] - 1.0);
  CHECK(bf[0].losses != f32[0].losses);
  for (std::size_t i = 0; i < c.steps; ++i) CHECK(std::abs(bf[0].losses[i] - f32[0].losses[i]) <= 0.02 * f32[0].losses[i]);
  CHECK(bf[1].weights == bf[0].weights);
  // ZeRO-1 and full sharding reduce-scatter the same bf16 values in the same order (by rank, here;
  // two ranks: any order), so without clipping their weights are unsharded data parallelism's bits.
  for (const int n : {2, 4}) {
    const train_config free = run_config(3, 0.0);
    const std::vector<outcome> plain = train_ranks(n, r, free, sharding::none, 1, dtype::bf16);
    for (const sharding s : {sharding::optimizer, sharding::full}) {
      INFO(n << " ranks, sharding " << name_of(s));
      const std::vector<outcome> sharded = train_ranks(n, r, free, s, 1, dtype::bf16);
      for (int k = 0; k < n; ++k) {
        CHECK(sharded[static_cast<std::size_t>(k)].weights == plain[0].weights);
        CHECK(sharded[static_cast<std::size_t>(k)].losses == plain[0].losses);
      }
    }
  }
}

TEST_CASE("full sharding: a rank holds its shard of the weights and at most two groups whole", "[nn][data_parallel]") {
  const int n = 4;
  std::vector<std::size_t> live(n), peak(n), grad_live(n), grad_peak(n);
  std::size_t whole = 0;
  model_config mc = tiny_model();
  mc.n_layers = 4;
  {
    host_backend be;
    model m(be, mc, recipes::mxfp8(), 17);
    whole = be.memory().live(mem_tag::parameter);
  }
  ref::run_ranks(n, [&](communicator& comm) {
    host_backend be;
    model m(be, mc, recipes::mxfp8(), 17);
    train_config c = run_config(2);
    c.parallel = {&comm, 1, sharding::full};
    trainer t(m, text_tokens(), c);
    be.memory().reset_peak();
    t.run();
    live[static_cast<std::size_t>(comm.rank())] = be.memory().live(mem_tag::parameter);
    peak[static_cast<std::size_t>(comm.rank())] = be.memory().peak(mem_tag::parameter);
    grad_live[static_cast<std::size_t>(comm.rank())] = be.memory().live(mem_tag::gradient);
    grad_peak[static_cast<std::size_t>(comm.rank())] = be.memory().peak(mem_tag::gradient);
  });
  // Groups: the embedding (256 x 32), four layers (9280 elements each), the final norm and head
  // (8224). A gathered layer: 4 ranks x its shard (9280 / 4 rounded up to 32) x 4 bytes.
  const std::size_t C = mc.layer.d_model, F = mc.layer.d_ff;
  const std::size_t layer = C * mc.layer.qkv_dim() + C * C + C * 2 * F + F * C + 2 * C;
  const std::size_t gathered_layer = n * round_up((layer + n - 1) / n, 32) * 4;
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": live " << live[static_cast<std::size_t>(r)] << ", peak " << peak[static_cast<std::size_t>(r)]
                 << ", unsharded " << whole);
    CHECK(live[static_cast<std::size_t>(r)] <= whole / n + 6 * 32 * 4);  // the shards (padding aside)
    CHECK(peak[static_cast<std::size_t>(r)] <= live[static_cast<std::size_t>(r)] + 2 * gathered_layer);  // + two groups in use
    CHECK(peak[static_cast<std::size_t>(r)] < whole * 2 / 3);
    // Gradients: the shards, and the whole gradients of at most two groups during backward.
    INFO("gradients: live " << grad_live[static_cast<std::size_t>(r)] << ", peak " << grad_peak[static_cast<std::size_t>(r)]);
    CHECK(grad_live[static_cast<std::size_t>(r)] <= whole / n + 6 * 32 * 4);
    CHECK(grad_peak[static_cast<std::size_t>(r)] <= grad_live[static_cast<std::size_t>(r)] + 2 * gathered_layer);
  }
}

TEST_CASE("data parallel: the amax MAX reduction gives every rank the global maximum", "[nn][data_parallel]") {
  const int n = 3;
  std::vector<std::vector<double>> seen(n);
  ref::run_ranks(n, [&](communicator& comm) {
    host_backend be;
    model m(be, tiny_model(), recipes::fp8_delayed({4, amax_algorithm::max, 0}), 17);
    data_parallel dp(m, {&comm, 1, sharding::none});
    tensor& h = m.scaling()->history();
    std::vector<double> v(h.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7 + static_cast<std::size_t>(comm.rank()) * 5) % 11);
    be.write(h, v);
    dp.reduce_amax();
    seen[static_cast<std::size_t>(comm.rank())] = be.read(h);
  });
  for (std::size_t i = 0; i < seen[0].size(); ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want = std::max(want, static_cast<double>((i * 7 + static_cast<std::size_t>(r) * 5) % 11));
    for (int r = 0; r < n; ++r) CHECK(seen[static_cast<std::size_t>(r)][i] == want);
  }
}

// Each recipe with each sharding for 24 steps: the loss falls, and both ranks see the same losses.
// Two test cases, each its own ctest test (the [ctest_*] tags), so the slowest part of this file
// runs on two cores.
namespace {
void check_recipes_train_on_2_ranks(std::initializer_list<recipe> list) {
  for (const recipe& r : list) {
    for (sharding s : {sharding::none, sharding::optimizer, sharding::full}) {
      INFO(r.name << ", sharding " << name_of(s));
      train_config c = run_config(24);
      c.shape = {2, 32};
      c.schedule = {1e-2, 1e-3, 3, 24};
      const std::vector<outcome> o = train_ranks(2, r, c, s);
      const double first = (o[0].losses[0] + o[0].losses[1]) / 2, last = (o[0].losses[22] + o[0].losses[23]) / 2;
      INFO("first " << first << ", last " << last);
      CHECK(std::isfinite(last));
      CHECK(last < first - 1.5);
      CHECK(o[1].losses == o[0].losses);
    }
  }
}
}  // namespace

TEST_CASE("data parallel: bf16 and FP8 train on 2 ranks", "[nn][data_parallel][ctest_recipes_bf16_fp8]") {
  check_recipes_train_on_2_ranks({recipes::bf16(), recipes::fp8_delayed({16, amax_algorithm::max, 0})});
}

TEST_CASE("data parallel: MXFP8 and MXFP4 train on 2 ranks", "[nn][data_parallel][ctest_recipes_mx]") {
  check_recipes_train_on_2_ranks({recipes::mxfp8(), recipes::mxfp4_amd()});
}

TEST_CASE("activation recomputation: the same gradients and weights, bit for bit", "[nn][data_parallel]") {
  for (const recipe& r : {recipes::bf16(), recipes::fp8_delayed({16, amax_algorithm::max, 0}), recipes::mxfp8(), recipes::mxfp4_nvidia_style()}) {
    INFO(r.name);
    const train_config c = run_config(3);
    const outcome plain = train(r, c, nullptr, 2, sharding::none, false), again = train(r, c, nullptr, 2, sharding::none, true);
    CHECK(plain.grads == again.grads);
    CHECK(plain.weights == again.weights);
    CHECK(plain.losses == again.losses);
  }
  // And it holds less: the peak of activations is lower with recomputation.
  std::size_t peak[2] = {};
  for (int on = 0; on < 2; ++on) {
    host_backend be;
    model_config mc = tiny_model();
    mc.n_layers = 3;
    model m(be, mc, recipes::bf16(), 17);
    m.set_recompute(on != 0);
    batch_loader loader(text_tokens(), {2, 32}, 1);
    const batch b = loader.at(0);
    be.memory().reset_peak();
    m.forward(b.inputs, b.targets, b.shape, true);
    m.backward();
    peak[on] = be.memory().peak(mem_tag::activation) + be.memory().peak(mem_tag::quantized_activation);
  }
  CHECK(peak[1] < peak[0]);
}

TEST_CASE("data parallel: a rank that throws ends every rank with comm_error within the bound", "[nn][data_parallel]") {
  const auto t0 = std::chrono::steady_clock::now();
  std::mutex mu;
  std::vector<std::string> comm_errors;
  try {
    ref::run_ranks(
        3,
        [&](communicator& comm) {
          host_backend be;
          model m(be, tiny_model(), recipes::bf16(), 17);
          train_config c = run_config(6);
          c.parallel = {&comm, 1, sharding::optimizer};
          trainer t(m, text_tokens(), c);
          try {
            for (std::size_t s = 0; s < 6; ++s) {
              if (comm.rank() == 2 && s == 3) throw std::runtime_error("rank 2: the data file went away");
              t.step();
            }
          } catch (const comm_error& e) {
            std::lock_guard<std::mutex> lock(mu);
            comm_errors.push_back(e.what());
            throw;
          }
        },
        std::chrono::seconds(30));
    FAIL("no error");
  } catch (const comm_error& e) {
    FAIL("the root cause was not rethrown: " << e.what());
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "rank 2: the data file went away");
  }
  REQUIRE(comm_errors.size() == 2);
  for (const std::string& e : comm_errors) CHECK(e.find("rank 2: the data file went away") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // not the 30 s timeout
}

TEST_CASE("data parallel: ranks configured differently fail with comm_error naming both calls", "[nn][data_parallel]") {
  CHECK_THROWS_WITH(ref::run_ranks(
                        2,
                        [&](communicator& comm) {
                          host_backend be;
                          model m(be, tiny_model(), recipes::bf16(), 17);
                          train_config c = run_config(2);
                          c.parallel = {&comm, 1, comm.rank() == 0 ? sharding::none : sharding::optimizer};
                          trainer t(m, text_tokens(), c);
                          t.run();
                        },
                        std::chrono::seconds(30)),
                    Catch::Matchers::Contains("mismatched collectives") && Catch::Matchers::Contains("all_reduce (sum)") &&
                        Catch::Matchers::Contains("reduce_scatter (sum)"));
}

TEST_CASE("data parallel: bad configurations are refused", "[nn][data_parallel]") {
  host_backend be;
  model m(be, tiny_model(), recipes::bf16(), 17);
  CHECK_THROWS_AS(data_parallel(m, {nullptr, 0, sharding::none}), std::invalid_argument);
  CHECK_THROWS_AS(data_parallel(m, {nullptr, 1, sharding::optimizer}), std::invalid_argument);
  parallel_config f64_reduction{nullptr, 1, sharding::none};
  f64_reduction.reduce_dtype = dtype::f64;  // f32 or bf16 only
  CHECK_THROWS_AS(data_parallel(m, f64_reduction), std::invalid_argument);
  CHECK_THROWS_AS(view_of(m.head().scaling() ? tensor{} : be.alloc(1, 4, dtype::f32, mem_tag::activation), 2, 1, 3),
                  std::invalid_argument);
}

TEST_CASE("parameter init: any element range of a normal fill is the whole fill's bits, for any threads", "[nn][data_parallel]") {
  const std::vector<double> whole = normal_values(1001, 9, 4, 0.5);
  for (const auto& [first, count] : {std::pair<std::size_t, std::size_t>{0, 1001}, {1, 1}, {1, 2}, {7, 500}, {998, 3}, {1000, 1}}) {
    INFO("elements " << first << " + " << count);
    std::vector<double> part(count);
    normal_values_into(part.data(), first, count, 9, 4, 0.5);
    CHECK(part == std::vector<double>(whole.begin() + static_cast<std::ptrdiff_t>(first),
                                      whole.begin() + static_cast<std::ptrdiff_t>(first + count)));
  }
  CHECK(whole != normal_values(1001, 9, 5, 0.5));  // another stream: other values (the checks above can fail)
  host_backend be;
  parameter p;
  p.name = "w";
  p.value = be.alloc(1, 1001, dtype::f32, mem_tag::parameter);
  for (unsigned threads : {1u, 3u, 8u}) {
    INFO(threads << " threads");
    initialize(be, p, parameter_init::normal(9, 4, 0.5), threads);
    std::vector<double> rounded;
    for (double v : whole) rounded.push_back(static_cast<double>(static_cast<float>(v)));
    CHECK(be.read(p.value) == rounded);
    tensor tail = be.alloc(1, 10, dtype::f32, mem_tag::activation);
    write_initial_values(be, p, tail, 991, threads);
    CHECK(be.read(tail) == std::vector<double>(rounded.end() - 10, rounded.end()));
  }
}

// Every parameter's values as the rank sees them after data_parallel's construction (full
// sharding: gathered), and the parameter bytes it held at most before that.
struct built {
  std::vector<std::vector<double>> values;
  std::size_t parameter_peak = 0, gradient_peak = 0;
};

built build_and_read(const model_config& mc, const recipe& r, bool deferred, communicator* comm, sharding s) {
  host_backend be;
  model_build_hooks h;
  h.defer_memory = deferred;
  model m(be, mc, r, 17, h);
  if (deferred)
    for (parameter* p : m.parameters()) CHECK(p->deferred());
  data_parallel dp(m, {comm, 1, s});
  built out{{}, be.memory().peak(mem_tag::parameter), be.memory().peak(mem_tag::gradient)};
  dp.gather_all();
  for (parameter* p : m.parameters()) out.values.push_back(be.read(p->value));
  dp.release_all(false);
  return out;
}

TEST_CASE("deferred construction: each rank makes only what it keeps, the eager construction's bits", "[nn][data_parallel]") {
  model_config mc = tiny_model();
  mc.n_layers = 3;
  const recipe r = recipes::mxfp8();
  std::size_t whole = 0;
  {
    host_backend be;
    model m(be, mc, r, 17);
    whole = be.memory().live(mem_tag::parameter);
  }
  const built eager = build_and_read(mc, r, false, nullptr, sharding::none);
  CHECK(build_and_read(mc, r, true, nullptr, sharding::none).values == eager.values);  // one rank: allocate whole
  const int n = 3;  // shards not a multiple of any parameter: pieces of several parameters per shard
  for (sharding s : {sharding::none, sharding::optimizer, sharding::full}) {
    INFO("sharding " << name_of(s));
    std::vector<built> got(n);
    ref::run_ranks(n, [&](communicator& comm) { got[static_cast<std::size_t>(comm.rank())] = build_and_read(mc, r, true, &comm, s); });
    for (int k = 0; k < n; ++k) {
      INFO("rank " << k << ": parameter peak " << got[static_cast<std::size_t>(k)].parameter_peak << " of " << whole);
      CHECK(got[static_cast<std::size_t>(k)].values == eager.values);
      if (s == sharding::full) {  // the rank's shards only, never a whole group, no whole gradients
        // (A group laid out in 32-row slabs, for the copies' gather: the bf16 head's here, is
        // padded by at most a quarter, data_parallel.hpp.)
        const std::size_t shards = whole * 5 / 4 / n + 6 * 32 * 4;
        CHECK(got[static_cast<std::size_t>(k)].parameter_peak <= shards);
        CHECK(got[static_cast<std::size_t>(k)].gradient_peak <= shards);
      } else {  // the whole weights, once
        CHECK(got[static_cast<std::size_t>(k)].parameter_peak <= whole + 6 * 32 * 4 * n);
      }
    }
  }
  host_backend be;
  model_build_hooks h;
  h.defer_memory = true;
  h.after_layer = [](std::size_t, transformer_layer&) {};
  CHECK_THROWS_AS(model(be, mc, r, 17, h), std::invalid_argument);
}

TEST_CASE("deferred construction: full sharding trains the eager model's losses and weights bit for bit", "[nn][data_parallel]") {
  const recipe r = recipes::mxfp4();
  const train_config c = run_config(2);
  const std::vector<outcome> eager = train_ranks(2, r, c, sharding::full);
  std::vector<outcome> deferred(2);
  ref::run_ranks(2, [&](communicator& comm) {
    host_backend be;
    model_build_hooks h;
    h.defer_memory = true;
    model m(be, tiny_model(), r, 17, h);
    train_config cc = c;
    cc.parallel = {&comm, 1, sharding::full};
    trainer t(m, text_tokens(), cc);
    t.run();
    deferred[static_cast<std::size_t>(comm.rank())] = collect(be, m, t);
  });
  for (std::size_t k = 0; k < 2; ++k) {
    CHECK(deferred[k].losses == eager[k].losses);
    CHECK(deferred[k].weights == eager[k].weights);
  }
}

TEST_CASE("full sharding: backward gathers only the norm gains where forward's weight copies serve dgrad", "[nn][data_parallel]") {
  model_config mc = tiny_model();
  mc.n_layers = 2;
  const int n = 3;
  const std::size_t C = mc.layer.d_model, F = mc.layer.d_ff;
  const std::size_t layer = C * mc.layer.qkv_dim() + C * C + C * 2 * F + F * C + 2 * C;
  const std::size_t head_group = C + C * mc.vocab, embedding_group = C * mc.vocab;
  const auto whole = [&](std::size_t elements) { return n * round_up((elements + n - 1) / n, 32) * 4; };  // gathered bytes
  const std::size_t forward = whole(embedding_group) + mc.n_layers * whole(layer) + whole(head_group);
  for (const bool lean : {false, true}) {
    for (const bool recompute : {false, true}) {
      INFO((lean ? "lean memory" : "cached weight copies") << (recompute ? ", recompute" : ""));
      std::vector<std::size_t> gathered(n), broadcast(n);
      std::vector<outcome> got(n);
      ref::run_ranks(n, [&](communicator& inner) {
        counting_communicator comm(inner);
        host_backend be;
        model m(be, mc, recipes::mxfp8(), 17);
        m.set_recompute(recompute);
        if (lean)
          for (auto& l : m.layers()) l.set_memory(linear_memory::lean());
        train_config c = run_config(2, 0.0);
        c.parallel = {&comm, 1, sharding::full};
        c.parallel.gather_quantized = false;  // the fp32 gather (the copies' gather: the next test)
        c.parallel.reshard_after_forward = false;  // forward's copies kept for dgrad (resharding: its own test)
        trainer t(m, text_tokens(), c);
        t.run();
        gathered[static_cast<std::size_t>(comm.rank())] = comm.gathered;
        broadcast[static_cast<std::size_t>(comm.rank())] = comm.broadcast_bytes;
        got[static_cast<std::size_t>(comm.rank())] = collect(be, m, t);
      });
      // Per step: forward gathers every group; backward the layers' and the head group's norm
      // gains (the head's bf16 copies serve too), or under lean memory the layers whole.
      const std::size_t norms = (2 * mc.n_layers + 1) * C * 4;
      const std::size_t backward = lean ? mc.n_layers * whole(layer) : 0;
      const std::size_t backward_broadcast = lean ? C * 4 : norms;
      for (int k = 0; k < n; ++k) {
        INFO("rank " << k);
        // 2 steps, each with the optimizer's all_gather of the ranks' f64 shard norms
        CHECK(gathered[static_cast<std::size_t>(k)] == 2 * (forward + backward + n * 8));
        CHECK(broadcast[static_cast<std::size_t>(k)] == 2 * backward_broadcast);
        CHECK(got[static_cast<std::size_t>(k)].weights == got[0].weights);
      }
      // The same bits as unsharded data parallelism.
      std::vector<outcome> plain(n);
      ref::run_ranks(n, [&](communicator& comm) {
        host_backend be;
        model m(be, mc, recipes::mxfp8(), 17);
        train_config c = run_config(2, 0.0);
        c.parallel = {&comm, 1, sharding::none};
        trainer t(m, text_tokens(), c);
        t.run();
        plain[static_cast<std::size_t>(comm.rank())] = collect(be, m, t);
      });
      CHECK(got[0].losses == plain[0].losses);
      CHECK(got[0].weights == plain[0].weights);
    }
  }
}

// NCCL's ring reduce-scatter adds a rank's chunk in an order that starts at the next rank, so with
// three or more ranks a gradient sum depends on which rank owns the element: two runs with
// different shard layouts differ in the last bits. The copies' gather lays linear weights out in
// 32-row slabs and the fp32 gather (gather_quantized off) does not; their FP8 runs therefore
// differed on 3 GPUs (MX gradients, sums of few-bit products under a shared block scale, added
// exactly and did not; bf16 gradients round as FP8's do). This is that device test's model and run
// on the host in NCCL's order (ref::sum_order::ring): gathering FP8 and bf16 weights as copies or
// in fp32 at the same layout (gather_quantized_fp8 and gather_quantized_bf16 on and off) gives the
// same bits. The bf16 head of every recipe here travels as its bf16 copy too.
TEST_CASE("full sharding: FP8 and bf16 weights gathered as copies give the fp32 gather's bits at the same layout, in NCCL's ring order",
          "[nn][data_parallel][ctest_gathered_copies]") {
  recipe edges = recipes::mxfp4();  // mxkit/train_program/options.hpp's mxfp4-bf16-edges
  edges.name = "mxfp4, bf16 first and last layer";
  edges.bf16_first_layers = edges.bf16_last_layers = 1;
  for (const recipe& r : {recipes::fp8_delayed(), recipes::bf16(), edges}) {
    model_config mc = tiny_model();
    mc.n_layers = r.bf16_first_layers ? 3 : 2;  // (an MXFP4 layer between the bf16 ones)
    mc.layer = {128, 2, 1, 128};  // tests/gpu/catch2_test_nccl_sharded_training.cu's model
    const int n = 3;
    INFO(r.name);
    std::size_t u8_gathered[2] = {};
    const auto run = [&](bool copies) {
      std::vector<outcome> got(n);
      ref::run_ranks(
          n,
          [&](communicator& inner) {
            counting_communicator comm(inner);
            host_backend be;
            model m(be, mc, r, 17);
            train_config c = run_config(3, 0.0);
            c.schedule = {1e-2, 1e-3, 1, 3};
            c.parallel = {&comm, 1, sharding::full};
            c.parallel.gather_quantized_fp8 = c.parallel.gather_quantized_bf16 = copies;
            trainer t(m, text_tokens(), c);
            t.run();
            got[static_cast<std::size_t>(comm.rank())] = collect(be, m, t);
            if (comm.rank() == 0) u8_gathered[copies] = comm.gathered_bytes_u8;
          },
          std::chrono::seconds(60), ref::sum_order::ring);
      return got;
    };
    check_same_runs(run(true), run(false));
    // Off gathers the FP8 and bf16 weights in fp32 (the edges' MXFP4 layer still as copies).
    CHECK(u8_gathered[1] > u8_gathered[0]);
    if (!r.bf16_first_layers) CHECK(u8_gathered[0] == 0);
  }
}

TEST_CASE("full sharding: gathering the weights' quantized copies gives unsharded data parallelism's bits with fewer bytes",
          "[nn][data_parallel][ctest_quantized_gather]") {
  model_config mc = tiny_model();
  mc.n_layers = 2;
  mc.layer = {64, 2, 1, 64};  // wide enough that the 32-row slab layout pads a layer by under a quarter on 2 and 3 ranks
  const std::size_t C = mc.layer.d_model, F = mc.layer.d_ff;
  const std::size_t head = mc.vocab * C;  // the LM head: bf16 in every recipe here, 2 wire bytes an element
  recipes::mxfp4_config signs;
  signs.random_signs = true;
  recipe first_bf16 = recipes::mxfp4();
  first_bf16.name = "mxfp4, first layer bf16";
  first_bf16.bf16_first_layers = 1;
  recipe nvfp4_rotated = recipes::nvfp4();  // W's two copies rotated along different axes: an amax each
  nvfp4_rotated.name = "nvfp4, random-sign Hadamard on fprop and dgrad";
  nvfp4_rotated.fprop.hadamard = nvfp4_rotated.fprop.random_signs = true;
  nvfp4_rotated.dgrad.hadamard = nvfp4_rotated.dgrad.random_signs = true;
  struct bytes_per_element {
    recipe r;
    double copies;  // wire bytes per layer weight element: both MX copies, or FP8's or bf16's rowwise one
  };
  for (const auto& [r, per_element] : {bytes_per_element{recipes::mxfp4(), 34.0 / 32}, bytes_per_element{recipes::mxfp4_no_hadamard(), 34.0 / 32},
                                       bytes_per_element{recipes::mxfp4(signs, "mxfp4 (random signs)"), 34.0 / 32},
                                       bytes_per_element{recipes::nvfp4(), 18.0 / 16},  // both copies, each slab with the weight's amax
                                       bytes_per_element{nvfp4_rotated, 18.0 / 16},
                                       bytes_per_element{recipes::mxfp8(), 66.0 / 32}, bytes_per_element{recipes::fp8_delayed(), 1.0},
                                       bytes_per_element{recipes::bf16(), 2.0},
                                       bytes_per_element{first_bf16, (2.0 + 34.0 / 32) / 2}}) {  // (two layers of one size)
    for (const int n : {2, 3}) {
      for (const std::size_t micro : {std::size_t{1}, std::size_t{2}}) {
        if (micro == 2 && n == 3) continue;
        INFO(r.name << " on " << n << " ranks, " << micro << " micro-batches");
        const train_config base = run_config(3, 0.0);  // no clipping: the shard layout moves the norm's last bits only
        struct run_result {
          std::vector<outcome> got;
          std::vector<std::size_t> f32_gathered, u8_gathered, broadcast;
        };
        const auto run = [&](sharding s, bool quantized, bool recompute = false, bool deferred = false, bool fp8_copies = true) {
          run_result out{std::vector<outcome>(n), std::vector<std::size_t>(n), std::vector<std::size_t>(n), std::vector<std::size_t>(n)};
          ref::run_ranks(n, [&](communicator& inner) {
            counting_communicator comm(inner);
            host_backend be;
            model_build_hooks hooks;
            hooks.defer_memory = deferred;  // each rank fills only its shard (06_train_gpu's construction)
            model m(be, mc, r, 17, hooks);
            m.set_recompute(recompute);
            train_config c = base;
            c.parallel = {&comm, micro, s};
            c.parallel.gather_quantized = quantized;
            c.parallel.gather_quantized_fp8 = quantized && fp8_copies;
            c.parallel.reshard_after_forward = false;  // the bytes below count one gather per weight and step
            trainer t(m, text_tokens(), c);
            t.run();
            const std::size_t k = static_cast<std::size_t>(comm.rank());
            out.u8_gathered[k] = comm.gathered_bytes_u8;
            out.f32_gathered[k] = comm.gathered - comm.gathered_bytes_u8;
            out.broadcast[k] = comm.broadcast_bytes;
            out.got[k] = collect(be, m, t);
          });
          return out;
        };
        const run_result copies = run(sharding::full, true), fp32 = run(sharding::full, false), plain = run(sharding::none, false);
        for (int k = 0; k < n; ++k) {
          INFO("rank " << k);
          const outcome& q = copies.got[static_cast<std::size_t>(k)];
          CHECK(q.losses == plain.got[0].losses);
          CHECK(q.weights == plain.got[0].weights);
          CHECK(q.weights == fp32.got[0].weights);
          CHECK(q.scale == plain.got[0].scale);
          CHECK(q.losses == fp32.got[0].losses);
        }
        if (n == 2 && micro == 1) {  // activation recomputation: the recomputed forward reads the installed copies
          const run_result again = run(sharding::full, true, true);
          CHECK(again.got[0].losses == plain.got[0].losses);
          CHECK(again.got[0].weights == plain.got[0].weights);
        }
        if (r.fprop.b.kind() == precision::fp8 && n == 2 && micro == 1) {  // FP8 weights travel as copies only when asked
          const run_result by_default = run(sharding::full, true, false, false, false);
          CHECK(by_default.u8_gathered[0] >= 2 * head * base.steps);  // the bf16 head's copies only
          CHECK(by_default.u8_gathered[0] <= 4 * head * base.steps);
          CHECK(by_default.got[0].weights == plain.got[0].weights);
        }
        if (n == 3 && micro == 1) {  // deferred construction into the 32-row slab layout
          const run_result deferred = run(sharding::full, true, false, true);
          CHECK(deferred.got[0].losses == plain.got[0].losses);
          CHECK(deferred.got[0].weights == plain.got[0].weights);
        }
        // Per step: the layers' and the head's weights travel as copies (u8), once per step
        // whatever the micro-batches; fp32 only the embedding and the norm gains (gathered with
        // the weights' groups' padding, or broadcast).
        const std::size_t steps = base.steps;
        const std::size_t weights = mc.n_layers * (C * mc.layer.qkv_dim() + C * C + C * 2 * F + F * C);
        const double copy_bytes = per_element * static_cast<double>(weights) + 2.0 * static_cast<double>(head);
        const std::size_t u8 = copies.u8_gathered[0] / steps;
        INFO("copies gathered per step: " << u8 << " bytes for " << weights << " layer and " << head
                                          << " head weight elements; fp32 gather: " << fp32.f32_gathered[0] / steps);
        CHECK(fp32.u8_gathered[0] == 0);
        CHECK(static_cast<double>(u8) >= copy_bytes);
        CHECK(static_cast<double>(u8) <= 2 * copy_bytes);
        CHECK(copies.f32_gathered[0] + 4 * (weights + head) * steps * micro <= fp32.f32_gathered[0]);
        CHECK(copies.u8_gathered[0] + copies.f32_gathered[0] + copies.broadcast[0] < fp32.f32_gathered[0] + fp32.broadcast[0]);
      }
    }
  }
}

TEST_CASE("full sharding: resharding after forward gives the same bits, gathers the weights again for backward and holds fewer copies",
          "[nn][data_parallel][ctest_reshard]") {
  model_config mc = tiny_model();
  mc.n_layers = 4;  // enough layers that every layer's copies at once outweigh two groups' and a wire
  mc.layer = {64, 2, 1, 64};  // the 32-row slab layout, as in the test above
  struct setup {
    recipe r;
    bool fp8_copies;  // gather_quantized_fp8
  };
  const recipe fp8 = recipes::fp8_delayed({16, amax_algorithm::max, 0});
  for (auto [r, fp8_copies] : {setup{recipes::mxfp4(), true}, setup{recipes::nvfp4(), true}, setup{recipes::mxfp8(), true}, setup{fp8, true},
                               setup{fp8, false}, setup{recipes::bf16(), true}}) {
    // The head native: its fp32 gather is the same in every run (the head group keeps its copies
    // from forward to backward, so its bytes would not double), and u8 counts the layers' copies.
    r.high = recipes::native_operand();
    const bool copies = r.fprop.b.kind() != precision::fp8 || fp8_copies;
    struct shape {
      int n;
      std::size_t micro;
      bool recompute;
    };
    for (const auto& [n, micro, recompute] : {shape{2, 1, false}, shape{2, 2, true}, shape{3, 2, false}}) {
      INFO(r.name << (fp8_copies ? "" : " (fp32 gather of FP8 weights)") << " on " << n << " ranks, " << micro << " micro-batches"
                  << (recompute ? ", recompute" : ""));
      const train_config base = run_config(2, 0.0);  // no clipping: the shard layout moves the norm's last bits only
      struct run_result {
        std::vector<outcome> got;
        std::vector<std::size_t> u8_gathered, other_bytes, copies_peak;
      };
      const auto run = [&](sharding s, bool reshard) {
        const std::size_t ranks = static_cast<std::size_t>(n);
        run_result out{std::vector<outcome>(ranks), std::vector<std::size_t>(ranks), std::vector<std::size_t>(ranks),
                       std::vector<std::size_t>(ranks)};
        ref::run_ranks(n, [&](communicator& inner) {
          counting_communicator comm(inner);
          host_backend be;
          model m(be, mc, r, 17);
          m.set_recompute(recompute);
          train_config c = base;
          c.parallel = {&comm, micro, s};
          c.parallel.gather_quantized_fp8 = fp8_copies;
          c.parallel.reshard_after_forward = reshard;
          trainer t(m, text_tokens(), c);
          be.memory().reset_peak();
          t.run();
          const std::size_t k = static_cast<std::size_t>(comm.rank());
          out.copies_peak[k] = be.memory().peak(mem_tag::quantized_weight);
          out.u8_gathered[k] = comm.gathered_bytes_u8;
          out.other_bytes[k] = comm.gathered - comm.gathered_bytes_u8 + comm.broadcast_bytes;
          out.got[k] = collect(be, m, t);
        });
        return out;
      };
      const run_result plain = run(sharding::none, false), kept = run(sharding::full, false), resharded = run(sharding::full, true);
      for (std::size_t k = 0; k < static_cast<std::size_t>(n); ++k) {
        INFO("rank " << k << ": quantized weight peak " << resharded.copies_peak[k] << " resharded, " << kept.copies_peak[k] << " kept");
        const outcome& q = resharded.got[k];
        CHECK(q.losses == plain.got[0].losses);
        CHECK(q.weights == plain.got[0].weights);
        CHECK(q.scale == plain.got[0].scale);
        CHECK(q.losses == kept.got[0].losses);
        CHECK(q.weights == kept.got[0].weights);
        CHECK(q.scale == kept.got[0].scale);
        // The copies of one or two groups (and a wire) at a time instead of every layer's.
        CHECK(resharded.copies_peak[k] < kept.copies_peak[k]);
      }
      INFO("u8 gathered: " << resharded.u8_gathered[0] << " resharded, " << kept.u8_gathered[0] << " kept; other: "
                           << resharded.other_bytes[0] << " resharded, " << kept.other_bytes[0] << " kept");
      if (copies) {  // kept: once per step; resharded: each micro-batch's forward and backward
        CHECK(kept.u8_gathered[0] > 0);
        CHECK(resharded.u8_gathered[0] == 2 * micro * kept.u8_gathered[0]);
      } else {  // the fp32 weights gathered again for backward
        CHECK(resharded.u8_gathered[0] == 0);
        CHECK(resharded.other_bytes[0] > kept.other_bytes[0]);
      }
    }
  }
}

TEST_CASE("full sharding: with collectives that complete only when joined, a group waits for its own gather only, the same bits",
          "[nn][data_parallel]") {
  // deferred_communicator runs a collective at the first join covering it, as a device
  // communicator's stream does at the latest: a group that used its weights before joining their
  // gather, or freed gradients a reduction still reads, would train other bits. partial_joins
  // counts the joins that left a later collective (the previous group's gradient reduction)
  // running: the overlap the marks exist for.
  model_config mc = tiny_model();
  mc.n_layers = 3;
  mc.layer = {64, 2, 1, 64};
  // NVFP4: its slabs wait for the reduction of the weight's amax (parallel/gathered_copies.hpp).
  for (const recipe& r : {recipes::mxfp4(), recipes::nvfp4(), recipes::fp8_delayed({16, amax_algorithm::max, 0}), recipes::bf16()}) {
    for (const auto& [n, micro, recompute, reshard] : {std::tuple{2, std::size_t{1}, false, true}, std::tuple{3, std::size_t{2}, true, true},
                                                       std::tuple{2, std::size_t{2}, false, false}}) {
      INFO(r.name << " on " << n << " ranks, " << micro << " micro-batches" << (recompute ? ", recompute" : "")
                  << (reshard ? ", resharded after forward" : ""));
      const train_config base = run_config(2, 0.0);
      const auto run = [&](bool deferred, bool overlap = true) {
        std::vector<outcome> got(static_cast<std::size_t>(n));
        std::vector<std::size_t> partial(static_cast<std::size_t>(n));
        ref::run_ranks(n, [&](communicator& inner) {
          deferred_communicator later(inner);
          communicator& comm = deferred ? static_cast<communicator&>(later) : inner;
          host_backend be;
          model m(be, mc, r, 17);
          m.set_recompute(recompute);
          train_config c = base;
          c.parallel = {&comm, micro, sharding::full};
          c.parallel.reshard_after_forward = reshard;
          c.parallel.overlap_reductions = overlap;
          trainer t(m, text_tokens(), c);
          t.run();
          got[static_cast<std::size_t>(comm.rank())] = collect(be, m, t);
          partial[static_cast<std::size_t>(comm.rank())] = later.partial_joins;
        });
        return std::pair{got, partial};
      };
      const auto [now, immediate_partial] = run(false);
      const auto [later, partial] = run(true);
      const auto [serial, serial_partial] = run(true, false);  // overlap_reductions off: every join waits for all
      for (std::size_t k = 0; k < static_cast<std::size_t>(n); ++k) {
        INFO("rank " << k);
        CHECK(later[k].losses == now[k].losses);
        CHECK(later[k].weights == now[k].weights);
        CHECK(later[k].scale == now[k].scale);
        CHECK(partial[k] > 0);
        CHECK(immediate_partial[k] == 0);
        CHECK(serial[k].weights == now[k].weights);
        CHECK(serial_partial[k] == 0);
      }
    }
  }
}
