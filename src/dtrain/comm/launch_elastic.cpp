// The launcher of an elastic job (launch.h): a coordinator, and replicas that are started
// again one by one where they fail, while the others go on. A slot is one replica: its
// ranks (replica_ranks of them) fail and start again together.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/comm/launch.h"
#include "dtrain/comm/launch_process.h"

namespace dtrain::comm {
namespace {

using namespace detail;
using Clock = std::chrono::steady_clock;

struct Slot {
  int restarts = 0;
  std::optional<Clock::time_point> restart_at;
  bool finished = false;  // ended with 0: the run is done as far as it saw
};

class ElasticLauncher {
 public:
  explicit ElasticLauncher(const LaunchOptions& o)
      : o_(o),
        port_(o.master_port > 0 ? o.master_port : pick_free_port()),
        slots_(static_cast<size_t>(o.nprocs / std::max(1, o.replica_ranks))) {
    if (o.replica_ranks < 1 || o.nprocs % o.replica_ranks != 0)
      throw std::invalid_argument("launch: " + std::to_string(o.replica_ranks) +
                                  " ranks a replica do not divide " + std::to_string(o.nprocs));
    children_.list.resize(static_cast<size_t>(o.nprocs) + 1);  // the slots, the coordinator
  }

  int run() {
    Child& coordinator = children_.list.back();
    coordinator.name = "coordinator";
    std::vector<std::string> command = o_.coordinator_command;
    command.insert(command.end(), {"--host", o_.master_addr, "--port", std::to_string(port_)});
    start_child(coordinator, command, {}, placement(0), o_.prefix_output);
    for (int r = 0; r < o_.nprocs; ++r)
      start(r);
    for (;;) {
      reap_ranks();
      restart_due();
      const bool ranks_left = any_rank_left();
      watch_coordinator(ranks_left);
      if (!ranks_left && coordinator.running) kill(-coordinator.pid, SIGTERM);
      if (!anything_left(children_.list)) break;
      // A restart falls due on time, not at the next 200 ms tick (a replica's time to train
      // again counts it).
      if (const int sig = pump(signals_.fd(), children_.list, until_next_restart())) {
        std::fprintf(stderr, "[launch] received %s, forwarding to all\n", strsignal(sig));
        stop(128 + sig, sig);
      }
    }
    bool done = leave_by_.has_value();
    for (const auto& slot : slots_)
      done = done || slot.finished;
    if (done && (!stopping_ || (stopped_after_done_ && result_ == 0))) return 0;
    return result_ != 0 ? result_ : 1;
  }

 private:
  RankPlacement placement(int r) const {
    return o_.placements.empty() ? RankPlacement{} : o_.placements[static_cast<size_t>(r)];
  }

  Slot& slot_of(int r) { return slots_[static_cast<size_t>(r / o_.replica_ranks)]; }
  const Slot& slot_of(int r) const { return slots_[static_cast<size_t>(r / o_.replica_ranks)]; }
  // The ranks of slot g: [g K, (g + 1) K).
  int first_rank(size_t g) const { return static_cast<int>(g) * o_.replica_ranks; }

  void start(int r) {
    Child& c = children_.list[static_cast<size_t>(r)];
    c.name = "rank " + std::to_string(r);
    start_child(c, o_.command, rank_environment(o_, r, port_, slot_of(r).restarts), placement(r),
                o_.prefix_output);
  }

  // The other ranks of a failed rank's replica: they would fail on their own only at their
  // replica group's timeout.
  void kill_replica_of(int failed) {
    const int first = failed - failed % o_.replica_ranks;
    for (int r = first; r < first + o_.replica_ranks; ++r) {
      Child& c = children_.list[static_cast<size_t>(r)];
      if (r != failed && c.running) kill(-c.pid, SIGKILL);
    }
  }

  void stop(int result, int sig) {
    if (result_ == 0) result_ = result;
    stopping_ = true;
    signal_all(children_.list, sig);
  }

  void reap_ranks() {
    for (int r = 0; r < o_.nprocs; ++r) {
      Child& c = children_.list[static_cast<size_t>(r)];
      Slot& slot = slot_of(r);
      if (!reap(c)) continue;
      if (exit_code(c.status) == 0) {
        slot.finished = true;
        continue;
      }
      std::fprintf(stderr, "[launch] rank %d %s", r, describe_status(c.status).c_str());
      if (slot.restart_at) {  // its replica failed already and starts again
        std::fprintf(stderr, " with its replica\n");
        continue;
      }
      if (o_.replica_ranks > 1) kill_replica_of(r);
      if (!stopping_ && !leave_by_ && slot.restarts < o_.max_restarts) {
        slot.restart_at = Clock::now() + std::chrono::milliseconds(
                                             static_cast<int64_t>(o_.restart_delay_s * 1000));
        std::fprintf(stderr, "; starting it again in %.1f s (restart %d of %d)\n",
                     o_.restart_delay_s, slot.restarts + 1, o_.max_restarts);
      } else {
        if (result_ == 0 && !stopped_after_done_) result_ = exit_code(c.status);
        std::fprintf(stderr, "; the others go on\n");
      }
    }
  }

  std::chrono::milliseconds until_next_restart() const {
    auto wait = std::chrono::milliseconds(200);
    for (const auto& slot : slots_)
      if (slot.restart_at)
        wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(std::max(
                                  Clock::duration::zero(), *slot.restart_at - Clock::now())));
    return wait;
  }

  // A slot due starts again once every rank of its replica ended.
  void restart_due() {
    for (size_t g = 0; g < slots_.size(); ++g) {
      Slot& slot = slots_[g];
      if (!slot.restart_at || Clock::now() < *slot.restart_at || stopping_) continue;
      bool ended = true;
      for (int r = first_rank(g); r < first_rank(g) + o_.replica_ranks; ++r)
        ended = ended && !children_.list[static_cast<size_t>(r)].running;
      if (!ended) continue;
      slot.restart_at.reset();
      ++slot.restarts;
      for (int r = first_rank(g); r < first_rank(g) + o_.replica_ranks; ++r)
        start(r);
    }
  }

  bool any_rank_left() const {
    for (int r = 0; r < o_.nprocs; ++r)
      if (children_.list[static_cast<size_t>(r)].running || (slot_of(r).restart_at && !stopping_))
        return true;
    return false;
  }

  // The coordinator ends with 0 once the run is done: the replicas are leaving, and those
  // still running get a while to. Any other end of it stops the ranks.
  void watch_coordinator(bool ranks_left) {
    Child& coordinator = children_.list.back();
    if (reap(coordinator) && ranks_left && !stopping_) {
      if (exit_code(coordinator.status) == 0) {
        leave_by_ = Clock::now() + std::chrono::seconds(30);
        for (auto& slot : slots_)
          slot.restart_at.reset();
      } else {
        std::fprintf(stderr, "[launch] the coordinator %s; stopping the ranks\n",
                     describe_status(coordinator.status).c_str());
        stop(exit_code(coordinator.status), SIGTERM);
      }
    }
    if (leave_by_ && Clock::now() > *leave_by_ && !stopping_) {
      // A replica started again just before the end waits for a store that is gone: the
      // run's work is done all the same, so the job still ends with 0.
      std::fprintf(stderr,
                   "[launch] the run is done; stopping the ranks still running after 30 s "
                   "(replicas that had not entered it)\n");
      stop(0, SIGTERM);
      stopped_after_done_ = true;
    }
  }

  const LaunchOptions& o_;
  const int port_;
  const SignalPipe signals_;  // before the children: restored after they are reaped
  Children children_;
  std::vector<Slot> slots_;
  int result_ = 0;
  bool stopping_ = false;
  std::optional<Clock::time_point> leave_by_;  // the coordinator ended the run
  bool stopped_after_done_ = false;
};

}  // namespace

int launch_elastic(const LaunchOptions& o) {
  if (o.coordinator_command.empty())
    throw std::invalid_argument("launch: an elastic job needs its coordinator's command");
  return ElasticLauncher(o).run();
}

}  // namespace dtrain::comm
