#include "dtrain/comm/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
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
  FILE* out = nullptr;
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

// In a forked child: moves it into a network namespace or exits 127 saying why.
void enter_network_namespace(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "launch: cannot enter the network namespace %s: %s%s\n", path.c_str(),
                 strerror(errno), errno == EPERM ? " (a network lab needs root)" : "");
    _exit(127);
  }
  close(fd);
}

pid_t spawn(const LaunchOptions& o, int rank, int port, int restart, int out_fd, int err_fd) {
  std::vector<std::string> env_strings{
      "RANK=" + std::to_string(rank),
      "WORLD_SIZE=" + std::to_string(o.nprocs),
      "LOCAL_RANK=" + std::to_string(rank),
      "LOCAL_WORLD_SIZE=" + std::to_string(o.nprocs),
      "MASTER_ADDR=" + o.master_addr,
      "MASTER_PORT=" + std::to_string(port),
      "DTRAIN_RESTART=" + std::to_string(restart),
  };
  for (const auto& [k, v] : o.extra_env)
    env_strings.push_back(k + "=" + v);
  const RankPlacement placement =
      o.placements.empty() ? RankPlacement{} : o.placements[static_cast<size_t>(rank)];
  for (const auto& [k, v] : placement.env)
    env_strings.push_back(k + "=" + v);
  std::vector<char*> args;
  for (const auto& a : o.command)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  // Signals stay blocked across fork until the child has dropped the launcher's handlers:
  // a stop sent to a child that has not yet reset them would run on_signal in the child and
  // write into the launcher's own signal pipe, so the launcher would believe it was told to
  // stop (and give up on restarts). Blocked, it stays pending and kills the child instead.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);  // own process group: a stop signal reaches the rank's children too
    for (const int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE})
      signal(sig, SIG_DFL);
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    if (!placement.netns_path.empty()) enter_network_namespace(placement.netns_path);
    for (auto& e : env_strings)
      putenv(const_cast<char*>(e.c_str()));
    execvp(args[0], args.data());
    std::fprintf(stderr, "launch: cannot run '%s': %s\n", args[0], strerror(errno));
    _exit(127);
  }
  const int fork_error = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0)
    throw std::runtime_error(std::string("launch: fork failed: ") + strerror(fork_error));
  setpgid(pid, pid);
  return pid;
}

void signal_all(std::vector<Child>& children, int sig) {
  for (auto& c : children) {
    if (c.running) kill(-c.pid, sig);
  }
}

// Routes SIGINT, SIGTERM and SIGCHLD into a self-pipe while alive (the poll loop reads
// it); restores the previous handlers however launch() ends, exceptions included.
class SignalPipe {
 public:
  SignalPipe() {
    if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      throw std::runtime_error("launch: pipe failed");
    }
    read_ = Fd(g_signal_pipe[0]);
    write_ = Fd(g_signal_pipe[1]);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i)
      sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalPipe() {
    for (size_t i = 0; i < kSignals.size(); ++i)
      sigaction(kSignals[i], &old_[i], nullptr);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;
  int fd() const { return read_.get(); }

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGCHLD};
  Fd read_, write_;
  std::array<struct sigaction, 3> old_{};
};

// The ranks; whatever is still running when this goes out of scope (an exception in
// launch()) is killed and reaped, never left behind.
struct Ranks {
  std::vector<Child> children;
  ~Ranks() {
    signal_all(children, SIGKILL);
    for (auto& c : children) {
      // SIGCHLD is still routed to the self-pipe without SA_RESTART: retry interrupted waits.
      while (c.running && waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
      }
    }
  }
};

void start_ranks(const LaunchOptions& o, int port, int restart, std::vector<Child>& children) {
  for (int r = 0; r < o.nprocs; ++r) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("launch: pipe failed");
    Fd out_r(out[0]), out_w(out[1]);
    if (pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("launch: pipe failed");
    Fd err_r(err[0]), err_w(err[1]);
    Child& c = children[static_cast<size_t>(r)];
    if (o.prefix_output) {
      c.streams[0] = Stream{std::move(out_r), stdout, {}};
      c.streams[1] = Stream{std::move(err_r), stderr, {}};
      c.pid = spawn(o, r, port, restart, out_w.get(), err_w.get());
    } else {
      c.pid = spawn(o, r, port, restart, STDOUT_FILENO, STDERR_FILENO);
    }
    c.running = true;
  }
}

// What the launcher decided so far: the exit code it will return and whether it is
// stopping the ranks (a rank failed, or it was told to stop), with the SIGKILL deadline.
struct LaunchState {
  int result = 0;
  bool stopping = false;
  bool interrupted = false;  // the launcher itself was told to stop: never restart
  std::chrono::steady_clock::time_point kill_at = std::chrono::steady_clock::time_point::max();
  void stop(std::vector<Child>& children, int sig, double grace_s) {
    signal_all(children, sig);
    if (stopping) return;
    stopping = true;
    kill_at = std::chrono::steady_clock::now() +
              std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  }
};

void reap_finished(const LaunchOptions& o, std::vector<Child>& children, LaunchState& state) {
  for (size_t r = 0; r < children.size(); ++r) {
    Child& c = children[r];
    int status = 0;
    if (!c.running || waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
    c.running = false;
    c.status = status;
    if (exit_code(status) == 0) continue;
    if (o.keep_going) {
      if (state.result == 0) state.result = exit_code(status);  // the first to fail
      std::fprintf(stderr, "[launch] rank %zu %s\n", r, describe_status(status).c_str());
    } else if (!state.stopping) {
      state.result = exit_code(status);
      std::fprintf(stderr, "[launch] rank %zu %s; stopping the other ranks\n", r,
                   describe_status(status).c_str());
      state.stop(children, SIGTERM, o.grace_s);
    }
  }
}

void forward_signals(int signal_fd, const LaunchOptions& o, std::vector<Child>& children,
                     LaunchState& state) {
  unsigned char sig = 0;
  while (read(signal_fd, &sig, 1) == 1) {
    if (sig != SIGINT && sig != SIGTERM) continue;  // SIGCHLD only wakes the loop
    std::fprintf(stderr, "[launch] received %s, forwarding to all ranks\n", strsignal(sig));
    if (!state.stopping && state.result == 0) state.result = 128 + sig;
    state.interrupted = true;
    state.stop(children, sig, o.grace_s);
  }
}

// Waits up to 200 ms for output or a signal and handles what arrived.
void pump(int signal_fd, const LaunchOptions& o, std::vector<Child>& children, LaunchState& state) {
  std::vector<pollfd> fds{{signal_fd, POLLIN, 0}};
  std::vector<std::pair<size_t, int>> owners{{0, -1}};
  for (size_t r = 0; r < children.size(); ++r) {
    for (int k = 0; k < 2; ++k) {
      if (children[r].streams[k].fd.get() < 0) continue;
      fds.push_back({children[r].streams[k].fd.get(), POLLIN, 0});
      owners.emplace_back(r, k);
    }
  }
  if (poll(fds.data(), fds.size(), 200) < 0) return;  // EINTR: the next round retries
  char buf[65536];
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (i == 0) {
      forward_signals(signal_fd, o, children, state);
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

bool anything_left(const std::vector<Child>& children) {
  for (const auto& c : children) {
    if (c.running) return true;
    for (const auto& s : c.streams)
      if (s.fd.get() >= 0) return true;
  }
  return false;
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

namespace {

// One start of every rank, until all have ended: the exit code, and whether the launcher
// was interrupted.
std::pair<int, bool> run_once(const LaunchOptions& o, int restart, const SignalPipe& signals) {
  const int port = o.master_port > 0 ? o.master_port : pick_free_port();
  Ranks ranks;
  ranks.children.resize(static_cast<size_t>(o.nprocs));
  start_ranks(o, port, restart, ranks.children);
  LaunchState state;
  for (;;) {
    reap_finished(o, ranks.children, state);
    if (!anything_left(ranks.children)) break;
    if (state.stopping && std::chrono::steady_clock::now() > state.kill_at) {
      signal_all(ranks.children, SIGKILL);
      state.kill_at = std::chrono::steady_clock::time_point::max();
    }
    pump(signals.fd(), o, ranks.children, state);
  }
  if (state.result == 0) {
    for (auto& c : ranks.children) {
      if (exit_code(c.status) != 0) return {exit_code(c.status), state.interrupted};
    }
  }
  return {state.result, state.interrupted};
}

}  // namespace

int launch(const LaunchOptions& o) {
  if (o.nprocs < 1) throw std::invalid_argument("launch: -n must be at least 1");
  if (o.command.empty()) throw std::invalid_argument("launch: no command given (use -- CMD ARGS)");
  if (o.max_restarts < 0) throw std::invalid_argument("launch: --max-restarts must be >= 0");
  if (!o.placements.empty() && static_cast<int>(o.placements.size()) != o.nprocs) {
    throw std::invalid_argument("launch: " + std::to_string(o.placements.size()) +
                                " placements for " + std::to_string(o.nprocs) + " ranks");
  }
  const SignalPipe signals;  // declared before the ranks: restored after they are reaped
  for (int restart = 0;; ++restart) {
    const auto [code, interrupted] = run_once(o, restart, signals);
    if (code == 0 || interrupted || restart >= o.max_restarts) {
      if (restart > 0) {
        std::fprintf(stderr, "[launch] %s after %d restart%s\n", code == 0 ? "finished" : "gave up",
                     restart, restart == 1 ? "" : "s");
      }
      return code;
    }
    std::fprintf(stderr, "[launch] restarting every rank (restart %d of %d; DTRAIN_RESTART=%d)\n",
                 restart + 1, o.max_restarts, restart + 1);
  }
}

}  // namespace dtrain::comm
