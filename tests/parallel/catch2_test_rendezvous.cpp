// SPDX-License-Identifier: Apache-2.0
// parallel/rendezvous.hpp: the launch environment's checks, and the exchange of rank 0's value over TCP
// (threads as ranks on 127.0.0.1, ports chosen free) and through a file, with its failures: a
// rank that never comes, a mismatched configuration, an abort and a crashed process seen through
// the control channel. Every wait is bounded by a short timeout.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../catch.hpp"
#include "free_port.hpp"

#include <mxkit/parallel/rendezvous.hpp>

namespace nn = mxkit::nn;
using namespace std::chrono_literals;

namespace {

int free_port() { return test_ports::free_loopback_port(); }

nn::launch_environment env_of(int rank, int world, int port) {
  nn::launch_environment e;
  e.rank = rank;
  e.world_size = world;
  e.local_rank = rank;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

std::string random_value(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::string v(n, '\0');
  for (char& c : v) c = static_cast<char>(g() & 0xff);
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("launch_environment reads torchrun's variables and names a bad one", "[rendezvous]") {
  std::map<std::string, std::string> vars;
  auto lookup = [&](const char* n) -> const char* {
    const auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  SECTION("none set: one rank") {
    const nn::launch_environment e = nn::launch_environment::from_environment(lookup);
    CHECK(e.rank == 0);
    CHECK(e.world_size == 1);
  }
  SECTION("all set") {
    vars = {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29511"}};
    const nn::launch_environment e = nn::launch_environment::from_environment(lookup);
    CHECK(e.rank == 3);
    CHECK(e.world_size == 4);
    CHECK(e.local_rank == 1);
    CHECK(e.master_addr == "node7");
    CHECK(e.master_port == 29511);
  }
  SECTION("torchrun's agent store holds MASTER_PORT: the next port") {
    vars = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
    CHECK(nn::launch_environment::from_environment(lookup).master_port == 29501);
  }
  SECTION("LOCAL_RANK defaults to RANK") {
    vars = {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
    CHECK(nn::launch_environment::from_environment(lookup).local_rank == 2);
  }
  auto refused = [&](const char* needle) {
    CHECK_THROWS_WITH(nn::launch_environment::from_environment(lookup), Catch::Contains(needle));
  };
  SECTION("errors name the variable and value") {
    vars = {{"RANK", "0"}};
    refused("WORLD_SIZE is not set");
    vars = {{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
    refused("RANK='4' is not an integer in [0, 3]");
    vars = {{"RANK", "x1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
    refused("RANK='x1'");
    vars = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}};
    refused("MASTER_ADDR is not set");
    vars = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}};
    refused("MASTER_PORT='70000'");
    vars = {{"RANK", "0"}, {"WORLD_SIZE", "0"}};
    refused("WORLD_SIZE='0'");
  }
}

TEST_CASE("tcp_rendezvous gives every rank rank 0's value", "[rendezvous]") {
  const int port = free_port();
  constexpr int world = 4;
  const std::string value = random_value(128, 7);
  std::vector<std::string> got(world);
  std::vector<std::thread> ranks;
  // The other ranks start first: they retry until rank 0 listens.
  for (int r = world - 1; r >= 0; --r)
    ranks.emplace_back([&, r] {
      nn::tcp_rendezvous rv(env_of(r, world, port), value.size(), 10s);
      got[r] = rv.broadcast(r == 0 ? value : std::string());
      CHECK_FALSE(rv.poll_abort());
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < world; ++r) CHECK(got[r] == value);
}

TEST_CASE("tcp_rendezvous: a rank that never comes ends the others within the timeout", "[rendezvous]") {
  const int port = free_port();
  SECTION("rank 0 waits for a missing rank") {
    std::string error;
    const auto t0 = std::chrono::steady_clock::now();
    std::thread r1([&] {
      nn::tcp_rendezvous rv(env_of(1, 3, port), 8, 5s);
      try {
        (void)rv.broadcast("");
      } catch (const nn::comm_error&) {
      }
    });
    try {
      nn::tcp_rendezvous rv(env_of(0, 3, port), 8, 400ms);
      FAIL("rank 0 started without rank 2");
    } catch (const nn::comm_error& e) {
      error = e.what();
    }
    r1.join();
    CHECK_THAT(error, Catch::Contains("ranks 2 never connected"));
    CHECK(seconds_since(t0) < 4.0);
  }
  SECTION("a rank waits for a rank 0 that never listens") {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(nn::tcp_rendezvous(env_of(1, 2, port), 8, 300ms), Catch::Contains("could not connect to rank 0"));
    CHECK(seconds_since(t0) < 3.0);
  }
}

TEST_CASE("tcp_rendezvous refuses a mismatched configuration on every rank", "[rendezvous]") {
  const int port = free_port();
  std::string error0, error1;
  std::thread r1([&] {
    try {
      nn::tcp_rendezvous rv(env_of(1, 3, port), 8, 5s);  // WORLD_SIZE 3 here, 2 on rank 0
      (void)rv.broadcast("");
    } catch (const nn::comm_error& e) {
      error1 = e.what();
    }
  });
  try {
    nn::tcp_rendezvous rv(env_of(0, 2, port), 8, 5s);
  } catch (const nn::comm_error& e) {
    error0 = e.what();
  }
  r1.join();
  CHECK_THAT(error0, Catch::Contains("rank 1 has WORLD_SIZE 3, rank 0 has 2"));
  CHECK_THAT(error1, Catch::Contains("mismatched configuration"));

  SECTION("another value size") {
    const int port2 = free_port();
    std::string e1;
    std::thread t([&] {
      try {
        nn::tcp_rendezvous rv(env_of(1, 2, port2), 16, 5s);
        (void)rv.broadcast("");
      } catch (const nn::comm_error& e) {
        e1 = e.what();
      }
    });
    CHECK_THROWS_WITH(nn::tcp_rendezvous(env_of(0, 2, port2), 8, 5s), Catch::Contains("expects a value of 16 bytes"));
    t.join();
    CHECK_THAT(e1, Catch::Contains("mismatched configuration"));
  }
}

TEST_CASE("tcp_rendezvous's control channel carries an abort to every rank", "[rendezvous]") {
  const int port = free_port();
  constexpr int world = 3;
  std::vector<std::string> heard(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      nn::tcp_rendezvous rv(env_of(r, world, port), 4, 10s);
      (void)rv.broadcast(r == 0 ? "abcd" : "");
      if (r == 2) {
        rv.abort("out of memory in layer 3");
        return;
      }
      const auto t0 = std::chrono::steady_clock::now();
      while (seconds_since(t0) < 5.0) {
        if (std::optional<std::string> why = rv.poll_abort()) {
          heard[r] = *why;
          return;
        }
        std::this_thread::sleep_for(1ms);
      }
    });
  for (std::thread& t : ranks) t.join();
  CHECK_THAT(heard[0], Catch::Contains("rank 2: out of memory in layer 3"));
  CHECK_THAT(heard[1], Catch::Contains("rank 2: out of memory in layer 3"));
}

TEST_CASE("tcp_rendezvous: a process that dies is seen as a crash, an orderly close is not", "[rendezvous]") {
  const int port = free_port();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // rank 1: joins, receives the value, then ends without close()
    try {
      nn::tcp_rendezvous rv(env_of(1, 2, port), 4, 5s);
      (void)rv.broadcast("");
      ::_exit(0);  // no destructor: the socket closes as a crash would close it
    } catch (...) {
      ::_exit(3);
    }
  }
  nn::tcp_rendezvous rv(env_of(0, 2, port), 4, 5s);
  CHECK(rv.broadcast("wxyz") == "wxyz");
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WEXITSTATUS(status) == 0);
  std::optional<std::string> why;
  const auto t0 = std::chrono::steady_clock::now();
  while (!why && seconds_since(t0) < 5.0) {
    why = rv.poll_abort();
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("rank 1's process ended"));

  SECTION("orderly close") {
    const int port2 = free_port();
    std::thread t([&] {
      nn::tcp_rendezvous r1(env_of(1, 2, port2), 1, 5s);
      (void)r1.broadcast("");
      r1.close();
    });
    nn::tcp_rendezvous r0(env_of(0, 2, port2), 1, 5s);
    (void)r0.broadcast("q");
    t.join();
    std::this_thread::sleep_for(50ms);
    CHECK_FALSE(r0.poll_abort());
    CHECK_FALSE(r0.poll_abort());
  }
}

TEST_CASE("file_rendezvous gives every rank rank 0's value, and refuses a stale file", "[rendezvous]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("mxkit_rendezvous_" + std::to_string(::getpid()) + "_" + std::to_string(free_port()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "id";
  const std::string value = random_value(128, 11);
  constexpr int world = 3;
  std::vector<std::string> got(world);
  std::vector<std::thread> ranks;
  for (int r = world - 1; r >= 0; --r)
    ranks.emplace_back([&, r] { got[r] = nn::file_rendezvous(path, env_of(r, world, 0), r == 0 ? value : "", value.size(), 10s); });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < world; ++r) CHECK(got[r] == value);

  CHECK_THROWS_WITH(nn::file_rendezvous(path, env_of(0, world, 0), value, value.size(), 1s), Catch::Contains("exists already"));
  CHECK_THROWS_WITH(nn::file_rendezvous(path, env_of(1, 4, 0), "", value.size(), 1s), Catch::Contains("mismatched configuration"));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(nn::file_rendezvous(dir / "never", env_of(1, 2, 0), "", 8, 200ms), Catch::Contains("until the timeout"));
  CHECK(seconds_since(t0) < 3.0);
  std::filesystem::remove_all(dir);
}
