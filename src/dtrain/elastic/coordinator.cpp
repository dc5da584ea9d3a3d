#include "dtrain/elastic/coordinator.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "dtrain/comm/kv_store.h"
#include "dtrain/comm/token_proof.h"
#include "dtrain/elastic/leader_claim.h"

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

// How long a counted registration may stay unwritten before the coordinator reads past it.
constexpr std::chrono::seconds kRegistrationHole{10};

}  // namespace

std::chrono::milliseconds poll_interval(std::chrono::milliseconds heartbeat_timeout) {
  return std::clamp(heartbeat_timeout / 20, std::chrono::milliseconds(5),
                    std::chrono::milliseconds(50));
}

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

void MembershipPolicy::forgive(Clock::time_point now) {
  for (auto& [replica, seen] : seen_)
    seen.changed = std::max(seen.changed, now);
}

std::string MembershipPolicy::checkpoint(int64_t next_seq) const {
  nlohmann::json j;
  j["view"] = current_.id > 0 ? current_.to_json() : "";
  j["candidates"] = candidates_;
  j["holders"] = std::vector<int64_t>(holders_.begin(), holders_.end());
  j["next_seq"] = next_seq;
  return j.dump();
}

MembershipPolicy MembershipPolicy::restore(CoordinatorConfig config, const std::string& text,
                                           Clock::time_point now, int64_t& next_seq) {
  MembershipPolicy p(config);
  try {
    const auto j = nlohmann::json::parse(text);
    const auto view = j.at("view").get<std::string>();
    if (!view.empty()) p.current_ = View::from_json(view);
    for (const int64_t r : j.at("candidates").get<std::vector<int64_t>>())
      if (!p.current_.has(r)) p.candidates_.push_back(r);
    for (const int64_t r : j.at("holders").get<std::vector<int64_t>>())
      if (p.current_.has(r)) p.holders_.insert(r);
    next_seq = j.at("next_seq").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("the coordinator's checkpoint is malformed: " +
                                std::string(e.what()));
  }
  for (const int64_t r : p.watched())
    p.seen_[r] = {"", now};
  if (!p.candidates_.empty()) p.first_registration_ = now;
  return p;
}

struct Coordinator::Leading {
  MembershipPolicy policy;
  int64_t next_seq = 0;
  std::string checkpoint;                         // as last written
  std::optional<Clock::time_point> hole_since{};  // registration next_seq counted, not written
  std::string challenge;                          // key::challenge(): the token check's
  int64_t notices = -1;  // key::notices() as the last poll that read left() and holds() saw
};

Coordinator::Coordinator(const std::string& address, int port, CoordinatorConfig config,
                         std::chrono::milliseconds store_timeout)
    : store_(comm::KeyValueStore::host(address, port, store_timeout)), config_(config) {}

Coordinator::Coordinator(const std::string& etcd_address, CoordinatorConfig config,
                         std::chrono::milliseconds store_timeout)
    : store_(comm::KeyValueStore::etcd(etcd_address, store_timeout)),
      claim_(std::make_unique<LeaderClaim>(*store_, coordinator_token(), config.takeover_after)),
      config_(config) {
  if (store_->try_get(key::done()))
    throw std::runtime_error("the run under " + store_->address() +
                             " has finished: give the new run a prefix of its own "
                             "(etcd://HOST:PORT,.../NAME) or delete the old one's keys "
                             "(etcdctl del --prefix ...)");
}

Coordinator::~Coordinator() = default;

int Coordinator::port() const {
  return store_->port();
}

void Coordinator::stop() {
  stopping_ = true;
}

Coordinator::Leading Coordinator::take_over() {
  Leading l{MembershipPolicy(config_), 0, "", std::nullopt, "", -1};
  // Set once for the run: a coordinator taking over keeps its predecessor's.
  l.challenge = store_->compare_set(key::challenge(), "", comm::random_challenge());
  if (const auto text = store_->try_get(key::policy())) {
    l.policy = MembershipPolicy::restore(config_, *text, Clock::now(), l.next_seq);
    l.checkpoint = *text;
    const View& v = l.policy.current();
    const auto latest = store_->try_get(key::latest_view());
    if (v.id > 0 && (!latest || std::stoll(*latest) < v.id)) {  // it died between the two
      store_->set(key::view(v.id), v.to_json());
      store_->set(key::latest_view(), std::to_string(v.id));
    }
  }
  return l;
}

void Coordinator::read_registrations(Leading& l, Observed& o) {
  const int64_t count = store_->add(key::join_count(), 0);
  while (l.next_seq < count) {
    const auto id = store_->try_get(key::join(l.next_seq));
    if (id) {
      const int64_t r = std::stoll(*id);
      const auto proof = store_->try_get(key::proof(r));
      if (proof && *proof == comm::token_proof(config_.token, l.challenge, r)) {
        o.registered.push_back(r);
      } else {
        store_->set(key::refused(r), proof ? "its DTRAIN_TOKEN differs from the coordinator's"
                                           : "it proved no DTRAIN_TOKEN");
        o.refused.push_back(r);
      }
    } else {
      // Counted but not written yet (a registration under way), or never to be: its replica
      // died between the two, or an etcd add whose answer was lost counted twice.
      const auto now = Clock::now();
      if (!l.hole_since) l.hole_since = now;
      if (now - *l.hole_since < kRegistrationHole) return;
    }
    l.hole_since.reset();
    ++l.next_seq;
  }
}

std::optional<bool> Coordinator::poll(Leading& l, const CoordinatorLog& log) {
  MembershipPolicy& policy = l.policy;
  const auto started = Clock::now();
  Observed o;
  // The notices first: a replica bumps them after setting left() or holds(), both after it
  // registered, so a notice counted here is of a registration read below or before.
  const int64_t notices = store_->add(key::notices(), 0);
  read_registrations(l, o);
  for (const int64_t r : o.refused)
    log.refused(r);
  std::vector<int64_t> watched = policy.watched();
  for (const int64_t r : watched)
    if (const auto hb = store_->try_get(key::heartbeat(r))) o.heartbeats[r] = *hb;
  if (notices != l.notices) {
    watched.insert(watched.end(), o.registered.begin(), o.registered.end());
    for (const int64_t r : watched) {
      if (store_->try_get(key::left(r))) o.left.push_back(r);
      if (!policy.holds(r) && store_->try_get(key::holds(r))) o.holding.push_back(r);
    }
    // Behind a registration counted but not written, a notice may be of one not read yet:
    // read them again next poll.
    if (!l.hole_since) l.notices = notices;
  }
  const auto now = Clock::now();
  // A store that stalled, this poll or since the last one, stalled the heartbeats too: an
  // etcd cluster electing a leader, or this process starved of its cores (its store's
  // server threads with it).
  const auto stall = config_.heartbeat_timeout / 2;
  const bool polled_before = last_poll_ != Clock::time_point{};
  if (now - started > stall ||
      (polled_before && started - last_poll_ > stall + poll_interval(config_.heartbeat_timeout)))
    policy.forgive(now);
  last_poll_ = now;
  const View before = policy.current();
  std::map<int64_t, double> silence;
  for (const int64_t r : before.members)
    silence[r] = policy.silent_s(r, now);
  auto view = policy.step(now, o);
  for (const int64_t r : o.holding)
    if (policy.holds(r)) log.holds(r);
  if (view) {
    view->published_at =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (const int64_t r : departed(before, *view))
      if (!contains(o.left, r)) view->silent_s[r] = silence[r];
  }
  // The checkpoint first: a leader that dies before publishing leaves the view to its heir.
  if (claim_) {
    const std::string checkpoint = policy.checkpoint(l.next_seq);
    if (checkpoint != l.checkpoint) store_->set(key::policy(), l.checkpoint = checkpoint);
  }
  if (!view) return std::nullopt;
  store_->set(key::view(view->id), view->to_json());
  store_->set(key::latest_view(), std::to_string(view->id));
  Published p{*view, {}, arrived(before, *view)};
  for (const int64_t r : departed(before, *view))
    if (!contains(o.left, r)) p.lost.push_back(r);
  log.published(p);
  if (view->members.empty()) return o.left.size() == before.members.size();
  return std::nullopt;
}

bool Coordinator::run(const CoordinatorLog& log) {
  std::optional<Leading> leading;
  if (!claim_) leading = take_over();  // a fresh store: nothing to take over but the challenge
  while (!stopping_) {
    if (store_->try_get(key::done())) return true;
    bool took_over = false;
    if (claim_ && !claim_->hold(Clock::now(), took_over)) {
      if (leading) log.deposed();
      leading.reset();  // standing by
    } else {
      if (took_over) {
        leading = take_over();
        log.leads(leading->policy.current().id);
      }
      if (const auto ended = poll(*leading, log)) return *ended;
    }
    std::this_thread::sleep_for(poll_interval(config_.heartbeat_timeout));
  }
  return true;
}

}  // namespace dtrain::elastic
