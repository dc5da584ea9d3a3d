// Internal to the elastic replica: the state a round started from, handed by one of its
// members to a replica that enters mid-round (docs/elastic.md), over a group of two of their
// own (the donor rank 0, the joiner rank 1), on a thread of its own beside the donor's inner
// steps. Four parts: first the upper halves of θ, the shared buffers and auto's choice
// (parallel/float_halves.h: θ to within 2^-7, in half the bytes) with the round's words, and
// those of the donor's inner optimizer state (inner_state.h; the joiner trains once both are
// in); then the lower halves of the first (the exact values); then the outer momentum
// (needed at the round's end). Each is checked against the CRC-32C the donor
// computed, and the joiner's acknowledgement comes last, so the donor's side closes only once
// everything arrived.
//
// Either side may abort() the transfer from another thread: its waits end at once (a
// connect still under way ends at its connect timeout). The destructor aborts and joins.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/world.h"

namespace dtrain::comm {
class Group;
class KeyValueStore;
}  // namespace dtrain::comm

namespace dtrain::train {

struct RoundStart {
  at::Tensor first;            // [θ, shared buffers, auto's choice], float32 (a joiner's: coarse)
  std::vector<int64_t> words;  // the round's view and the run's progress at its start
  at::Tensor momentum;         // the outer momentum, float32
  at::Tensor inner;            // the inner optimizer's state (a joiner's: coarse)
};

class SideTransfer {
 public:
  struct Link {
    std::unique_ptr<comm::KeyValueStore> store;  // a client of the thread's own
    std::string name;                            // the group's rendezvous prefix
    comm::WorldConfig world;
    std::chrono::milliseconds connect_timeout{10'000};
  };
  // The donor's side: sends `state`; failures are said on stderr with `who`.
  static std::unique_ptr<SideTransfer> serve(Link link, RoundStart state, std::string who);
  // The joiner's side: first_part() (its `first` coarse), exact_first() and momentum() become
  // ready as the parts arrive (or hold the CommError that ended the transfer). `first_values`
  // and `inner_values`: the sizes of `first` and `inner` in this replica's model and optimizer
  // (a donor's of another size fails the fetch).
  static std::unique_ptr<SideTransfer> fetch(Link link, int64_t first_values, int64_t inner_values);
  ~SideTransfer();
  SideTransfer(const SideTransfer&) = delete;
  SideTransfer& operator=(const SideTransfer&) = delete;

  std::future<RoundStart>& first_part() { return first_; }
  std::future<at::Tensor>& exact_first() { return exact_; }
  std::future<at::Tensor>& momentum() { return momentum_; }
  bool done() const;
  // The donor's side: the first part (all a joiner needs to train) went out.
  bool first_sent() const { return first_sent_; }
  void abort();

 private:
  SideTransfer() = default;
  static std::unique_ptr<SideTransfer> make();  // its futures tied to its promises
  // Runs on the thread: connects, then `body` over the group unless aborted meanwhile.
  void run(Link link, int rank, const std::function<void(comm::Group&)>& body);

  mutable std::mutex mutex_;
  comm::Group* group_ = nullptr;  // while the thread uses it
  bool aborted_ = false, done_ = false;
  std::atomic<bool> first_sent_{false};
  std::promise<RoundStart> first_promise_;
  std::promise<at::Tensor> exact_promise_, momentum_promise_;
  std::future<RoundStart> first_;
  std::future<at::Tensor> exact_;
  std::future<at::Tensor> momentum_;
  std::thread thread_;
};

}  // namespace dtrain::train
