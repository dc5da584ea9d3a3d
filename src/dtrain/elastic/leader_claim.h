// Which of several coordinators of one elastic run leads: the one whose token the store's
// key::coordinator() holds. The leader renews its claim (a compare-and-set that also bumps a
// counter) every quarter of the takeover time; a standby that has seen the value unchanged
// for a whole takeover time takes the key over with a compare-and-set of the value it saw,
// so of several standbys one wins, and a leader that was only slow learns at its next
// renewal that it lost.
//
// The takeover time is measured on each standby's own clock, from when it saw the value
// change: no clocks are compared across hosts. A deposed leader may still finish the poll it
// was in (up to one poll interval of writes); docs/elastic.md says so.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dtrain::comm {
class KeyValueStore;
}

namespace dtrain::elastic {

class LeaderClaim {
 public:
  using Clock = std::chrono::steady_clock;
  // `token` tells this coordinator from the others (unique per process).
  LeaderClaim(comm::KeyValueStore& store, std::string token,
              std::chrono::milliseconds takeover_after);
  // Renews the claim where this one leads, else takes it over where it went unrenewed for
  // the takeover time. Whether this one leads now. `took_over` is set when it leads now and
  // did not at the last call.
  bool hold(Clock::time_point now, bool& took_over);
  const std::string& token() const { return token_; }

 private:
  bool claim(const std::string& expected);

  comm::KeyValueStore& store_;
  std::string token_;
  std::chrono::milliseconds takeover_after_;
  bool leading_ = false;
  std::string written_;  // leading: the value this one wrote last
  int64_t renewals_ = 0;
  Clock::time_point renewed_{};
  std::string seen_;  // standing by: the value seen last, and since when
  Clock::time_point seen_since_{};
};

// A token no other process has: host name, process id and a random number.
std::string coordinator_token();

}  // namespace dtrain::elastic
