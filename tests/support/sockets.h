// Test support: whether a TCP connection to an IPv4 address and port is accepted.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace dtrain::testing {

// 0 when a connection to address:port is accepted, else errno (ECONNREFUSED: nobody
// listens there).
inline int connect_error(const char* address, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address, &to.sin_addr);
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  const int error = rc == 0 ? 0 : errno;
  close(fd);
  return error;
}

}  // namespace dtrain::testing
