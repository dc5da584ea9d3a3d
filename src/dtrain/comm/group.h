// comm::Group: one rank's view of a set of ranks connected by a transport (Gloo over TCP).
//
// Contract
// - Point-to-point operations are asynchronous and tagged. Messages between one pair of
//   ranks with the same tag are matched in posting order (FIFO); different tags are
//   independent. Tags >= kReservedTagBase are used by the collective algorithms.
// - The caller keeps a tensor (or byte buffer) alive and unmodified (send) or untouched
//   (recv) until the Request's wait() returns. Tensors must be contiguous.
// - Tensors off the CPU: on the GPU the group's NCCL backend serves (comm/collective_backend.h)
//   they go by NCCL's own send/recv: no wire check (NCCL carries the bytes), matched in
//   posting order per pair of ranks whatever the tag; wait() orders the caller's current
//   CUDA stream after the transfer (and, given the group's timeout, NCCL's wait also polls
//   for its end on the host; synchronize the device before reading a clock). Any other is
//   staged through host memory: a send copies it out when posted, a receive copies the
//   verified bytes in when wait() returns; checked as CPU tensors are.
// - A Request must not outlive its Group.
// - Every wait has the group's timeout. A dead or silent peer makes wait() throw
//   comm::CommError naming this rank, the peer, the tag and the size; it never hangs. When
//   the peer itself failed first (a cascade), the message carries the peer's own error, so
//   the rank that really died is named.
// - The receiver must post a buffer of exactly the size the sender sends (the transport
//   cannot tell); byte messages carry their own length, see isend_bytes/recv_bytes.
//
// Integrity: while the wire check is on (the default; DTRAIN_WIRE_CHECK=0 turns it off, and
//   every rank must agree, which connect() checks), each message carries a check [CRC32C of
//   the payload, payload bytes mod 2^32]: appended to payloads up to 1 MiB (one message),
//   or as an 8-byte message after a larger payload sent in pieces (a quarter of it, within
//   1 .. 4 MiB: each end checksums one piece while the next crosses). The receiver verifies
//   it in wait() (recv_bytes: the CRC rides in the length message). A mismatch throws
//   comm::CorruptMessage naming the link and the message, and the payload is never handed
//   on. Gloo's own collectives (native_*) are not covered.
//
// Accounting: every completed message is counted per peer and direction: bytes, messages,
// active time (post -> observed completion, overlapping messages counted once) and wait time
// (time the caller was blocked in wait()). Link bandwidth = bytes / active time (split-learning
// studies' recv_bytes / recv_time).
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/reduce_op.h"

namespace c10d {
class Backend;
}

namespace dtrain::comm {

class AllReduceTuner;
class Backend;
class Group;
struct OpeningPiece;

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

// What the wire check sends beside a payload: its CRC32C and its length mod 2^32.
struct WireCheck {
  uint32_t crc = 0;
  uint32_t bytes = 0;
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
  // A receive posted with Group::irecv_deferred, after wait(): the check the sender sent
  // (zeros with the wire check off), for Group::verify_deferred.
  WireCheck sender_check() const;
  // The rank a receive came from: its peer, or for Group::irecv_from_any, after wait(), the
  // rank whose message it took (-1 before).
  int source() const;

 private:
  friend class Group;
  struct State;
  std::unique_ptr<State> state_;
};

class PeerWatch;

class Group {
 public:
  explicit Group(std::unique_ptr<Backend> backend);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const { return rank_; }
  // The c10d objects behind it (comm/backend.h: for comm/world.cpp's subgroups only).
  const Backend& backend() const { return *backend_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Room after a tensor: with Room::kCheck the caller promises that the kCheckRoom bytes
  // right after the tensor's last byte are part of the same allocation and free for the
  // group (a send may overwrite them, a receive fills them). A checked message of up to
  // 1 MiB then carries its check there: no copy at either end, only the checksum.
  enum class Room { kNone, kCheck };
  static constexpr int64_t kCheckRoom = 8;
  // A byte tensor of `bytes` whose allocation holds kCheckRoom more after it: a buffer the
  // caller may pass with Room::kCheck.
  static at::Tensor buffer_with_room(int64_t bytes);
  // Scratch memory for the collective algorithms (a ring's staging): `bytes` of a buffer the
  // group keeps for reuse, so a large all-reduce does not fault in fresh pages every call.
  // Hand it back with give_back_scratch; the group keeps the largest few for its lifetime.
  at::Tensor take_scratch(int64_t bytes);
  void give_back_scratch(at::Tensor buffer) { give_back_frame(std::move(buffer)); }
  Request isend(const at::Tensor& tensor, int peer, int tag, Room room = Room::kNone);
  Request irecv(at::Tensor& tensor, int peer, int tag, Room room = Room::kNone);
  // The wire check where the caller touches the bytes anyway (a reduction, a copy): a send
  // whose CRC32C the caller computed (no pass over the payload here, no copy: the check
  // goes as a message of its own after the payload), and a receive that leaves the
  // verification to the caller, who computes the CRC while using the bytes and must call
  // verify_deferred before anything else sees them. Each pairs only with its own kind.
  // Without a `crc` the group computes it after posting the payload, while the payload
  // crosses (for bytes the caller does not touch before they go).
  Request isend_checked(const at::Tensor& tensor, int peer, int tag, std::optional<uint32_t> crc);
  Request irecv_deferred(at::Tensor& tensor, int peer, int tag);
  // Throws CorruptMessage (as wait() does) unless `computed` is the CRC32C the sender of
  // `request` (an irecv_deferred, waited for) announced. A no-op with the wire check off.
  void verify_deferred(const Request& request, uint32_t computed) const;
  // A receive from whichever rank's message of `tag` comes first (torch's recv without a
  // source), paired with an ordinary isend; Request::source() says whose after wait(). A
  // contiguous CPU tensor of more than 0 bytes; a message of kStripeMinBytes or more needs
  // the same streams() to every peer (its first piece is what is matched). Only the first
  // message is matched from any rank: the rest of a message in pieces is received from its
  // sender once wait() has learnt who that is.
  Request irecv_from_any(at::Tensor& tensor, int tag);
  void send(const at::Tensor& tensor, int peer, int tag) { isend(tensor, peer, tag).wait(); }
  void recv(at::Tensor& tensor, int peer, int tag) { irecv(tensor, peer, tag).wait(); }

  // Byte messages of any length: an 8-byte length message, then the payload.
  // `bytes` must stay alive until the Request completes.
  Request isend_bytes(const std::vector<uint8_t>& bytes, int peer, int tag);
  // A byte tensor viewing `bytes` (not owning them): for isend/irecv of a byte vector, which
  // must outlive the message.
  static at::Tensor payload_view(const std::vector<uint8_t>& bytes);
  std::vector<uint8_t> recv_bytes(int peer, int tag, int64_t max_bytes = int64_t{1} << 34);
  // Both directions at once: `out[i]` goes to `peers[i]`, and what each of `peers` sent here
  // comes back in the same order (the same messages as isend_bytes/recv_bytes). Use it
  // where ranks send to and receive from each other: every receive is posted before this
  // rank's payloads go out. Gloo sends data only to a posted receive, and a receive's
  // notice travels behind this rank's own outgoing data on the pair's one connection: a
  // receive posted after a large send waits for that send to cross, and on a slow link the
  // two directions then take turns (half the rate; docs/results.md, "Slow links and auto").
  std::vector<std::vector<uint8_t>> exchange_bytes(
      const std::vector<int>& peers, const std::vector<const std::vector<uint8_t>*>& out, int tag,
      int64_t max_bytes = int64_t{1} << 34);

  void barrier();

  // The wire check (see Integrity). Turning it on or off is collective in effect: both ends
  // of every link must switch between the same two messages (benchmarks' A/B runs).
  bool wire_check() const { return wire_check_; }
  void set_wire_check(bool on) { wire_check_ = on; }
  // Seconds this rank has spent on the wire check since the group was made: the checksums of
  // what it sent and received, and the copies of the framing. What the check costs it, to
  // hold beside the run's time (pipeline reports: wire_check_s).
  double wire_check_seconds() const { return static_cast<double>(check_ns_.load()) * 1e-9; }

  // The backend's own collectives, for the `native` algorithm and for small bookkeeping
  // reductions. Dense tensors (contiguous or channels-last), in place. A tensor on the GPU the
  // group's NCCL backend serves is reduced there, on NCCL's stream (the caller's current stream
  // waits for it; the host does not); any other off the CPU is copied through host memory and
  // reduced by Gloo.
  void native_all_reduce(at::Tensor& tensor, ReduceOp op);
  void native_broadcast(at::Tensor& tensor, int root);
  // Whether native_* reduce `tensor` where it lies on a GPU (NCCL), with no host copy.
  bool reduces_on_device(const at::Tensor& tensor) const;

  // Streams: connections per peer for large messages, which go in pieces over them (one
  // TCP connection cannot fill a link whose bandwidth-delay product exceeds its socket
  // buffers). stream_capacity() connections were made at connect (--streams); a link uses
  // streams(peer) of them for messages of kStripeMinBytes or more. Both ends of a link
  // must set the same count, between messages (set_streams throws outside 1..capacity).
  static constexpr int64_t kStripeMinBytes = int64_t{256} << 10;
  int stream_capacity() const;
  int streams(int peer) const { return streams_.at(static_cast<size_t>(peer)); }
  void set_streams(int peer, int count);
  // A link's round trip in seconds as measured at connect (link_probe.h, configure_streams),
  // or -1 where it was not measured.
  double round_trip(int peer) const { return round_trips_.at(static_cast<size_t>(peer)); }
  void set_round_trip(int peer, double seconds) {
    round_trips_.at(static_cast<size_t>(peer)) = seconds;
  }
  // The longest round trip of this rank's links that were measured (0 where none was).
  double longest_round_trip() const;

  // Openings (docs/wire-format.md, "Openings"). Gloo sends a message only once the receiver's
  // notice that its receive is posted has arrived, so on a long link a collective's first
  // bytes leave one one-way delay after the call begins. An opening is a message whose
  // receive the group keeps posted ahead, in buffers of its own (standing receives per link
  // and tag, posted again as soon as one is taken): from the second opening of a link and tag
  // on, the sender's bytes leave at once.
  // - opening_capacity(peer): the most bytes one opening on the link to `peer` carries; 0
  //   (no openings) unless set. configure_streams() sets kOpeningBytes on long links. Both
  //   ends of a link set the same value, between messages; once a link's openings are in use
  //   it may go to 0 and back, not to another size.
  // - isend_opening / irecv_opening pair as isend / irecv do (same size, posting order per
  //   link and tag), for CPU tensors of at most the capacity and collective tags
  //   (tags.h, opening_tags). One opening per link and tag is in flight at a time. The bytes
  //   go over every connection of the link at once; the receive is checked as irecv's is (the
  //   wire check) and for its place in the sequence, and its bytes are copied out of the
  //   standing buffers into `tensor` by wait().
  static constexpr int64_t kOpeningBytes = int64_t{4} << 20;
  int64_t opening_capacity(int peer) const;
  void set_opening_capacity(int peer, int64_t bytes);
  Request isend_opening(const at::Tensor& tensor, int peer, int tag);
  Request irecv_opening(at::Tensor& tensor, int peer, int tag);
  // An opening where the message fits one (a CPU tensor of more than 0 bytes, at most the
  // link's capacity, a collective tag), else an ordinary isend / irecv: both ends of a link
  // decide alike, so either pairs with the other.
  Request isend_opening_if_fits(const at::Tensor& tensor, int peer, int tag);
  Request irecv_opening_if_fits(at::Tensor& tensor, int peer, int tag);
  // As the _if_fits pair, except that a contiguous message longer than the link's capacity
  // goes as two: its first capacity's worth of whole values as an opening, the rest as an
  // ordinary message of the same tag, whose receive's notice crosses while the opening's
  // bytes do (a call then pays one one-way delay, not a round trip more). Appends one or two
  // requests to `requests`; both ends split alike.
  void isend_opening_first(const at::Tensor& tensor, int peer, int tag,
                           std::vector<Request>& requests);
  void irecv_opening_first(at::Tensor& tensor, int peer, int tag, std::vector<Request>& requests);

  // Aborts (elastic membership, elastic/): after make_abortable(), called before the first
  // message, abort() from any thread ends every pending point-to-point wait of the group at
  // once (Gloo's send and receive works are aborted) with a CommError carrying `reason`, and
  // every later post or wait throws it too: a group once aborted is done, make a new one.
  // A failed message of an abortable group throws at once, without waiting for the peer's
  // published error (its owner, the elastic membership, explains failures), unless
  // keep_explaining_failures() says the group's failures are still its own to explain (the
  // torch backend, abortable for abort() alone). The backend's own collectives (native_*,
  // barrier) are not abortable.
  void make_abortable();
  bool abortable() const;
  void keep_explaining_failures();
  // aborted() or an abortable group whose owner explains its failures.
  bool owner_explains_failures() const;
  void abort(const std::string& reason);
  bool aborted() const;

  LinkStats link_stats(int peer) const;
  void reset_link_stats();

  // Prefix used in error messages: "rank 3/8"; in a subgroup (connect_subgroup) "rank 1/2 of
  // subgroup 'NAME' (world ranks 1, 3)", the peers its messages name being its own ranks.
  std::string describe() const;
  // A rank of this group as a rank of the world (the same, but in a subgroup).
  int world_rank(int rank) const;

  // `--algo auto`'s measurements of this group's links (allreduce_tuner.h).
  AllReduceTuner& all_reduce_tuner() { return *tuner_; }

 private:
  friend class Request;
  // How a message crosses (request_state.h): `checked` false: no check of its own (byte
  // messages' payloads: their length message carries it); `crc`: the caller's (a send of
  // isend_checked), or for a receive, a deferred verification.
  struct PostOptions {
    bool checked = true;
    Room room = Room::kNone;
    bool deferred = false;        // isend_checked / irecv_deferred
    std::optional<uint32_t> crc;  // isend_checked's (none: computed after the payload)
  };
  Request post(const at::Tensor& tensor, int peer, int tag, Direction dir,
               const PostOptions& options);
  Request post(const at::Tensor& tensor, int peer, int tag, Direction dir, bool checked) {
    PostOptions o;
    o.checked = checked;
    return post(tensor, peer, tag, dir, o);
  }
  // post()'s steps for a CPU payload (framing.cpp): the messages it becomes (a Plan), the
  // inline framing's one message, and the plan's posting.
  struct Plan;
  void plan_message(Request::State& s, const at::Tensor& bytes, int k, const PostOptions& options,
                    Plan& plan);
  void plan_inline(Request::State& s, const at::Tensor& bytes, bool send, Room room, Plan& plan);
  void post_plan(Request::State& s, const at::Tensor& bytes, const Plan& plan,
                 const PostOptions& options);
  // post() of a tensor off the CPU: by NCCL where it serves the tensor's GPU, else a host
  // copy through post().
  Request post_off_cpu(const at::Tensor& tensor, int peer, int tag, Direction dir,
                       const PostOptions& options);
  // The Gloo group whose connections are stream `stream` of every link (comm/backend.h).
  c10d::Backend& connection(int stream) const;
  // A pending request for `tensor`'s bytes, posted now.
  Request new_request(const at::Tensor& tensor, int peer, int tag, Direction dir);
  // The receive side of the wire check: throws CorruptMessage unless the sender's `crc` and
  // `announced_bytes` (mod 2^32) are the `computed` CRC and the `bytes` received.
  void verify(uint32_t computed, uint32_t crc, uint32_t announced_bytes, int64_t bytes, int peer,
              int tag) const;
  // Byte messages' framing (byte_messages.cpp): the length message of `bytes`; the length a
  // received one announces (throws beyond `max_bytes`); the payload's check.
  at::Tensor length_message(const std::vector<uint8_t>& bytes);
  int64_t announced_bytes(const at::Tensor& length, int peer, int tag, int64_t max_bytes) const;
  void verify_bytes(const std::vector<uint8_t>& bytes, const at::Tensor& length, int peer, int tag);
  // Holds `tensor` until `request` completes.
  static void keep_alive(Request& request, const at::Tensor& tensor);
  // crc32c(data, n, crc), its time counted in wire_check_seconds().
  uint32_t checksum(const void* data, size_t n, uint32_t crc = 0);
  // Buffers for the inline framing (payload and check in one message) of callers without
  // room, reused: a fresh one per message costs page faults for every few hundred KB. A
  // pooled buffer of at least `bytes`, and its return.
  at::Tensor take_frame(int64_t bytes);
  void give_back_frame(at::Tensor frame);
  // crc32c_copy(out, data, n, crc), its time counted the same way.
  uint32_t checksum_copy(void* out, const void* data, size_t n, uint32_t crc = 0);
  // Adds the time since `start` to wire_check_seconds().
  void count_check_time(std::chrono::steady_clock::time_point start);
  void record(int peer, Direction dir, int64_t bytes, std::chrono::steady_clock::time_point posted,
              std::chrono::steady_clock::time_point done, double waited_s);
  void check_peer(int peer, const char* what) const;
  // Throws CommError naming this rank, the peer and, if it failed first, the peer's error.
  // The group's first failure is its last: it is noted (note_failure), and a later message's
  // failure throws at once, publishing nothing and waiting for no one.
  [[noreturn]] void fail(Direction dir, int peer, int tag, int64_t bytes, double waited_s,
                         const std::string& what) const;
  // A failing rank leaves its error in the rendezvous store before it exits, so a rank that
  // sees the connection drop can name the root cause rather than the messenger.
  void publish_failure(const std::string& message) const;
  // The peer's published error, waiting up to a second for it (empty when there is none),
  // and whether the store did not answer at all: it lives in rank 0's process, so then rank 0
  // is gone too, and a cascade that began there cannot be traced through the store.
  struct PeerFailure {
    std::string error;
    bool store_gone = false;
  };
  PeerFailure failure_of(int peer) const;
  // Said by a failing rank once its message is complete: counted in the store where another
  // process serves it; where this one does, serve_failure_readers (failure_readers.h) waits
  // for the others' counts before the process leaves.
  void done_reading_failures() const;
  // After a collective of every rank failed here: the peers that published no failure of
  // their own within a second (the silent ones, where a stopped rank hides), as a clause
  // of the error message, or what the others reported where every peer failed too.
  std::string silent_peers_note() const;
  // Runs a native collective, `what` naming it in the CommError it becomes on failure.
  template <typename Collective>
  void run_native(const char* what, Collective&& collective);

  // Aborts (aborts.cpp): the pending works of an abortable group, tracked from post to wait.
  struct Aborts;
  // A failed group is done, as an aborted one is: its pending works (where tracked) are
  // aborted, and every later post or wait throws at once with the first failure. Its waits
  // would otherwise run to the timeout: a collective unwinding from a failure waits for its
  // sends, to a peer that will never receive them (it failed too, or is stopped), and a rank
  // that failed first held its neighbours' cascade (and the store they read it from) that long.
  // True for the group's first failure only.
  bool note_failure(const std::string& message) const;
  void track(Request::State& s);
  void untrack(Request::State& s);
  void throw_if_aborted() const;
  // A peer's connection ends (peer_watch.h): a send Gloo has begun to write when its peer
  // dies is not failed by Gloo (its other operations on that connection are), and its wait
  // would run to the timeout. The peer's watch reports the end kLostGrace after it: a send
  // still waited for on that peer is then aborted and fails naming it (a message that
  // completed wakes its waiter at once, so only a wait that cannot end is cut).
  static constexpr std::chrono::milliseconds kLostGrace{200};
  void peer_lost(int peer, const std::string& what);
  class BlockedSend;
  void throw_if_lost(int peer) const;
  // Openings (openings.cpp; the caller holds the openings' mutex): an opening's arguments
  // checked, its byte view returned; a link and tag's standing receives posted where taken;
  // a received opening checked and copied out of them, and its receives posted again.
  struct Openings;
  at::Tensor opening_bytes(const at::Tensor& tensor, int peer, int tag, const char* what) const;
  bool fits_opening(const at::Tensor& tensor, int peer, int tag) const;
  // The values an opening carries ahead of the rest of `tensor` (isend_opening_first); 0
  // where the whole message goes one way or the other.
  int64_t opening_head(const at::Tensor& tensor, int peer, int tag) const;
  void post_standing(int peer, int tag);
  void take_opening(const at::Tensor& bytes, const std::vector<OpeningPiece>& pieces, int peer,
                    int tag);

  std::unique_ptr<Backend> backend_;
  // The openings' standing receives (openings.h): declared after backend_, so their
  // pending receives go before the connections they wait on.
  std::unique_ptr<Openings> openings_;
  std::unique_ptr<Aborts> aborts_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  bool wire_check_;
  std::atomic<int64_t> check_ns_{0};
  std::mutex frames_mutex_;
  std::vector<at::Tensor> frames_;
  std::vector<int> streams_;         // per peer
  std::vector<double> round_trips_;  // per peer
  std::unique_ptr<AllReduceTuner> tuner_;

  struct PeerAccount {
    LinkStats stats;
    std::chrono::steady_clock::time_point last_end[2];
  };
  mutable std::mutex stats_mutex_;
  std::vector<PeerAccount> accounts_;
  // Last: its threads, which report into aborts_, end before anything else goes.
  std::unique_ptr<PeerWatch> watch_;
};

}  // namespace dtrain::comm
