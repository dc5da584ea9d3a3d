// Internal to comm::Group (group.cpp, openings.cpp): the state behind openings (group.h,
// "Openings"; docs/wire-format.md): per link and tag, the receives posted ahead and the
// buffers they fill, and the sequence numbers both ends keep.
//
// An opening of n bytes is cut into pieces, one per connection of the link (opening_pieces),
// each at most the capacity's share of a connection; the pieces go first, then a 16-byte
// trailer on connection 0: [CRC32C of the payload (0 with the wire check off), n mod 2^32,
// sequence number, kOpeningMagic]. A standing receive is a whole share long; Gloo accepts a
// shorter message into it, and the trailer says how long the opening was. Each connection
// keeps its own queue of standing receives: a small opening fills only connection 0's, and
// the next opening's pieces land in the heads of their own connections' queues.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "dtrain/comm/group.h"

namespace dtrain::comm {

constexpr int64_t kOpeningTrailerBytes = 16;
constexpr uint32_t kOpeningMagic = 0x4e45504f;  // "OPEN"

// One piece of an opening: its bytes [begin, begin + bytes) and its connection.
struct OpeningPiece {
  int64_t begin = 0, bytes = 0;
  int stream = 0;
};
// The pieces of an n-byte opening over `connections` connections: one per 64 KiB up to one
// per connection, even shares rounded up to 64 KiB. Each is at most opening_share().
std::vector<OpeningPiece> opening_pieces(int64_t n, int connections);
// The bytes a standing receive of one connection holds, for a link of `capacity`.
int64_t opening_share(int64_t capacity, int connections);

struct Group::Openings {
  // Receives posted per connection and per (peer, tag): two each, so that back-to-back calls
  // each find one posted long enough ago for its notice to have crossed (a receive taken is
  // posted again once its bytes are copied out, behind the other).
  static constexpr int kDepth = 2;
  struct Posted {
    at::Tensor into;
    c10::intrusive_ptr<c10d::Work> work;  // null while a request holds it
  };
  // One (peer, tag)'s receive side: per connection the receives its pieces fill in order,
  // the trailers' receives, the sequence number the next opening must carry, and whether a
  // request holds the heads.
  struct Standing {
    std::vector<std::deque<Posted>> pieces;
    std::deque<Posted> trailers;
    uint32_t next = 0;
    bool taken = false;
  };

  explicit Openings(int peers) : capacity(static_cast<size_t>(peers), 0) {}

  std::mutex mutex;
  std::vector<int64_t> capacity;      // per peer
  std::map<int, int64_t> armed_with;  // per peer: the capacity its openings were first used with
  std::map<std::pair<int, int>, Standing> receiving;  // (peer, tag)
  std::map<std::pair<int, int>, uint32_t> sending;    // (peer, tag): the next sequence number
};

}  // namespace dtrain::comm
