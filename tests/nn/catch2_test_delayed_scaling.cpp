// SPDX-License-Identifier: Apache-2.0
// FP8 delayed scaling: scale updates against values computed by hand, step by step, with the
// state in a backend scaling table (amaxes written by real casts, one fused update per step);
// the fused update of a many-row table against an independent per-row computation; the host's
// scale versions.
#include <cmath>
#include <limits>
#include <vector>

#include <mxkit/nn/delayed_scaling.hpp>
#include <mxkit/host/host_backend.hpp>

#include "../catch.hpp"
#include "nn_test_helpers.hpp"

using namespace nn_test;

namespace {

// One FP8 tensor's state in a one-row table; record() is a training cast of a 1x1 tensor.
struct one_tensor {
  host_backend be;
  fp8_type type;
  std::shared_ptr<scaling_table> t;
  one_tensor(const delayed_scaling_config& c, fp8_type ty) : type(ty), t(be.make_scaling_table(c, {ty})) {}
  void record(float amax, std::uint64_t source = scaling_table::volatile_source) {
    tensor x = be.alloc(1, 1, dtype::f32, mem_tag::activation);
    be.write(x, {static_cast<double>(amax)});
    quant_request r;
    r.spec = recipes::mma_operand(type);
    r.fp8 = {t.get(), 0, true, source};
    be.quantize(x, r);
  }
  void update() { be.update_scales(*t); }
  float scale() const { return static_cast<float>(be.read(t->scale())[0]); }
  std::vector<double> history() const { return be.read(t->history()); }
};

}  // namespace

TEST_CASE("delayed scaling: max algorithm over a window of 3 steps", "[nn][scaling]") {
  one_tensor s({3, amax_algorithm::max, 0}, fp8_type::e4m3);
  CHECK(s.scale() == 1.0f);  // the first step runs unscaled
  const float amax[] = {2.0f, 8.0f, 4.0f, 1.0f, 0.5f, 0.25f};
  // window after each step: {2} {8,2} {4,8,2} {1,4,8} {0.5,1,4} {0.25,0.5,1}
  const float window_max[] = {2.0f, 8.0f, 8.0f, 8.0f, 4.0f, 1.0f};
  for (int step = 0; step < 6; ++step) {
    s.record(amax[step] / 2);  // two quantizations in one step: the larger amax counts
    s.record(amax[step]);
    s.update();
    INFO("step " << step);
    CHECK(s.scale() == 448.0f / window_max[step]);
  }
  const std::vector<double> h = s.history();
  CHECK(h[0] == 0.0);  // the next step's slot is empty
  CHECK(h[1] == 0.25);
  CHECK(h[2] == 0.5);
}

TEST_CASE("delayed scaling: most recent algorithm and margin", "[nn][scaling]") {
  one_tensor s({4, amax_algorithm::most_recent, 2}, fp8_type::e5m2);
  const float amax[] = {3.0f, 100.0f, 0.75f, 6.0f, 6.0f};
  for (int step = 0; step < 5; ++step) {
    s.record(amax[step]);
    s.update();
    INFO("step " << step);
    CHECK(s.scale() == 57344.0f / 4.0f / amax[step]);  // E5M2 max, 2^margin = 4, this step's amax
  }
}

TEST_CASE("delayed scaling: a zero or non-finite amax keeps the previous scale", "[nn][scaling]") {
  one_tensor s({1, amax_algorithm::most_recent, 0}, fp8_type::e4m3);
  s.record(7.0f);
  s.update();
  const float kept = 448.0f / 7.0f;
  REQUIRE(s.scale() == kept);
  s.update();  // nothing recorded: amax 0
  CHECK(s.scale() == kept);
  s.record(std::numeric_limits<float>::infinity());
  s.update();
  CHECK(s.scale() == kept);
  s.record(1.0f);
  s.record(std::numeric_limits<float>::quiet_NaN());  // NaN wins within the step
  s.record(2.0f);
  CHECK(std::isnan(s.history()[0]));
  s.update();
  CHECK(s.scale() == kept);
  s.record(14.0f);
  s.update();
  CHECK(s.scale() == 32.0f);
}

TEST_CASE("delayed scaling: a NaN in the max window keeps the scale until it slides out", "[nn][scaling]") {
  one_tensor s({2, amax_algorithm::max, 0}, fp8_type::e4m3);
  s.record(std::numeric_limits<float>::quiet_NaN());
  s.update();
  CHECK(s.scale() == 1.0f);
  s.record(4.0f);
  s.update();  // window {4, NaN}
  CHECK(s.scale() == 1.0f);
  s.record(2.0f);
  s.update();  // window {2, 4}
  CHECK(s.scale() == 112.0f);
}

TEST_CASE("delayed scaling: tiny amax saturates the scale at the largest float; a new table starts fresh", "[nn][scaling]") {
  one_tensor s({1, amax_algorithm::max, 0}, fp8_type::e4m3);
  s.record(1e-44f);  // subnormal: 448 / amax overflows
  s.update();
  CHECK(s.scale() == std::numeric_limits<float>::max());
  one_tensor fresh({3, amax_algorithm::max, 0}, fp8_type::e5m2);
  CHECK(fresh.scale() == 1.0f);
  CHECK(fresh.history() == std::vector<double>(3, 0.0));
  CHECK(fresh.be.read(fresh.t->fp8_max())[0] == 57344.0);
}

TEST_CASE("delayed scaling: the fused update of a whole table equals a per-row computation", "[nn][scaling]") {
  // 12 rows x history 5, E4M3 and E5M2 alternating, histories with zeros, NaN and Inf.
  for (const amax_algorithm algo : {amax_algorithm::max, amax_algorithm::most_recent}) {
    INFO(name_of(algo));
    host_backend be;
    const std::size_t rows = 12, H = 5;
    const delayed_scaling_config c{H, algo, 1};
    std::vector<fp8_type> types;
    for (std::size_t r = 0; r < rows; ++r) types.push_back(r % 2 ? fp8_type::e5m2 : fp8_type::e4m3);
    const std::shared_ptr<scaling_table> t = be.make_scaling_table(c, types);
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    std::vector<double> h(rows * H), s(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      s[r] = 0.5 + static_cast<double>(r);  // the previous scales
      for (std::size_t k = 0; k < H; ++k) h[r * H + k] = static_cast<double>((r * 7 + k * 3) % 11) * 0.75;
    }
    for (std::size_t k = 0; k < H; ++k) h[0 * H + k] = 0.0;  // row 0: nothing seen
    h[1 * H + 0] = 0.0;                                       // row 1: nothing this step
    h[2 * H + 3] = nan;                                       // row 2: NaN in the window
    h[3 * H + 0] = inf;                                       // row 3: Inf this step
    h[4 * H + 0] = nan;                                       // row 4: NaN this step
    h[5 * H + 0] = 1e-44;                                     // row 5: the quotient overflows
    for (std::size_t k = 1; k < H; ++k) h[5 * H + k] = 0.0;
    be.write(t->history(), h);
    be.write(t->scale(), s);
    be.update_scales(*t);
    const std::vector<double> got_h = be.read(t->history()), got_s = be.read(t->scale());
    for (std::size_t r = 0; r < rows; ++r) {
      INFO("row " << r);
      // Independent: amax over the window (NaN anywhere -> NaN), then the rule.
      double amax = 0.0;
      bool saw_nan = false;
      for (std::size_t k = 0; k < (algo == amax_algorithm::max ? H : 1); ++k) {
        const float a = static_cast<float>(h[r * H + k]);
        saw_nan = saw_nan || std::isnan(a);
        amax = std::max(amax, static_cast<double>(a));
      }
      const float fmax = types[r] == fp8_type::e4m3 ? 448.0f : 57344.0f;
      float want = static_cast<float>(s[r]);
      if (!saw_nan && amax > 0.0 && std::isfinite(amax)) {
        const float q = fmax / 2.0f / static_cast<float>(amax);
        want = std::isfinite(q) ? q : std::numeric_limits<float>::max();
      }
      CHECK(static_cast<float>(got_s[r]) == want);
      // The window rolled: column k+1 = column k, column 0 = 0.
      CHECK(got_h[r * H] == 0.0);
      for (std::size_t k = 1; k < H; ++k) {
        const double prev = h[r * H + k - 1];
        if (std::isnan(prev)) CHECK(std::isnan(got_h[r * H + k]));
        else CHECK(got_h[r * H + k] == static_cast<double>(static_cast<float>(prev)));
      }
    }
    CHECK(static_cast<float>(got_s[0]) == 0.5f);  // spelled out: zero keeps, NaN/Inf keep, overflow saturates
    CHECK(static_cast<float>(got_s[3]) == 3.5f);
    CHECK(static_cast<float>(got_s[4]) == 4.5f);
    CHECK(static_cast<float>(got_s[5]) == std::numeric_limits<float>::max());
  }
}

TEST_CASE("delayed scaling: the scale version moves only when the amaxes that decide the scale change", "[nn][scaling]") {
  SECTION("most recent") {
    one_tensor s({1, amax_algorithm::most_recent, 0}, fp8_type::e4m3);
    s.record(3.0f, 7);  // weight version 6
    s.update();
    CHECK(s.t->version(0) == 1);  // 1 -> 448/3
    s.record(3.0f, 7);            // the same weight cast again (its scale had moved)
    s.update();
    CHECK(s.t->version(0) == 1);  // same source, same amax: the scale cannot have moved
    s.update();                   // nothing recorded: kept
    CHECK(s.t->version(0) == 1);
    s.record(5.0f, 8);            // a new weight version
    s.update();
    CHECK(s.t->version(0) == 2);
    s.record(1.0f);               // activations: a new tensor every cast
    s.update();
    s.record(1.0f);
    s.update();
    CHECK(s.t->version(0) == 4);
  }
  SECTION("max over a window of 3") {
    one_tensor s({3, amax_algorithm::max, 0}, fp8_type::e4m3);
    s.record(3.0f, 2);
    s.update();  // window {2}
    CHECK(s.t->version(0) == 1);
    s.update();  // {-, 2}
    s.update();  // {-, -, 2}
    CHECK(s.t->version(0) == 1);
    s.update();  // the amax slid out: the window is empty, the scale is kept
    CHECK(s.t->version(0) == 1);
    CHECK(s.scale() == 448.0f / 3.0f);
    s.record(3.0f, 2);
    s.record(4.0f, 3);  // two sources in one step
    s.update();
    CHECK(s.t->version(0) == 2);
  }
}

TEST_CASE("delayed scaling: bad configurations are refused", "[nn][scaling]") {
  host_backend be;
  CHECK_THROWS_WITH(be.make_scaling_table({0, amax_algorithm::max, 0}, {fp8_type::e4m3}), mxkit_test::contains("history_length"));
  CHECK_THROWS_WITH(be.make_scaling_table({4, amax_algorithm::max, -1}, {fp8_type::e4m3}), mxkit_test::contains("margin"));
  const std::shared_ptr<scaling_table> t = be.make_scaling_table({4, amax_algorithm::max, 0}, {fp8_type::e4m3});
  tensor x = be.alloc(2, 2, dtype::f32, mem_tag::activation);
  quant_request r;
  r.spec = recipes::mma_operand(fp8_type::e5m2);
  CHECK_THROWS_WITH(be.quantize(x, r), mxkit_test::contains("needs a scaling table row"));
  r.fp8 = {t.get(), 1};
  CHECK_THROWS_WITH(be.quantize(x, r), mxkit_test::contains("scaling row 1 of a 1-row table"));
  r.fp8 = {t.get(), 0};
  CHECK_THROWS_WITH(be.quantize(x, r), mxkit_test::contains("holds e4m3, the request asks for e5m2"));
}
