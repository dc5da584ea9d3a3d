// The coordinator of an elastic run: the one process the replicas' membership lives in. It
// hosts the store (comm/kv_store.h), watches the replicas' heartbeats and registrations, and
// publishes a new view (view.h) whenever a member is lost (its heartbeat silent for
// heartbeat_timeout), leaves, or a replica registers. Replicas decide at their outer
// boundaries which view they adopt (membership.h); the coordinator never waits for them.
//
// `dtrain launch` / `dtrain train -n N --elastic` run one in a process of their own (on host
// 0 of a network lab); across hosts `dtrain coordinator` runs it where every replica can reach
// it, and replicas started anywhere (their own torchrun or Slurm jobs) join with --join.
// With a store of its own the coordinator is the run's single point of failure: the replicas
// stop when it is gone. With an etcd cluster's store the membership outlives it and any one
// etcd member: coordinators run anywhere, one leads, the others take over when it is gone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dtrain/elastic/view.h"

namespace dtrain::comm {
class KeyValueStore;
}

namespace dtrain::elastic {

struct CoordinatorConfig {
  int expect = 1;        // replicas the first view waits for
  int min_replicas = 1;  // ... or this many once form_timeout has passed
  std::chrono::milliseconds form_timeout{60'000};
  std::chrono::milliseconds heartbeat_timeout{1'000};
  // etcd: a leader that has not renewed its claim this long is replaced by a standby.
  std::chrono::milliseconds takeover_after{2'000};
  // DTRAIN_TOKEN: a registration whose proof of it differs is refused (key::refused), never
  // a member. Every replica and coordinator of a run must hold the same (or none).
  std::string token;
};

using Clock = std::chrono::steady_clock;

// How often a coordinator reads the store for a run of this heartbeat timeout: a twentieth
// of it, 50 ms at most: a death is declared at most this much after its timeout, and
// every survivor's recovery waits for the view that declares it.
std::chrono::milliseconds poll_interval(std::chrono::milliseconds heartbeat_timeout);

// What one poll of the store found.
struct Observed {
  std::vector<int64_t> registered;            // new registrations, in their order
  std::map<int64_t, std::string> heartbeats;  // replica -> its counter, where set
  std::vector<int64_t> left;                  // replicas that said they are leaving
  std::vector<int64_t> holding;               // replicas that said they hold the run's state
  std::vector<int64_t> refused;               // registrations without the token's proof
};

// The coordinator's decisions, without the store (tested on their own): feed it each poll's
// observations; it answers with the next view to publish, if any. The run's state lives only
// in members that hold it: the founders, and joiners once they entered (key::holds). A view
// whose members would all be joiners that have not entered yet has no state to hand them:
// it is published empty, and the run ends (they would otherwise wait for a donor in vain).
class MembershipPolicy {
 public:
  explicit MembershipPolicy(CoordinatorConfig config) : config_(config) {}
  std::optional<View> step(Clock::time_point now, const Observed& observed);
  // The replicas to read heartbeats of: members and candidates.
  std::vector<int64_t> watched() const;
  bool formed() const { return current_.id > 0; }
  bool holds(int64_t replica) const { return holders_.count(replica) > 0; }
  const View& current() const { return current_; }
  // Seconds since the replica's heartbeat last changed (or it registered), as of `now`.
  double silent_s(int64_t replica, Clock::time_point now) const;
  // The coordinator could not read the store for a while (an etcd election, its process
  // starved of cores): heartbeats written meanwhile could not land either, so no one's
  // silence up to `now` counts.
  void forgive(Clock::time_point now);
  // What a coordinator taking over needs to decide as this one would: the current view, the
  // candidates, the holders, and `next_seq` (the registrations read so far). JSON.
  std::string checkpoint(int64_t next_seq) const;
  // The policy a checkpoint describes, as of `now`: every member's and candidate's silence
  // counts from `now`. Sets `next_seq`. Throws std::invalid_argument on malformed text.
  static MembershipPolicy restore(CoordinatorConfig config, const std::string& checkpoint,
                                  Clock::time_point now, int64_t& next_seq);

 private:
  struct Seen {
    std::string value;
    Clock::time_point changed;
  };
  CoordinatorConfig config_;
  View current_;                     // id 0: not formed yet
  std::vector<int64_t> candidates_;  // registered, not members yet
  std::set<int64_t> holders_;        // members that hold the run's state
  std::map<int64_t, Seen> seen_;
  std::optional<Clock::time_point> first_registration_;
};

// A view's publication, for the log and the events file.
struct Published {
  View view;
  std::vector<int64_t> lost;    // members declared dead by this view
  std::vector<int64_t> joined;  // replicas it adds
};

// What the coordinator tells as it goes: each view it publishes, and each member that came to
// hold the run's state (a joiner that entered).
struct CoordinatorLog {
  std::function<void(const Published&)> published = [](const Published&) {};
  std::function<void(int64_t)> holds = [](int64_t) {};
  // etcd: this coordinator took the lead (as of that view id; 0: none yet), or lost it.
  std::function<void(int64_t)> leads = [](int64_t) {};
  std::function<void()> deposed = [] {};
  std::function<void(int64_t)> refused = [](int64_t) {};  // a registration without the token
};

class LeaderClaim;

class Coordinator {
 public:
  // Hosts the store on `address`:`port` (0: a free port) and starts watching.
  Coordinator(const std::string& address, int port, CoordinatorConfig config,
              std::chrono::milliseconds store_timeout);
  // Watches the membership in an etcd cluster's store (etcd://..., KeyValueStore::etcd),
  // one of any number of coordinators: one leads at a time (leader_claim.h); the others
  // stand by and the first to see its claim go unrenewed takes over, from the policy's checkpoint
  // (key::policy). Throws std::runtime_error when the run under that prefix already finished.
  Coordinator(const std::string& etcd_address, CoordinatorConfig config,
              std::chrono::milliseconds store_timeout);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  int port() const;
  // Polls until the run is done (a replica set key::done), stop() is called, or every
  // replica that held the run's state is gone (then false). Tells `log` as it goes.
  bool run(const CoordinatorLog& log);
  void stop();

 private:
  struct Leading;  // the leader's policy and registrations read (coordinator.cpp)
  // One poll as the leader: reads the store, steps the policy, publishes. The run's end
  // where the view it published is empty (true: every member left).
  std::optional<bool> poll(Leading& leading, const CoordinatorLog& log);
  // The registrations since the last poll, in their order; one counted but not written
  // stops the reading until it is written, or read past after 10 s (never to be written).
  void read_registrations(Leading& leading, Observed& o);
  // A new leader's policy: from the checkpoint, its view published if the last leader died
  // between the two.
  Leading take_over();

  std::unique_ptr<comm::KeyValueStore> store_;
  std::unique_ptr<LeaderClaim> claim_;  // etcd: which coordinator leads; none: this one
  Clock::time_point last_poll_{};       // when the last poll had read the store
  CoordinatorConfig config_;
  std::atomic<bool> stopping_{false};
};

}  // namespace dtrain::elastic
