#include "dtrain/elastic/membership.h"

#include <algorithm>
#include <future>
#include <stdexcept>

#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/comm/token_proof.h"
#include "dtrain/elastic/fault_plan.h"

namespace dtrain::elastic {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t to_id(const std::optional<std::string>& text) {
  return text ? std::stoll(*text) : 0;
}

std::unique_ptr<comm::KeyValueStore> open_store(const MembershipConfig& c) {
  if (!c.etcd.empty()) return comm::KeyValueStore::etcd(c.etcd, c.world.timeout);
  return comm::KeyValueStore::connect(c.address, c.port, c.world.timeout);
}

}  // namespace

Membership::Membership(MembershipConfig config)
    : config_(std::move(config)), store_(open_store(config_)) {
  register_once();
  watcher_ = std::thread([this] { watch(); });
}

Membership::~Membership() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
  for (auto& t : connecting_)  // abandoned connects end at their timeout
    t.join();
}

void Membership::register_once() {
  if (config_.register_after_round) {
    const int64_t due = *config_.register_after_round;
    while (to_id(store_->try_get(key::round())) < due && !store_->try_get(key::done()))
      std::this_thread::sleep_for(milliseconds(20));
    config_.register_after_round.reset();
  }
  registered_after_ = to_id(store_->try_get(key::latest_view()));
  if (config_.replica_id && id_ < 0)
    id_ = *config_.replica_id;
  else
    id_ = store_->add(key::next_id(), 1) + kFirstRegisteredId;
  store_->set(key::proof(id_), comm::token_proof(config_.world.token, await_challenge(), id_));
  store_->set(key::heartbeat(id_), "0");
  const int64_t seq = store_->add(key::join_count(), 1) - 1;
  store_->set(key::join(seq), std::to_string(id_));
}

void Membership::register_again() {
  leave();
  disconnect();
  config_.replica_id.reset();
  register_once();
}

std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds heartbeat_timeout) {
  return std::clamp(heartbeat_timeout / 10, milliseconds(5), milliseconds(100));
}

void Membership::notice(const std::string& key) {
  store_->set(key, "1");
  store_->add(key::notices(), 1);
}

void Membership::leave() {
  notice(key::left(id_));
}

void Membership::hold() {
  notice(key::holds(id_));
}

int64_t Membership::latest() {
  const int64_t newest = to_id(store_->try_get(key::latest_view()));
  note_seen(newest);
  return newest;
}

void Membership::note_seen(int64_t view) {
  int64_t seen = latest_seen_.load();
  while (seen < view && !latest_seen_.compare_exchange_weak(seen, view)) {
  }
}

const View& Membership::view(int64_t id) {
  auto it = views_.find(id);
  if (it == views_.end())
    it = views_.emplace(id, View::from_json(store_->get(key::view(id)))).first;
  return it->second;
}

std::optional<int64_t> Membership::wait_newer(int64_t than, milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (true) {
    const int64_t now = latest();
    if (now > than) return now;
    if (Clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::min(beat(), milliseconds(50)));
  }
}

std::string Membership::await_challenge() {
  const auto until = Clock::now() + config_.world.timeout;
  while (Clock::now() < until) {
    if (auto challenge = store_->try_get(key::challenge())) return *challenge;
    std::this_thread::sleep_for(milliseconds(10));
  }
  throw comm::CommError("replica " + std::to_string(id_) + ": no coordinator led the run at " +
                        store_->address() + " within " +
                        std::to_string(config_.world.timeout.count() / 1000) + " s");
}

void Membership::throw_if_refused() {
  if (const auto why = store_->try_get(key::refused(id_)))
    throw std::runtime_error("the coordinator refused replica " + std::to_string(id_) + ": " +
                             *why +
                             " (--token or DTRAIN_TOKEN must be the same on every replica and "
                             "coordinator of the run)");
}

View Membership::wait_to_enter(milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  int64_t checked = registered_after_ + 1;  // views before this one do not let it in
  int64_t listed = 0;                       // the first view that named this replica
  while (Clock::now() < until) {
    throw_if_refused();
    if (store_->try_get(key::done()))
      throw RunFinished("the run finished before replica " + std::to_string(id_) +
                        " could enter it");
    const int64_t newest = latest();
    for (int64_t v = checked; v <= newest; ++v) {
      const View& candidate = view(v);
      if (!candidate.has(id_)) {
        // Named once and dropped since (its heartbeats late while it started): no later view
        // names this id again, so waiting on would only run into the timeout.
        if (listed > 0)
          throw comm::CommError("view " + std::to_string(v) + " dropped replica " +
                                std::to_string(id_) + " before it entered (" + candidate.reason +
                                ")");
        checked = v + 1;
        continue;
      }
      if (listed == 0) listed = v;
      if (v == 1 || store_->try_get(key::adopted(v))) return candidate;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  throw std::runtime_error("replica " + std::to_string(id_) + ": no view let it in within " +
                           std::to_string(timeout.count() / 1000) + " s");
}

int Membership::rank_in(const std::string& name, const std::vector<int64_t>& members) const {
  const auto me = std::find(members.begin(), members.end(), id_);
  if (me == members.end())
    throw std::invalid_argument("replica " + std::to_string(id_) + " is not a member of " + name);
  return static_cast<int>(me - members.begin());
}

comm::Group& Membership::connect(const std::string& name, const std::vector<int64_t>& members) {
  rank_in(name, members);
  const int64_t since = latest();
  disconnect();
  // Taken up where connect_ahead() got, else begun now.
  std::future<std::unique_ptr<comm::Group>> connected;
  const auto ahead = ahead_.find(name);
  if (ahead != ahead_.end() && ahead->second.members == members)
    connected = std::move(ahead->second.connected);
  ahead_.clear();
  // A member the newest view dropped already would keep the others waiting to the timeout.
  if (since >= 1)
    for (const int64_t m : members)
      if (!view(since).has(m))
        throw comm::CommError("replica " + std::to_string(m) + " was lost (view " +
                              std::to_string(since) + ") before '" + name + "' connected");
  // Gloo connects on a thread of its own: a member lost meanwhile is noticed here at once,
  // not when the connect timeout runs out (the abandoned thread ends at it).
  connected_ahead_ = connected.valid();
  if (!connected.valid()) connected = start_connecting(name, members);
  watch_while_connecting(connected, name, members, since);
  std::unique_ptr<comm::Group> group;
  try {
    group = connected.get();
  } catch (const comm::CommError&) {
    throw;
  } catch (const std::invalid_argument&) {
    throw;                             // a setting: no retry mends it
  } catch (const std::exception& e) {  // Gloo's handshake with a peer that went
    throw comm::CommError("'" + name + "' did not connect: " + e.what());
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  group_ = std::move(group);
  group_members_ = members;
  group_since_ = since;
  return *group_;
}

void Membership::watch_while_connecting(const std::future<std::unique_ptr<comm::Group>>& connected,
                                        const std::string& name,
                                        const std::vector<int64_t>& members, int64_t since) {
  int64_t checked = since;
  while (connected.wait_for(milliseconds(20)) != std::future_status::ready) {
    const int64_t newest = latest();
    for (; checked < newest; ++checked) {
      const View& v = view(checked + 1);
      for (const int64_t m : members)
        if (!v.has(m))
          throw comm::CommError("replica " + std::to_string(m) + " was lost (view " +
                                std::to_string(v.id) + ") while '" + name + "' connected");
    }
  }
}

void Membership::connect_ahead(const std::string& name, const std::vector<int64_t>& members) {
  rank_in(name, members);
  if (ahead_.count(name)) return;
  // A member the newest view dropped would never come (a group of the round's view, where
  // a member died in the round: its survivors connect another after the exchange fails).
  const int64_t seen = latest_seen();
  if (seen >= 1)
    for (const int64_t m : members)
      if (!view(seen).has(m)) return;
  ahead_[name] = {members, start_connecting(name, members)};
}

std::future<std::unique_ptr<comm::Group>> Membership::start_connecting(
    const std::string& name, const std::vector<int64_t>& members) {
  const int rank = rank_in(name, members);
  auto task = std::make_shared<std::packaged_task<std::unique_ptr<comm::Group>()>>(
      [store = store_->another_client(), name, rank, size = static_cast<int>(members.size()),
       world = config_.world, timeout = config_.connect_timeout]() mutable {
        return comm::connect_members(*store, name, rank, size, world, timeout);
      });
  std::future<std::unique_ptr<comm::Group>> connected = task->get_future();
  connecting_.emplace_back([task] { (*task)(); });
  return connected;
}

std::vector<int64_t> Membership::group_members() {
  const std::lock_guard<std::mutex> lock(mutex_);
  return group_ ? group_members_ : std::vector<int64_t>{};
}

void Membership::disconnect() {
  std::unique_ptr<comm::Group> old;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    old = std::move(group_);
    group_members_.clear();
  }
}

void Membership::post(const std::string& key, const std::string& value) {
  const std::lock_guard<std::mutex> lock(mutex_);
  posts_.emplace_back(key, value);
}

void Membership::check_against(const View& v) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!group_ || v.id <= group_since_) return;
  for (const int64_t m : group_members_)
    if (!v.has(m)) {
      group_->abort("replica " + std::to_string(m) + " left the membership (view " +
                    std::to_string(v.id) + ": " + v.reason + ")");
      return;
    }
}

void Membership::watch() {
  const auto store = store_->another_client();
  // Views before this replica registered hold no group of its own to check. Reading them all
  // (hundreds, late in a long run; a round trip each) kept a joiner from its heartbeats long
  // enough to be declared lost before it entered.
  int64_t seen = registered_after_;
  auto answered = Clock::now();
  while (true) {
    std::vector<std::pair<std::string, std::string>> posts;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) break;
      posts.swap(posts_);
    }
    try {
      store->add(key::heartbeat(id_), 1);
      for (const auto& [k, v] : posts)
        store->set(k, v);
      const int64_t newest = to_id(store->try_get(key::latest_view()));
      note_seen(newest);
      for (auto beaten = Clock::now(); seen < newest; ++seen) {
        check_against(View::from_json(store->get(key::view(seen + 1))));
        if (Clock::now() - beaten >= beat()) {  // a long catch-up
          store->add(key::heartbeat(id_), 1);
          beaten = Clock::now();
        }
      }
      answered = Clock::now();
    } catch (const std::exception& e) {
      // The coordinator (or this replica's link to it) is gone: nothing in flight can count.
      if (Clock::now() - answered > config_.heartbeat_timeout) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (group_)
          group_->abort(std::string("the coordinator's store does not answer: ") + e.what());
      }
    }
    std::this_thread::sleep_for(beat());
  }
}

}  // namespace dtrain::elastic
