#include "dtrain/train/elastic_mid_round.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/train/elastic_replica.h"

namespace dtrain::train {
namespace {

using std::chrono::milliseconds;
namespace skey = elastic::key;

// The round's list sealed: the joiners in it (every member reads the same).
std::vector<int64_t> seal(comm::KeyValueStore& store, int64_t round) {
  std::string listed, now;
  // Joiners that came in since the last try are sealed in with the next.
  while (!is_sealed(now = store.compare_set(skey::mid_round(round), listed, kSealed + listed)))
    listed = now;
  std::vector<int64_t> joiners = listed_ids(now);
  if (!joiners.empty()) store.set(skey::mid_round_sealed(round), "1");
  return joiners;
}

bool names_all(const std::string& listed, const std::vector<int64_t>& ids) {
  const std::vector<int64_t> in = listed_ids(listed);
  return std::all_of(ids.begin(), ids.end(),
                     [&](int64_t id) { return std::find(in.begin(), in.end(), id) != in.end(); });
}

// Whether the newest view still holds `replica` (read through `store`, off the main thread).
bool still_held(comm::KeyValueStore& store, int64_t replica) {
  const auto latest = store.try_get(skey::latest_view());
  return !latest ||
         elastic::View::from_json(store.get(skey::view(std::stoll(*latest)))).has(replica);
}

}  // namespace

bool ElasticReplica::enter_mid_round() {
  auto t = metrics::Clock::now();
  auto& store = membership_->store();
  int64_t holding = 0;  // the first view holding this replica
  while (holding == 0) {
    const int64_t newest = membership_->latest();
    if (newest >= 1 && membership_->view(newest).has(id()))
      holding = newest;
    else if (metrics::since(t) * 1000 > static_cast<double>(settings_.enter_timeout.count()) ||
             store.try_get(skey::done()))
      return false;  // enter_once says why
    else
      std::this_thread::sleep_for(milliseconds(20));
    membership_->throw_if_refused();
  }
  // A founder enters with the others; a view that let it in already is the boundary's.
  if (membership_->view(1).has(id()) || store.try_get(skey::adopted(holding))) return false;
  entering_ = {metrics::since(t), 0, 0};
  t = metrics::Clock::now();
  mid_ = std::make_unique<MidRound>();
  mid_->fetch_started = t;
  mid_->fetch = SideTransfer::fetch(side_link("mid-" + std::to_string(id())),
                                    outer_.packed_values() - outer_.values(), inner_.values());
  // The first part, unless the members reach a boundary and let this replica in there first,
  // or a view drops it (its heartbeats late): enter_once then says so and it registers again.
  int polls = 0;
  while (mid_->fetch->first_part().wait_for(milliseconds(20)) != std::future_status::ready) {
    if (++polls % 5 != 0) continue;
    for (int64_t v = holding; v <= membership_->latest_seen(); ++v)
      if (!membership_->view(v).has(id()) || store.try_get(skey::adopted(v))) {
        give_up_mid_round();
        return false;
      }
  }
  RoundStart start;
  try {
    start = mid_->fetch->first_part().get();
  } catch (const std::exception& e) {
    std::cerr << "elastic: replica " << id() << " could not enter mid-round (" << e.what()
              << "); entering at the next boundary" << std::endl;
    give_up_mid_round();
    return false;
  }
  entering_.transfer_s = metrics::since(t);
  if (!claim_mid_round(start)) {
    give_up_mid_round();
    return false;
  }
  return true;
}

bool ElasticReplica::adopt_deferring(const elastic::View& next, const std::vector<int64_t>& donors,
                                     const std::vector<int64_t>& arrivals) {
  if (!settings_.mid_round || arrivals.empty() || outer_.choice_pending()) return false;
  // The round's shares leave none for them (the run's last round): they enter here.
  if (planned_after(static_cast<int>(donors.size()), static_cast<int>(arrivals.size()) - 1).empty())
    return false;
  auto& store = membership_->store();
  const std::string now = std::to_string(round_);
  // Every member asks in the same order and reads the same answers.
  if (!std::all_of(arrivals.begin(), arrivals.end(),
                   [&](int64_t m) { return store.compare_set(skey::deferred(m), "", now) == now; }))
    return false;
  // The members train among themselves, in a group of its own name (the view's is the
  // arrivals' too), and the first hands them the round's start state (serve_joiners).
  view_ = next;
  view_.members = donors;
  group_name_ = view_group(next.id) + "-d" + now;
  if (id() == donors.front()) {
    metrics::Row row;
    row["event"] = "deferred";
    row["deferred"] = elastic::describe(arrivals);
    event(std::move(row));
  }
  if (group_broken_ || membership_->group_members() != donors)
    group_broken_ = !connect_or_report(group_name_, donors);
  return true;
}

// words: [the round's view id, its member count, its members..., progress() at its start]
bool ElasticReplica::claim_mid_round(const RoundStart& start) {
  const std::vector<int64_t>& w = start.words;
  if (w.size() < 2 || w[1] < 1 || static_cast<size_t>(w[1]) + 2 > w.size())
    throw comm::CommError("a malformed mid-round state (" + std::to_string(w.size()) + " words)");
  const auto members_end = w.begin() + 2 + w[1];
  // The round's trainers: the view's members, less arrivals deferred to now (this one).
  elastic::View round_view = membership_->view(w[0]);
  const std::vector<int64_t> trainers(w.begin() + 2, members_end);
  if (std::any_of(trainers.begin(), trainers.end(),
                  [&](int64_t m) { return !round_view.has(m) || m == id(); }))
    throw comm::CommError("the mid-round state names members of view " + std::to_string(w[0]) +
                          " that the store's does not hold");
  round_view.members = trainers;
  set_progress({members_end, w.end()});
  view_ = round_view;
  group_name_.clear();
  group_broken_ = false;
  const int64_t n = outer_.values();
  outer_.unpack(at::cat({start.first.narrow(0, 0, n), at::zeros({n}, at::kFloat),
                         start.first.narrow(0, n, start.first.numel() - n)}));
  if (outer_.choice_pending()) return false;  // auto chooses among the founders first
  inner_.unpack(start.inner);
  // A place in the round's list, after the joiners already in it; none once it is sealed.
  auto& store = membership_->store();
  std::string listed = store.try_get(skey::mid_round(round_)).value_or("");
  while (!is_sealed(listed)) {
    const std::vector<int64_t> before = listed_ids(listed);
    std::vector<int64_t> planned = planned_after(size(), static_cast<int>(before.size()));
    if (planned.empty()) {
      std::cerr << "elastic: replica " << id() << ": round " << round_
                << " left no positions for it (the run's last); entering at the boundary"
                << std::endl;
      return false;
    }
    const std::string want = listed + std::to_string(id()) + ",";
    const std::string now = store.compare_set(skey::mid_round(round_), listed, want);
    if (now == want) {
      mid_->positions = std::move(planned);
      mid_->index = static_cast<int>(before.size());
      connect_ahead_with(listed_ids(want));
      mid_->watcher = std::thread(
          [m = mid_.get(), client = store.another_client(), key = skey::mid_round_sealed(round_)] {
            while (!m->stop) {
              try {
                if (client->try_get(key)) break;
              } catch (const std::exception&) {
                break;  // the store is gone: the exchange that follows fails and says so
              }
              std::this_thread::sleep_for(milliseconds(40));
            }
            m->closing = true;
          });
      return true;
    }
    listed = now;
  }
  std::cerr << "elastic: replica " << id() << ": round " << round_
            << " closed before it could enter; entering at the boundary" << std::endl;
  return false;
}

std::vector<int64_t> ElasticReplica::planned_after(int members, int index) const {
  data::SampleQueue q = queue_;
  data::assign_round(q, members, settings_.per_replica, settings_.epoch_size,
                     q.epoch + 1 < settings_.epochs);
  std::vector<int64_t> planned;
  for (int i = 0; i <= index; ++i)
    planned = joiners_share(q);
  return planned;
}

std::vector<int64_t> ElasticReplica::joiners_share(data::SampleQueue& queue) const {
  return data::assign_joiner(queue, settings_.per_replica, settings_.epoch_size,
                             queue.epoch + 1 < settings_.epochs);
}

// The fetch may be inside its connect, which no abort ends: it finishes on its own (at the
// connect timeout at worst), kept with the serving transfers, while this replica goes on.
void ElasticReplica::give_up_mid_round() {
  if (!mid_) return;
  mid_->fetch->abort();
  serving_.push_back({std::move(mid_->fetch), -1, -1});
  mid_.reset();
}

SideTransfer::Link ElasticReplica::side_link(const std::string& name) {
  SideTransfer::Link link;
  link.store = membership_->store().another_client();
  link.name = skey::group_prefix(name);
  link.world = settings_.membership.world;
  // One connection: no probe of the link before it (a round trip and more to the store, a
  // Gloo context a stream): the joiner's wait is all of it.
  link.world.streams = 1;
  link.connect_timeout = settings_.membership.connect_timeout;
  return link;
}

void ElasticReplica::between_inner_steps() {
  if (mid_) {
    refine_mid_round(*mid_, false);
  } else {
    serve_joiners();
    connect_joiners_ahead();
  }
}

// Entered on the coarse θ: the exact one installed once in (`wait`: the round's end needs
// it). A failure (the donor lost) is kept for the round's end, where close_round says so and
// enters again: between inner steps the joiner trains on.
void ElasticReplica::refine_mid_round(MidRound& entered, bool wait) {
  if (entered.refined) {
    if (wait && entered.refine_failure) std::rethrow_exception(entered.refine_failure);
    return;
  }
  std::future<at::Tensor>& exact = entered.fetch->exact_first();
  if (!wait && exact.wait_for(milliseconds(0)) != std::future_status::ready) return;
  entered.refined = true;
  try {
    outer_.refine(exact.get());
  } catch (const std::exception&) {
    entered.refine_failure = std::current_exception();
    if (wait) throw;
    return;
  }
  metrics::Row row;
  row["event"] = "refined";
  row["exact_s"] = metrics::since(entered.fetch_started);  // the handover's start to now
  event(std::move(row));
}

// The rest of the handover comes from the round's first member. Where a view drops it (its
// host cut off: no connection reset ends the wait) the fetch is given up at once, not at the
// transport's timeout (--timeout).
void ElasticReplica::await_handover(MidRound& entered) {
  const int64_t donor = view_.members.front();
  while (entered.fetch->momentum().wait_for(milliseconds(50)) != std::future_status::ready)
    if (!membership_->view(membership_->latest_seen()).has(donor))
      entered.fetch->abort();  // the waits end with this reason
}

void ElasticReplica::serve_joiners() {
  if (!settings_.mid_round) return;
  const int64_t seen = membership_->latest_seen();
  if (seen <= served_view_) return;
  served_view_ = seen;
  comm::Group* g = membership_->group();
  if (!g || group_broken_ || g->rank() != 0 || outer_.choice_pending()) return;
  serving_.erase(std::remove_if(serving_.begin(), serving_.end(),
                                [](const Handover& h) { return h.transfer->done(); }),
                 serving_.end());
  const elastic::View newest = membership_->view(seen);
  for (const int64_t m : newest.members) {
    if (view_.has(m) || !served_.insert(m).second) continue;
    // Served now: a boundary that finds it still out (the round's seal came first) takes it
    // in there, not defers it again.
    membership_->store().compare_set(skey::deferred(m), "", "served");
    const at::Tensor state = outer_.pack();
    const int64_t n = outer_.values();
    RoundStart start;
    start.first = at::cat({state.narrow(0, 0, n), state.narrow(0, 2 * n, state.numel() - 2 * n)});
    start.momentum = state.narrow(0, n, n).clone();
    start.inner = inner_.pack();
    start.words = {view_.id, static_cast<int64_t>(view_.members.size())};
    start.words.insert(start.words.end(), view_.members.begin(), view_.members.end());
    start.words.insert(start.words.end(), round_start_words_.begin(), round_start_words_.end());
    serving_.push_back({SideTransfer::serve(side_link("mid-" + std::to_string(m)), std::move(start),
                                            "replica " + std::to_string(id()) + ": round " +
                                                std::to_string(round_) + "'s state to replica " +
                                                std::to_string(m)),
                        round_, m});
  }
}

const std::vector<int64_t>& ElasticReplica::positions(
    const std::vector<std::vector<int64_t>>& assignment) const {
  return mid_ ? mid_->positions : assignment.at(static_cast<size_t>(rank()));
}

int ElasticReplica::share_index() const {
  return mid_ ? size() + mid_->index : rank();
}

bool ElasticReplica::round_closing() const {
  return mid_ && mid_->closing;
}

// The group's first member seals: where it handed joiners the round's start state, once
// the first parts are out it waits for them to name themselves (2 s at most in all: a later
// one enters at the boundary), so that a handover near the round's end still counts. The
// others wait for its seal, and seal themselves once a view dropped it.
std::function<std::vector<int64_t>()> ElasticReplica::sealer(comm::KeyValueStore& store) {
  std::vector<std::pair<SideTransfer*, int64_t>> handovers;
  for (const Handover& h : serving_)
    if (h.round == round_) handovers.emplace_back(h.transfer.get(), h.joiner);
  const int64_t first = view_.members.front();
  return [&store, round = round_, handovers, first, mine = first == id()] {
    const std::string key = skey::mid_round(round);
    if (mine) {
      const auto until = metrics::Clock::now() + milliseconds(2000);
      std::vector<int64_t> sent;
      for (const auto& [t, joiner] : handovers) {
        while (!t->first_sent() && !t->done() && metrics::Clock::now() < until)
          std::this_thread::sleep_for(milliseconds(5));
        if (t->first_sent()) sent.push_back(joiner);
      }
      while (!sent.empty() && metrics::Clock::now() < until &&
             !names_all(store.try_get(key).value_or(""), sent))
        std::this_thread::sleep_for(milliseconds(5));
      return seal(store, round);
    }
    for (int polls = 0;; ++polls) {
      const std::string listed = store.try_get(key).value_or("");
      if (is_sealed(listed)) return listed_ids(listed);
      if (polls % 10 == 9 && !still_held(store, first)) return seal(store, round);
      std::this_thread::sleep_for(milliseconds(10));
    }
  };
}

void ElasticReplica::seal_soon() {
  if (!settings_.mid_round || mid_ || sealing_.valid()) return;
  if (!seal_store_) seal_store_ = membership_->store().another_client();
  sealing_ = std::async(std::launch::async, sealer(*seal_store_));
}

bool ElasticReplica::close_round(MidRound* entered,
                                 const std::vector<std::vector<int64_t>>& assignment,
                                 Outcome& out) {
  std::future<std::vector<int64_t>> sealing = std::move(sealing_);  // this round's, if any
  stop_watching_list();
  out.assignment = assignment;
  if (entered) {  // the exact θ and the momentum, which the outer step needs, came after
    try {
      await_handover(*entered);
      refine_mid_round(*entered, true);
      outer_.unpack_momentum(entered->fetch->momentum().get());
      membership_->hold();  // the whole state now
    } catch (const std::exception& e) {
      std::cerr << "elastic: replica " << id() << ": the round's exact state did not arrive ("
                << e.what() << "); entering again" << std::endl;
      membership_->register_again();
      enter();
      out.counted = false;
      return false;
    }
  }
  if (settings_.mid_round) {
    const std::vector<int64_t> joiners =
        sealing.valid() ? sealing.get() : sealer(membership_->store())();
    if (!joiners.empty()) take_in(joiners, out.assignment);
  }
  out.trained_in = view_;
  return true;
}

void ElasticReplica::take_in(const std::vector<int64_t>& joiners,
                             std::vector<std::vector<int64_t>>& assignment) {
  elastic::View round_view = view_;
  for (const int64_t j : joiners) {
    assignment.push_back(joiners_share(queue_));
    round_view.members.push_back(j);
  }
  view_ = round_view;
  group_name_ = mid_round_group(view_.id, round_, joiners);
  if (group_broken_) return;
  const auto t = metrics::Clock::now();
  group_broken_ = !connect_or_report(group_name_, view_.members);
  if (id() != view_.members.front()) return;
  metrics::Row row;  // what taking them in cost the members at the round's end
  row["event"] = "taken_in";
  row["joiners"] = elastic::describe(joiners);
  row["connect_s"] = metrics::since(t);
  row["ahead"] = membership_->connected_ahead();
  event(std::move(row));
}

}  // namespace dtrain::train
