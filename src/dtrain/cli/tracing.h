// --trace FILE on the ranked subcommands: record a timeline on every rank, aligned to rank
// 0's clock, merged by rank 0 into one Chrome trace file (metrics/trace.h).
#pragma once

#include <string>

#include "dtrain/comm/trace_gather.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::cli {

class TraceSession {
 public:
  // Empty `path`: does nothing. Otherwise starts recording and, with a group of more than
  // one rank, synchronizes the clocks (every rank must construct it at the same point).
  TraceSession(std::string path, comm::Group* group);
  // Every rank calls it at the same point; rank 0 writes the file and says where on stderr.
  void finish();
  // After finish(), on rank 0: every rank's events as written (empty without a trace).
  const nlohmann::json& events() const { return events_; }

 private:
  std::string path_;
  comm::Group* group_;
  comm::ClockSync sync_;
  nlohmann::json events_ = nlohmann::json::array();
};

}  // namespace dtrain::cli
