#include "dtrain/comm/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dtrain/comm/launch_process.h"

namespace dtrain::comm {
namespace {

using namespace detail;

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
    if (!reap(c) || exit_code(c.status) == 0) continue;
    if (o.keep_going) {
      if (state.result == 0) state.result = exit_code(c.status);  // the first to fail
      std::fprintf(stderr, "[launch] rank %zu %s\n", r, describe_status(c.status).c_str());
    } else if (!state.stopping) {
      state.result = exit_code(c.status);
      std::fprintf(stderr, "[launch] rank %zu %s; stopping the other ranks\n", r,
                   describe_status(c.status).c_str());
      state.stop(children, SIGTERM, o.grace_s);
    }
  }
}

// One start of every rank, until all have ended: the exit code, and whether the launcher
// was interrupted.
std::pair<int, bool> run_once(const LaunchOptions& o, int restart, const SignalPipe& signals) {
  const int port = o.master_port > 0 ? o.master_port : pick_free_port();
  Children ranks;
  ranks.list.resize(static_cast<size_t>(o.nprocs));
  for (int r = 0; r < o.nprocs; ++r) {
    Child& c = ranks.list[static_cast<size_t>(r)];
    c.name = "rank " + std::to_string(r);
    start_child(c, o.command, rank_environment(o, r, port, restart),
                o.placements.empty() ? RankPlacement{} : o.placements[static_cast<size_t>(r)],
                o.prefix_output);
  }
  LaunchState state;
  for (;;) {
    reap_finished(o, ranks.list, state);
    if (!anything_left(ranks.list)) break;
    if (state.stopping && std::chrono::steady_clock::now() > state.kill_at) {
      signal_all(ranks.list, SIGKILL);
      state.kill_at = std::chrono::steady_clock::time_point::max();
    }
    if (const int sig = pump(signals.fd(), ranks.list)) {
      std::fprintf(stderr, "[launch] received %s, forwarding to all ranks\n", strsignal(sig));
      if (!state.stopping && state.result == 0) state.result = 128 + sig;
      state.interrupted = true;
      state.stop(ranks.list, sig, o.grace_s);
    }
  }
  if (state.result == 0) {
    for (auto& c : ranks.list) {
      if (exit_code(c.status) != 0) return {exit_code(c.status), state.interrupted};
    }
  }
  return {state.result, state.interrupted};
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
  if (o.max_restarts < 0) throw std::invalid_argument("launch: --max-restarts must be >= 0");
  if (!o.placements.empty() && static_cast<int>(o.placements.size()) != o.nprocs) {
    throw std::invalid_argument("launch: " + std::to_string(o.placements.size()) +
                                " placements for " + std::to_string(o.nprocs) + " ranks");
  }
  if (o.elastic) return launch_elastic(o);
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
