#include "dtrain/elastic/leader_claim.h"

#include <unistd.h>

#include <random>

#include "dtrain/comm/kv_store.h"
#include "dtrain/elastic/view.h"

namespace dtrain::elastic {

LeaderClaim::LeaderClaim(comm::KeyValueStore& store, std::string token,
                         std::chrono::milliseconds takeover_after)
    : store_(store), token_(std::move(token)), takeover_after_(takeover_after) {}

bool LeaderClaim::claim(const std::string& expected) {
  const std::string mine = token_ + "#" + std::to_string(++renewals_);
  leading_ = store_.compare_set(key::coordinator(), expected, mine) == mine;
  if (leading_) written_ = mine;
  return leading_;
}

bool LeaderClaim::hold(Clock::time_point now, bool& took_over) {
  took_over = false;
  if (leading_) {
    if (now - renewed_ < takeover_after_ / 4) return true;
    renewed_ = now;
    if (claim(written_)) return true;
    seen_.clear();  // deposed: stand by from now
  }
  const auto value = store_.try_get(key::coordinator());
  const bool lapsed = value && *value == seen_ && now - seen_since_ >= takeover_after_;
  if (!value || lapsed) {
    took_over = claim(value.value_or(""));
    if (took_over) {
      renewed_ = now;
      return true;
    }
  }
  if (!value || *value != seen_) {
    seen_ = value.value_or("");
    seen_since_ = now;
  }
  return false;
}

std::string coordinator_token() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::random_device device;
  return std::string(host) + ":" + std::to_string(getpid()) + ":" + std::to_string(device());
}

}  // namespace dtrain::elastic
