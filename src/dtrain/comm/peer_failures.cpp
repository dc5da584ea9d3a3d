// A failing rank's error and its peers' view of it: the error it publishes in the
// rendezvous store before it exits, and the message naming the rank where a cascade began.
#include <algorithm>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/backend.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/failure_readers.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {

using Clock = std::chrono::steady_clock;

namespace {
// A rank's published failure, keyed by its world rank: a subgroup's ranks share the store.
std::string failure_key(const Group& group, int rank) {
  return "dtrain/failed/" + std::to_string(group.world_rank(rank));
}
// How many ranks have read what their failure message needed from the store.
const char* const kReadersKey = "dtrain/failures_read";

// The store this process serves, once a group of it failed: kept for serve_failure_readers.
struct ServedStore {
  std::mutex mutex;
  c10::intrusive_ptr<c10d::Store> store;
  int readers_expected = 0;
};
ServedStore& served_store() {
  // Never destroyed: a store served by a process that exits without serve_failure_readers
  // (a Python rank) must not be torn down among the static destructors, after c10's own.
  static ServedStore& served = *new ServedStore;
  return served;
}
}  // namespace

void Group::done_reading_failures() const {
  if (backend_->hosts_store) {
    ServedStore& served = served_store();
    const std::lock_guard<std::mutex> lock(served.mutex);
    served.store = backend_->store;
    served.readers_expected = std::max(served.readers_expected, size_ - 2);
    return;
  }
  try {
    backend_->store->add(kReadersKey, 1);
  } catch (const std::exception&) {  // best effort: the store's host may be gone
  }
}

void serve_failure_readers(std::chrono::milliseconds limit) {
  ServedStore& served = served_store();
  const std::lock_guard<std::mutex> lock(served.mutex);
  if (!served.store) return;
  const auto deadline = Clock::now() + limit;
  try {
    while (served.store->add(kReadersKey, 0) < served.readers_expected && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } catch (const std::exception&) {
  }
  served.store.reset();
}

void Group::fail(Direction dir, int peer, int tag, int64_t bytes, double waited_s,
                 const std::string& what) const {
  std::ostringstream msg;
  msg << describe() << ": " << (dir == Direction::kSend ? "send to" : "recv from") << " rank ";
  if (peer < 0)
    msg << "any";  // a receive from any rank that heard from none (irecv_from_any)
  else
    msg << peer;
  msg << " (tag " << tag << ", " << bytes << " bytes) failed after " << waited_s
      << " s: " << what.substr(0, what.find('\n'));
  // A later failure of a group that failed before (its first error is on its way up), or
  // an elastic group's, whose failures are its membership's to explain (elastic/): throw now.
  if (!note_failure(msg.str()) || owner_explains_failures()) throw CommError(msg.str());
  if (peer < 0) {  // no one peer to blame: name those that reported nothing
    msg << silent_peers_note();
    publish_failure(msg.str());
    done_reading_failures();
    throw CommError(msg.str());
  }
  std::ostringstream silent;
  silent << " -- rank " << peer << " exited, crashed or stopped responding (";
  // A link that broke fails at once; only a silent one waits the timeout out.
  if (waited_s * 1e3 < 0.9 * static_cast<double>(timeout_.count()))
    silent << "its link failed before the timeout of ";
  else
    silent << "no answer within the timeout of ";
  silent << timeout_.count() << " ms); see its output";
  // Published first (so two ranks failing at once still see each other's), with the
  // peer named as silent: a rank reading it in a cascade learns where the silence began.
  publish_failure(msg.str() + silent.str());
  const PeerFailure cause = failure_of(peer);
  if (!cause.error.empty()) {
    msg << " -- rank " << peer << " had already failed: " << cause.error;
  } else {
    msg << silent.str();
    if (cause.store_gone && peer != 0)
      msg << "; the rendezvous store, held by rank 0, does not answer either: rank 0 has "
             "exited or stopped, probably first (see its output)";
  }
  done_reading_failures();
  throw CommError(msg.str());
}

void Group::publish_failure(const std::string& message) const {
  try {  // best effort: the store's host may be the rank that died
    backend_->store->set(failure_key(*this, rank_),
                         std::vector<uint8_t>(message.begin(), message.end()));
  } catch (const std::exception&) {
  }
}

Group::PeerFailure Group::failure_of(int peer) const {
  PeerFailure failure;
  // A peer that timed out at the same moment publishes its reason a moment later: give it
  // that moment, so the message leads to the rank where the silence began.
  constexpr auto kGrace = std::chrono::milliseconds(1000);
  const auto start = Clock::now();
  try {
    const std::string key = failure_key(*this, peer);
    backend_->store->wait({key}, kGrace);
    const auto value = backend_->store->get(key);
    failure.error.assign(value.begin(), value.end());
  } catch (const std::exception&) {
    // No answer at all, well before the grace ran out: the connection to the store broke
    // (a timeout and a broken socket are the same exception type in c10d).
    failure.store_gone = Clock::now() - start < kGrace / 2;
  }
  return failure;
}

std::string Group::silent_peers_note() const {
  constexpr auto kGrace = std::chrono::milliseconds(1000);
  const auto deadline = Clock::now() + kGrace;
  std::vector<int> silent;
  std::string reported;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    try {
      const auto left =
          std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                   std::chrono::milliseconds(1));
      const std::string key = failure_key(*this, peer);
      backend_->store->wait({key}, left);
      if (reported.empty()) {
        const auto value = backend_->store->get(key);
        reported = " -- rank " + std::to_string(peer) +
                   " failed too: " + std::string(value.begin(), value.end());
      }
    } catch (const std::exception&) {
      silent.push_back(peer);
    }
  }
  if (silent.empty()) return reported;
  std::ostringstream note;
  note << " -- rank" << (silent.size() > 1 ? "s " : " ");
  for (size_t i = 0; i < silent.size(); ++i)
    note << (i ? ", " : "") << silent[i];
  note << (silent.size() > 1 ? " reported no failure of their own: each " : " ")
       << "exited, crashed or stopped responding (no answer within the timeout of "
       << timeout_.count() << " ms); see its output";
  return note.str();
}

}  // namespace dtrain::comm
