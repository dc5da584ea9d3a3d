// A replica's side of an elastic run's membership (docs/elastic.md): it registers with the
// coordinator's store (coordinator.h), heartbeats from a thread of its own, follows the
// views the coordinator publishes, and connects the groups its training runs over.
//
// Contracts:
// - Heartbeats: every heartbeat_interval() the watcher thread bumps key::heartbeat(id); the
//   coordinator declares the replica lost once they stop for its heartbeat_timeout.
// - Aborts: a group connected here is aborted (Group::abort) by the watcher as soon as a
//   newer view drops one of its members, or when the store has not answered for a heartbeat
//   timeout (the coordinator, or this replica's own link, is gone): a wait in it then ends
//   at once with a CommError, whatever the group's timeout.
// - Posts: post() hands a key and value to the watcher thread, which sets them in order;
//   the main thread never waits for them.
// - One thread (the training loop's) calls the rest.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/world.h"
#include "dtrain/elastic/view.h"

namespace dtrain::comm {
class Group;
class KeyValueStore;
}  // namespace dtrain::comm

namespace dtrain::elastic {

// The run finished before this replica could enter it (a joiner that came too late).
class RunFinished : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How often a replica of a run of this heartbeat timeout beats: a tenth of it, 100 ms at
// most. A beat is two store requests (the heartbeat, the newest view's id), and survivors
// learn of a new view at their next beat.
std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds heartbeat_timeout);

struct MembershipConfig {
  std::string address = "127.0.0.1";  // the coordinator's store
  int port = 0;
  std::string etcd;         // etcd://...: the membership lives in this etcd cluster instead
  comm::WorldConfig world;  // how groups connect: timeout, wire check, interface, streams
  // The coordinator's; the heartbeats follow it (heartbeat_interval).
  std::chrono::milliseconds heartbeat_timeout{1'000};
  std::chrono::milliseconds connect_timeout{10'000};  // for every member of a group to come
  std::optional<int64_t> replica_id;  // fixed (launcher slots, fault plans), else the store's
  // Fault plans: register only once the members have committed this many outer steps.
  std::optional<int64_t> register_after_round;
};

class Membership {
 public:
  // Connects to the store and registers (a fresh id unless one is given); heartbeats start.
  // Throws CommError when the store does not answer.
  explicit Membership(MembershipConfig config);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  int64_t id() const { return id_; }
  comm::KeyValueStore& store() { return *store_; }
  const MembershipConfig& config() const { return config_; }

  // The newest view the store holds (0: none yet), and a view by id (cached: views never
  // change).
  int64_t latest();
  // The newest view seen by latest() or by the watcher, which reads it every heartbeat: at
  // most a heartbeat interval old, and no round trip to the store.
  int64_t latest_seen() const { return latest_seen_.load(); }
  const View& view(int64_t id);
  // Waits until a view newer than `than` is published; its id, or nothing after `timeout`.
  std::optional<int64_t> wait_newer(int64_t than, std::chrono::milliseconds timeout);
  // Waits for the first view holding this replica: the view the run formed with, or one the
  // members adopted (key::adopted) to let it in. Throws RunFinished when the run finished
  // first, std::runtime_error when nothing came within `timeout`.
  View wait_to_enter(std::chrono::milliseconds timeout);
  // std::runtime_error, naming the token, where the coordinator refused this registration
  // (its proof of DTRAIN_TOKEN differs: coordinator.h). Waits for a view call it.
  void throw_if_refused();
  // Connects the group of `members` (replica ids, this one among them; ranks in their order)
  // under `name`, and makes it the current group: the one the watcher aborts. Throws
  // CommError when a member does not come within connect_timeout, the newest view does not
  // hold one of them (at once), or a view drops one of
  // them while they connect.
  comm::Group& connect(const std::string& name, const std::vector<int64_t>& members);
  // Starts connecting `name` among `members` now, on a thread, for a later connect() of the
  // same name and members to take up where it got (the group of a round's members and the
  // joiners that named themselves to enter it mid-round, connected while they train); not
  // started where the newest view seen lacks one of them. Its failure is the later
  // connect()'s. Nothing waits on it: one not taken up is dropped at
  // the next connect() (its thread ends at connect_timeout at the latest).
  void connect_ahead(const std::string& name, const std::vector<int64_t>& members);
  // Whether the last connect() took up a connect_ahead().
  bool connected_ahead() const { return connected_ahead_; }
  comm::Group* group() { return group_.get(); }
  // The current group's members, in rank order (empty: none).
  std::vector<int64_t> group_members();
  // Drops the current group (its connections close).
  void disconnect();

  // Sets key = value from the watcher thread, in order, without waiting.
  void post(const std::string& key, const std::string& value);
  // Sets left(id) and waits until it is set: the coordinator drops this replica without
  // counting it lost.
  void leave();
  // Sets holds(id): this replica holds the run's state (it entered), and may donate it.
  void hold();
  // Leaves and registers again under a fresh id (a replica whose round did not count where
  // others' did: it enters again as a joiner).
  void register_again();

 private:
  void register_once();
  // Sets `key` (left, holds), then bumps key::notices: a coordinator that counts the notice
  // reads the key.
  void notice(const std::string& key);
  std::chrono::milliseconds beat() const { return heartbeat_interval(config_.heartbeat_timeout); }
  // The run's challenge (key::challenge), once a coordinator leads; CommError after the
  // store's timeout.
  std::string await_challenge();
  void watch();
  void note_seen(int64_t view);
  // Aborts the current group if `view` drops one of its members.
  void check_against(const View& view);
  // This replica's rank among `members` of group `name`; std::invalid_argument if absent.
  int rank_in(const std::string& name, const std::vector<int64_t>& members) const;
  std::future<std::unique_ptr<comm::Group>> start_connecting(const std::string& name,
                                                             const std::vector<int64_t>& members);
  // Waits until `connected` is ready; CommError as soon as a view from `since` on drops one
  // of `members`.
  void watch_while_connecting(const std::future<std::unique_ptr<comm::Group>>& connected,
                              const std::string& name, const std::vector<int64_t>& members,
                              int64_t since);

  MembershipConfig config_;
  std::unique_ptr<comm::KeyValueStore> store_;  // the training thread's
  int64_t id_ = -1;
  // The newest view before this id registered: no view up to it can name the id.
  int64_t registered_after_ = 0;
  std::map<int64_t, View> views_;
  std::atomic<int64_t> latest_seen_{0};

  std::mutex mutex_;  // guards what the watcher shares
  std::unique_ptr<comm::Group> group_;
  std::vector<int64_t> group_members_;
  int64_t group_since_ = 0;  // the newest view id when the group was connected
  std::vector<std::pair<std::string, std::string>> posts_;
  bool stopping_ = false;
  std::thread watcher_;
  std::vector<std::thread> connecting_;  // one per connect(); joined at the end
  struct Ahead {
    std::vector<int64_t> members;
    std::future<std::unique_ptr<comm::Group>> connected;
  };
  std::map<std::string, Ahead> ahead_;  // connect_ahead()'s, by name
  bool connected_ahead_ = false;
};

}  // namespace dtrain::elastic
