// A view of an elastic run's membership: which replicas train together, in which order. The
// coordinator (coordinator.h) publishes views in the store, each under its own id (ids only
// grow; a published view never changes); replicas adopt one at an outer boundary, all the
// same one (membership.h), and connect a group over its members, a member's rank in the
// group being its index in `members`.
//
// Replica ids are unique for the run's life: a replica that dies and comes back (restarted
// by the launcher, torchrun or Slurm) joins under a new id.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtrain::elastic {

struct View {
  int64_t id = 0;
  std::vector<int64_t> members;  // replica ids, in rank order
  // Why the view was published: "formed", "lost 3", "joined 7", ... (for logs and rows).
  std::string reason;
  double published_at = 0;             // the coordinator's wall clock, seconds since 1970
  std::map<int64_t, double> silent_s;  // each member it dropped as lost: silent this long

  int rank_of(int64_t replica) const;  // -1 where it is not a member
  bool has(int64_t replica) const { return rank_of(replica) >= 0; }
  std::string to_json() const;
  // Throws std::invalid_argument on malformed text (the store is shared: say what is wrong).
  static View from_json(const std::string& text);
};

// Replicas of `now` that were not in `before`, and those of `before` not in `now`, in the
// order of their views.
std::vector<int64_t> arrived(const View& before, const View& now);
std::vector<int64_t> departed(const View& before, const View& now);
// "[0, 2, 5]"
std::string describe(const std::vector<int64_t>& replicas);

// The store's keys (one namespace per run: `elastic/`).
namespace key {
std::string next_id();          // counter: fresh replica ids
std::string join_count();       // counter: registrations so far
std::string join(int64_t seq);  // the seq-th registration's replica id
std::string heartbeat(int64_t replica);
std::string left(int64_t replica);       // set by a replica that finished or gave up
std::string killed_at(int64_t replica);  // fault plans: when the replica killed itself
std::string view(int64_t id);
std::string latest_view();           // the newest view's id
std::string adopted(int64_t view);   // set by the members as they connect a view: its donors
std::string holds(int64_t replica);  // set by a replica once it holds the run's state (entered)
// Counter: bumped by a replica after it set left() or holds(), so that the coordinator reads
// those keys only in the polls after a change (not every replica's, every poll).
std::string notices();
// Joiners that entered round `round` mid-round ("ID,ID,"), "sealed:" before them once the
// members reached its end; and a key set then, which such joiners wait for.
std::string mid_round(int64_t round);
std::string mid_round_sealed(int64_t round);
// The boundary (its round) at which the members first deferred `replica` to a mid-round
// entry: set once, so every member decides alike and a replica is deferred at most once.
std::string deferred(int64_t replica);
// A member's outcome of a round's outer step in a group: "done" or "failed".
std::string status(const std::string& group, int64_t round, int64_t replica);
// Which view replaces a group whose round failed (the first to decide sets it).
std::string redo(const std::string& group, int64_t round);
// The view the members wait for at a boundary where too few are left.
std::string boundary(int64_t round);
std::string round();       // the last committed outer step (progress, joiners)
std::string done();        // the run finished: everyone may leave
std::string run_config();  // the run's settings, for joiners to compare
std::string group_prefix(const std::string& group);  // the rendezvous of a group
// Which coordinator leads (an etcd cluster's standbys take over from it), and its decisions'
// state as of its last change (MembershipPolicy::checkpoint), for the one that takes over.
std::string coordinator();
std::string policy();
// Which replica writes an epoch's metrics row (the first member to close the epoch claims it).
std::string epoch_row(int64_t epoch);
// The token check of registrations (DTRAIN_TOKEN): the leading coordinator's random
// challenge (set once), each replica's proof (comm/token_proof.h), and the coordinator's
// refusal of a replica whose proof differs.
std::string challenge();
std::string proof(int64_t replica);
std::string refused(int64_t replica);
}  // namespace key

}  // namespace dtrain::elastic
