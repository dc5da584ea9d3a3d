#include "dtrain/train/elastic_replica.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/parallel/elastic_sync.h"
#include "dtrain/parallel/float_halves.h"
#include "dtrain/train/elastic_mid_round.h"

namespace dtrain::train {
namespace {

using elastic::FaultPhase;
using std::chrono::milliseconds;
namespace skey = elastic::key;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::vector<int> ranks_of(const std::vector<int64_t>& members, const std::vector<int64_t>& ids) {
  std::vector<int> out;
  for (size_t i = 0; i < members.size(); ++i)
    if (contains(ids, members[i])) out.push_back(static_cast<int>(i));
  return out;
}

// Where a fault plan killed a lost member (it noted the moment: key::killed_at), the times
// from that kill to this replica's failed exchange and to the first view without it (the
// coordinator's detection, by heartbeats): the MTTR's first parts, in the redo event's row.
void note_kill_timings(metrics::Row& row, elastic::Membership& membership,
                       const std::vector<int64_t>& gone, int64_t trained_view, double failed_at) {
  for (const int64_t m : gone) {
    const auto killed = membership.store().try_get(skey::killed_at(m));
    if (!killed) continue;
    const double at = std::stod(*killed);
    row["kill_to_abort_s"] = failed_at - at;
    for (int64_t v = trained_view + 1; v <= membership.latest(); ++v) {
      const elastic::View& view = membership.view(v);
      if (view.has(m)) continue;
      row["kill_to_view_s"] = view.published_at - at;
      break;
    }
    return;  // the first killed member's
  }
}

}  // namespace

ElasticReplica::ElasticReplica(Settings settings, parallel::ElasticOuter& outer,
                               InnerOptimizer inner)
    : settings_(std::move(settings)), outer_(outer), inner_(std::move(inner)) {
  membership_ = std::make_unique<elastic::Membership>(settings_.membership);
}

ElasticReplica::~ElasticReplica() = default;

int64_t ElasticReplica::id() const {
  return membership_->id();
}

comm::Group& ElasticReplica::group() {
  if (!membership_->group()) throw std::logic_error("elastic replica without a group");
  return *membership_->group();
}

// [round, rounds since a whole exchange, n, carried (n words), the queue's words]
std::vector<int64_t> ElasticReplica::progress() const {
  std::vector<int64_t> words{round_, since_whole_, static_cast<int64_t>(carried_.size())};
  words.insert(words.end(), carried_.begin(), carried_.end());
  const std::vector<int64_t> q = data::pack(queue_);
  words.insert(words.end(), q.begin(), q.end());
  return words;
}

void ElasticReplica::set_progress(const std::vector<int64_t>& words) {
  if (words.size() < 3 || words[1] < 0 || words[2] < 0 ||
      static_cast<size_t>(words[2]) > words.size() - 3)
    throw std::invalid_argument("a malformed progress record (" + std::to_string(words.size()) +
                                " words)");
  const auto carried_end = words.begin() + 3 + words[2];
  round_ = words[0];
  since_whole_ = words[1];
  carried_.assign(words.begin() + 3, carried_end);
  queue_ = data::unpack_queue({carried_end, words.end()});
}

void ElasticReplica::event(metrics::Row row) {
  row["replica"] = id();
  row["round"] = round_;
  row["view"] = view_.id;
  events_.push_back(std::move(row));
}

std::vector<metrics::Row> ElasticReplica::take_events() {
  std::vector<metrics::Row> out;
  out.swap(events_);
  return out;
}

int64_t ElasticReplica::transfer_bytes() const {
  return (outer_.packed_values() + parallel::half_values(inner_.values())) * 4;
}

// The shared state, then the inner optimizer's truncated to bfloat16 (its moments need no
// more, in half the bytes): each donor sends an equal part of the whole, so a receiver's
// inner state is its donors' put together coordinate by coordinate.
void ElasticReplica::transfer(const std::vector<int>& donors, const std::vector<int>& receivers) {
  const at::Tensor inner = inner_.pack();
  const int64_t shared = outer_.packed_values();
  at::Tensor state = at::cat({outer_.pack(), parallel::upper_halves(inner)});
  std::vector<int64_t> words = progress();
  uint64_t digest = outer_.digest();
  const bool receiver =
      std::find(receivers.begin(), receivers.end(), group().rank()) != receivers.end();
  parallel::transfer_state(group(), donors, receivers, state, words, digest);
  if (!receiver) return;
  outer_.unpack(state.narrow(0, 0, shared));
  inner_.unpack(
      parallel::join_halves(state.narrow(0, shared, state.numel() - shared), {}, inner.numel()));
  set_progress(words);
  if (outer_.digest() != digest)
    throw comm::CommError("replica " + std::to_string(id()) +
                          ": the state received does not match its donors' digest");
}

// Another member lost or cut while the group connects (its link probe, Gloo's handshake)
// fails the connect: false, said on stderr, and the caller recovers as from a failed round.
bool ElasticReplica::connect_or_report(const std::string& name,
                                       const std::vector<int64_t>& members) {
  try {
    membership_->connect(skey::group_prefix(name), members);
    return true;
  } catch (const comm::CommError& e) {
    std::cerr << "elastic: replica " << id() << ": group '" << name
              << "' did not connect: " << e.what() << std::endl;
    return false;
  }
}

void ElasticReplica::enter() {
  const auto start = metrics::Clock::now();
  const double started_at = wall_now();
  const double process_s = metrics::process_age_s();
  for (auto tried = start;; tried = metrics::Clock::now()) {
    try {
      if (!settings_.mid_round || !enter_mid_round()) enter_once();
      break;
    } catch (const comm::CommError& e) {
      // A donor or this replica's link went while it entered: register again and retry, while
      // each try ends within --timeout (under churn, donors may go many times in a row).
      const bool late =
          metrics::since(tried) * 1000 > static_cast<double>(settings_.enter_timeout.count());
      std::cerr << "elastic: replica " << id() << " could not enter (" << e.what() << "); "
                << (late ? "no more tries: --timeout passed" : "registering again") << std::endl;
      if (late) throw;
      membership_->register_again();
    }
  }
  // Said at once, not posted: the coordinator ends the run if no member holds its state. A
  // mid-round joiner holds it once its momentum is in too (close_round).
  if (!entered_mid_round()) membership_->hold();
  metrics::Row row;
  row["event"] = "entered";
  row["enter_s"] = metrics::since(start);
  row["started_at"] = started_at;
  // The parts of the time to train again: the process's start (loading, the dataset, the
  // model), the wait for a view that lets it in, its group's connect, the state's transfer.
  row["process_s"] = process_s;
  row["inner_steps"] = inner_.steps();
  row["view_s"] = entering_.view_s;
  row["connect_s"] = entering_.connect_s;
  row["transfer_s"] = entering_.transfer_s;
  row["mid_round"] = entered_mid_round();
  event(std::move(row));
}

void ElasticReplica::enter_once() {
  auto t = metrics::Clock::now();
  view_ = membership_->wait_to_enter(settings_.enter_timeout);
  entering_.view_s = metrics::since(t);
  group_name_ = view_group(view_.id);
  std::vector<int64_t> donors_ids;
  if (view_.id == 1) {
    donors_ids = {view_.members.front()};  // the founders start from the first one's state
  } else {
    donors_ids = nlohmann::json::parse(membership_->store().get(skey::adopted(view_.id)))
                     .get<std::vector<int64_t>>();
  }
  t = metrics::Clock::now();
  membership_->connect(elastic::key::group_prefix(group_name_), view_.members);
  entering_.connect_s = metrics::since(t);
  group_broken_ = false;
  std::vector<int64_t> arrivals;
  for (const int64_t m : view_.members)
    if (!contains(donors_ids, m)) arrivals.push_back(m);
  if (settings_.plan.kills_at(id(), round_, FaultPhase::kJoin)) elastic::die_now(*membership_);
  t = metrics::Clock::now();
  transfer(ranks_of(view_.members, donors_ids), ranks_of(view_.members, arrivals));
  entering_.transfer_s = metrics::since(t);
}

void ElasticReplica::settle_positions(const Outcome& out,
                                      const std::vector<parallel::Record>& records) {
  const elastic::View& trained_in = out.trained_in;
  for (size_t r = 0; r < trained_in.members.size(); ++r)
    if (!contains(out.members, trained_in.members[r])) data::requeue(queue_, out.assignment[r]);
  for (size_t i = 0; i < out.members.size() && i < records.size(); ++i) {
    const std::vector<int64_t>& planned =
        out.assignment[static_cast<size_t>(trained_in.rank_of(out.members[i]))];
    const auto used = static_cast<size_t>(std::max<int64_t>(0, records[i].samples));
    if (used < planned.size()) data::requeue(queue_, {planned.begin() + used, planned.end()});
  }
}

std::vector<std::vector<int64_t>> ElasticReplica::assign() {
  round_start_words_ = progress();
  return data::assign_round(queue_, size(), settings_.per_replica, settings_.epoch_size,
                            queue_.epoch + 1 < settings_.epochs);
}

int64_t ElasticReplica::next_proposal(int64_t round) {
  const std::vector<int64_t> due = settings_.plan.due_before(round + 1);
  // What the watcher saw: asking the store here cost every round a round trip or more to
  // the coordinator's host, in the records' critical path. A view it has not seen yet is
  // adopted one round later.
  if (due.empty()) return membership_->latest_seen();
  // A fault plan's replacements enter exactly here: wait until a view holds them all.
  const auto until = metrics::Clock::now() + settings_.enter_timeout;
  while (metrics::Clock::now() < until) {
    const int64_t newest = membership_->latest();
    const elastic::View& v = membership_->view(newest);
    if (std::all_of(due.begin(), due.end(), [&](int64_t r) { return v.has(r); })) return newest;
    std::this_thread::sleep_for(milliseconds(20));
  }
  throw std::runtime_error("elastic: the fault plan's replacements " + elastic::describe(due) +
                           " did not register");
}

ElasticReplica::Outcome ElasticReplica::finish_round(
    int64_t samples, const std::vector<std::vector<int64_t>>& assignment) {
  const int64_t k = round_;
  Outcome out;
  // Kept to the round's end: the transfer's last acknowledgement may still be under way.
  const std::unique_ptr<MidRound> entered = std::move(mid_);
  std::unique_ptr<Contribution> early = std::move(early_);  // start_exchange()'s
  if (!close_round(entered.get(), assignment, out)) return out;
  const elastic::View& trained_in = out.trained_in;
  Contribution& c = own_contribution(early, samples);
  std::vector<int64_t> members = group_broken_ ? std::vector<int64_t>{} : trained_in.members;
  std::string name = group_name_;
  std::vector<parallel::Record> records;
  bool unconnected = false;  // connecting the survivors' group failed: recover again
  for (int attempt = 0;; ++attempt) {
    const auto t0 = metrics::Clock::now();
    try {
      if (members.empty()) throw comm::CommError("the round's group broke (a transfer, a connect)");
      if (unconnected) throw comm::CommError("the survivors' group did not connect");
      out.averaged = exchange(c);
      out.waited_s = metrics::since(t0);
      outer_.count_exchange(name, out.averaged);
      if (settings_.plan.kills_at(id(), k, FaultPhase::kRecords)) elastic::die_now(*membership_);
      records = parallel::exchange_records(
          group(), {k, next_proposal(k), c.digest_before, samples, outer_.measured()});
      membership_->post(skey::status(name, k, id()), "done");
      break;
    } catch (const comm::CommError& e) {
      if (members.empty()) members = trained_in.members;
      const auto failed = metrics::Clock::now();
      const double failed_at = wall_now();
      // Closing this group's connections ends the peers' waits in it at once (auto's probe
      // over it, if it still runs, first ends; an early exchange that has not failed yet
      // ends then).
      outer_.settle_probe();
      if (c.running.valid()) c.running.wait();
      membership_->disconnect();
      std::cerr << "elastic: replica " << id() << ", round " << k << ": " << e.what() << std::endl;
      const auto live = recover(name, k, members);
      if (!live) {  // dropped, or another member's round counted where this one's did not
        membership_->register_again();
        enter();
        out.counted = false;
        return out;
      }
      const auto recovered = metrics::Clock::now();
      name = name + "-r" + std::to_string(k) + "a" + std::to_string(attempt);
      unconnected = !connect_or_report(name, *live);
      note_redo(members, *live, {t0, failed, recovered}, trained_in.id, failed_at);
      members = *live;
    }
  }
  out.members = members;
  for (const int64_t m : trained_in.members)
    if (!contains(members, m)) out.lost.push_back(m);
  settle_positions(out, records);
  for (const auto& rec : records)
    out.samples += rec.samples;
  out.averaged.mean.mul_(parallel::reweigh_factor(records, settings_.per_replica));
  outer_.apply(out.averaged, c.started ? outer_.merge_alpha() : 0);
  round_ = k + 1;
  since_whole_ = c.due.size() == static_cast<size_t>(outer_.fragments()) ? 0 : since_whole_ + 1;
  after_outer_step(members, records);
  return out;
}

void ElasticReplica::note_redo(const std::vector<int64_t>& members,
                               const std::vector<int64_t>& live, const RedoTimes& at, int64_t view,
                               double failed_at) {
  std::vector<int64_t> gone;
  for (const int64_t m : members)
    if (!contains(live, m)) gone.push_back(m);
  metrics::Row row;
  row["event"] = "redo";
  row["lost"] = elastic::describe(gone);
  row["failed_after_s"] = std::chrono::duration<double>(at.failed - at.started).count();
  row["decide_s"] = std::chrono::duration<double>(at.recovered - at.failed).count();
  row["rebuild_s"] = metrics::since(at.recovered);
  row["members"] = live.size();
  note_kill_timings(row, *membership_, gone, view, failed_at);
  event(std::move(row));
}

// Every member alike, from the same records: the same choice again (elastic_outer.h).
void ElasticReplica::after_outer_step(const std::vector<int64_t>& members,
                                      const std::vector<parallel::Record>& records) {
  const parallel::Majority majority = parallel::majority_digest(records);
  if (!majority.differ.empty()) resync(majority.differ, records);
  std::vector<parallel::ExchangeMeasure> measured;
  for (const auto& rec : records)
    measured.push_back(rec.measured);
  const std::string line = outer_.choose_again(measured);
  if (!line.empty() && group().rank() == 0) std::cerr << "elastic: " << line << std::endl;
  proposal_ = view_.id;
  for (const auto& rec : records)
    proposal_ = std::max(proposal_, rec.proposal);
  holders_ = members;
  membership_->post(skey::round(), std::to_string(round_));
}

void ElasticReplica::begin_round() {
  const bool redone = holders_ != view_.members;
  // A view adopted with its arrivals deferred (and not all taken in mid-round since) is
  // adopted again, with them.
  const bool deferred = view_.members != membership_->view(view_.id).members;
  if (proposal_ <= view_.id && !redone && !deferred) return;
  if (!adopt(proposal_, holders_)) {
    membership_->register_again();  // the next view dropped this replica: it enters again
    enter();
  }
}

void ElasticReplica::resync(const std::vector<int>& differ,
                            const std::vector<parallel::Record>& records) {
  std::vector<int> holders;
  for (int r = 0; r < static_cast<int>(records.size()); ++r)
    if (std::find(differ.begin(), differ.end(), r) == differ.end()) holders.push_back(r);
  const bool mine = std::find(differ.begin(), differ.end(), group().rank()) != differ.end();
  const auto t0 = metrics::Clock::now();
  transfer(holders, differ);
  if (mine) {
    metrics::Row row;
    row["event"] = "resync";
    row["transfer_s"] = metrics::since(t0);
    event(std::move(row));
    std::cerr << "elastic: replica " << id() << "'s shared state differed from the majority's; "
              << "re-synced from it" << std::endl;
  }
}

bool ElasticReplica::adopt(int64_t proposal, const std::vector<int64_t>& holders) {
  auto& store = membership_->store();
  elastic::View next = membership_->view(proposal);
  if (static_cast<int>(next.members.size()) < settings_.min_replicas) {
    // Too few left: wait for joiners, all members for the same view (the first decides).
    const auto until = metrics::Clock::now() + settings_.enter_timeout;
    int64_t enough = 0;
    while (enough == 0 && metrics::Clock::now() < until) {
      const int64_t newest = membership_->latest();
      if (static_cast<int>(membership_->view(newest).members.size()) >= settings_.min_replicas)
        enough = newest;
      else
        std::this_thread::sleep_for(milliseconds(50));
    }
    if (enough == 0)
      throw std::runtime_error("elastic: fewer than --min-replicas " +
                               std::to_string(settings_.min_replicas) + " replicas left");
    next = membership_->view(
        std::stoll(store.compare_set(skey::boundary(round_), "", std::to_string(enough))));
  }
  std::vector<int64_t> donors, arrivals;
  for (const int64_t m : next.members)
    (contains(holders, m) ? donors : arrivals).push_back(m);
  if (donors.empty()) throw std::runtime_error("elastic: no replica of the run is left");
  if (!contains(next.members, id())) return false;
  if (adopt_deferring(next, donors, arrivals)) return true;
  store.set(skey::adopted(next.id), nlohmann::json(donors).dump());
  view_ = next;
  group_name_ = view_group(next.id);
  // The survivors of a redo are connected already where the view holds just them: their
  // group serves it (a connect costs every member 0.3-0.5 s on a long link).
  if (!group_broken_ && membership_->group_members() == next.members) return true;
  // A member lost while the group connects: the next exchange recovers among those left.
  group_broken_ = !connect_or_report(group_name_, next.members);
  if (arrivals.empty() || group_broken_) return true;
  const auto t0 = metrics::Clock::now();
  try {
    if (settings_.plan.kills_at(id(), round_, FaultPhase::kTransfer))
      elastic::die_now(*membership_);
    transfer(ranks_of(next.members, donors), ranks_of(next.members, arrivals));
  } catch (const comm::CommError& e) {
    // A joiner or a donor went: the next exchange fails and recovers among those left.
    std::cerr << "elastic: replica " << id() << ": the state transfer failed: " << e.what()
              << std::endl;
    group_broken_ = true;
  }
  metrics::Row row;
  row["event"] = "joined";
  row["joined"] = elastic::describe(arrivals);
  row["transfer_s"] = metrics::since(t0);
  row["bytes"] = transfer_bytes();
  if (group().rank() == 0) event(std::move(row));
  return true;
}

void ElasticReplica::finish() {
  auto& store = membership_->store();
  if (group().rank() == 0) store.set(skey::done(), "1");
  membership_->leave();
}

}  // namespace dtrain::train
