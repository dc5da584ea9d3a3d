#include "dtrain/netlab/impairer.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>

#include "dtrain/netlab/delay_line.h"
#include "dtrain/netlab/lab.h"
#include "dtrain/netlab/nfqueue.h"

namespace dtrain::netlab {
namespace {

using Clock = DelayLine::Clock;

struct Counts {
  uint64_t passed = 0;
  uint64_t dropped = 0;
  uint64_t overflows = 0;  // times the kernel reported lost queue messages
};

bool namespace_exists(const std::string& ns) {
  struct stat st {};
  return stat(namespace_path(ns).c_str(), &st) == 0;
}

// The queue, bound from inside the namespace (a netlink socket keeps the namespace it was
// made in). Without loss the kernel may hand over whole GSO packets (cheaper); with loss
// it segments them first, so a lost packet is one packet on the wire, not a 64 KiB burst.
std::unique_ptr<NfQueue> bind_queue(const ImpairerSpec& spec) {
  const std::string& ns = spec.namespace_name;
  const int fd = open(namespace_path(ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open namespace " + ns + ": " + strerror(errno));
  const int entered = setns(fd, CLONE_NEWNET);
  const int error = errno;
  close(fd);
  if (entered != 0)
    throw std::runtime_error("cannot enter namespace " + ns + ": " + strerror(error));
  return std::make_unique<NfQueue>(kImpairQueue, /*whole_gso_packets=*/spec.loss_percent == 0);
}

// Latency is the point of this process: ask for a real-time slot, and for tight timers.
void prefer_prompt_wakeups() {
  prctl(PR_SET_NAME, kImpairerName);
  prctl(PR_SET_TIMERSLACK, 1000UL);  // ns
  sched_param p{};
  p.sched_priority = 10;
  if (sched_setscheduler(0, SCHED_FIFO, &p) != 0 && setpriority(PRIO_PROCESS, 0, -10) != 0) {
    std::fprintf(stderr, "impairer: runs at normal priority (%s)\n", strerror(errno));
  }
}

// Waits for packets, the next release, a signal, or a second (to notice a removed lab).
Counts run_loop(NfQueue& queue, const ImpairerSpec& spec, int signal_fd) {
  DelayLine line(spec.delay_ms, spec.loss_percent, spec.seed);
  Counts counts;
  pollfd fds[2] = {{queue.fd(), POLLIN, 0}, {signal_fd, POLLIN, 0}};
  std::vector<uint32_t> ids;
  auto next_check = Clock::now() + std::chrono::seconds(1);
  for (;;) {
    const auto until = std::min(line.next_due().value_or(next_check), next_check);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::max(Clock::duration::zero(), until - Clock::now()))
                        .count();
    const timespec timeout{static_cast<time_t>(ns / 1000000000),
                           static_cast<long>(ns % 1000000000)};
    if (ppoll(fds, 2, &timeout, nullptr) < 0 && errno != EINTR) {
      throw std::runtime_error(std::string("poll: ") + strerror(errno));
    }
    if (fds[1].revents != 0) return counts;
    if (fds[0].revents != 0) {
      ids.clear();
      if (!queue.receive(ids)) ++counts.overflows;
      const auto now = Clock::now();
      for (const uint32_t id : ids) {
        if (line.arrive(id, now)) continue;
        queue.verdict(id, false);
        ++counts.dropped;
      }
    }
    for (const uint32_t id : line.release(Clock::now())) {
      queue.verdict(id, true);
      ++counts.passed;
    }
    if (Clock::now() >= next_check) {
      if (!namespace_exists(spec.namespace_name)) return counts;
      next_check = Clock::now() + std::chrono::seconds(1);
    }
  }
}

// The detached process: binds, says "ok" (or why not) on `ready`, then serves until told to
// stop. Never returns.
[[noreturn]] void serve(const ImpairerSpec& spec, int ready) {
  const int null = open("/dev/null", O_RDWR);
  const int log = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  dup2(null, STDIN_FILENO);
  dup2(null, STDOUT_FILENO);
  dup2(log >= 0 ? log : null, STDERR_FILENO);
  // Keep nothing of the caller's (a pipe it reads to the end would never end).
  if (ready > 3) close_range(3, static_cast<unsigned>(ready) - 1, 0);
  close_range(static_cast<unsigned>(ready) + 1, ~0U, 0);
  const std::string me = std::to_string(getpid()) + " ";
  int status = 0;
  try {
    sigset_t stop;
    sigemptyset(&stop);
    for (const int s : {SIGTERM, SIGINT, SIGHUP})
      sigaddset(&stop, s);
    sigprocmask(SIG_BLOCK, &stop, nullptr);
    const int signal_fd = signalfd(-1, &stop, SFD_CLOEXEC);
    if (signal_fd < 0) throw std::runtime_error(std::string("signalfd: ") + strerror(errno));
    prefer_prompt_wakeups();
    const auto queue = bind_queue(spec);
    const std::string ok = me + "ok\n";
    if (write(ready, ok.data(), ok.size()) < 0) _exit(1);
    close(ready);
    const Counts c = run_loop(*queue, spec, signal_fd);
    std::fprintf(stderr, "impairer: %llu packets passed, %llu dropped, %llu queue overflows\n",
                 static_cast<unsigned long long>(c.passed),
                 static_cast<unsigned long long>(c.dropped),
                 static_cast<unsigned long long>(c.overflows));
  } catch (const std::exception& e) {
    const std::string why = std::string(e.what()) + "\n";
    const std::string said = me + why;
    // Nothing more to do if the starter is gone: it reports "no answer" itself.
    [[maybe_unused]] const ssize_t written = write(ready, said.data(), said.size());
    std::fprintf(stderr, "impairer: %s", why.c_str());
    status = 1;
  }
  _exit(status);
}

bool is_impairer(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  if (name != kImpairerName) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

}  // namespace

pid_t start_impairer(const ImpairerSpec& spec) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("netlab: pipe failed");
  const pid_t child = fork();
  if (child < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("netlab: fork failed: ") + strerror(errno));
  }
  if (child == 0) {
    // Detach: a new session, and a grandchild that init adopts, so the impairer neither
    // holds the caller's terminal nor stays its zombie.
    close(fds[0]);
    setsid();
    const pid_t grandchild = fork();
    if (grandchild == 0) serve(spec, fds[1]);
    _exit(grandchild > 0 ? 0 : 1);
  }
  close(fds[1]);
  std::string said;
  char buf[512];
  pollfd p{fds[0], POLLIN, 0};
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    p.revents = 0;
    if (poll(&p, 1, 100) < 0 && errno != EINTR) break;
    if (p.revents == 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    said.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  const size_t space = said.find(' ');
  const pid_t pid = space == std::string::npos ? 0 : std::atoi(said.substr(0, space).c_str());
  const std::string message = space == std::string::npos ? said : said.substr(space + 1);
  if (pid > 0 && message == "ok\n") return pid;
  if (pid > 0) stop_impairer(pid);
  throw std::runtime_error("netlab: the delay/loss impairer did not start: " +
                           (message.empty() ? std::string("no answer within 10 s") : message));
}

void stop_impairer(pid_t pid) {
  if (pid <= 0 || !is_impairer(pid)) return;
  kill(pid, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (is_impairer(pid) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (is_impairer(pid)) kill(pid, SIGKILL);
  while (is_impairer(pid))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace dtrain::netlab
