// SPDX-License-Identifier: Apache-2.0
// Two runs of every rank compared bit for bit (per rank: the losses, the final weights, the FP8
// scales): the check that the host and device full-sharding tests share. Include after catch.hpp.
#pragma once

#include <cstddef>
#include <vector>

namespace nn_test {

template <class Outcome>
void check_same_runs(const std::vector<Outcome>& a, const std::vector<Outcome>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    INFO("rank " << k);
    CHECK(a[k].losses == b[k].losses);
    CHECK(a[k].weights == b[k].weights);
    CHECK(a[k].scale == b[k].scale);
  }
}

}  // namespace nn_test
