// The elastic replica's recovery from a failed exchange (elastic_replica.h, step 1): the
// view that replaces the round's group, decided once in the store, and what each member
// noted of the round.
#include <algorithm>
#include <stdexcept>
#include <thread>

#include "dtrain/comm/error.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/train/elastic_replica.h"

namespace dtrain::train {
namespace {

using std::chrono::milliseconds;
namespace skey = elastic::key;

}  // namespace

std::optional<std::vector<int64_t>> ElasticReplica::recover(const std::string& group, int64_t round,
                                                            const std::vector<int64_t>& members) {
  auto& store = membership_->store();
  // "gone": the others already went on without this replica.
  if (store.compare_set(skey::status(group, round, id()), "", "failed") == "gone")
    return std::nullopt;
  // The view that replaces the group: the coordinator publishes one once the lost member's
  // heartbeats stop; a failure with everyone still there (a broken connection) keeps them.
  const auto wait = settings_.membership.heartbeat_timeout * 3;
  const int64_t newest = membership_->wait_newer(view_.id, wait).value_or(membership_->latest());
  const int64_t decided =
      std::stoll(store.compare_set(skey::redo(group, round), "", std::to_string(newest)));
  const elastic::View& replacing = membership_->view(decided);
  std::vector<int64_t> live;
  for (const int64_t m : members)
    if (replacing.has(m)) live.push_back(m);
  if (std::find(live.begin(), live.end(), id()) == live.end())
    return std::nullopt;  // dropped: it enters again
  // Each live member notes how its round went; one whose round counted holds the step.
  std::vector<int64_t> noted;
  for (const int64_t m : live) {
    const std::string outcome =
        m == id() ? "failed" : await_outcome(skey::status(group, round, m), m, round);
    if (outcome == "done") return std::nullopt;
    if (outcome != "gone") noted.push_back(m);
  }
  return noted;
}

std::string ElasticReplica::await_outcome(const std::string& key, int64_t member, int64_t round) {
  auto& store = membership_->store();
  const auto until = metrics::Clock::now() + store.timeout();
  while (true) {
    if (const auto outcome = store.try_get(key)) return *outcome;
    if (!membership_->view(membership_->latest()).has(member))
      return store.compare_set(key, "", "gone");
    if (metrics::Clock::now() >= until)
      throw comm::CommError("replica " + std::to_string(member) + " noted no outcome of round " +
                            std::to_string(round));
    std::this_thread::sleep_for(milliseconds(20));
  }
}

}  // namespace dtrain::train
