// SPDX-License-Identifier: Apache-2.0
#pragma once
// Start-up of a multi-process run without MPI: the launch environment torchrun sets, and the
// exchange of one opaque value (NCCL's unique id) from rank 0 to every rank, over TCP or a file.
// Host only (POSIX sockets); gpu::nccl_communicator builds on it, and CI tests it with threads on
// 127.0.0.1.
//
//   launch_environment env = launch_environment::from_environment();   // RANK, WORLD_SIZE, ...
//   tcp_rendezvous r(env, id_bytes, std::chrono::seconds(60));         // rank 0 listens, others connect
//   std::string id = r.broadcast(env.rank == 0 ? make_id() : "");
//
// tcp_rendezvous keeps its connections open after the exchange as a control channel beside the
// collectives (a star through rank 0): abort(reason) reaches every rank at once, and a process
// that ends without close() (a crash, a kill) is seen by the others as a closed connection. A
// device communicator's watchdog polls it (poll_abort()), so a dead rank ends the run at once
// instead of after the collective timeout (NCCL's kernels wait on a dead NVLink peer forever).
//
// Every wait has a deadline: connecting (retried until rank 0 listens), accepting the other
// ranks, reading the value. A mismatched configuration (another WORLD_SIZE, another value size,
// two processes with one RANK) fails every rank with comm_error naming both sides.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <mxkit/error.hpp>
#include <mxkit/parallel/communicator.hpp>
#include <mxkit/file_io.hpp>

MXKIT_BEGIN_NAMESPACE
namespace nn {

// ---- the launch environment ----------------------------------------------------------------------

// What torchrun (and scripts/launch_gpus.sh) tells each process.
struct launch_environment {
  int rank = 0;        // RANK: this process's rank in [0, world_size)
  int world_size = 1;  // WORLD_SIZE
  int local_rank = 0;  // LOCAL_RANK: the device index on this host
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR: where rank 0 listens
  int master_port = 29500;                // MASTER_PORT, where rank 0 listens (+1 under torchrun's agent store, below)

  // From the process environment, or any lookup (tests). None of the variables set: one rank
  // (0 of 1). RANK or WORLD_SIZE set: both must be, with MASTER_ADDR and MASTER_PORT where
  // WORLD_SIZE > 1; LOCAL_RANK defaults to RANK. Bad values throw std::invalid_argument naming the
  // variable and its text.
  static launch_environment from_environment(const std::function<const char*(const char*)>& lookup = [](const char* n) {
    return std::getenv(n);
  }) {
    launch_environment e;
    const char* rank = lookup("RANK");
    const char* world = lookup("WORLD_SIZE");
    if (!rank && !world) return e;
    auto number = [&](const char* name, const char* text, long lo, long hi) {
      detail::require(text != nullptr, "launch environment: ", name, " is not set (RANK and WORLD_SIZE are set together, "
                                       "as torchrun and scripts/launch_gpus.sh do)");
      long v = 0;
      const std::string_view s(text);
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      detail::require(ec == std::errc{} && end == s.data() + s.size() && !s.empty() && v >= lo && v <= hi, "launch environment: ",
                      name, "='", s, "' is not an integer in [", lo, ", ", hi, "]");
      return static_cast<int>(v);
    };
    e.world_size = number("WORLD_SIZE", world, 1, 1 << 20);
    e.rank = number("RANK", rank, 0, e.world_size - 1);
    const char* local = lookup("LOCAL_RANK");
    e.local_rank = local ? number("LOCAL_RANK", local, 0, 1 << 16) : e.rank;
    const char* addr = lookup("MASTER_ADDR");
    const char* port = lookup("MASTER_PORT");
    if (e.world_size > 1) {
      detail::require(addr && *addr, "launch environment: WORLD_SIZE=", e.world_size, " but MASTER_ADDR is not set (rank 0's host)");
      e.master_addr = addr;
      e.master_port = number("MASTER_PORT", port, 1, 65535);
      // torchrun (c10d rendezvous) may keep its own TCP store listening on MASTER_PORT and say so
      // with TORCHELASTIC_USE_AGENT_STORE: every rank then meets on the next port.
      if (const char* agent = lookup("TORCHELASTIC_USE_AGENT_STORE"); agent && (std::string_view(agent) == "True" || std::string_view(agent) == "1")) {
        detail::require(e.master_port < 65535, "launch environment: MASTER_PORT=65535 leaves no port beside torchrun's store");
        ++e.master_port;
      }
    } else {
      if (addr && *addr) e.master_addr = addr;
      if (port) e.master_port = number("MASTER_PORT", port, 1, 65535);
    }
    return e;
  }
};

// ---- TCP -----------------------------------------------------------------------------------------

namespace rendezvous_detail {

using clock = std::chrono::steady_clock;

using socket_fd = mxkit::detail::unique_fd;  // file_io.hpp

inline int ms_left(clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

[[noreturn]] inline void comm_fail(const std::string& what) { throw comm_error("mxkit: rendezvous: " + what); }

inline std::string errno_text(int err) { return std::system_category().message(err); }

// Waits until fd is readable (or writable); false on timeout.
inline bool wait_fd(int fd, short events, clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) comm_fail(std::string("poll: ") + errno_text(errno));
  }
}

inline void send_all(int fd, const void* data, std::size_t n, clock::time_point deadline, const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) comm_fail("timed out sending to " + peer);
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      comm_fail("sending to " + peer + ": " + errno_text(errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Reads exactly n bytes; false if the peer closed the connection before the first byte.
inline bool recv_all(int fd, void* data, std::size_t n, clock::time_point deadline, const std::string& peer) {
  char* p = static_cast<char*>(data);
  std::size_t got = 0;
  while (got < n) {
    if (!wait_fd(fd, POLLIN, deadline)) comm_fail("timed out waiting for " + peer);
    const ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r == 0) {
      if (got == 0) return false;
      comm_fail(peer + " closed the connection in the middle of a message");
    }
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      comm_fail("reading from " + peer + ": " + errno_text(errno));
    }
    got += static_cast<std::size_t>(r);
  }
  return true;
}

inline void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) comm_fail(std::string("fcntl: ") + errno_text(errno));
}

inline void put_u32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline std::uint32_t get_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace rendezvous_detail

// The TCP rendezvous and control channel (see the header comment).
class tcp_rendezvous {
 public:
  // A rank's hello to rank 0: magic, world size, rank, value size (little-endian u32 each).
  static constexpr std::uint32_t hello_magic = 0x5652584du;  // "MXRV"
  static constexpr std::size_t max_value_bytes = 1 << 20;

  // Rank 0 listens on env.master_port (all interfaces) and accepts world_size - 1 ranks; the
  // others connect to env.master_addr, retrying until rank 0 listens, and say hello (their world
  // size, rank and value_bytes, the size of the value broadcast() will carry). Throws comm_error
  // when the deadline passes, naming the ranks still missing, or on a mismatched hello.
  tcp_rendezvous(const launch_environment& env, std::size_t value_bytes, std::chrono::milliseconds timeout)
      : rank_(env.rank), world_(env.world_size), value_bytes_(value_bytes), timeout_(timeout) {
    mxkit::detail::require(timeout.count() > 0, "tcp_rendezvous: timeout ", timeout.count(), " ms must be positive");
    mxkit::detail::require(value_bytes <= max_value_bytes, "tcp_rendezvous: value_bytes ", value_bytes, " (at most ", max_value_bytes, ")");
    mxkit::detail::require(world_ >= 1 && rank_ >= 0 && rank_ < world_, "tcp_rendezvous: rank ", rank_, " of ", world_);
    if (world_ == 1) return;
    const auto deadline = rendezvous_detail::clock::now() + timeout;
    if (rank_ == 0) {
      listen_and_accept(env, deadline);
    } else {
      connect_to_root(env, deadline);
      char m[16];
      rendezvous_detail::put_u32(m, hello_magic);
      rendezvous_detail::put_u32(m + 4, static_cast<std::uint32_t>(world_));
      rendezvous_detail::put_u32(m + 8, static_cast<std::uint32_t>(rank_));
      rendezvous_detail::put_u32(m + 12, static_cast<std::uint32_t>(value_bytes_));
      rendezvous_detail::send_all(root_.get(), m, sizeof m, deadline, "rank 0");
    }
  }
  tcp_rendezvous(const tcp_rendezvous&) = delete;
  tcp_rendezvous& operator=(const tcp_rendezvous&) = delete;
  ~tcp_rendezvous() { close(); }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return world_; }

  // Rank 0's `value` (value_bytes long; the other ranks' argument is ignored) on every rank.
  // Throws comm_error (timeout, a refusal, rank 0's abort).
  std::string broadcast(const std::string& value) {
    const std::size_t bytes = value_bytes_;
    if (rank_ == 0)
      mxkit::detail::require(value.size() == bytes, "tcp_rendezvous::broadcast: rank 0's value has ", value.size(), " bytes, expected ",
                             bytes);
    if (world_ == 1) return value;
    const auto deadline = rendezvous_detail::clock::now() + timeout_;
    if (rank_ == 0) {
      for (int r = 1; r < world_; ++r) send_message(peers_[r].get(), 'V', value, deadline, "rank " + std::to_string(r));
      return value;
    }
    for (;;) {
      auto [type, text] = read_message(root_.get(), deadline, "rank 0");
      if (type == 'V') {
        if (text.size() != bytes) rendezvous_detail::comm_fail("rank 0 sent " + std::to_string(text.size()) + " bytes, expected " + std::to_string(bytes));
        return text;
      }
      if (type == 'A') throw comm_error("mxkit: rank 0 aborted during start-up: " + text);
      if (type == 'X') rendezvous_detail::comm_fail(text);
      if (type == 0) rendezvous_detail::comm_fail("rank 0 closed the connection before sending the value (it failed or timed out)");
      if (type != 'B') rendezvous_detail::comm_fail(std::string("unexpected message '") + type + "' from rank 0");
    }
  }

  // Tells every other rank to abort, naming `reason` (through rank 0). Never throws.
  void abort(const std::string& reason) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (world_ == 1 || closed_) return;
    try {
      const auto deadline = rendezvous_detail::clock::now() + std::chrono::seconds(2);
      const std::string text = "rank " + std::to_string(rank_) + ": " + reason;
      if (rank_ == 0) {
        for (int r = 1; r < world_; ++r)
          if (peers_[r].get() >= 0) try_send(peers_[r].get(), 'A', text, deadline);
      } else if (root_.get() >= 0) {
        try_send(root_.get(), 'A', text, deadline);
      }
    } catch (...) {
    }
  }

  // A non-blocking look at the channel: the reason when another rank aborted or its process
  // ended without close(); nullopt otherwise. Rank 0 relays what it hears to the others. Thread
  // safety: one thread polls (the watchdog); abort() may be called from another.
  std::optional<std::string> poll_abort() {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (world_ == 1 || closed_) return std::nullopt;
    if (failure_) return failure_;
    const auto deadline = rendezvous_detail::clock::now() + std::chrono::seconds(2);
    auto heard = [&](int fd, const std::string& peer) -> std::optional<std::string> {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) return std::nullopt;
      char type = 0;
      std::string text;
      try {
        std::tie(type, text) = read_message(fd, deadline, peer);
      } catch (const comm_error& e) {
        return std::string(e.what());
      }
      if (type == 'B') return std::string();  // orderly close: not an abort
      if (type == 0) return peer + "'s process ended or closed its connection without finishing (a crash or a kill)";
      return text;
    };
    if (rank_ == 0) {
      for (int r = 1; r < world_; ++r) {
        if (peers_[r].get() < 0) continue;
        std::optional<std::string> h = heard(peers_[r].get(), "rank " + std::to_string(r));
        if (!h) continue;
        if (h->empty()) {  // rank r said goodbye
          (void)peers_[r].close();
          continue;
        }
        failure_ = *h;
        for (int q = 1; q < world_; ++q)
          if (q != r && peers_[q].get() >= 0) try_send(peers_[q].get(), 'A', *h, deadline);
        return failure_;
      }
      return std::nullopt;
    }
    if (root_.get() < 0) return std::nullopt;
    std::optional<std::string> h = heard(root_.get(), "rank 0");
    if (h && h->empty()) {
      (void)root_.close();
      return std::nullopt;
    }
    if (h) failure_ = *h;
    return failure_;
  }

  // An orderly end: the others will not read this rank's closed connection as a crash.
  void close() noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    closed_ = true;
    const auto deadline = rendezvous_detail::clock::now() + std::chrono::seconds(1);
    if (root_.get() >= 0) try_send(root_.get(), 'B', "", deadline);
    for (rendezvous_detail::socket_fd& p : peers_)
      if (p.get() >= 0) try_send(p.get(), 'B', "", deadline);
    (void)root_.close();
    peers_.clear();
  }

 private:
  int rank_, world_;
  std::size_t value_bytes_;
  std::chrono::milliseconds timeout_;
  rendezvous_detail::socket_fd root_;                 // ranks > 0: the connection to rank 0
  std::vector<rendezvous_detail::socket_fd> peers_;   // rank 0: index r, rank r's connection
  std::optional<std::string> failure_;
  bool closed_ = false;
  std::mutex mutex_;  // abort(), poll_abort() and close() may run on different threads

  // Messages: type (1 byte), length (u32), text. 'V' value, 'A' abort, 'B' goodbye, 'X' refusal.
  static void send_message(int fd, char type, const std::string& text, rendezvous_detail::clock::time_point deadline, const std::string& peer) {
    std::string m(5, '\0');
    m[0] = type;
    rendezvous_detail::put_u32(m.data() + 1, static_cast<std::uint32_t>(text.size()));
    m += text;
    rendezvous_detail::send_all(fd, m.data(), m.size(), deadline, peer);
  }
  static void try_send(int fd, char type, const std::string& text, rendezvous_detail::clock::time_point deadline) noexcept {
    try {
      send_message(fd, type, text, deadline, "peer");
    } catch (...) {
    }
  }
  // type 0: the peer closed the connection.
  static std::pair<char, std::string> read_message(int fd, rendezvous_detail::clock::time_point deadline, const std::string& peer) {
    char head[5];
    if (!rendezvous_detail::recv_all(fd, head, 5, deadline, peer)) return {0, {}};
    const std::uint32_t n = rendezvous_detail::get_u32(head + 1);
    if (n > max_value_bytes + 4096) rendezvous_detail::comm_fail(peer + " sent a message of " + std::to_string(n) + " bytes (not an mxkit rank?)");
    std::string text(n, '\0');
    if (n > 0 && !rendezvous_detail::recv_all(fd, text.data(), n, deadline, peer)) rendezvous_detail::comm_fail(peer + " closed the connection mid-message");
    return {head[0], std::move(text)};
  }

  void listen_and_accept(const launch_environment& env, rendezvous_detail::clock::time_point deadline) {
    rendezvous_detail::socket_fd ls(::socket(AF_INET, SOCK_STREAM, 0));
    if (ls.get() < 0) rendezvous_detail::comm_fail(std::string("socket: ") + rendezvous_detail::errno_text(errno));
    const int one = 1;
    ::setsockopt(ls.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(env.master_port));
    if (::bind(ls.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      rendezvous_detail::comm_fail("rank 0 cannot listen on port " + std::to_string(env.master_port) + " (MASTER_PORT): " + rendezvous_detail::errno_text(errno));
    if (::listen(ls.get(), 128) != 0) rendezvous_detail::comm_fail(std::string("listen: ") + rendezvous_detail::errno_text(errno));
    rendezvous_detail::set_nonblocking(ls.get());
    peers_.resize(static_cast<std::size_t>(world_));
    int joined = 1;
    std::string refusal;
    while (joined < world_ && refusal.empty()) {
      if (!rendezvous_detail::wait_fd(ls.get(), POLLIN, deadline)) {
        std::string missing;
        for (int r = 1; r < world_; ++r)
          if (peers_[r].get() < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        rendezvous_detail::comm_fail("rank 0 waited for the other ranks on port " + std::to_string(env.master_port) + " and ranks " + missing +
                          " never connected (a rank did not start, or WORLD_SIZE differs between ranks)");
      }
      rendezvous_detail::socket_fd c(::accept(ls.get(), nullptr, nullptr));
      if (c.get() < 0) continue;
      ::setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      char hello[16];
      try {
        if (!rendezvous_detail::recv_all(c.get(), hello, sizeof hello, deadline, "a connecting rank")) continue;
      } catch (const comm_error&) {
        continue;  // not one of ours (a port scanner): ignore it
      }
      const std::uint32_t magic = rendezvous_detail::get_u32(hello), world = rendezvous_detail::get_u32(hello + 4), r = rendezvous_detail::get_u32(hello + 8),
                          bytes = rendezvous_detail::get_u32(hello + 12);
      if (magic != hello_magic) continue;
      if (static_cast<int>(world) != world_) refusal = "rank " + std::to_string(r) + " has WORLD_SIZE " + std::to_string(world) + ", rank 0 has " + std::to_string(world_);
      else if (r == 0 || static_cast<int>(r) >= world_) refusal = "a process claims rank " + std::to_string(r) + " of " + std::to_string(world_);
      else if (peers_[r].get() >= 0) refusal = "two processes claim RANK " + std::to_string(r);
      else if (bytes != value_bytes_)
        refusal = "rank " + std::to_string(r) + " expects a value of " + std::to_string(bytes) + " bytes, rank 0 sends " +
                  std::to_string(value_bytes_) + " (another build or communicator kind)";
      if (!refusal.empty()) {
        try_send(c.get(), 'X', "mismatched configuration: " + refusal, deadline);
        break;
      }
      peers_[r] = std::move(c);
      ++joined;
    }
    if (!refusal.empty()) {
      for (rendezvous_detail::socket_fd& p : peers_)
        if (p.get() >= 0) try_send(p.get(), 'X', "mismatched configuration: " + refusal, deadline);
      peers_.clear();
      closed_ = true;
      rendezvous_detail::comm_fail("mismatched configuration: " + refusal);
    }
  }

  void connect_to_root(const launch_environment& env, rendezvous_detail::clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(env.master_port);
    const int gai = ::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &found);
    if (gai != 0 || !found) rendezvous_detail::comm_fail("MASTER_ADDR '" + env.master_addr + "': " + ::gai_strerror(gai));
    const sockaddr_in addr = *reinterpret_cast<const sockaddr_in*>(found->ai_addr);
    ::freeaddrinfo(found);
    std::string last = "no attempt";
    for (auto pause = std::chrono::milliseconds(10);; pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
      rendezvous_detail::socket_fd s(::socket(AF_INET, SOCK_STREAM, 0));
      if (s.get() < 0) rendezvous_detail::comm_fail(std::string("socket: ") + rendezvous_detail::errno_text(errno));
      if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
        const int one = 1;
        ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        root_ = std::move(s);
        break;
      }
      last = rendezvous_detail::errno_text(errno);
      if (rendezvous_detail::clock::now() + pause >= deadline)
        rendezvous_detail::comm_fail("rank " + std::to_string(rank_) + " could not connect to rank 0 at " + env.master_addr + ":" + port + " (" + last +
                          ") before the timeout");
      std::this_thread::sleep_for(pause);
    }
  }

};

// ---- a file ---------------------------------------------------------------------------------------

// Rank 0's `value` (value_bytes long) on every rank through a file on a file system every rank
// sees: rank 0 writes it atomically (write, fsync, rename: the others never read half a file),
// the others poll until it appears. The file must not exist before the run (a stale one from an
// earlier run would hand out an old id): rank 0 refuses to start over one, naming it. No control
// channel: a dead rank is found by the communicator's timeout.
inline std::string file_rendezvous(const std::filesystem::path& path, const launch_environment& env, const std::string& value,
                                   std::size_t value_bytes, std::chrono::milliseconds timeout) {
  mxkit::detail::require(timeout.count() > 0, "file_rendezvous: timeout ", timeout.count(), " ms must be positive");
  mxkit::detail::require(!path.empty(), "file_rendezvous: empty path");
  const std::string header = "mxkit-rendezvous world_size=" + std::to_string(env.world_size) + " bytes=" + std::to_string(value_bytes) + "\n";
  if (env.rank == 0) {
    mxkit::detail::require(value.size() == value_bytes, "file_rendezvous: rank 0's value has ", value.size(), " bytes, expected ",
                           value_bytes);
    std::error_code ec;
    if (std::filesystem::exists(path, ec))
      rendezvous_detail::comm_fail("rank 0: '" + path.string() + "' exists already (left by an earlier run?); remove it or use a new path");
    const std::string text = header + value;
    mxkit::detail::replace_file(path, text.data(), text.size());
    return value;
  }
  const auto deadline = rendezvous_detail::clock::now() + timeout;
  for (auto pause = std::chrono::milliseconds(5);; pause = std::min(pause * 2, std::chrono::milliseconds(200))) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
      std::string text;
      {
        mxkit::detail::input_file in(path);
        char buf[4096];
        for (std::size_t got = sizeof buf; got == sizeof buf;) {
          got = in.read(buf, sizeof buf);
          text.append(buf, got);
        }
      }
      const std::size_t eol = text.find('\n');
      const std::string got_header = eol == std::string::npos ? text : text.substr(0, eol + 1);
      if (got_header != header)
        rendezvous_detail::comm_fail("rank " + std::to_string(env.rank) + " expects '" + header.substr(0, header.size() - 1) + "' in '" + path.string() +
                          "', rank 0 wrote '" + got_header.substr(0, got_header.find('\n')) + "' (mismatched configuration)");
      return text.substr(eol + 1);
    }
    if (rendezvous_detail::clock::now() + pause >= deadline)
      rendezvous_detail::comm_fail("rank " + std::to_string(env.rank) + " waited for rank 0 to write '" + path.string() + "' until the timeout");
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace nn
MXKIT_END_NAMESPACE
