#include "dtrain/comm/launch_process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dtrain::comm::detail {
namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const unsigned char s = static_cast<unsigned char>(sig);
  const ssize_t ignored = write(g_signal_pipe[1], &s, 1);
  (void)ignored;
}

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

pid_t spawn(const std::vector<std::string>& command, std::vector<std::string> env,
            const RankPlacement& placement, int out_fd, int err_fd) {
  std::vector<char*> args;
  for (const auto& a : command)
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
    setpgid(0, 0);  // own process group: a stop signal reaches the child's children too
    for (const int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE})
      signal(sig, SIG_DFL);
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    if (!placement.netns_path.empty()) enter_network_namespace(placement.netns_path);
    for (auto& e : env)
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

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
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

std::vector<std::string> rank_environment(const LaunchOptions& o, int rank, int port, int restart) {
  std::vector<std::string> env{
      "RANK=" + std::to_string(rank),
      "WORLD_SIZE=" + std::to_string(o.nprocs),
      "LOCAL_RANK=" + std::to_string(rank),
      "LOCAL_WORLD_SIZE=" + std::to_string(o.nprocs),
      "MASTER_ADDR=" + o.master_addr,
      "MASTER_PORT=" + std::to_string(port),
      "DTRAIN_RESTART=" + std::to_string(restart),
  };
  for (const auto& [k, v] : o.extra_env)
    env.push_back(k + "=" + v);
  if (!o.placements.empty())
    for (const auto& [k, v] : o.placements[static_cast<size_t>(rank)].env)
      env.push_back(k + "=" + v);
  return env;
}

void start_child(Child& c, const std::vector<std::string>& command,
                 const std::vector<std::string>& env, const RankPlacement& placement,
                 bool prefix_output) {
  if (!prefix_output) {
    c.pid = spawn(command, env, placement, STDOUT_FILENO, STDERR_FILENO);
    c.running = true;
    return;
  }
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("launch: pipe failed");
  Fd out_r(out[0]), out_w(out[1]);
  if (pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("launch: pipe failed");
  Fd err_r(err[0]), err_w(err[1]);
  c.streams[0] = Stream{std::move(out_r), stdout, {}};
  c.streams[1] = Stream{std::move(err_r), stderr, {}};
  c.pid = spawn(command, env, placement, out_w.get(), err_w.get());
  c.running = true;
}

void signal_all(std::vector<Child>& children, int sig) {
  for (auto& c : children) {
    if (c.running) kill(-c.pid, sig);
  }
}

bool reap(Child& c) {
  int status = 0;
  if (!c.running || waitpid(c.pid, &status, WNOHANG) != c.pid) return false;
  c.running = false;
  c.status = status;
  return true;
}

SignalPipe::SignalPipe() {
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

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < kSignals.size(); ++i)
    sigaction(kSignals[i], &old_[i], nullptr);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
}

Children::~Children() {
  signal_all(list, SIGKILL);
  for (auto& c : list) {
    // SIGCHLD is still routed to the self-pipe without SA_RESTART: retry interrupted waits.
    while (c.running && waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
    }
  }
}

int pump(int signal_fd, std::vector<Child>& children, std::chrono::milliseconds wait) {
  std::vector<pollfd> fds{{signal_fd, POLLIN, 0}};
  std::vector<std::pair<size_t, int>> owners{{0, -1}};
  for (size_t r = 0; r < children.size(); ++r) {
    for (int k = 0; k < 2; ++k) {
      if (children[r].streams[k].fd.get() < 0) continue;
      fds.push_back({children[r].streams[k].fd.get(), POLLIN, 0});
      owners.emplace_back(r, k);
    }
  }
  const auto timeout = static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 200));
  if (poll(fds.data(), fds.size(), timeout) < 0) return 0;  // EINTR: the next round retries
  int received = 0;
  char buf[65536];
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (i == 0) {
      unsigned char sig = 0;
      while (read(signal_fd, &sig, 1) == 1)
        if (sig == SIGINT || sig == SIGTERM) received = sig;  // SIGCHLD only wakes the loop
      continue;
    }
    auto [r, k] = owners[i];
    Stream& s = children[r].streams[k];
    const ssize_t n = read(s.fd.get(), buf, sizeof(buf));
    const std::string prefix = "[" + children[r].name + "] ";
    if (n > 0) {
      s.pending.append(buf, static_cast<size_t>(n));
      forward_lines(s, prefix, false);
    } else if (n == 0 || errno != EINTR) {
      forward_lines(s, prefix, true);
      s.fd.reset();
    }
  }
  return received;
}

bool anything_left(const std::vector<Child>& children) {
  for (const auto& c : children) {
    if (c.running) return true;
    for (const auto& s : c.streams)
      if (s.fd.get() >= 0) return true;
  }
  return false;
}

}  // namespace dtrain::comm::detail
