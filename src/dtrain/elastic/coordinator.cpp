#include "dtrain/elastic/coordinator.h"

#include <algorithm>
#include <thread>

#include "dtrain/comm/kv_store.h"

namespace dtrain::elastic {
namespace {

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string reason_of(const std::vector<int64_t>& lost, const std::vector<int64_t>& left,
                      const std::vector<int64_t>& joined) {
  std::string out;
  const auto part = [&](const char* what, const std::vector<int64_t>& ids) {
    if (ids.empty()) return;
    out += (out.empty() ? "" : "; ") + std::string(what) + " " + describe(ids);
  };
  part("lost", lost);
  part("left", left);
  part("joined", joined);
  return out;
}

}  // namespace

double MembershipPolicy::silent_s(int64_t replica, Clock::time_point now) const {
  const auto it = seen_.find(replica);
  if (it == seen_.end()) return 0;
  return std::chrono::duration<double>(now - it->second.changed).count();
}

std::vector<int64_t> MembershipPolicy::watched() const {
  std::vector<int64_t> out = current_.members;
  out.insert(out.end(), candidates_.begin(), candidates_.end());
  return out;
}

std::optional<View> MembershipPolicy::step(Clock::time_point now, const Observed& o) {
  for (const int64_t r : o.registered) {
    if (current_.has(r) || contains(candidates_, r)) continue;
    candidates_.push_back(r);
    seen_[r] = {"", now};
    if (!first_registration_) first_registration_ = now;
  }
  for (const auto& [r, value] : o.heartbeats) {
    auto& s = seen_[r];
    if (s.value != value) s = {value, now};
  }
  for (const int64_t r : o.holding)
    if (current_.has(r)) holders_.insert(r);
  const auto silent = [&](int64_t r) {
    return silent_s(r, now) * 1000 > config_.heartbeat_timeout.count();
  };
  std::vector<int64_t> lost, left, joined;
  for (const int64_t r : current_.members) {
    if (contains(o.left, r))
      left.push_back(r);
    else if (silent(r))
      lost.push_back(r);
  }
  candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(),
                                   [&](int64_t r) { return contains(o.left, r) || silent(r); }),
                    candidates_.end());
  if (!formed()) {
    const bool waited = first_registration_ && now - *first_registration_ >= config_.form_timeout;
    const auto n = static_cast<int>(candidates_.size());
    if (n == 0 || (n < config_.expect && !(waited && n >= config_.min_replicas)))
      return std::nullopt;
    View v;
    v.id = 1;
    v.members = candidates_;
    std::sort(v.members.begin(), v.members.end());
    v.reason = "formed with " + describe(v.members);
    candidates_.clear();
    holders_.insert(v.members.begin(), v.members.end());  // each can start the run
    current_ = v;
    return v;
  }
  if (lost.empty() && left.empty() && candidates_.empty()) return std::nullopt;
  View v;
  v.id = current_.id + 1;
  for (const int64_t r : current_.members) {
    if (!contains(lost, r) && !contains(left, r))
      v.members.push_back(r);
    else
      holders_.erase(r);
  }
  // A run whose members that held its state are all gone has none to hand a joiner: it ends.
  const bool survivors = !v.members.empty();
  const bool state_left =
      std::any_of(v.members.begin(), v.members.end(), [&](int64_t r) { return holds(r); });
  if (!state_left) {
    v.members.clear();
    candidates_.clear();
  }
  joined = candidates_;
  std::sort(joined.begin(), joined.end());
  v.members.insert(v.members.end(), joined.begin(), joined.end());
  candidates_.clear();
  v.reason = reason_of(lost, left, joined);
  if (survivors && !state_left)
    v.reason += "; no member left holds the run's state (those left had not entered)";
  current_ = v;
  return v;
}

Coordinator::Coordinator(const std::string& address, int port, CoordinatorConfig config,
                         std::chrono::milliseconds store_timeout)
    : store_(comm::KeyValueStore::host(address, port, store_timeout)), config_(config) {}

Coordinator::~Coordinator() = default;

int Coordinator::port() const {
  return store_->port();
}

void Coordinator::stop() {
  stopping_ = true;
}

bool Coordinator::run(const CoordinatorLog& log) {
  MembershipPolicy policy(config_);
  int64_t next_seq = 0;
  while (!stopping_) {
    if (store_->try_get(key::done())) return true;
    Observed o;
    const int64_t count = store_->add(key::join_count(), 0);
    for (; next_seq < count; ++next_seq)
      o.registered.push_back(std::stoll(store_->get(key::join(next_seq))));
    for (const int64_t r : policy.watched()) {
      if (const auto hb = store_->try_get(key::heartbeat(r))) o.heartbeats[r] = *hb;
      if (store_->try_get(key::left(r))) o.left.push_back(r);
      if (!policy.holds(r) && store_->try_get(key::holds(r))) o.holding.push_back(r);
    }
    const auto now = Clock::now();
    const View before = policy.current();
    std::map<int64_t, double> silence;
    for (const int64_t r : before.members)
      silence[r] = policy.silent_s(r, now);
    auto view = policy.step(now, o);
    for (const int64_t r : o.holding)
      if (policy.holds(r)) log.holds(r);
    if (view) {
      view->published_at =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      for (const int64_t r : departed(before, *view))
        if (!contains(o.left, r)) view->silent_s[r] = silence[r];
      store_->set(key::view(view->id), view->to_json());
      store_->set(key::latest_view(), std::to_string(view->id));
      Published p{*view, {}, arrived(before, *view)};
      for (const int64_t r : departed(before, *view))
        if (!contains(o.left, r)) p.lost.push_back(r);
      log.published(p);
      if (view->members.empty()) return o.left.size() == before.members.size();
    }
    std::this_thread::sleep_for(config_.poll);
  }
  return true;
}

}  // namespace dtrain::elastic
