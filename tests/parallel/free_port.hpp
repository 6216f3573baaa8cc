// SPDX-License-Identifier: Apache-2.0
#pragma once
// A loopback TCP port nothing listens on right now (the kernel's choice for a socket bound to
// port 0 and closed), for the rendezvous tests' rank 0 (host and GPU tests).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace test_ports {

inline int free_loopback_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) throw std::runtime_error("free_loopback_port: socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(s);
  if (!ok) throw std::runtime_error("free_loopback_port: bind or getsockname failed");
  return ntohs(a.sin_port);
}

}  // namespace test_ports
