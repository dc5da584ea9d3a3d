// Internal to the elastic replica (elastic_replica.h): its groups' names, what its mid-round
// entry keeps while a joiner's first round runs, and the round's list in the store
// (key::mid_round).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

}  // namespace dtrain::train
