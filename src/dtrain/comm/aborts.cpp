// Aborting a group's pending messages (Group::make_abortable): an elastic run's view of its
// members changes while an exchange is in flight, and the ranks still waiting in it must
// let go at once, not at the group's timeout. Gloo's send and receive works can be aborted
// from another thread (their wait() then returns false), so the group keeps the works
// posted and not yet waited for, and abort() aborts each. A group's first failed message
// ends it the same way (note_failure): its later posts and waits throw at once.
#include <algorithm>

#include "dtrain/comm/error.h"
#include "dtrain/comm/request_state.h"

namespace dtrain::comm {

void Group::make_abortable() {
  const std::lock_guard<std::mutex> lock(aborts_->mutex);
  aborts_->enabled = true;
  aborts_->owner_explains = true;
}

void Group::keep_explaining_failures() {
  const std::lock_guard<std::mutex> lock(aborts_->mutex);
  aborts_->owner_explains = false;
}

bool Group::owner_explains_failures() const {
  const std::lock_guard<std::mutex> lock(aborts_->mutex);
  return !aborts_->reason.empty() || aborts_->owner_explains;
}

bool Group::abortable() const {
  const std::lock_guard<std::mutex> lock(aborts_->mutex);
  return aborts_->enabled;
}

namespace {
void abort_each(std::vector<c10::intrusive_ptr<c10d::Work>>& pending) {
  for (auto& work : pending) {
    try {
      work->abort();
    } catch (const std::exception&) {  // a work that completed or failed meanwhile
    }
  }
}
}  // namespace

void Group::abort(const std::string& reason) {
  std::vector<c10::intrusive_ptr<c10d::Work>> pending;
  {
    const std::lock_guard<std::mutex> lock(aborts_->mutex);
    if (!aborts_->reason.empty()) return;
    aborts_->reason = reason.empty() ? "aborted" : reason;
    pending.swap(aborts_->pending);
  }
  abort_each(pending);
}

bool Group::note_failure(const std::string& message) const {
  std::vector<c10::intrusive_ptr<c10d::Work>> pending;
  {
    const std::lock_guard<std::mutex> lock(aborts_->mutex);
    if (!aborts_->failure.empty()) return false;
    aborts_->failure = message;
    pending.swap(aborts_->pending);
  }
  abort_each(pending);
  return true;
}

bool Group::aborted() const {
  const std::lock_guard<std::mutex> lock(aborts_->mutex);
  return !aborts_->reason.empty();
}

void Group::throw_if_aborted() const {
  const std::lock_guard<std::mutex> lock(aborts_->mutex);
  if (!aborts_->reason.empty())
    throw CommError(describe() + ": the group was aborted: " + aborts_->reason);
  if (!aborts_->failure.empty())
    throw CommError(describe() + ": the group failed before: " + aborts_->failure);
}

void Group::peer_lost(int peer, const std::string& what) {
  std::vector<c10::intrusive_ptr<c10d::Work>> cut;
  {
    const std::lock_guard<std::mutex> lock(aborts_->mutex);
    aborts_->lost.emplace(peer, what.substr(0, what.find('\n')));
    for (const auto& [p, work] : aborts_->blocked)
      if (p == peer) cut.push_back(work);
  }
  abort_each(cut);
}

void Group::throw_if_lost(int peer) const {
  const std::lock_guard<std::mutex> lock(aborts_->mutex);
  const auto it = aborts_->lost.find(peer);
  if (it != aborts_->lost.end())
    throw CommError(describe() + ": the connection to rank " + std::to_string(peer) +
                    " ended: " + it->second);
}

Group::BlockedSend::BlockedSend(Group& group, int peer, c10::intrusive_ptr<c10d::Work> work)
    : group_(group), work_(std::move(work)) {
  const std::lock_guard<std::mutex> lock(group_.aborts_->mutex);
  group_.aborts_->blocked.emplace_back(peer, work_);
}

Group::BlockedSend::~BlockedSend() {
  const std::lock_guard<std::mutex> lock(group_.aborts_->mutex);
  auto& blocked = group_.aborts_->blocked;
  blocked.erase(std::remove_if(blocked.begin(), blocked.end(),
                               [&](const auto& b) { return b.second == work_; }),
                blocked.end());
}

void Group::track(Request::State& s) {
  bool late = false;
  {
    const std::lock_guard<std::mutex> lock(aborts_->mutex);
    if (!aborts_->enabled) return;
    late = !aborts_->reason.empty() || !aborts_->failure.empty();
    if (!late) aborts_->pending.insert(aborts_->pending.end(), s.works.begin(), s.works.end());
  }
  if (late)  // aborted or failed while these were being posted
    for (auto& work : s.works)
      work->abort();
}

void Group::untrack(Request::State& s) {
  const std::lock_guard<std::mutex> lock(aborts_->mutex);
  if (!aborts_->enabled || aborts_->pending.empty()) return;
  auto& pending = aborts_->pending;
  pending.erase(std::remove_if(pending.begin(), pending.end(),
                               [&](const c10::intrusive_ptr<c10d::Work>& w) {
                                 return std::find(s.works.begin(), s.works.end(), w) !=
                                        s.works.end();
                               }),
                pending.end());
}

}  // namespace dtrain::comm
