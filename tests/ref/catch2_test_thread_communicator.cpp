// SPDX-License-Identifier: Apache-2.0
// The host communicator: every collective on 1 to 4 rank threads against a sequential oracle
// (sums in rank order, bit for bit), in-place forms, and the failure contract: a mismatched call,
// a rank that throws and a rank that never arrives end every rank with comm_error, in bounded
// time.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <mxkit/ref/nn/thread_communicator.hpp>

#include "../catch.hpp"

using namespace mxkit;
using mxkit::nn::comm_buffer;
using mxkit::nn::comm_error;
using mxkit::nn::comm_type;
using mxkit::nn::reduce_op;

namespace {

// Values whose float sum depends on the order: large and small magnitudes mixed.
float value(int rank, std::size_t i) {
  const float big = (i % 3 == 0) ? 1e8f : 1.0f;
  return (rank % 2 ? -big : big) * (1.0f + 0.125f * static_cast<float>(rank)) + 0.1f * static_cast<float>(i) + 1e-3f * static_cast<float>(rank);
}

// One all_reduce that must fail: counts the comm_error, checks that it names `expected`, rethrows.
void sum_expecting_failure(nn::communicator& c, std::atomic<int>& errors, const std::string& expected) {
  float v = 1.0f;
  try {
    c.all_reduce({&v, 1, comm_type::f32}, {&v, 1, comm_type::f32}, reduce_op::sum);
  } catch (const comm_error& e) {
    ++errors;
    CHECK(std::string(e.what()).find(expected) != std::string::npos);
    throw;
  }
}

}  // namespace

TEST_CASE("thread communicator: all_reduce sums in rank order, max with NaN winning", "[ref][communicator]") {
  for (int n : {1, 2, 3, 4}) {
    const std::size_t count = 37;
    std::vector<std::vector<float>> got(static_cast<std::size_t>(n));
    ref::run_ranks(n, [&](nn::communicator& c) {
      std::vector<float> v(count);
      for (std::size_t i = 0; i < count; ++i) v[i] = value(c.rank(), i);
      c.all_reduce({v.data(), count, comm_type::f32}, {v.data(), count, comm_type::f32}, reduce_op::sum);
      got[static_cast<std::size_t>(c.rank())] = v;
    });
    for (std::size_t i = 0; i < count; ++i) {
      float want = value(0, i);
      for (int r = 1; r < n; ++r) want += value(r, i);
      for (int r = 0; r < n; ++r) CHECK(got[static_cast<std::size_t>(r)][i] == want);
    }
  }
  // max: f64, NaN on one rank wins; i32 and bf16 too.
  std::vector<double> maxes(3);
  std::vector<std::int32_t> sums(3);
  std::vector<float> bf_sums(3);
  ref::run_ranks(3, [&](nn::communicator& c) {
    double v[2] = {static_cast<double>(c.rank()) * 2.5, c.rank() == 1 ? std::nan("") : 1.0};
    c.all_reduce({v, 2, comm_type::f64}, {v, 2, comm_type::f64}, reduce_op::max);
    maxes[static_cast<std::size_t>(c.rank())] = v[0];
    CHECK(std::isnan(v[1]));
    std::int32_t k = c.rank() + 10, s = 0;
    c.all_reduce({&k, 1, comm_type::i32}, {&s, 1, comm_type::i32}, reduce_op::sum);
    sums[static_cast<std::size_t>(c.rank())] = s;
    bfloat16 b = bfloat16::from_float(1.0f + static_cast<float>(c.rank()), rounding::nearest_even, overflow::propagate);
    c.all_reduce({&b, 1, comm_type::bf16}, {&b, 1, comm_type::bf16}, reduce_op::sum);
    bf_sums[static_cast<std::size_t>(c.rank())] = b.to_float();
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(maxes[static_cast<std::size_t>(r)] == 5.0);
    CHECK(sums[static_cast<std::size_t>(r)] == 33);
    CHECK(bf_sums[static_cast<std::size_t>(r)] == 6.0f);
  }
}

TEST_CASE("thread communicator: reduce_scatter, all_gather (in place too) and broadcast", "[ref][communicator]") {
  const int n = 3;
  const std::size_t chunk = 5;
  ref::run_ranks(n, [&](nn::communicator& c) {
    std::vector<float> in(chunk * n), out(chunk);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(c.rank(), i);
    c.reduce_scatter({in.data(), in.size(), comm_type::f32}, {out.data(), chunk, comm_type::f32}, reduce_op::sum);
    for (std::size_t i = 0; i < chunk; ++i) {
      const std::size_t g = static_cast<std::size_t>(c.rank()) * chunk + i;
      float want = value(0, g);
      for (int r = 1; r < n; ++r) want += value(r, g);
      CHECK(out[i] == want);
    }
    // all_gather out of place, then in place (the input is the rank's own chunk of the output).
    std::vector<std::uint8_t> mine(chunk, static_cast<std::uint8_t>(c.rank() + 1)), all(chunk * n, 0);
    c.all_gather({mine.data(), chunk, comm_type::u8}, {all.data(), all.size(), comm_type::u8});
    for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i] == i / chunk + 1);
    std::vector<float> gathered(chunk * n, -1.0f);
    for (std::size_t i = 0; i < chunk; ++i) gathered[static_cast<std::size_t>(c.rank()) * chunk + i] = static_cast<float>(c.rank() * 100 + i);
    c.all_gather({gathered.data() + static_cast<std::size_t>(c.rank()) * chunk, chunk, comm_type::f32},
                 {gathered.data(), gathered.size(), comm_type::f32});
    for (std::size_t i = 0; i < gathered.size(); ++i) CHECK(gathered[i] == static_cast<float>((i / chunk) * 100 + i % chunk));
    double b[3] = {static_cast<double>(c.rank()), 0.5 * c.rank(), -1.0 * c.rank()};
    c.broadcast({b, 3, comm_type::f64}, 2);
    CHECK(b[0] == 2.0);
    CHECK(b[1] == 1.0);
    CHECK(b[2] == -2.0);
  });
}

TEST_CASE("thread communicator: bad arguments are refused before any rank waits", "[ref][communicator]") {
  ref::thread_world w(1);
  ref::thread_communicator c(w, 0);
  std::uint8_t bytes[4] = {};
  float f[4] = {};
  CHECK_THROWS_AS(c.all_reduce({bytes, 4, comm_type::u8}, {bytes, 4, comm_type::u8}, reduce_op::sum), std::invalid_argument);
  CHECK_THROWS_AS(c.all_reduce({f, 4, comm_type::f32}, {f, 3, comm_type::f32}, reduce_op::sum), std::invalid_argument);
  CHECK_THROWS_AS(c.broadcast({f, 4, comm_type::f32}, 1), std::invalid_argument);
  CHECK_THROWS_AS(ref::thread_communicator(w, 1), std::invalid_argument);
  CHECK_THROWS_AS(ref::thread_world(0), std::invalid_argument);
}

TEST_CASE("thread communicator: a mismatched call, a throwing rank and a missing rank end every rank with comm_error",
          "[ref][communicator]") {
  using clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::milliseconds(400);
  SECTION("mismatched count: every rank's error names both calls") {
    std::atomic<int> errors{0};
    try {
      ref::run_ranks(
          3,
          [&](nn::communicator& c) {
            std::vector<float> v(c.rank() == 2 ? 8 : 4);
            try {
              c.all_reduce({v.data(), v.size(), comm_type::f32}, {v.data(), v.size(), comm_type::f32}, reduce_op::sum);
            } catch (const comm_error& e) {
              ++errors;
              const std::string what = e.what();
              CHECK(what.find("mismatched") != std::string::npos);
              CHECK(what.find("of 8 f32") != std::string::npos);
              CHECK(what.find("of 4 f32") != std::string::npos);
              throw;
            }
          },
          timeout);
      FAIL("no error");
    } catch (const comm_error&) {
    }
    CHECK(errors == 3);
  }
  SECTION("a rank that throws: the others fail at once (well before the timeout); its own error is rethrown") {
    const auto t0 = clock::now();
    std::atomic<int> comm_errors{0};
    try {
      ref::run_ranks(
          4,
          [&](nn::communicator& c) {
            if (c.rank() == 1) throw std::runtime_error("rank 1 ran out of data");
            sum_expecting_failure(c, comm_errors, "rank 1 ran out of data");
          },
          std::chrono::seconds(20));
      FAIL("no error");
    } catch (const comm_error&) {
      FAIL("the root cause was not rethrown");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "rank 1 ran out of data");
    }
    CHECK(comm_errors == 3);
    CHECK(clock::now() - t0 < std::chrono::seconds(5));
  }
  SECTION("a rank that never arrives: the others time out within the bound, naming it") {
    const auto t0 = clock::now();
    std::atomic<int> comm_errors{0};
    CHECK_THROWS_AS(ref::run_ranks(
                        3,
                        [&](nn::communicator& c) {
                          if (c.rank() == 2) return;  // skips the collective
                          sum_expecting_failure(c, comm_errors, "rank(s) 2 never arrived");
                        },
                        timeout),
                    comm_error);
    CHECK(comm_errors == 2);
    const auto took = clock::now() - t0;
    CHECK(took >= timeout);
    CHECK(took < timeout * 2 + std::chrono::seconds(2));
  }
  SECTION("after an abort every later collective fails at once") {
    ref::thread_world w(2, timeout);
    ref::thread_communicator a(w, 0);
    a.abort("test");
    float v = 0;
    CHECK_THROWS_WITH(a.all_reduce({&v, 1, comm_type::f32}, {&v, 1, comm_type::f32}, reduce_op::max),
                      Catch::Matchers::Contains("rank 0 aborted: test"));
  }
}
