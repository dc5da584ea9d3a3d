// comm::Group: one rank's view of a set of ranks connected by a transport (Gloo over TCP).
//
// Contract
// - Point-to-point operations are asynchronous and tagged. Messages between one pair of
//   ranks with the same tag are matched in posting order (FIFO); different tags are
//   independent. Tags >= kReservedTagBase are used by the collective algorithms.
// - The caller keeps a tensor (or byte buffer) alive and unmodified (send) or untouched
//   (recv) until the Request's wait() returns. Tensors must be contiguous and on CPU.
// - A Request must not outlive its Group.
// - Every wait has the group's timeout. A dead or silent peer makes wait() throw
//   comm::CommError naming this rank, the peer, the tag and the size; it never hangs. When
//   the peer itself failed first (a cascade), the message carries the peer's own error, so
//   the rank that really died is named.
// - The receiver must post a buffer of exactly the size the sender sends (the transport
//   cannot tell); byte messages carry their own length, see isend_bytes/recv_bytes.
//
// Accounting: every completed message is counted per peer and direction: bytes, messages,
// active time (post -> observed completion, overlapping messages counted once) and wait time
// (time the caller was blocked in wait()). Link bandwidth = bytes / active time (seed 000's
// recv_bytes / recv_time).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dtrain/comm/reduce_op.h"

namespace dtrain::comm {

class Backend;
class Group;

constexpr int kReservedTagBase = 1 << 24;

enum class Direction { kSend, kRecv };

struct LinkCounters {
  int64_t bytes = 0;
  int64_t messages = 0;
  double active_s = 0;  // union of post->completion intervals
  double wait_s = 0;    // caller blocked in wait()
};

struct LinkStats {
  LinkCounters send;
  LinkCounters recv;
};

// A pending point-to-point operation. Movable, not copyable. wait() is idempotent.
class Request {
 public:
  Request();
  ~Request();
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Blocks until complete; throws CommError on failure or timeout.
  void wait();
  bool pending() const;

 private:
  friend class Group;
  struct State;
  std::unique_ptr<State> state_;
};

class Group {
 public:
  explicit Group(std::unique_ptr<Backend> backend);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  Request isend(const at::Tensor& tensor, int peer, int tag);
  Request irecv(at::Tensor& tensor, int peer, int tag);
  void send(const at::Tensor& tensor, int peer, int tag) { isend(tensor, peer, tag).wait(); }
  void recv(at::Tensor& tensor, int peer, int tag) { irecv(tensor, peer, tag).wait(); }

  // Byte messages of any length: an 8-byte length message, then the payload.
  // `bytes` must stay alive until the Request completes.
  Request isend_bytes(const std::vector<uint8_t>& bytes, int peer, int tag);
  std::vector<uint8_t> recv_bytes(int peer, int tag, int64_t max_bytes = int64_t{1} << 34);

  void barrier();

  // The backend's own collectives (Gloo's), for the `native` algorithm and for small
  // bookkeeping reductions. Contiguous CPU tensors, in place.
  void native_all_reduce(at::Tensor& tensor, ReduceOp op);
  void native_broadcast(at::Tensor& tensor, int root);

  LinkStats link_stats(int peer) const;
  void reset_link_stats();

  // Prefix used in error messages: "rank 3/8".
  std::string describe() const;

 private:
  friend class Request;
  Request post(const at::Tensor& tensor, int peer, int tag, Direction dir);
  void record(int peer, Direction dir, int64_t bytes, std::chrono::steady_clock::time_point posted,
              std::chrono::steady_clock::time_point done, double waited_s);
  void check_peer(int peer, const char* what) const;
  // Throws CommError naming this rank, the peer and, if it failed first, the peer's error.
  [[noreturn]] void fail(Direction dir, int peer, int tag, int64_t bytes, double waited_s,
                         const std::string& what) const;
  // A failing rank leaves its error in the rendezvous store before it exits, so a rank that
  // sees the connection drop can name the root cause rather than the messenger.
  void publish_failure(const std::string& message) const;
  std::string failure_of(int peer) const;

  std::unique_ptr<Backend> backend_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;

  struct PeerAccount {
    LinkStats stats;
    std::chrono::steady_clock::time_point last_end[2];
  };
  mutable std::mutex stats_mutex_;
  std::vector<PeerAccount> accounts_;
};

}  // namespace dtrain::comm
