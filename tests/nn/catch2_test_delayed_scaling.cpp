// FP8 delayed scaling: scale updates against values computed by hand, step by step.
#include <cmath>
#include <limits>

#include <mxkit/nn/delayed_scaling.hpp>

#include "../catch.hpp"

using namespace mxkit;
using namespace mxkit::nn;

TEST_CASE("delayed scaling: max algorithm over a window of 3 steps", "[nn][scaling]") {
  scaling_state s({3, amax_algorithm::max, 0}, fp8_type::e4m3);
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
  CHECK(s.history()[0] == 0.0f);  // the next step's slot is empty
  CHECK(s.history()[1] == 0.25f);
  CHECK(s.history()[2] == 0.5f);
}

TEST_CASE("delayed scaling: most recent algorithm and margin", "[nn][scaling]") {
  scaling_state s({4, amax_algorithm::most_recent, 2}, fp8_type::e5m2);
  const float amax[] = {3.0f, 100.0f, 0.75f, 6.0f, 6.0f};
  for (int step = 0; step < 5; ++step) {
    s.record(amax[step]);
    s.update();
    INFO("step " << step);
    CHECK(s.scale() == 57344.0f / 4.0f / amax[step]);  // E5M2 max, 2^margin = 4, this step's amax
  }
}

TEST_CASE("delayed scaling: a zero or non-finite amax keeps the previous scale", "[nn][scaling]") {
  scaling_state s({1, amax_algorithm::most_recent, 0}, fp8_type::e4m3);
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
  s.update();
  CHECK(s.scale() == kept);
  s.record(14.0f);
  s.update();
  CHECK(s.scale() == 32.0f);
}

TEST_CASE("delayed scaling: a NaN in the max window keeps the scale until it slides out", "[nn][scaling]") {
  scaling_state s({2, amax_algorithm::max, 0}, fp8_type::e4m3);
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

TEST_CASE("delayed scaling: tiny amax saturates the scale at the largest float", "[nn][scaling]") {
  scaling_state s({1, amax_algorithm::max, 0}, fp8_type::e4m3);
  s.record(1e-44f);  // subnormal: 448 / amax overflows
  s.update();
  CHECK(s.scale() == std::numeric_limits<float>::max());
  s.reset();
  CHECK(s.scale() == 1.0f);
  CHECK(s.history()[0] == 0.0f);
}

TEST_CASE("delayed scaling: bad configurations are refused", "[nn][scaling]") {
  CHECK_THROWS_WITH((scaling_state({0, amax_algorithm::max, 0}, fp8_type::e4m3)), mxkit_test::contains("history_length"));
  CHECK_THROWS_WITH((scaling_state({4, amax_algorithm::max, -1}, fp8_type::e4m3)), mxkit_test::contains("margin"));
}
