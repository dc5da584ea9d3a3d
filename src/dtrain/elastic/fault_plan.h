// A test's script of faults for elastic runs (--fault-plan, for tests and chaos benchmarks):
// replicas that SIGKILL themselves at a given point of a given outer step, when their
// replacements enter, and replicas whose shared state is corrupted on purpose. A plan makes
// the membership's changes fall at fixed outer steps, so a run with it is deterministic.
//
//   kill:S@K:PHASE   the replica of launcher slot S kills itself in round K at PHASE:
//                    inner (half its inner steps done), exchange (as the outer exchange
//                    starts), records (after the exchange, before its record goes out),
//                    transfer (a donor, while sending the state to a joiner at boundary K),
//                    join (S's replacement, while receiving the state to enter at K),
//                    close (K the last round of an epoch: as the epoch closes, before
//                    its evaluation), row (the same, after the evaluation, before the
//                    epoch's row is claimed)
//   rejoin:S@K       S's replacement enters before round K (the members wait for it)
//   corrupt:S@K      S adds 1e-3 to its shared parameters before round K's exchange (the
//                    digest check must find it and re-sync it from the majority)
//
// A slot may die many times: its n-th kill (from 0, in the plan's order) is of its n-th
// replacement (a join-phase kill of the replacement entering at K), and its n-th rejoin
// (from 1) sets when its n-th replacement enters. Under a plan a replica's id is its slot plus
// kRestartStride times the launcher's restart count of that slot, so every run of the plan
// names its replicas alike; ids the store hands out start at kFirstRegisteredId, above them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::elastic {

enum class FaultPhase { kInner, kExchange, kRecords, kTransfer, kJoin, kClose, kRow };

struct FaultPlan {
  struct Kill {
    int64_t slot = 0, round = 0;
    FaultPhase phase = FaultPhase::kInner;
  };
  struct At {
    int64_t slot = 0, round = 0;
  };
  std::vector<Kill> kills;
  std::vector<At> rejoins, corruptions;
  bool empty() const { return kills.empty() && rejoins.empty() && corruptions.empty(); }
  // Whether replica `id` (slot, restart) dies at this point.
  bool kills_at(int64_t id, int64_t round, FaultPhase phase) const;
  // The round before which `id`'s replacement is due to enter, if the plan has one.
  std::optional<int64_t> rejoin_round(int64_t id) const;
  // Replacements due to enter before `round` (their ids).
  std::vector<int64_t> due_before(int64_t round) const;
  bool corrupts(int64_t id, int64_t round) const;
};

constexpr int64_t kRestartStride = 100;
constexpr int64_t kMaxPlannedRestarts = 9'999;  // a slot's kills in one plan
constexpr int64_t kFirstRegisteredId = kRestartStride * (kMaxPlannedRestarts + 1);

// Throws std::invalid_argument naming the malformed entry.
FaultPlan parse_fault_plan(const std::string& text);
// SIGKILLs this process now, after noting the moment in the store (key::killed_at) so the
// survivors can time their detection.
[[noreturn]] void die_now(class Membership& membership);

}  // namespace dtrain::elastic
