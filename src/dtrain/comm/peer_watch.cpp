// PeerWatch (peer_watch.h): one standing receive and one waiting thread per peer.
#include "dtrain/comm/peer_watch.h"

#include <ATen/ATen.h>

#include <exception>

#include "dtrain/comm/tags.h"

namespace dtrain::comm {

PeerWatch::PeerWatch(c10d::Backend& connection, int rank, int size, std::chrono::milliseconds grace,
                     Lost lost)
    : grace_(grace), lost_(std::move(lost)) {
  const int tag = static_cast<int>(TagSpace::kWatch) << 24;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    std::vector<at::Tensor> byte{at::empty({1}, at::kByte)};
    c10::intrusive_ptr<c10d::Work> receive;
    try {
      receive = connection.recv(byte, peer, tag);
    } catch (const std::exception& e) {  // the connection ended already: nothing waits on it
      lost_(peer, e.what());
      continue;
    }
    receives_.push_back(receive);
    threads_.emplace_back([this, receive, peer] { watch(receive, peer); });
  }
}

void PeerWatch::watch(const c10::intrusive_ptr<c10d::Work>& receive, int peer) {
  std::string what;
  try {
    // As long as the group lives: a wait that runs out would end every connection of the
    // group (Gloo then fails its whole context).
    receive->wait(std::chrono::hours(24 * 365));
    return;  // aborted by the destructor (nothing is ever sent on this tag)
  } catch (const std::exception& e) {
    what = e.what();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (stop_.wait_for(lock, grace_, [this] { return stopping_; })) return;
  lock.unlock();
  lost_(peer, what);
}

PeerWatch::~PeerWatch() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  for (auto& receive : receives_) {
    try {
      receive->abort();                // its wait returns
    } catch (const std::exception&) {  // it failed meanwhile: its wait has returned
    }
  }
  for (auto& t : threads_)
    t.join();
}

}  // namespace dtrain::comm
