// Starts N local ranks of a command, torchrun-style.
//
// Each child gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT. Every line a child prints is forwarded with a "[rank k] " prefix (stdout to
// stdout, stderr to stderr). SIGINT/SIGTERM received by the launcher are forwarded to all
// ranks. When a rank fails (non-zero exit or signal), the others are sent SIGTERM, then
// SIGKILL after a grace period, and the launcher returns the failing rank's status
// (128 + signal for a signal). Returns 0 when every rank exits 0.
//
// Restarts (torchrun's --max-restarts): when a rank fails, every rank is stopped, then all
// are started again, at most max_restarts times, each time on a fresh rendezvous port
// unless one is fixed; DTRAIN_RESTART (0, 1, ...) tells the ranks which start this is. A
// job that resumes from its checkpoints (train --checkpoint-dir D --resume) thus goes on
// from the last one. A launcher told to stop (SIGINT, SIGTERM) never restarts.
//
// Elastic (docs/elastic.md): a coordinator process (coordinator_command with "--port P"
// added, placed where rank 0 would be) hosts the run's membership on master_addr:P; the
// ranks are its replicas. A rank that fails does not stop the others: its slot is started
// again alone restart_delay_s later, at most max_restarts times a slot, with its restart
// count in DTRAIN_RESTART; it joins the running job. Where a replica is several ranks
// (replica_ranks K: ranks [g K, (g + 1) K) are replica g), they fail and start again
// together: the first to fail has the others of its replica killed. The launcher returns 0 once the
// run is done (a rank ended with 0 and the coordinator with it), else the first failure's status;
// when the coordinator ends first, it stops the ranks.
#pragma once

#include <string>
#include <vector>

namespace dtrain::comm {

// Where one rank runs when not in the launcher's own network: a network namespace to enter
// first (the path setns(2) opens, e.g. /run/netns/NAME) and environment variables of its
// own (added after the common ones).
struct RankPlacement {
  std::string netns_path;
  std::vector<std::pair<std::string, std::string>> env;
};

struct LaunchOptions {
  int nprocs = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port
  std::vector<std::string> command;
  bool prefix_output = true;
  bool keep_going = false;  // on a failure, wait for the others instead of stopping them
  double grace_s = 5.0;
  int max_restarts = 0;
  std::vector<std::pair<std::string, std::string>> extra_env;
  std::vector<RankPlacement> placements;  // empty, or one per rank
  bool elastic = false;
  std::vector<std::string> coordinator_command;
  double restart_delay_s = 1.0;
  int replica_ranks = 1;  // elastic: the ranks of one replica, restarted together
};

int launch(const LaunchOptions& options);
// launch() of an elastic job (launch_elastic.cpp).
int launch_elastic(const LaunchOptions& options);

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read, close).
int pick_free_port();

}  // namespace dtrain::comm
