// SPDX-License-Identifier: Apache-2.0
// gpu::nccl_communicator through NCCL (RCCL under HIP) on every GPU of the machine (2 to 8), one
// thread per rank in one process (NCCL allows one thread per rank): every collective and element
// type against host arithmetic, both stream modes, the ordering after the backend's stream, and
// the failures: a rank's abort, a rank that never calls (timeout), a mismatched call, each
// ending every rank with comm_error in bounded time. Skipped (exit 77) without two GPUs or
// without the library (MXKIT_NCCL_LIBRARY, or MXKIT_NCCL_ROOT at configure time).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../catch.hpp"
#include "nccl_ranks.hpp"

#include <mxkit/format/float16.hpp>
#include <mxkit/gpu/memory.hpp>
#include <mxkit/gpu/parallel/nccl_communicator.hpp>
#include <mxkit/gpu/runtime.hpp>

namespace gpu = mxkit::gpu;
namespace nn = mxkit::nn;
using namespace std::chrono_literals;
using nccl_test::ranks;
using nccl_test::rank_context;
using nccl_test::run_ranks;
using nccl_test::require_no_errors;

namespace {

// Exact in every type: small integers (sums of at most 8 of them stay below bf16's 256).
float value_at(int rank, std::size_t i) { return static_cast<float>(static_cast<int>((i * 7 + 3 * rank) % 13) - 6); }

template <class T>
T as(float x) {
  if constexpr (std::is_same_v<T, mxkit::bfloat16>) return mxkit::bfloat16::from_float(x);
  else return static_cast<T>(x);
}
template <class T>
double back(T x) {
  if constexpr (std::is_same_v<T, mxkit::bfloat16>) return x.to_float();
  else return static_cast<double>(x);
}

template <class T>
void check_all_reduce(nn::comm_type type, bool own_stream) {
  constexpr std::size_t n = 100003;  // odd: no chunking by a power of two hides an edge
  gpu::nccl_options o;
  o.own_stream = own_stream;
  o.timeout = 60s;
  std::vector<std::vector<double>> sums(ranks), maxes(ranks);
  const std::vector<std::string> errors = run_ranks(ranks, o, [&](rank_context& c) {
    std::vector<T> host(n);
    for (std::size_t i = 0; i < n; ++i) host[i] = as<T>(value_at(c.rank, i));
    gpu::device_buffer<T> a(n, c.stream), b(n, c.stream), m(n, c.stream);
    a.copy_from(host, c.stream);
    m.copy_from(host, c.stream);
    c.comm.all_reduce({a.data(), n, type}, {b.data(), n, type}, nn::reduce_op::sum);
    c.comm.all_reduce({m.data(), n, type}, {m.data(), n, type}, nn::reduce_op::max);  // in place
    c.comm.join();
    for (const T& x : b.to_host(c.stream)) sums[c.rank].push_back(back(x));
    for (const T& x : m.to_host(c.stream)) maxes[c.rank].push_back(back(x));
    c.comm.synchronize();
  });
  require_no_errors(errors);
  for (int r = 0; r < ranks; ++r) {
    REQUIRE(sums[r].size() == n);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0, mx = -1e30;
      for (int q = 0; q < ranks; ++q) {
        s += value_at(q, i);
        mx = std::max<double>(mx, value_at(q, i));
      }
      bad += sums[r][i] != s || maxes[r][i] != mx;
    }
    INFO("rank " << r << ", " << name_of(type) << (own_stream ? ", own stream" : ", backend stream"));
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("nccl_communicator: all_reduce sum and max in every type and both stream modes", "[nccl][memcheck]") {
  for (const bool own : {true, false}) {
    check_all_reduce<float>(nn::comm_type::f32, own);
    check_all_reduce<mxkit::bfloat16>(nn::comm_type::bf16, own);
    check_all_reduce<double>(nn::comm_type::f64, own);
    check_all_reduce<std::int32_t>(nn::comm_type::i32, own);
  }
}

TEST_CASE("nccl_communicator: reduce_scatter, all_gather of bytes, broadcast", "[nccl][memcheck]") {
  constexpr std::size_t chunk = 4099;
  gpu::nccl_options o;
  o.timeout = 60s;
  o.verify_calls = true;  // also checks that matched calls pass the verification
  std::vector<std::vector<float>> scattered(ranks);
  std::vector<std::vector<std::uint8_t>> gathered(ranks), broadcasted(ranks);
  const std::vector<std::string> errors = run_ranks(ranks, o, [&](rank_context& c) {
    const std::size_t total = chunk * static_cast<std::size_t>(ranks);
    std::vector<float> host(total);
    for (std::size_t i = 0; i < total; ++i) host[i] = value_at(c.rank, i);
    gpu::device_buffer<float> in(total, c.stream), out(chunk, c.stream);
    in.copy_from(host, c.stream);
    c.comm.reduce_scatter({in.data(), total, nn::comm_type::f32}, {out.data(), chunk, nn::comm_type::f32}, nn::reduce_op::sum);

    std::vector<std::uint8_t> bytes(chunk);
    for (std::size_t i = 0; i < chunk; ++i) bytes[i] = static_cast<std::uint8_t>(i * 31 + c.rank * 101);
    gpu::device_buffer<std::uint8_t> mine(chunk, c.stream), all(total, c.stream), root(chunk, c.stream);
    mine.copy_from(bytes, c.stream);
    root.copy_from(bytes, c.stream);
    c.comm.all_gather({mine.data(), chunk, nn::comm_type::u8}, {all.data(), total, nn::comm_type::u8});
    c.comm.broadcast({root.data(), chunk, nn::comm_type::u8}, 1);
    c.comm.join();
    scattered[c.rank] = out.to_host(c.stream);
    gathered[c.rank] = all.to_host(c.stream);
    broadcasted[c.rank] = root.to_host(c.stream);
  });
  require_no_errors(errors);
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    std::size_t bad_scatter = 0, bad_gather = 0, bad_broadcast = 0;
    for (std::size_t i = 0; i < chunk; ++i) {
      double s = 0;
      for (int q = 0; q < ranks; ++q) s += value_at(q, static_cast<std::size_t>(r) * chunk + i);
      bad_scatter += scattered[r][i] != s;
      bad_broadcast += broadcasted[r][i] != static_cast<std::uint8_t>(i * 31 + 1 * 101);
      for (int q = 0; q < ranks; ++q)
        bad_gather += gathered[r][static_cast<std::size_t>(q) * chunk + i] != static_cast<std::uint8_t>(i * 31 + q * 101);
    }
    CHECK(bad_scatter == 0);
    CHECK(bad_gather == 0);
    CHECK(bad_broadcast == 0);
  }
}

TEST_CASE("nccl_communicator: a collective sees the backend's earlier work, the backend sees it after join", "[nccl]") {
  constexpr std::size_t n = 1 << 22;
  for (const bool own : {true, false}) {
    gpu::nccl_options o;
    o.own_stream = own;
    o.timeout = 60s;
    std::vector<std::vector<float>> got(ranks);
    const std::vector<std::string> errors = run_ranks(ranks, o, [&](rank_context& c) {
      gpu::device_buffer<float> x(n, c.stream), copy(n, c.stream);
      // Several rounds, each: the backend writes x (bytes 0x3f80 0000 = 1.0f per element after
      // the fill below is replaced), the communicator sums it, the backend copies the sum.
      for (int round = 0; round < 4; ++round) {
        x.fill_bytes(0, c.stream);
        std::vector<float> ones(n, static_cast<float>(round + 1));
        x.copy_from(ones, c.stream);
        c.comm.all_reduce({x.data(), n, nn::comm_type::f32}, {x.data(), n, nn::comm_type::f32}, nn::reduce_op::sum);
        c.comm.join();
        MXKIT_GPU_CHECK(gpu::memcpy_async(copy.data(), x.data(), n * sizeof(float), gpu::copy_kind::device_to_device, c.stream));
        MXKIT_GPU_CHECK(gpu::stream_synchronize(c.stream));  // `ones` must outlive the upload
        const std::vector<float> h = copy.to_host(c.stream);
        std::size_t bad = 0;
        for (float v : h) bad += v != static_cast<float>((round + 1) * ranks);
        got[c.rank].push_back(static_cast<float>(bad));
      }
    });
    require_no_errors(errors);
    for (int r = 0; r < ranks; ++r) {
      INFO("rank " << r << (own ? ", own stream" : ", backend stream"));
      CHECK(got[r] == std::vector<float>(4, 0.0f));
    }
  }
}

TEST_CASE("nccl_communicator: take_exposed_seconds is the backend stream's stall at join", "[nccl]") {
  // Rank 1 calls 100 ms late, so every other rank's join stalls its idle stream until rank 1's
  // data arrives: at least 90 ms exposed there (some of the delay may pass before the join is
  // enqueued), far less on rank 1. Nothing between the next two takes: 0. Not measured without a
  // communication stream or with time_joins off.
  constexpr std::size_t n = 1 << 20;
  struct reading {
    double first = -1, second = -1;
    bool off_measured = true;
  };
  std::vector<reading> got(ranks);
  gpu::nccl_options o;
  o.timeout = 60s;
  std::vector<std::string> errors = run_ranks(ranks, o, [&](rank_context& c) {
    gpu::device_buffer<float> x(n, c.stream);
    x.fill_bytes(0, c.stream);
    // A first collective connects the ranks, and its enqueue may wait on the host for a late peer
    // (then the stream never stalls): connect first.
    c.comm.all_reduce({x.data(), n, nn::comm_type::f32}, {x.data(), n, nn::comm_type::f32}, nn::reduce_op::sum);
    c.comm.synchronize();
    (void)c.comm.take_exposed_seconds();
    if (c.rank == 1) std::this_thread::sleep_for(100ms);
    c.comm.all_reduce({x.data(), n, nn::comm_type::f32}, {x.data(), n, nn::comm_type::f32}, nn::reduce_op::sum);
    c.comm.join();
    const std::optional<double> a = c.comm.take_exposed_seconds(), b = c.comm.take_exposed_seconds();
    got[c.rank].first = a.value_or(-1);
    got[c.rank].second = b.value_or(-1);
  });
  require_no_errors(errors);
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r);
    CHECK(got[r].second == 0.0);
    if (r == 1) continue;
    CHECK(got[r].first >= 0.09);
    CHECK(got[r].first > got[1].first);
  }
  CHECK(got[1].first >= 0.0);
  for (const auto& [own, timed] : {std::pair{true, false}, std::pair{false, true}, std::pair{false, false}}) {
    gpu::nccl_options p;
    p.timeout = 60s;
    p.own_stream = own;
    p.time_joins = timed;
    errors = run_ranks(ranks, p, [&](rank_context& c) {
      gpu::device_buffer<float> x(n, c.stream);
      x.fill_bytes(0, c.stream);
      c.comm.all_reduce({x.data(), n, nn::comm_type::f32}, {x.data(), n, nn::comm_type::f32}, nn::reduce_op::sum);
      c.comm.join();
      got[c.rank].off_measured = c.comm.take_exposed_seconds().has_value();
    });
    require_no_errors(errors);
    INFO((own ? "own stream" : "backend stream") << (timed ? ", joins timed" : ", joins not timed"));
    for (int r = 0; r < ranks; ++r) CHECK_FALSE(got[r].off_measured);
  }
}

TEST_CASE("nccl_communicator: join(mark) waits for the collectives before the mark, not for later ones", "[nccl]") {
  // Every rank sums x, takes a mark, then sums y; rank 1 calls the second sum 100 ms late. On the
  // other ranks join(mark) must not stall for the late sum (well under 50 ms), while x's sum is
  // visible to the backend after it; the full join that follows waits for y's (at least 50 ms).
  constexpr std::size_t n = 1 << 20;
  struct reading {
    double partial = -1, full = -1;
    std::size_t bad_x = 1, bad_y = 1;
  };
  std::vector<reading> got(ranks);
  gpu::nccl_options o;
  o.timeout = 60s;
  const std::vector<std::string> errors = run_ranks(ranks, o, [&](rank_context& c) {
    gpu::device_buffer<float> x(n, c.stream), y(n, c.stream), copy(n, c.stream);
    const std::vector<float> ones(n, 1.0f);
    x.copy_from(ones, c.stream);
    y.copy_from(ones, c.stream);
    MXKIT_GPU_CHECK(gpu::stream_synchronize(c.stream));
    c.comm.all_reduce({y.data(), n, nn::comm_type::f32}, {y.data(), n, nn::comm_type::f32}, nn::reduce_op::sum);  // connects
    c.comm.join();
    y.copy_from(ones, c.stream);
    MXKIT_GPU_CHECK(gpu::stream_synchronize(c.stream));
    (void)c.comm.take_exposed_seconds();
    c.comm.all_reduce({x.data(), n, nn::comm_type::f32}, {x.data(), n, nn::comm_type::f32}, nn::reduce_op::sum);
    const nn::communicator::collective_mark m = c.comm.mark();
    if (c.rank == 1) std::this_thread::sleep_for(100ms);
    c.comm.all_reduce({y.data(), n, nn::comm_type::f32}, {y.data(), n, nn::comm_type::f32}, nn::reduce_op::sum);
    c.comm.join(m);
    MXKIT_GPU_CHECK(gpu::memcpy_async(copy.data(), x.data(), n * sizeof(float), gpu::copy_kind::device_to_device, c.stream));
    got[c.rank].partial = c.comm.take_exposed_seconds().value_or(-1);
    const auto wrong = [&](const std::vector<float>& h) { return static_cast<std::size_t>(std::count_if(h.begin(), h.end(), [](float v) { return v != ranks; })); };
    got[c.rank].bad_x = wrong(copy.to_host(c.stream));
    c.comm.join();
    got[c.rank].full = c.comm.take_exposed_seconds().value_or(-1);
    got[c.rank].bad_y = wrong(y.to_host(c.stream));
  });
  require_no_errors(errors);
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r << ": join(mark) stalled " << got[r].partial << " s, the full join " << got[r].full << " s");
    CHECK(got[r].bad_x == 0);
    CHECK(got[r].bad_y == 0);
    CHECK(got[r].partial >= 0.0);
    if (r == 1) continue;
    CHECK(got[r].partial < 0.05);
    CHECK(got[r].full >= 0.05);
  }
}

TEST_CASE("nccl_communicator: a rank's abort ends every rank at once through the control channel", "[nccl][failure]") {
  gpu::nccl_options o;
  o.timeout = 60s;  // far above the bound checked below: the channel, not the timeout, ends it
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> errors = run_ranks(
      ranks, o,
      [&](rank_context& c) {
        gpu::device_buffer<float> x(1 << 20, c.stream);
        if (c.rank == ranks - 1) {
          c.comm.abort("injected failure");
          throw std::runtime_error("rank raised after abort");
        }
        c.comm.all_reduce({x.data(), x.size(), nn::comm_type::f32}, {x.data(), x.size(), nn::comm_type::f32}, nn::reduce_op::sum);
        c.comm.synchronize();
      },
      /*control=*/true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r + 1 < ranks; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK_THAT(errors[r], Catch::Contains("injected failure"));
  }
  CHECK_THAT(errors[ranks - 1], Catch::Contains("rank raised after abort"));
  CHECK(seconds < 30.0);
}

TEST_CASE("nccl_communicator: a rank that never calls ends the others at the timeout", "[nccl][failure]") {
  gpu::nccl_options o;
  o.timeout = 3s;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> errors = run_ranks(ranks, o, [&](rank_context& c) {
    gpu::device_buffer<float> x(1 << 20, c.stream);
    if (c.rank == 0) return;  // never calls; its communicator is destroyed (aborted) at return
    c.comm.all_reduce({x.data(), x.size(), nn::comm_type::f32}, {x.data(), x.size(), nn::comm_type::f32}, nn::reduce_op::sum);
    c.comm.synchronize();
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(errors[0] == "");
  for (int r = 1; r < ranks; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK_THAT(errors[r], Catch::Contains("failed"));
  }
  CHECK(seconds < 40.0);
}

TEST_CASE("nccl_communicator: verify_calls names a mismatched call on every rank", "[nccl][failure]") {
  gpu::nccl_options o;
  o.timeout = 30s;
  o.verify_calls = true;
  const std::vector<std::string> errors = run_ranks(ranks, o, [&](rank_context& c) {
    const std::size_t n = c.rank == 1 ? 500 : 1000;
    gpu::device_buffer<float> x(1000, c.stream);
    c.comm.all_reduce({x.data(), n, nn::comm_type::f32}, {x.data(), n, nn::comm_type::f32}, nn::reduce_op::sum);
    c.comm.synchronize();
  });
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK_THAT(errors[r], Catch::Contains("mismatched collective") && Catch::Contains("all_reduce of 500 f32"));
  }
}
