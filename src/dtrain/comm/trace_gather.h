// The trace of a multi-rank run in one file: every rank's clock aligned to rank 0's, every
// rank's events merged by rank 0 (metrics/trace.h records them).
//
// Contract: every rank of the group calls each function, in the same order; both use the
// trace tag (comm/tags.h) and the group's timeout.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace dtrain::comm {

class Group;

struct ClockSync {
  int64_t origin_ns = 0;  // rank 0's trace clock when the synchronisation began: ts 0
  int64_t offset_ns = 0;  // add to this rank's clock to read rank 0's (0 on rank 0)
  int64_t rtt_ns = 0;     // round trip of the exchange the offset came from (its error bound)
};

// Rank 0 answers `rounds` timestamp requests from each other rank in turn; each rank keeps
// the exchange with the least round trip and takes the offset as rank 0's time minus the
// midpoint of its own send and receive times (NTP's estimate; error <= rtt / 2).
ClockSync synchronize_clocks(Group& group, int rounds = 8);

// Each rank sends its recorded events (shifted by its offset) to rank 0, which returns them
// all, one process per rank, and adds every rank's offset and round trip to `other_data`
// ("clock_sync"). The other ranks get an empty array.
nlohmann::json gather_trace_events(Group& group, const ClockSync& sync, nlohmann::json& other_data);

}  // namespace dtrain::comm
