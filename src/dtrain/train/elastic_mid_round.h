// Internal to the elastic replica (elastic_replica.h): its groups' names, what its mid-round
// entry keeps while a joiner's first round runs, and the round's list in the store
// (key::mid_round) and a member's watch on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/kv_store.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/train/elastic_replica.h"

namespace dtrain::train {

// The group of a view's members.
inline std::string view_group(int64_t view) {
  return "v" + std::to_string(view);
}

inline constexpr const char* kSealed = "sealed:";

inline bool is_sealed(const std::string& listed) {
  return listed.rfind(kSealed, 0) == 0;
}

// "3,7," or "sealed:3,7," -> {3, 7}
inline std::vector<int64_t> listed_ids(const std::string& listed) {
  const std::string text = is_sealed(listed) ? listed.substr(std::string(kSealed).size()) : listed;
  std::vector<int64_t> ids;
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = text.find(',', at);
    ids.push_back(std::stoll(text.substr(at, comma - at)));
    at = comma == std::string::npos ? text.size() : comma + 1;
  }
  return ids;
}

// A replica that entered mid-round, until its first round ends: the transfer (its momentum
// part may still be on the way), its planned positions, and a thread that watches the store
// for the members' end of the round.
struct ElasticReplica::MidRound {
  std::unique_ptr<SideTransfer> fetch;
  metrics::Clock::time_point fetch_started;
  bool refined = false;               // the exact θ installed over the coarse one it entered on
  std::exception_ptr refine_failure;  // or why it did not arrive (rethrown at the round's end)
  std::vector<int64_t> positions;
  int index = 0;  // its place among the round's mid-round joiners
  std::atomic<bool> closing{false}, stop{false};
  std::thread watcher;
  ~MidRound() {
    stop = true;
    if (watcher.joinable()) watcher.join();
  }
};

// The group a round's members connect with the joiners the round takes in mid-round (in the
// sealed list's order): named by them, so that one connected ahead for the same list is
// taken up (Membership::connect_ahead), and one for another list is not.
std::string mid_round_group(int64_t view, int64_t round, const std::vector<int64_t>& joiners);

// A member's watch on the round's list (key::mid_round) from a thread of its own, started
// once a view names an arrival: what it read last, without a round trip in the inner steps.
// Dropping it never waits: the thread, in a read the link holds up (a cut cable), ends
// after it on its own.
struct ElasticReplica::ListWatch {
  ListWatch(std::unique_ptr<comm::KeyValueStore> client, std::string key);
  ~ListWatch();
  std::string latest();

  struct Shared {
    std::mutex mutex;
    std::string listed;
    std::atomic<bool> stop{false};
  };
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
};

}  // namespace dtrain::train
