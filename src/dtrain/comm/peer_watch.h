// Internal to comm::Group: a standing receive from every peer on the group's first
// connection, on a tag no one sends to (TagSpace::kWatch). Gloo fails it when the connection
// ends (the peer died, or closed the group), which a send that Gloo has begun to write never
// learns: its wait would run to the group's timeout (group.h, peer_lost). A thread per peer
// waits on it and, `grace` after it failed, reports the peer once.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::comm {

class PeerWatch {
 public:
  // `lost(peer, what)` runs on the peer's thread; destruction waits for one running.
  using Lost = std::function<void(int peer, const std::string& what)>;
  PeerWatch(c10d::Backend& connection, int rank, int size, std::chrono::milliseconds grace,
            Lost lost);
  // Ends every standing receive's wait (and a grace under way) and joins the threads.
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

 private:
  void watch(const c10::intrusive_ptr<c10d::Work>& receive, int peer);

  const std::chrono::milliseconds grace_;
  const Lost lost_;
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> receives_;
  std::vector<std::thread> threads_;
};

}  // namespace dtrain::comm
