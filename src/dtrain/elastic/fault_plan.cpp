#include "dtrain/elastic/fault_plan.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "dtrain/base/parse.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/elastic/membership.h"

namespace dtrain::elastic {
namespace {

FaultPhase parse_phase(const std::string& text, const std::string& entry) {
  if (text == "inner") return FaultPhase::kInner;
  if (text == "exchange") return FaultPhase::kExchange;
  if (text == "records") return FaultPhase::kRecords;
  if (text == "transfer") return FaultPhase::kTransfer;
  if (text == "join") return FaultPhase::kJoin;
  if (text == "close") return FaultPhase::kClose;
  if (text == "row") return FaultPhase::kRow;
  throw std::invalid_argument("--fault-plan '" + entry + "': the phase '" + text +
                              "' is not inner, exchange, records, transfer, join, close or row");
}

int64_t number(const std::string& text, const std::string& entry, int64_t max) {
  const auto v = parse_integer(text, 0, max);
  if (!v)
    throw std::invalid_argument("--fault-plan '" + entry + "': '" + text +
                                "' is not an integer in 0.." + std::to_string(max));
  return *v;
}

int64_t slot_of(int64_t id) {
  return id % kRestartStride;
}
int64_t restart_of(int64_t id) {
  return id / kRestartStride;
}

}  // namespace

FaultPlan parse_fault_plan(const std::string& text) {
  FaultPlan plan;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string entry = text.substr(start, comma - start);
    start = comma + 1;
    if (entry.empty()) continue;
    const size_t colon = entry.find(':'), at = entry.find('@');
    if (colon == std::string::npos || at == std::string::npos || at < colon)
      throw std::invalid_argument("--fault-plan '" + entry +
                                  "': expected kill:S@K:PHASE, rejoin:S@K or corrupt:S@K");
    const std::string what = entry.substr(0, colon);
    const int64_t slot = number(entry.substr(colon + 1, at - colon - 1), entry, kRestartStride - 1);
    const size_t phase_colon = entry.find(':', at);
    const int64_t round =
        number(entry.substr(at + 1, phase_colon == std::string::npos ? std::string::npos
                                                                     : phase_colon - at - 1),
               entry, int64_t{1} << 40);
    if (what == "kill") {
      if (phase_colon == std::string::npos)
        throw std::invalid_argument("--fault-plan '" + entry + "': a kill needs its :PHASE");
      plan.kills.push_back({slot, round, parse_phase(entry.substr(phase_colon + 1), entry)});
    } else if (phase_colon != std::string::npos) {
      throw std::invalid_argument("--fault-plan '" + entry + "': only kill takes a phase");
    } else if (what == "rejoin") {
      if (round < 1)
        throw std::invalid_argument("--fault-plan '" + entry + "': rejoin at 1 or later");
      plan.rejoins.push_back({slot, round});
    } else if (what == "corrupt") {
      plan.corruptions.push_back({slot, round});
    } else {
      throw std::invalid_argument("--fault-plan '" + entry + "': '" + what +
                                  "' is not kill, rejoin or corrupt");
    }
  }
  for (int64_t slot = 0; slot < kRestartStride; ++slot) {
    int64_t n = 0;
    for (const auto& k : plan.kills)
      n += k.slot == slot ? 1 : 0;
    if (n > kMaxPlannedRestarts)
      throw std::invalid_argument("--fault-plan: slot " + std::to_string(slot) + " is killed " +
                                  std::to_string(n) + " times (at most " +
                                  std::to_string(kMaxPlannedRestarts) + ")");
  }
  return plan;
}

bool FaultPlan::kills_at(int64_t id, int64_t round, FaultPhase phase) const {
  // A slot's n-th kill (from 0, in the plan's order) is of its n-th replacement; a join-phase
  // kill is always of a replacement (the one entering at its round).
  int64_t nth = 0;
  for (const auto& k : kills) {
    if (k.slot != slot_of(id)) continue;
    const int64_t restart = k.phase == FaultPhase::kJoin ? std::max<int64_t>(nth, 1) : nth;
    if (restart == restart_of(id) && k.round == round && k.phase == phase) return true;
    ++nth;
  }
  return false;
}

std::optional<int64_t> FaultPlan::rejoin_round(int64_t id) const {
  // A slot's n-th rejoin (from 1) is its n-th replacement's; a replacement beyond the plan's
  // rejoins takes the last one's round (it registers at once where that round is past).
  if (restart_of(id) == 0) return std::nullopt;
  std::optional<int64_t> round;
  int64_t nth = 0;
  for (const auto& r : rejoins) {
    if (r.slot != slot_of(id)) continue;
    round = r.round;
    if (++nth == restart_of(id)) break;
  }
  return round;
}

std::vector<int64_t> FaultPlan::due_before(int64_t round) const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < rejoins.size(); ++i) {
    if (rejoins[i].round != round) continue;
    int64_t nth = 0;  // this rejoin's place among its slot's
    for (size_t j = 0; j <= i; ++j)
      nth += rejoins[j].slot == rejoins[i].slot ? 1 : 0;
    out.push_back(rejoins[i].slot + nth * kRestartStride);
  }
  return out;
}

bool FaultPlan::corrupts(int64_t id, int64_t round) const {
  for (const auto& c : corruptions)
    if (c.slot == slot_of(id) && restart_of(id) == 0 && c.round == round) return true;
  return false;
}

void die_now(Membership& membership) {
  try {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    membership.store().set(key::killed_at(membership.id()), std::to_string(now));
  } catch (const std::exception&) {
  }
  kill(getpid(), SIGKILL);
  _exit(137);
}

}  // namespace dtrain::elastic
