// Internal to the trainer: one replica of an elastic DiLoCo run (docs/elastic.md), its place
// in the membership and the protocol of an outer boundary:
//
// 1. The outer exchange over the group the round trained in. Where it fails (a member lost:
//    its connections closed, or the watcher aborted the group on a view that drops it), every
//    member notes "failed" in the store, the first to decide names the view that replaces
//    the group (key::redo), and the members still in it redo the exchange among themselves
//    with the same pseudo-gradients: the survivors lose no inner step, and the lost
//    replicas' samples go back to the queue.
// 2. Records: each member sends every other its acknowledgement, its proposal for the next
//    view and its state's digest. A member applies the outer step only with every record
//    in; a member that finds another member's "done" where its own round failed (the
//    acknowledgements crossed as a member died) enters again as a joiner.
// 3. The view of the next round: the newest any member proposed. Its group is connected, and
//    replicas that enter with it receive the shared state from the members that hold it,
//    split between them, checked against the first donor's digest. A member whose digest
//    differs from the majority's is re-synced from it the same way.
//
// Mid-round entry (Settings::mid_round; --mid-round-entry): a joiner need not wait for the
// next boundary. The group's first member hands it the state the round started from, beside
// its own inner steps (elastic_side_transfer.h); the joiner names itself in the round's list
// in the store (key::mid_round) and trains the positions planned for it after the members'
// until the members reach the round's end. The first member seals the list (one
// compare-and-set, once its handovers landed, 2 s at most) and the others read it; where it
// names joiners, the round's exchange runs over the members and them; positions a trainer
// did not reach go back to the queue. A joiner that finds the list sealed enters at the
// boundary as above. A joiner that asked while the members exchanged is deferred at that
// boundary (once): the members adopt the view without it and hand it the next round's start
// state mid-round, sparing everyone the boundary's connect and transfer.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dtrain/data/sample_queue.h"
#include "dtrain/elastic/fault_plan.h"
#include "dtrain/elastic/membership.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/parallel/elastic_outer.h"
#include "dtrain/parallel/elastic_sync.h"
#include "dtrain/train/elastic_side_transfer.h"

namespace dtrain::train {

class ElasticReplica {
 public:
  struct Settings {
    elastic::MembershipConfig membership;
    elastic::FaultPlan plan;
    int min_replicas = 1;
    std::chrono::milliseconds enter_timeout{600'000};
    // Joiners may enter mid-round (--mid-round-entry; never under a fault plan with rejoins:
    // they land at set boundaries).
    bool mid_round = false;
    // A round's positions a replica, the epoch's size and the run's epochs: what assign()
    // hands out, and what a mid-round joiner plans its share from (in an epoch's last round,
    // the next epoch's positions, data::assign_joiner, unless the epoch is the run's last).
    int64_t per_replica = 0, epoch_size = 0, epochs = 1;
  };
  // The replica's inner optimizer, whose state one that enters takes from its donors
  // (inner_state.h; docs/elastic.md): `pack` its state, `values` the packed size, `unpack`
  // replaces it, `steps` the steps its state has seen (in the entered row).
  struct InnerOptimizer {
    std::function<at::Tensor()> pack;
    std::function<int64_t()> values;
    std::function<void(const at::Tensor&)> unpack;
    std::function<int64_t()> steps;
  };
  ElasticReplica(Settings settings, parallel::ElasticOuter& outer, InnerOptimizer inner);
  ~ElasticReplica();

  // Enters the run: the founders start from the first founder's state, a joiner from the
  // members'. Blocks until it is in.
  void enter();
  int64_t id() const;
  int rank() const { return view_.rank_of(id()); }
  int size() const { return static_cast<int>(view_.members.size()); }
  const elastic::View& view() const { return view_; }
  comm::Group& group();
  int64_t round() const { return round_; }
  data::SampleQueue& queue() { return queue_; }
  // The trainer's own words of the run's progress (its epoch's start and committed samples):
  // they travel with the shared state, so that a replica that enters mid-epoch reports the
  // epoch as the members saw it.
  std::vector<int64_t>& carried() { return carried_; }
  const elastic::FaultPlan& plan() const { return settings_.plan; }
  elastic::Membership& membership() { return *membership_; }

  // The positions each member of the view trains this round (advances the queue).
  // Settings::per_replica each, of an epoch of Settings::epoch_size.
  std::vector<std::vector<int64_t>> assign();
  // This replica's positions this round: its share of `assignment`, or, entered mid-round,
  // the share planned for it after the members'. And its place among the round's trainers
  // (its rank, or after the members').
  const std::vector<int64_t>& positions(const std::vector<std::vector<int64_t>>& assignment) const;
  int share_index() const;
  // Between inner steps: the group's first member hands the round's start state to replicas
  // that asked to enter since (a thread each); a replica that entered mid-round on the coarse
  // θ installs the exact one once it arrived. Cheap when there is nothing to do.
  void between_inner_steps();
  // Entered mid-round: the members reached the round's end (its inner steps stop).
  bool round_closing() const;
  bool entered_mid_round() const { return mid_ != nullptr; }
  // Before the round's last inner step: seals the round's list of mid-round joiners (one
  // compare-and-set on the store) on a thread, so the round's end does not wait for it. A
  // joiner that comes later enters at the boundary.
  void seal_soon();
  // --sync-delay τ: the inner step of a round of `steps` before which its exchange starts, on
  // a thread beside the round's last τ steps (finish_round applies it, merged by
  // --merge-alpha); -1: at the round's end (no delay, auto's first choice, or the round ends
  // its epoch, whose evaluation needs θ whole). Mid-round entry is off under a delay: every trainer
  // is a member from the round's start and trains its whole share.
  int64_t exchange_starts_at(int64_t steps) const;
  void start_exchange(int64_t samples);

  struct Outcome {
    bool counted = true;           // false: this replica's round did not count (it re-entered)
    int64_t samples = 0;           // samples of the contributions that counted
    std::vector<int64_t> members;  // the replicas whose contributions counted
    std::vector<int64_t> lost;     // members of the round whose contributions did not
    parallel::ElasticOuter::Averaged averaged;
    // Of its seconds, what the round's end waited for it (all of them, unless it ran beside
    // the round's last steps: --sync-delay).
    double waited_s = 0;
    elastic::View trained_in;  // the round's trainers: the view's members, then mid-round joiners
    std::vector<std::vector<int64_t>> assignment;  // their planned positions, in that order
  };
  // The outer step that ends the round (steps 1 and 2 above). `assignment` is assign()'s.
  Outcome finish_round(int64_t samples, const std::vector<std::vector<int64_t>>& assignment);
  // Step 3: the view the next round trains in, and the state's transfer to replicas that
  // enter it. Between the two the group is still the round's (the epoch's evaluation).
  void begin_round();

  // The run is over: leaves, and the view's first member marks the run done.
  void finish();
  // Events (lost replicas, joins, re-syncs) as metrics rows, since the last call.
  std::vector<metrics::Row> take_events();

 private:
  void enter_once();
  // Enters mid-round where a member hands this replica the round's start state before the
  // round ends; false: enter at the boundary (enter_once).
  bool enter_mid_round();
  // Installs the round's start state and takes a place in the round's list; false where the
  // list is sealed or no positions are left for it.
  bool claim_mid_round(const RoundStart& start);
  SideTransfer::Link side_link(const std::string& name);
  void serve_joiners();
  // The round's seal (run on a thread by seal_soon(), or at the round's end), over `store`.
  std::function<std::vector<int64_t>()> sealer(comm::KeyValueStore& store);
  void give_up_mid_round();
  // The positions planned for the index-th mid-round joiner of this round (the queue as it
  // stands at the round's start), after `members` members' shares; none where the run's
  // positions run out first.
  std::vector<int64_t> planned_after(int members, int index) const;
  // One joiner's share from `queue` (advanced): the next epoch's where this one has none.
  std::vector<int64_t> joiners_share(data::SampleQueue& queue) const;
  // At a boundary, under mid-round entry: adopts `next` without its arrivals, which then
  // enter in the next round's first inner steps instead of this boundary's connect and
  // transfer (`donors` hold the state). Each arrival is deferred once at most
  // (key::deferred); all or none are. False: not deferred (adopt them here).
  bool adopt_deferring(const elastic::View& next, const std::vector<int64_t>& donors,
                       const std::vector<int64_t>& arrivals);
  struct MidRound;
  struct ListWatch;
  // Between inner steps, a member's: the group of the round's members and the joiners its
  // list names so far, connected ahead (elastic_connect_ahead.cpp); stopped at the round's
  // end.
  void connect_joiners_ahead();
  void stop_watching_list();
  // Starts the group of the round's members and `joiners` (the round's list so far).
  void connect_ahead_with(const std::vector<int64_t>& joiners);
  void refine_mid_round(MidRound& entered, bool wait);
  void await_handover(MidRound& entered);
  // Before the round's exchange: a mid-round joiner's momentum (`entered`: it entered this
  // round), and the joiners the round takes in (out.trained_in, out.assignment: `assignment`
  // and theirs). False: this replica entered again (`out` says its round did not count).
  bool close_round(MidRound* entered, const std::vector<std::vector<int64_t>>& assignment,
                   Outcome& out);
  // Takes them in: their planned positions appended to `assignment`, the round's group
  // extended by them.
  void take_in(const std::vector<int64_t>& joiners, std::vector<std::vector<int64_t>>& assignment);
  // After the records: positions of lost trainers, and those a trainer did not reach, back
  // to the queue.
  void settle_positions(const Outcome& out, const std::vector<parallel::Record>& records);
  // What this replica brings to the round's exchange: the fragments due (ElasticOuter::due()),
  // its pseudo-gradient weighed by its samples, its buffers and the state's digest as they
  // are now; and, started early, the exchange running.
  struct Contribution {
    std::vector<size_t> due;
    at::Tensor pseudo_gradient, buffers;
    uint64_t digest_before = 0;
    int64_t samples = 0;
    bool started = false;  // by start_exchange(), before the round's end
    std::future<parallel::ElasticOuter::Averaged> running;
  };
  Contribution contribution(int64_t samples);
  // `early` (start_exchange()'s, checked against the round's `samples`), or one made now.
  Contribution& own_contribution(std::unique_ptr<Contribution>& early, int64_t samples);
  // The round's exchange: the one running beside the last steps, or one now (where `c`
  // started early, the fault plan's kill in the exchange came at its start).
  parallel::ElasticOuter::Averaged exchange(Contribution& c);
  struct RedoTimes {
    std::chrono::steady_clock::time_point started, failed, recovered;
  };
  // The redo event: `members` less `live` were lost.
  void note_redo(const std::vector<int64_t>& members, const std::vector<int64_t>& live,
                 const RedoTimes& at, int64_t view, double failed_at);
  // Connects the group `name` of `members`; false where a member was lost or cut meanwhile.
  bool connect_or_report(const std::string& name, const std::vector<int64_t>& members);
  // A failed exchange's replacement group: the survivors of `members`; or nothing when
  // another member's round counted (this one must enter again).
  std::optional<std::vector<int64_t>> recover(const std::string& group, int64_t round,
                                              const std::vector<int64_t>& members);
  // What `member` noted of the round at `key`: "done", "failed", or "gone" where a view
  // dropped it before it noted anything (a joiner that never entered, a member lost since):
  // the first survivor to see that settles it in the store, so that every survivor, and the
  // member itself, reads the same.
  std::string await_outcome(const std::string& key, int64_t member, int64_t round);
  int64_t next_proposal(int64_t round);
  // Connects the group of the view the next round trains in, and hands the state to the
  // replicas that enter with it.
  // False: the view dropped this replica (it enters again).
  bool adopt(int64_t proposal, const std::vector<int64_t>& holders);
  void resync(const std::vector<int>& differ, const std::vector<parallel::Record>& records);
  // The outer step applied: a state that differs re-synced from the majority, auto's choice
  // again from the exchanges the records report, the next view proposed, the round posted.
  void after_outer_step(const std::vector<int64_t>& members,
                        const std::vector<parallel::Record>& records);
  void transfer(const std::vector<int>& donors, const std::vector<int>& receivers);
  int64_t transfer_bytes() const;  // what transfer() sends each receiver
  std::vector<int64_t> progress() const;
  void set_progress(const std::vector<int64_t>& words);
  void event(metrics::Row row);

  Settings settings_;
  parallel::ElasticOuter& outer_;
  InnerOptimizer inner_;
  std::unique_ptr<elastic::Membership> membership_;
  elastic::View view_;
  std::string group_name_;
  bool group_broken_ = false;     // a transfer failed in it: the next exchange recovers
  int64_t round_ = 0;             // outer steps committed
  int64_t since_whole_ = 0;       // of them, since the last that exchanged every fragment
  int64_t proposal_ = 0;          // the newest view proposed at the last boundary
  std::vector<int64_t> holders_;  // the members whose step counted there
  data::SampleQueue queue_;
  std::vector<int64_t> round_start_words_;  // progress() before the round's assignment
  int64_t served_view_ = 0;                 // serve_joiners(): the newest view looked at
  std::set<int64_t> served_;
  struct Handover {
    std::unique_ptr<SideTransfer> transfer;
    int64_t round = -1, joiner = -1;  // -1: a fetch given up
  };
  std::vector<Handover> serving_;  // this replica's handovers, and fetches given up, until done
  std::unique_ptr<MidRound> mid_;  // entered mid-round, until its first round ends
  std::unique_ptr<Contribution> early_;              // start_exchange()'s, until the round's end
  std::unique_ptr<ListWatch> list_watch_;            // connect_joiners_ahead()'s, this round
  std::string ahead_listed_;                         // the listing whose group it started
  std::future<std::vector<int64_t>> sealing_;        // seal_soon()'s
  std::unique_ptr<comm::KeyValueStore> seal_store_;  // its client
  std::vector<int64_t> carried_;
  std::vector<metrics::Row> events_;
  struct EnterTimes {
    double view_s = 0, connect_s = 0, transfer_s = 0;
  } entering_;  // the last attempt's, in the entered event
};

}  // namespace dtrain::train
