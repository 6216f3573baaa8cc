// SPDX-License-Identifier: Apache-2.0
// The host communicator: every collective on 1 to 4 rank threads against a sequential oracle
// (sums in rank order, bit for bit), in-place forms, and the failure contract: a mismatched call,
// a rank that throws and a rank that never arrives end every rank with comm_error, in bounded
// time; a timeout too large for the clock saturates; a rank thread the system refuses to start
// (an address-space limit) ends run_ranks with an error after joining the ranks started. Catch's
// assertions are not thread-safe: the rank threads record, the test thread checks.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <optional>
#include <ratio>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/resource.h>
#include <unistd.h>
#endif

#include <mxkit/parallel/thread_communicator.hpp>

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

// The comm_errors of the rank threads (recorded there, checked on the test thread).
struct error_log {
  std::mutex mu;
  std::vector<std::string> messages;
  void add(const comm_error& e) {
    std::lock_guard<std::mutex> lock(mu);
    messages.push_back(e.what());
  }
  bool all_contain(const std::string& s) const {
    for (const std::string& m : messages)
      if (m.find(s) == std::string::npos) return false;
    return true;
  }
};

// One all_reduce that must fail: records the comm_error and rethrows it.
void sum_expecting_failure(nn::communicator& c, error_log& log) {
  float v = 1.0f;
  try {
    c.all_reduce({&v, 1, comm_type::f32}, {&v, 1, comm_type::f32}, reduce_op::sum);
  } catch (const comm_error& e) {
    log.add(e);
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
  std::vector<double> maxes(3), nans(3);
  std::vector<std::int32_t> sums(3);
  std::vector<float> bf_sums(3);
  ref::run_ranks(3, [&](nn::communicator& c) {
    double v[2] = {static_cast<double>(c.rank()) * 2.5, c.rank() == 1 ? std::nan("") : 1.0};
    c.all_reduce({v, 2, comm_type::f64}, {v, 2, comm_type::f64}, reduce_op::max);
    maxes[static_cast<std::size_t>(c.rank())] = v[0];
    nans[static_cast<std::size_t>(c.rank())] = v[1];
    std::int32_t k = c.rank() + 10, s = 0;
    c.all_reduce({&k, 1, comm_type::i32}, {&s, 1, comm_type::i32}, reduce_op::sum);
    sums[static_cast<std::size_t>(c.rank())] = s;
    bfloat16 b = bfloat16::from_float(1.0f + static_cast<float>(c.rank()), rounding::nearest_even, overflow::propagate);
    c.all_reduce({&b, 1, comm_type::bf16}, {&b, 1, comm_type::bf16}, reduce_op::sum);
    bf_sums[static_cast<std::size_t>(c.rank())] = b.to_float();
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(maxes[static_cast<std::size_t>(r)] == 5.0);
    CHECK(std::isnan(nans[static_cast<std::size_t>(r)]));
    CHECK(sums[static_cast<std::size_t>(r)] == 33);
    CHECK(bf_sums[static_cast<std::size_t>(r)] == 6.0f);
  }
}

TEST_CASE("thread communicator: reduce_scatter, all_gather (in place too) and broadcast", "[ref][communicator]") {
  const int n = 3;
  const std::size_t chunk = 5;
  struct seen {
    std::vector<float> scattered, gathered;
    std::vector<std::uint8_t> bytes;
    std::vector<double> broadcast;
  };
  std::vector<seen> out(n);
  ref::run_ranks(n, [&](nn::communicator& c) {
    seen& o = out[static_cast<std::size_t>(c.rank())];
    std::vector<float> in(chunk * n);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(c.rank(), i);
    o.scattered.resize(chunk);
    c.reduce_scatter({in.data(), in.size(), comm_type::f32}, {o.scattered.data(), chunk, comm_type::f32}, reduce_op::sum);
    // all_gather out of place, then in place (the input is the rank's own chunk of the output).
    std::vector<std::uint8_t> mine(chunk, static_cast<std::uint8_t>(c.rank() + 1));
    o.bytes.assign(chunk * n, 0);
    c.all_gather({mine.data(), chunk, comm_type::u8}, {o.bytes.data(), o.bytes.size(), comm_type::u8});
    o.gathered.assign(chunk * n, -1.0f);
    for (std::size_t i = 0; i < chunk; ++i)
      o.gathered[static_cast<std::size_t>(c.rank()) * chunk + i] = static_cast<float>(static_cast<std::size_t>(c.rank()) * 100 + i);
    c.all_gather({o.gathered.data() + static_cast<std::size_t>(c.rank()) * chunk, chunk, comm_type::f32},
                 {o.gathered.data(), o.gathered.size(), comm_type::f32});
    o.broadcast = {static_cast<double>(c.rank()), 0.5 * c.rank(), -1.0 * c.rank()};
    c.broadcast({o.broadcast.data(), 3, comm_type::f64}, 2);
  });
  for (int r = 0; r < n; ++r) {
    const seen& o = out[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < chunk; ++i) {
      const std::size_t g = static_cast<std::size_t>(r) * chunk + i;
      float want = value(0, g);
      for (int k = 1; k < n; ++k) want += value(k, g);
      CHECK(o.scattered[i] == want);
    }
    for (std::size_t i = 0; i < o.bytes.size(); ++i) CHECK(o.bytes[i] == i / chunk + 1);
    for (std::size_t i = 0; i < o.gathered.size(); ++i) CHECK(o.gathered[i] == static_cast<float>((i / chunk) * 100 + i % chunk));
    CHECK(o.broadcast == std::vector<double>{2.0, 1.0, -2.0});
  }
}

TEST_CASE("thread communicator: a reduce_scatter in ring order adds rank r's chunk from rank r + 1 on, as NCCL's ring does",
          "[ref][communicator]") {
  // 1 + e + e with e = 2^-24: in rank order (1 + e) + e = 1 (each sum a tie, to even); from rank 1
  // on, (e + e) + 1 = 1 + 2^-23. Every rank sends the same value for each of the 3 chunks.
  const float e = std::ldexp(1.0f, -24);
  const float value_of[3] = {1.0f, e, e};
  for (const ref::sum_order order : {ref::sum_order::by_rank, ref::sum_order::ring}) {
    std::vector<float> got(3);
    ref::run_ranks(
        3,
        [&](nn::communicator& c) {
          std::vector<float> in(3, value_of[c.rank()]);
          c.reduce_scatter({in.data(), 3, comm_type::f32}, {&got[static_cast<std::size_t>(c.rank())], 1, comm_type::f32},
                           reduce_op::sum);
        },
        std::chrono::seconds(60), order);
    INFO((order == ref::sum_order::ring ? "ring" : "by rank"));
    // ring: rank 0's chunk from rank 1 ((e + e) + 1), rank 1's from rank 2 ((e + 1) + e), rank 2's from 0.
    CHECK(got[0] == (order == ref::sum_order::ring ? 1.0f + 2 * e : 1.0f));
    CHECK(got[1] == 1.0f);
    CHECK(got[2] == 1.0f);
  }
}

// bf16 sums are carried in bf16 (NCCL's ncclBfloat16): each partial sum rounded to nearest even.
// The oracle: element i of the chunk, the ranks from `start` on around the ring, acc = bf16(acc + v).
namespace {
float bf16_carried_sum(const std::vector<std::vector<bfloat16>>& in, std::size_t i, std::size_t start) {
  const auto round = [](float v) { return bfloat16::from_float(v, rounding::nearest_even, overflow::propagate).to_float(); };
  const std::size_t n = in.size();
  float acc = in[start % n][i].to_float();
  for (std::size_t j = 1; j < n; ++j) acc = round(acc + in[(start + j) % n][i].to_float());
  return acc;
}
}  // namespace

TEST_CASE("thread communicator: bf16 sums are carried in bf16, in rank order (all_reduce) and in the order asked (reduce_scatter)",
          "[ref][communicator]") {
  for (const int n : {2, 4}) {
    for (const ref::sum_order order : {ref::sum_order::by_rank, ref::sum_order::ring}) {
      INFO(n << " ranks, order " << (order == ref::sum_order::ring ? "ring" : "by rank"));
      const std::size_t chunk = 257, count = chunk * static_cast<std::size_t>(n);
      // Magnitudes over 2^-12 .. 2^12: a partial sum's rounding often decides the next one's.
      std::vector<std::vector<bfloat16>> in(static_cast<std::size_t>(n), std::vector<bfloat16>(count));
      std::uint32_t state = 12345;
      for (auto& rank : in)
        for (bfloat16& v : rank) {
          state = state * 1664525u + 1013904223u;
          const float m = std::ldexp(1.0f + static_cast<float>(state >> 9) * 0x1p-23f, static_cast<int>(state % 25) - 12);
          v = bfloat16::from_float(state & 0x100u ? -m : m, rounding::nearest_even, overflow::propagate);
        }
      std::vector<std::vector<bfloat16>> reduced(static_cast<std::size_t>(n), std::vector<bfloat16>(count)),
          scattered(static_cast<std::size_t>(n), std::vector<bfloat16>(chunk));
      ref::run_ranks(
          n,
          [&](nn::communicator& c) {
            const std::size_t r = static_cast<std::size_t>(c.rank());
            c.all_reduce({in[r].data(), count, comm_type::bf16}, {reduced[r].data(), count, comm_type::bf16}, reduce_op::sum);
            c.reduce_scatter({in[r].data(), count, comm_type::bf16}, {scattered[r].data(), chunk, comm_type::bf16}, reduce_op::sum);
          },
          std::chrono::seconds(60), order);
      std::size_t wrong = 0, once_differs = 0;
      for (std::size_t r = 0; r < static_cast<std::size_t>(n); ++r)
        for (std::size_t i = 0; i < count; ++i) {
          wrong += reduced[r][i].to_float() != bf16_carried_sum(in, i, 0);  // all_reduce: rank order in both
          if (i < chunk) {
            const std::size_t start = order == ref::sum_order::ring ? (r + 1) % static_cast<std::size_t>(n) : 0;
            wrong += scattered[r][i].to_float() != bf16_carried_sum(in, r * chunk + i, start);
          }
        }
      CHECK(wrong == 0);
      // With more than two ranks the oracle is not the float sum rounded once: the test tells the
      // two apart (two ranks add once: the same bits).
      for (std::size_t i = 0; n > 2 && i < count; ++i) {
        float once = 0;
        for (const auto& rank : in) once += rank[i].to_float();
        once_differs += bfloat16::from_float(once, rounding::nearest_even, overflow::propagate).to_float() != bf16_carried_sum(in, i, 0);
      }
      if (n > 2) CHECK(once_differs > count / 50);
    }
  }
}

TEST_CASE("thread communicator: take_exposed_seconds is the time spent in collectives, waiting included, since the last take",
          "[ref][communicator]") {
  // After a first all_reduce that lines the ranks up, rank 1 arrives 100 ms late: rank 0's
  // all_reduce holds it at least 50 ms of that (the rest is room for the ranks leaving the first
  // one apart on a loaded machine), all of it exposed. Nothing happens between the second and
  // third takes, so the third reads nothing. (Timed from the threads' start instead, rank 0 could
  // reach its all_reduce after part of rank 1's wait and read 49.96 ms.)
  constexpr double late = 0.05;
  double first[2] = {}, second[2] = {}, third[2] = {};
  bool measured = true;
  ref::run_ranks(2, [&](nn::communicator& c) {
    const auto r = static_cast<std::size_t>(c.rank());
    const std::optional<double> before = c.take_exposed_seconds();  // nothing yet
    float v = 1.0f;
    c.all_reduce({&v, 1, comm_type::f32}, {&v, 1, comm_type::f32}, reduce_op::sum);
    (void)c.take_exposed_seconds();
    if (r == 1) std::this_thread::sleep_for(std::chrono::duration<double>(2 * late));
    c.all_reduce({&v, 1, comm_type::f32}, {&v, 1, comm_type::f32}, reduce_op::sum);
    const std::optional<double> a = c.take_exposed_seconds(), b = c.take_exposed_seconds();
    if (!before || !a || !b) {
      measured = false;
      return;
    }
    first[r] = *before;
    second[r] = *a;
    third[r] = *b;
  });
  REQUIRE(measured);
  CHECK(first[0] == 0.0);
  CHECK(first[1] == 0.0);
  CHECK(second[0] >= late);
  CHECK(second[1] >= 0.0);
  CHECK(second[1] < second[0]);
  CHECK(third[0] == 0.0);
  CHECK(third[1] == 0.0);
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
    error_log log;
    CHECK_THROWS_AS(ref::run_ranks(
                        3,
                        [&](nn::communicator& c) {
                          std::vector<float> v(c.rank() == 2 ? 8 : 4);
                          try {
                            c.all_reduce({v.data(), v.size(), comm_type::f32}, {v.data(), v.size(), comm_type::f32}, reduce_op::sum);
                          } catch (const comm_error& e) {
                            log.add(e);
                            throw;
                          }
                        },
                        timeout),
                    comm_error);
    CHECK(log.messages.size() == 3);
    CHECK(log.all_contain("mismatched"));
    CHECK(log.all_contain("of 8 f32"));
    CHECK(log.all_contain("of 4 f32"));
  }
  SECTION("a rank that throws: the others fail at once (well before the timeout); its own error is rethrown") {
    const auto t0 = clock::now();
    error_log log;
    try {
      ref::run_ranks(
          4,
          [&](nn::communicator& c) {
            if (c.rank() == 1) throw std::runtime_error("rank 1 ran out of data");
            sum_expecting_failure(c, log);
          },
          std::chrono::seconds(20));
      FAIL("no error");
    } catch (const comm_error&) {
      FAIL("the root cause was not rethrown");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "rank 1 ran out of data");
    }
    CHECK(log.messages.size() == 3);
    CHECK(log.all_contain("rank 1 ran out of data"));
    CHECK(clock::now() - t0 < std::chrono::seconds(5));
  }
  SECTION("a rank that never arrives: the others time out within the bound, naming it") {
    const auto t0 = clock::now();
    error_log log;
    CHECK_THROWS_AS(ref::run_ranks(
                        3,
                        [&](nn::communicator& c) {
                          if (c.rank() == 2) return;  // skips the collective
                          sum_expecting_failure(c, log);
                        },
                        timeout),
                    comm_error);
    CHECK(log.messages.size() == 2);
    CHECK(log.all_contain("rank(s) 2 never arrived"));
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

TEST_CASE("thread communicator: a timeout too large for the clock waits as long as it must (the deadline saturates)",
          "[ref][communicator]") {
  // milliseconds::max() and 1000 years are more nanoseconds than steady_clock holds: a deadline
  // that wrapped would be in the past and time the collective out at once, while rank 1 is 300 ms late.
  using years = std::chrono::duration<std::int64_t, std::ratio<31556952>>;
  for (const std::chrono::milliseconds timeout :
       {std::chrono::milliseconds::max(), std::chrono::duration_cast<std::chrono::milliseconds>(years(1000))}) {
    INFO("timeout " << timeout.count() << " ms");
    std::vector<float> got(2, 0.0f);
    CHECK_NOTHROW(ref::run_ranks(
        2,
        [&](nn::communicator& c) {
          if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
          float v = static_cast<float>(c.rank() + 1);
          c.all_reduce({&v, 1, comm_type::f32}, {&v, 1, comm_type::f32}, reduce_op::sum);
          got[static_cast<std::size_t>(c.rank())] = v;
        },
        timeout));
    CHECK(got == std::vector<float>{3.0f, 3.0f});
  }
  using clock = std::chrono::steady_clock;
  CHECK(ref::thread_world::deadline_after(std::chrono::milliseconds::max()) == clock::time_point::max());
  const auto soon = ref::thread_world::deadline_after(std::chrono::milliseconds(5));
  CHECK(soon > clock::now() - std::chrono::seconds(1));
  CHECK(soon < clock::now() + std::chrono::seconds(1));
}

// The sanitizers' runtimes reserve terabytes of address space: a limit on it stops them, not the threads.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MXKIT_TEST_ADDRESS_SPACE_LIMIT 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define MXKIT_TEST_ADDRESS_SPACE_LIMIT 0
#endif
#endif
#if !defined(MXKIT_TEST_ADDRESS_SPACE_LIMIT) && defined(__linux__)
#define MXKIT_TEST_ADDRESS_SPACE_LIMIT 1
#endif

#if MXKIT_TEST_ADDRESS_SPACE_LIMIT
TEST_CASE("thread communicator: run_ranks joins the ranks it started and throws when the system refuses a thread",
          "[ref][communicator]") {
  // The address space limited to what the process maps now plus 48 MiB: a few rank threads' stacks
  // (8 MiB each by default) fit, the 64th does not, and std::thread throws std::system_error. The
  // ranks started wait in a collective for the ranks that never start, with a 60 s timeout.
  std::size_t pages = 0;
  {
    std::ifstream statm("/proc/self/statm");
    statm >> pages;
  }
  REQUIRE(pages > 0);
  const rlim_t mapped = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
  struct rlimit saved {};
  REQUIRE(::getrlimit(RLIMIT_AS, &saved) == 0);
  struct restore {
    const struct rlimit& limit;
    ~restore() { ::setrlimit(RLIMIT_AS, &limit); }
  };
  std::optional<std::string> what;
  std::atomic<int> ran{0};
  const auto t0 = std::chrono::steady_clock::now();
  {
    struct rlimit small = saved;
    small.rlim_cur = mapped + (rlim_t{48} << 20);
    if (saved.rlim_max != RLIM_INFINITY && small.rlim_cur > saved.rlim_max) small.rlim_cur = saved.rlim_max;
    REQUIRE(::setrlimit(RLIMIT_AS, &small) == 0);
    const restore undo{saved};
    try {
      ref::run_ranks(64, [&](nn::communicator& c) {
        ++ran;
        float v = 1.0f;
        c.all_reduce({&v, 1, comm_type::f32}, {&v, 1, comm_type::f32}, reduce_op::sum);
      });
    } catch (const std::system_error& e) {
      what = e.what();
    }
  }
  REQUIRE(what);
  CHECK(what->find("run_ranks: cannot start the thread of rank ") != std::string::npos);
  CHECK(what->find(" of 64 (the ") != std::string::npos);
  CHECK(what->find("started were stopped") != std::string::npos);
  CHECK(ran.load() < 64);
  // The started ranks were released by the abort, not by their 60 s timeout.
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
}
#endif
