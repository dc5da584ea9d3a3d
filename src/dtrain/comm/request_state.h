// Internal to comm::Group (group.cpp, framing.cpp, wire_check.cpp, byte_messages.cpp): the
// state of a pending point-to-point request, and the wire check's framing of a checked
// message (docs/wire-format.md, "Message integrity").
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm/group.h"

namespace dtrain::comm {

struct Request::State {
  Group* group = nullptr;
  int peer = -1;
  int tag = 0;
  Direction dir = Direction::kSend;
  int64_t bytes = 0;
  std::chrono::steady_clock::time_point posted;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<at::Tensor> keep_alive;
  // A checked receive (see the framing in post()): the caller's bytes, and either the framed
  // message holding them and their check (small), or the pieces and the check message.
  at::Tensor payload, framed, check;
  at::Tensor frame;  // the pooled buffer `framed` views, given back when done
  std::vector<at::Tensor> pieces;
  // A receive staged through host memory for a tensor off the CPU: copied there in wait().
  at::Tensor staged, stage_to;
  // A deferred receive (irecv_deferred): wait() leaves the check to the caller.
  bool deferred = false;
  WireCheck sender_check;
  // Run by wait() once the messages have arrived, before the request counts as complete:
  // an opening's copy out of the group's standing buffers and its check (openings.cpp).
  std::function<void(State&)> finish;
  // A receive from any rank (Group::irecv_from_any): run by wait() once the first message
  // (works[0]) has arrived, to learn the sender and post the rest of the message from it.
  std::function<void(State&)> await_source;
  bool done = false;
};

// A send being waited for, listed in the group's Aborts for the time of the wait, so that a
// report of its peer's lost connection (Group::peer_lost) can end the wait.
class Group::BlockedSend {
 public:
  BlockedSend(Group& group, int peer, c10::intrusive_ptr<c10d::Work> work);
  ~BlockedSend();
  BlockedSend(const BlockedSend&) = delete;
  BlockedSend& operator=(const BlockedSend&) = delete;

 private:
  Group& group_;
  c10::intrusive_ptr<c10d::Work> work_;
};

// The messages of one payload (framing.cpp), in posting order, and the connection each takes.
struct Group::Plan {
  std::vector<at::Tensor> messages;
  std::vector<int> streams;
  void add(at::Tensor m, int stream) {
    messages.push_back(std::move(m));
    streams.push_back(stream);
  }
  // The pieces of `bytes`: `piece` bytes each, spread over `k` connections.
  void add_pieces(const at::Tensor& bytes, int64_t piece, int k) {
    const int64_t n = bytes.numel();
    int j = 0;
    for (int64_t begin = 0; begin < n; begin += piece, ++j)
      add(bytes.narrow(0, begin, std::min(piece, n - begin)), j % k);
  }
};

// An abortable group's pending works (Group::make_abortable).
struct Group::Aborts {
  std::mutex mutex;
  bool enabled = false;
  bool owner_explains = false;      // failures throw at once (make_abortable)
  std::string reason;               // set once aborted
  std::string failure;              // the group's first failed message, once one failed
  std::map<int, std::string> lost;  // peers whose connection ended (PeerWatch), and how
  // Sends being waited for now, by peer: what a lost peer's report ends (peer_lost).
  std::vector<std::pair<int, c10::intrusive_ptr<c10d::Work>>> blocked;
  std::vector<c10::intrusive_ptr<c10d::Work>> pending;
};

// Payloads up to kInlineCheckBytes travel with their check appended (one message: a copy,
// fused with the checksum, costs less than the extra messages of pieces); larger ones go in
// pieces and then an 8-byte check message, so each end checksums one piece while the next
// crosses: a quarter of the payload (rounded up to 64 KiB), within 1 .. 4 MiB. Measured
// inside one pipeline run (--measure-wire-check), a 256 KiB limit, which sent the cnn's
// 400 KB activations in pieces, cost about 2.5 points of step time more than carrying them
// inline (docs/results.md).
constexpr int64_t kInlineCheckBytes = int64_t{1} << 20;
constexpr int64_t kFrameGrain = int64_t{64} << 10;
// n rounded up to a whole number of `grain`s.
inline int64_t round_up(int64_t n, int64_t grain) {
  return (n + grain - 1) / grain * grain;
}
inline int64_t piece_bytes(int64_t payload) {
  const int64_t quarter = round_up(payload / 4, kFrameGrain);
  return std::clamp(quarter, kInlineCheckBytes, int64_t{4} << 20);
}
constexpr int64_t kStripeMinBytes = Group::kStripeMinBytes;
// A striped payload's piece (Group::set_streams): an even share of the payload for each of
// the k connections, rounded up to a whole cache line, so that every connection carries a
// piece of every striped message of kStripeMinBytes or more (k <= kMaxStreams). A connection
// left out (64 KiB shares left the fifth of 5 without a piece of a 1 MiB segment) carries
// only openings, idles between calls past TCP's retransmission timeout, and Linux starts it
// again from its initial window: on the 25 ms lab the ring's opening then arrived last, and
// a 4-rank all-reduce of 64 MiB took 1,009 ms instead of 893 (docs/results.md,
// "Collectives and links").
constexpr int64_t kStripeGrain = 64;
inline int64_t striped_piece_bytes(int64_t bytes, int k) {
  return round_up((bytes + k - 1) / k, kStripeGrain);
}
constexpr int64_t kCheckBytes = Group::kCheckRoom;  // [CRC32C, payload bytes mod 2^32], LE uint32

inline void write_check(uint8_t* at, uint32_t crc, int64_t bytes) {
  const uint32_t words[2] = {crc, static_cast<uint32_t>(bytes)};
  std::memcpy(at, words, sizeof(words));
}

inline std::pair<uint32_t, uint32_t> read_check(const uint8_t* at) {
  uint32_t words[2];
  std::memcpy(words, at, sizeof(words));
  return {words[0], words[1]};
}

}  // namespace dtrain::comm
