#include "dtrain/comm/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dtrain::comm {
namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const unsigned char s = static_cast<unsigned char>(sig);
  const ssize_t ignored = write(g_signal_pipe[1], &s, 1);
  (void)ignored;
}

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

struct Stream {
  Fd fd;
  FILE* out;
  std::string pending;  // partial line
};

struct Child {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream streams[2];
};

void forward_lines(Stream& s, const std::string& prefix, bool flush_all) {
  size_t start = 0;
  for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::fprintf(s.out, "%s%.*s\n", prefix.c_str(), static_cast<int>(nl - start),
                 s.pending.data() + start);
  }
  s.pending.erase(0, start);
  if (flush_all && !s.pending.empty()) {
    std::fprintf(s.out, "%s%s\n", prefix.c_str(), s.pending.c_str());
    s.pending.clear();
  }
  std::fflush(s.out);
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended";
}

pid_t spawn(const LaunchOptions& o, int rank, int port, int out_fd, int err_fd) {
  std::vector<std::string> env_strings{
      "RANK=" + std::to_string(rank),       "WORLD_SIZE=" + std::to_string(o.nprocs),
      "LOCAL_RANK=" + std::to_string(rank), "LOCAL_WORLD_SIZE=" + std::to_string(o.nprocs),
      "MASTER_ADDR=" + o.master_addr,       "MASTER_PORT=" + std::to_string(port),
  };
  for (const auto& [k, v] : o.extra_env)
    env_strings.push_back(k + "=" + v);
  std::vector<char*> args;
  for (const auto& a : o.command)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("launch: fork failed: ") + strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);  // own process group: a stop signal reaches the rank's children too
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    for (auto& e : env_strings)
      putenv(const_cast<char*>(e.c_str()));
    execvp(args[0], args.data());
    std::fprintf(stderr, "launch: cannot run '%s': %s\n", args[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

void signal_all(std::vector<Child>& children, int sig) {
  for (auto& c : children) {
    if (c.running) kill(-c.pid, sig);
  }
}

}  // namespace

int pick_free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) throw std::runtime_error("launch: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(s);
    throw std::runtime_error("launch: cannot find a free port");
  }
  close(s);
  return ntohs(addr.sin_port);
}

int launch(const LaunchOptions& o) {
  if (o.nprocs < 1) throw std::invalid_argument("launch: -n must be at least 1");
  if (o.command.empty()) throw std::invalid_argument("launch: no command given (use -- CMD ARGS)");
  const int port = o.master_port > 0 ? o.master_port : pick_free_port();

  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::runtime_error("launch: pipe failed");
  }
  Fd signal_read(g_signal_pipe[0]);
  Fd signal_write(g_signal_pipe[1]);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{}, old_chld{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGCHLD, &sa, &old_chld);

  std::vector<Child> children(static_cast<size_t>(o.nprocs));
  for (int r = 0; r < o.nprocs; ++r) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      throw std::runtime_error("launch: pipe failed");
    }
    Child& c = children[static_cast<size_t>(r)];
    c.streams[0] = Stream{Fd(out[0]), stdout, {}};
    c.streams[1] = Stream{Fd(err[0]), stderr, {}};
    Fd out_w(out[1]), err_w(err[1]);
    if (!o.prefix_output) {
      c.streams[0].fd.reset();
      c.streams[1].fd.reset();
      c.pid = spawn(o, r, port, STDOUT_FILENO, STDERR_FILENO);
    } else {
      c.pid = spawn(o, r, port, out_w.get(), err_w.get());
    }
    c.running = true;
  }

  int result = 0;
  int first_failed = -1;
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  char buf[65536];
  for (;;) {
    // Reap finished ranks.
    for (size_t r = 0; r < children.size(); ++r) {
      Child& c = children[r];
      if (!c.running) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.running = false;
        c.status = status;
        if (exit_code(status) != 0 && first_failed < 0 && !stopping) {
          first_failed = static_cast<int>(r);
          result = exit_code(status);
          std::fprintf(stderr, "[launch] rank %zu %s%s\n", r, describe_status(status).c_str(),
                       o.keep_going ? "" : "; stopping the other ranks");
          if (!o.keep_going) {
            stopping = true;
            signal_all(children, SIGTERM);
            stop_deadline = std::chrono::steady_clock::now() +
                            std::chrono::milliseconds(static_cast<int64_t>(o.grace_s * 1000));
          }
        } else if (exit_code(status) != 0 && o.keep_going) {
          std::fprintf(stderr, "[launch] rank %zu %s\n", r, describe_status(status).c_str());
        }
      }
    }
    bool any_running = false, any_open = false;
    for (auto& c : children) {
      any_running |= c.running;
      for (auto& s : c.streams)
        any_open |= s.fd.get() >= 0;
    }
    if (!any_running && !any_open) break;
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) {
      signal_all(children, SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }

    std::vector<pollfd> fds{{signal_read.get(), POLLIN, 0}};
    std::vector<std::pair<size_t, int>> owners{{0, -1}};
    for (size_t r = 0; r < children.size(); ++r) {
      for (int k = 0; k < 2; ++k) {
        if (children[r].streams[k].fd.get() < 0) continue;
        fds.push_back({children[r].streams[k].fd.get(), POLLIN, 0});
        owners.emplace_back(r, k);
      }
    }
    const int ready = poll(fds.data(), fds.size(), 200);
    if (ready < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (i == 0) {
        unsigned char sig = 0;
        while (read(signal_read.get(), &sig, 1) == 1) {
          if (sig == SIGINT || sig == SIGTERM) {
            std::fprintf(stderr, "[launch] received %s, forwarding to all ranks\n", strsignal(sig));
            signal_all(children, sig);
            if (!stopping) {
              stopping = true;
              if (result == 0) result = 128 + sig;
              stop_deadline = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(static_cast<int64_t>(o.grace_s * 1000));
            }
          }
        }
        continue;
      }
      auto [r, k] = owners[i];
      Stream& s = children[r].streams[k];
      const ssize_t n = read(s.fd.get(), buf, sizeof(buf));
      const std::string prefix = "[rank " + std::to_string(r) + "] ";
      if (n > 0) {
        s.pending.append(buf, static_cast<size_t>(n));
        forward_lines(s, prefix, false);
      } else if (n == 0 || errno != EINTR) {
        forward_lines(s, prefix, true);
        s.fd.reset();
      }
    }
  }

  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGCHLD, &old_chld, nullptr);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
  if (result == 0) {
    for (auto& c : children) {
      if (exit_code(c.status) != 0) return exit_code(c.status);
    }
  }
  return result;
}

}  // namespace dtrain::comm
