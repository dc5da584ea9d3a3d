// The messages elastic DiLoCo's members exchange beside the outer mean (docs/elastic.md):
//
// - records: after an outer exchange each member sends every other a few words: the round
//   it finished (its acknowledgement: a member applies the outer step only once it has every
//   other's), its proposal for the view of the next round, the digest of its shared state,
//   the samples it trained and what it measured of the outer exchanges (under auto). Every
//   member ends with all of them, in rank order.
// - state transfers: the shared state (ElasticOuter::pack, float32) and the run's progress
//   (int64 words) from donors to members that join or whose state differs. The donors split
//   the float state evenly, so a joiner draws on all of them at once; the first donor sends
//   the progress and the digest, which the receiver checks against what it assembled.
//
// Both are collective over the ranks they name and throw CommError as the group does.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

// What one member measured of the outer codec in force, for `--compress-outer auto`'s choice
// again from the exchanges (ElasticOuter::choose_again). Every member decides from all of
// them alike, so none of it has to be the same on every member.
struct ExchangeMeasure {
  int64_t exchanges = 0;  // counted in the group it exchanges in now (0: not measuring)
  double exchange_s = 0;  // those exchanges' total time
  double bytes = 0;       // and the bytes it sent in them
  double step_s = 0;      // its inner step
  // The link as the founders' probe read it (0: this replica joined after it).
  double rate_bytes_per_s = 0, latency_s = 0;
  int64_t floor = 0;  // the least lossy candidate a choice again may take (diloco_auto.h)
};

struct Record {
  int64_t round = 0;     // the outer step this member finished
  int64_t proposal = 0;  // the newest view it has seen
  uint64_t digest = 0;   // of its shared state before the step
  int64_t samples = 0;   // it trained this round
  ExchangeMeasure measured;
};

// Throws CommError where a member's record names another round than `mine`.
std::vector<Record> exchange_records(comm::Group& group, const Record& mine);

// The outer step's mean weighs each contribution by the samples it trained, against a full
// share of `full` samples (a mid-round joiner's few inner steps, an epoch's short last
// round): the plain mean would shrink the step by every short one. A member scales its
// pseudo-gradient by contribution_weight() before the exchange; the exchange's mean times
// reweigh_factor() of the round's records is the samples-weighted mean. Both are exactly 1
// where every member trained a full share: the plain mean, bit for bit.
double contribution_weight(int64_t samples, int64_t full);
double reweigh_factor(const std::vector<Record>& records, int64_t full);

// The digest most members hold (ties: the one of the lowest rank among them), and the ranks
// whose digest differs from it.
struct Majority {
  uint64_t digest = 0;
  std::vector<int> differ;
};
Majority majority_digest(const std::vector<Record>& records);

// Sends `state` and `progress` from `donors` to each of `receivers` (ranks of `group`; every
// one of them calls it). A donor passes its own state, progress and digest; a receiver gets
// them back in the same arguments (state sized as the donors'). A receiver's digest is the
// first donor's.
void transfer_state(comm::Group& group, const std::vector<int>& donors,
                    const std::vector<int>& receivers, at::Tensor& state,
                    std::vector<int64_t>& progress, uint64_t& digest);

}  // namespace dtrain::parallel
