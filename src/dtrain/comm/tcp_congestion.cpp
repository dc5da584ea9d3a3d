#include "dtrain/comm/tcp_congestion.h"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace dtrain::comm {
namespace {

// This process's open sockets: descriptor -> inode.
std::map<int, unsigned long> open_sockets() {
  std::map<int, unsigned long> sockets;
  const std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir("/proc/self/fd"), closedir);
  if (!dir) return sockets;
  const int own = dirfd(dir.get());
  while (const dirent* entry = readdir(dir.get())) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own) continue;
    char target[64] = {};
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    unsigned long inode = 0;
    if (n > 0 && std::sscanf(target, "socket:[%lu]", &inode) == 1)
      sockets[static_cast<int>(fd)] = inode;
  }
  return sockets;
}

bool is_tcp(int fd) {
  int protocol = 0;
  socklen_t length = sizeof(protocol);
  return getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &length) == 0 &&
         protocol == IPPROTO_TCP;
}

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string allowed_algorithms() {
  const std::string line = first_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
  return line.empty() ? "unknown" : line;
}

[[noreturn]] void refused(const std::string& algorithm, int error) {
  throw std::invalid_argument("TCP congestion control '" + algorithm + "' is refused here (" +
                              std::strerror(error) + "): this host lets a process choose " +
                              allowed_algorithms() +
                              " (--tcp-congestion, DTRAIN_TCP_CONGESTION; empty: the host's "
                              "default)");
}

// setsockopt(TCP_CONGESTION); the errno where it failed, else 0.
int set_on(int fd, const std::string& algorithm) {
  return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, algorithm.data(),
                    static_cast<socklen_t>(algorithm.size())) == 0
             ? 0
             : errno;
}

}  // namespace

void check_tcp_congestion(const std::string& algorithm) {
  if (algorithm.empty()) return;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return;  // no socket to try it on: connecting will say what is wrong
  const int error = set_on(fd, algorithm);
  close(fd);
  if (error != 0) refused(algorithm, error);
}

std::string idle_restart_advice(const std::string& algorithm) {
  const std::string used =
      algorithm.empty() ? first_line("/proc/sys/net/ipv4/tcp_congestion_control") : algorithm;
  if (used.empty() || used == "bbr" ||
      first_line("/proc/sys/net/ipv4/tcp_slow_start_after_idle") != "1")
    return "";
  return "dtrain: the connections run " + used +
         ", and this host restarts an idle connection's window "
         "(net.ipv4.tcp_slow_start_after_idle=1): on a long link a step's first message after "
         "compute starts small; root can set it to 0 on every host (docs/wire-format.md, "
         "\"Congestion control\")";
}

void advise_on_idle_restart(const std::string& algorithm) {
  static std::once_flag once;
  std::call_once(once, [&algorithm] {
    const std::string advice = idle_restart_advice(algorithm);
    if (!advice.empty()) std::fprintf(stderr, "%s\n", advice.c_str());
  });
}

SocketsOpened::SocketsOpened() {
  for (const auto& [fd, inode] : open_sockets())
    before_.insert(inode);
}

int SocketsOpened::set_congestion(const std::string& algorithm) const {
  if (algorithm.empty()) return 0;
  int set = 0;
  for (const auto& [fd, inode] : open_sockets()) {
    if (before_.count(inode) || !is_tcp(fd)) continue;
    const int error = set_on(fd, algorithm);
    // A descriptor closed (or reused for something else) since it was listed is no socket of
    // the group's any more.
    if (error == EBADF || error == ENOTSOCK) continue;
    if (error != 0) refused(algorithm, error);
    ++set;
  }
  return set;
}

}  // namespace dtrain::comm
