// The group that takes mid-round joiners in, connected while the round trains: without it
// the members connected it at the round's end, 0.9-1.5 s on the lab's 5 ms links (the
// joiner training beside them) each time a replica joined (docs/elastic.md).
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "dtrain/elastic/membership.h"
#include "dtrain/elastic/view.h"
#include "dtrain/train/elastic_mid_round.h"

namespace dtrain::train {

namespace skey = elastic::key;

std::string mid_round_group(int64_t view, int64_t round, const std::vector<int64_t>& joiners) {
  std::string name = view_group(view) + "-m" + std::to_string(round);
  for (const int64_t j : joiners)
    name += "-" + std::to_string(j);
  return name;
}

ElasticReplica::ListWatch::ListWatch(std::unique_ptr<comm::KeyValueStore> client, std::string key) {
  std::thread([shared = shared, client = std::shared_ptr<comm::KeyValueStore>(std::move(client)),
               key = std::move(key)] {
    while (!shared->stop) {
      try {
        std::string now = client->try_get(key).value_or("");
        const std::lock_guard<std::mutex> lock(shared->mutex);
        shared->listed = std::move(now);
      } catch (const std::exception&) {
        return;  // the store is gone: the round's end says so
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
    }
  }).detach();
}

ElasticReplica::ListWatch::~ListWatch() {
  shared->stop = true;
}

std::string ElasticReplica::ListWatch::latest() {
  const std::lock_guard<std::mutex> lock(shared->mutex);
  return shared->listed;
}

// A member's: once a view names an arrival, the list is watched; each new (unsealed)
// listing starts the group of the members and the joiners it names. The joiner starts the
// same group as it names itself (claim_mid_round).
void ElasticReplica::connect_joiners_ahead() {
  if (!settings_.mid_round || group_broken_ || mid_) return;
  if (!list_watch_) {
    const elastic::View& newest = membership_->view(membership_->latest_seen());
    if (std::none_of(newest.members.begin(), newest.members.end(),
                     [&](int64_t m) { return !view_.has(m); }))
      return;
    list_watch_ =
        std::make_unique<ListWatch>(membership_->store().another_client(), skey::mid_round(round_));
  }
  const std::string listed = list_watch_->latest();
  if (listed.empty() || is_sealed(listed) || listed == ahead_listed_) return;
  ahead_listed_ = listed;
  connect_ahead_with(listed_ids(listed));
}

void ElasticReplica::connect_ahead_with(const std::vector<int64_t>& joiners) {
  std::vector<int64_t> members = view_.members;
  members.insert(members.end(), joiners.begin(), joiners.end());
  membership_->connect_ahead(skey::group_prefix(mid_round_group(view_.id, round_, joiners)),
                             members);
}

void ElasticReplica::stop_watching_list() {
  list_watch_.reset();
  ahead_listed_.clear();
}

}  // namespace dtrain::train
