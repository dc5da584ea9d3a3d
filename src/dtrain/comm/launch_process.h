// Internal to the launchers (launch.cpp, launch_elastic.cpp): child processes whose output
// lines are forwarded with a prefix, the signals the launcher receives, and the poll loop
// that waits for either.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "dtrain/comm/launch.h"

namespace dtrain::comm::detail {

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_;
};

struct Stream {
  Fd fd;
  FILE* out = nullptr;
  std::string pending;  // partial line
};

struct Child {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  std::string name;  // its lines' prefix: "rank 3", "coordinator"
  Stream streams[2];
};

int exit_code(int status);
std::string describe_status(int status);

// The environment rank `rank` of `o` gets: torchrun's variables, DTRAIN_RESTART, the extra
// variables and its placement's.
std::vector<std::string> rank_environment(const LaunchOptions& o, int rank, int port, int restart);
// Starts `command` in a process group of its own, in `placement`'s network namespace, with
// `env` added to the launcher's; its output goes through pipes the poll loop forwards line
// by line with "[name] " in front, or straight to the launcher's when not `prefix_output`.
void start_child(Child& child, const std::vector<std::string>& command,
                 const std::vector<std::string>& env, const RankPlacement& placement,
                 bool prefix_output);
void signal_all(std::vector<Child>& children, int sig);
// Reaps `child` if it ended (no waiting): true when it did, its status in child.status.
bool reap(Child& child);

// Routes SIGINT, SIGTERM and SIGCHLD into a self-pipe while alive (the poll loop reads
// it); restores the previous handlers however the launcher ends, exceptions included.
class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;
  int fd() const { return read_.get(); }

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGCHLD};
  Fd read_, write_;
  std::array<struct sigaction, 3> old_{};
};

// Children; whatever is still running when this goes out of scope (an exception in the
// launcher) is killed and reaped, never left behind.
struct Children {
  std::vector<Child> list;
  ~Children();
};

// Waits up to `wait` (200 ms at most) for output or a signal and forwards the output that
// arrived. Returns the SIGINT or SIGTERM the launcher received meanwhile, or 0.
int pump(int signal_fd, std::vector<Child>& children,
         std::chrono::milliseconds wait = std::chrono::milliseconds(200));
bool anything_left(const std::vector<Child>& children);

}  // namespace dtrain::comm::detail
