#include "dtrain/comm/tcp_congestion.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtrain::comm {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string congestion_of(int fd) {
  char name[32] = {};
  socklen_t length = sizeof(name);
  EXPECT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &length), 0);
  return name;
}

// A socket closed at scope exit.
struct Socket {
  int fd;
  explicit Socket(int f) : fd(f) {}
  ~Socket() {
    if (fd >= 0) close(fd);
  }
};

// A loopback listener, a client connected to it and the accepted end.
struct Connection {
  Socket listener{socket(AF_INET, SOCK_STREAM, 0)};
  Socket client{socket(AF_INET, SOCK_STREAM, 0)};
  Socket accepted{-1};
  Connection() {
    EXPECT_GE(listener.fd, 0);
    EXPECT_GE(client.fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    auto* any = reinterpret_cast<sockaddr*>(&address);
    EXPECT_EQ(bind(listener.fd, any, sizeof(address)), 0);
    EXPECT_EQ(listen(listener.fd, 1), 0);
    EXPECT_EQ(getsockname(listener.fd, any, &length), 0);
    EXPECT_EQ(connect(client.fd, any, sizeof(address)), 0);
    accepted.fd = accept(listener.fd, nullptr, nullptr);
    EXPECT_GE(accepted.fd, 0);
  }
};

// An algorithm this host lets a process choose that is not its default (empty: none).
std::string another_allowed() {
  const std::string fallback = first_line("/proc/sys/net/ipv4/tcp_congestion_control");
  std::istringstream allowed(first_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control"));
  for (std::string name; allowed >> name;)
    if (name != fallback) return name;
  return "";
}

TEST(TcpCongestionTest, AnAlgorithmTheHostRefusesIsAnErrorNamingTheAllowedOnes) {
  EXPECT_NO_THROW(check_tcp_congestion(""));
  try {
    check_tcp_congestion("no-such-algorithm");
    FAIL() << "an unknown algorithm was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no-such-algorithm"), std::string::npos) << what;
    EXPECT_NE(what.find(first_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control")),
              std::string::npos)
        << what;
  }
}

// bbr ignores the idle restart; reno and cubic meet it where the host's setting is on, and
// the host's default counts where no algorithm is named.
TEST(TcpCongestionTest, AdvisesOnIdleRestartWhereTheConnectionsMeetIt) {
  const bool restarts = first_line("/proc/sys/net/ipv4/tcp_slow_start_after_idle") == "1";
  EXPECT_EQ(idle_restart_advice("bbr"), "");
  for (const char* algorithm : {"reno", "cubic"}) {
    const std::string advice = idle_restart_advice(algorithm);
    EXPECT_EQ(advice.empty(), !restarts) << advice;
    if (restarts) {
      EXPECT_NE(advice.find("net.ipv4.tcp_slow_start_after_idle=1"), std::string::npos) << advice;
    }
  }
  const bool host_bbr = first_line("/proc/sys/net/ipv4/tcp_congestion_control") == "bbr";
  EXPECT_EQ(idle_restart_advice("").empty(), host_bbr || !restarts);
}

TEST(TcpCongestionTest, OnlyTheSocketsOpenedSinceItWasMadeChange) {
  const std::string target = another_allowed();
  if (target.empty()) GTEST_SKIP() << "this host allows its default congestion control only";
  EXPECT_NO_THROW(check_tcp_congestion(target));
  const Connection earlier;
  const std::string fallback = congestion_of(earlier.client.fd);
  ASSERT_NE(fallback, target);
  const SocketsOpened opened;
  const Connection later;
  const Socket datagram{socket(AF_INET, SOCK_DGRAM, 0)};  // no TCP: left alone
  ASSERT_GE(datagram.fd, 0);
  EXPECT_EQ(opened.set_congestion(target), 3);  // listener, client, accepted
  EXPECT_EQ(congestion_of(later.client.fd), target);
  EXPECT_EQ(congestion_of(later.accepted.fd), target);
  EXPECT_EQ(congestion_of(earlier.client.fd), fallback);
  EXPECT_EQ(congestion_of(earlier.accepted.fd), fallback);
  EXPECT_EQ(opened.set_congestion(""), 0);  // the host's default: nothing changes
}

}  // namespace
}  // namespace dtrain::comm
