// How a point-to-point message crosses (group.h, Integrity; docs/wire-format.md): the
// messages a payload becomes, the connections they take, and their completion and
// verification in Request::wait().
//
//   unchecked    the payload alone (the wire check off, or a byte message's payload)
//   inline       payload and check in one message: the caller's buffer with room for the
//                check, or a pooled frame it is copied into (small payloads)
//   pieces       the payload in pieces, then an 8-byte check message: large payloads (each
//                end checksums one piece while the next crosses), and the caller-checked
//                messages of isend_checked / irecv_deferred (no copy; no pass here
//                unless isend_checked is given no CRC: then one pass after posting)
//
// A message of a striped link (Group::set_streams) goes in pieces, piece j on connection
// j % k, the check message on connection 0 after its pieces.
#include <ATen/ATen.h>

#include <algorithm>

#include "dtrain/comm/backend.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/request_state.h"

namespace dtrain::comm {

using Clock = std::chrono::steady_clock;

Request::Request() = default;
Request::~Request() = default;
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&&) noexcept = default;

bool Request::pending() const {
  return state_ && !state_->done;
}

WireCheck Request::sender_check() const {
  return state_ ? state_->sender_check : WireCheck{};
}

int Request::source() const {
  return state_ ? state_->peer : -1;
}

void Request::wait() {
  if (!pending()) return;
  State& s = *state_;
  const auto wait_start = Clock::now();
  uint32_t crc = 0;  // of the pieces received so far
  const bool verify_pieces = !s.deferred && s.check.defined();
  try {
    s.group->throw_if_aborted();  // or failed: its sends may never complete (group.h)
    // A Gloo work is waited for once (a second wait waits for another message).
    bool first_done = false;
    if (s.await_source) {
      if (!s.works[0]->wait(s.group->timeout())) s.group->throw_if_aborted();
      first_done = true;
      const auto post_rest = std::move(s.await_source);
      s.await_source = nullptr;
      post_rest(s);
    }
    // Without pieces to checksum as they come, the last message first: it completes last
    // (a connection keeps order; the check follows the pieces on connection 0), so this
    // thread sleeps and is woken once, not once per message. On 16 cores the ring's
    // per-segment check message alone cost 10-14 % at 16 MiB (docs/results.md).
    const size_t n = s.works.size();
    for (size_t j = 0; j < n; ++j) {
      const size_t i = verify_pieces ? j : n - 1 - j;
      if (!(i == 0 && first_done)) {
        std::optional<Group::BlockedSend> blocked;  // a send's peer may go with it half written
        if (s.dir == Direction::kSend) blocked.emplace(*s.group, s.peer, s.works[i]);
        // False: aborted (Group::abort, or the group failed), or the peer's connection ended.
        if (!s.works[i]->wait(s.group->timeout())) {
          s.group->throw_if_aborted();
          s.group->throw_if_lost(s.peer);
        }
      }
      if (verify_pieces && i < s.pieces.size())
        crc = s.group->checksum(s.pieces[i].data_ptr(), static_cast<size_t>(s.pieces[i].numel()),
                                crc);
    }
  } catch (const std::exception& e) {
    s.done = true;
    s.group->untrack(s);
    s.group->fail(s.dir, s.peer, s.tag, s.bytes,
                  std::chrono::duration<double>(Clock::now() - s.posted).count(), e.what());
  }
  s.group->untrack(s);
  const auto end = Clock::now();
  s.done = true;
  if (s.finish) {
    auto finish = std::move(s.finish);
    s.finish = nullptr;
    finish(s);
  }
  if (s.framed.defined()) {
    const auto* data = s.framed.data_ptr<uint8_t>();
    const auto [sent_crc, sent_bytes] = read_check(data + s.bytes);
    // Checked (and copied out of a pooled frame) in one pass; on a mismatch wait() throws,
    // so the caller never uses the bytes.
    const auto n = static_cast<size_t>(s.bytes);
    const uint32_t crc = s.payload.defined() ? s.group->checksum_copy(s.payload.data_ptr(), data, n)
                                             : s.group->checksum(data, n);
    s.group->verify(crc, sent_crc, sent_bytes, s.bytes, s.peer, s.tag);
  } else if (s.check.defined()) {
    const auto [sent_crc, sent_bytes] = read_check(s.check.data_ptr<uint8_t>());
    if (s.deferred)
      s.sender_check = {sent_crc, sent_bytes};
    else
      s.group->verify(crc, sent_crc, sent_bytes, s.bytes, s.peer, s.tag);
  }
  if (s.stage_to.defined()) s.stage_to.copy_(s.staged);  // only verified bytes move on
  s.group->record(s.peer, s.dir, s.bytes, s.posted, end,
                  std::chrono::duration<double>(end - wait_start).count());
  s.works.clear();
  s.keep_alive.clear();
  s.framed = at::Tensor();
  s.staged = s.stage_to = at::Tensor();
  if (s.frame.defined()) s.group->give_back_frame(std::move(s.frame));
}

Request Group::post(const at::Tensor& tensor, int peer, int tag, Direction dir,
                    const PostOptions& options) {
  check_peer(peer, dir == Direction::kSend ? "send" : "recv");
  if (!tensor.is_contiguous()) {
    throw std::invalid_argument(describe() + ": point-to-point tensors must be contiguous");
  }
  if (tag < 0) throw std::invalid_argument(describe() + ": negative tag");
  throw_if_aborted();
  if (!tensor.device().is_cpu()) return post_off_cpu(tensor, peer, tag, dir, options);
  Request req = new_request(tensor, peer, tag, dir);
  auto& s = *req.state_;
  if (s.bytes == 0) {  // nothing crosses the wire; both sides agree on sizes
    s.done = true;
    return req;
  }
  // c10d wants a byte-typed view: its Gloo backend rejects some dtypes (bfloat16) for p2p.
  const at::Tensor bytes = tensor.view({-1}).view(at::kByte);
  const bool send = dir == Direction::kSend;
  const int k = s.bytes >= kStripeMinBytes ? streams(peer) : 1;
  Plan plan;
  plan_message(s, bytes, k, options, plan);
  post_plan(s, bytes, plan, options);
  for (const auto& m : plan.messages)  // views of the caller's storage, or our framed copy
    s.keep_alive.push_back(m);
  if (send) s.check = at::Tensor();  // only a receive verifies in wait()
  return req;
}

// The messages `bytes` becomes over `k` connections (the framing above), in `plan`; a
// receive's state learns where its check arrives.
void Group::plan_message(Request::State& s, const at::Tensor& bytes, int k,
                         const PostOptions& options, Plan& plan) {
  const bool send = s.dir == Direction::kSend;
  const bool checked = (options.checked || options.deferred) && wire_check_;
  if (!checked) {
    plan.add_pieces(bytes, k > 1 ? striped_piece_bytes(s.bytes, k) : s.bytes, k);
  } else if (s.bytes <= kInlineCheckBytes && !options.deferred && k == 1) {
    plan_inline(s, bytes, send, options.room, plan);
  } else {
    const int64_t piece = std::min(options.deferred ? s.bytes : piece_bytes(s.bytes),
                                   k > 1 ? striped_piece_bytes(s.bytes, k) : s.bytes);
    plan.add_pieces(bytes, piece, k);
    s.check = at::empty({kCheckBytes}, at::kByte);
    if (!send) s.pieces = plan.messages;
    s.deferred = options.deferred;
    plan.add(s.check, 0);
  }
}

// Payload and check in one message: the caller's buffer where it left room for the check,
// else a pooled frame the payload is copied into (a send) or out of (a receive, in wait()).
void Group::plan_inline(Request::State& s, const at::Tensor& bytes, bool send, Room room,
                        Plan& plan) {
  at::Tensor framed;
  if (room == Room::kCheck) {
    framed = at::from_blob(bytes.data_ptr(), {s.bytes + kCheckBytes}, at::kByte);
    s.keep_alive.push_back(bytes);
  } else {
    s.frame = take_frame(s.bytes + kCheckBytes);
    framed = s.frame.narrow(0, 0, s.bytes + kCheckBytes);
  }
  auto* data = framed.data_ptr<uint8_t>();
  const auto n = static_cast<size_t>(s.bytes);
  if (send) {
    write_check(data + s.bytes,
                s.frame.defined() ? checksum_copy(data, bytes.data_ptr(), n) : checksum(data, n),
                s.bytes);
  } else {
    if (s.frame.defined()) s.payload = bytes;  // copied out in wait()
    s.framed = framed;
  }
  plan.add(framed, 0);
}

// Posts the plan's messages in order. A checked send in pieces checksums each piece just
// before it goes and writes the check message last.
void Group::post_plan(Request::State& s, const at::Tensor& bytes, const Plan& plan,
                      const PostOptions& options) {
  const bool send = s.dir == Direction::kSend;
  try {  // posting already fails when the connection to the peer is gone
    uint32_t crc = 0;
    for (size_t i = 0; i < plan.messages.size(); ++i) {
      std::vector<at::Tensor> one{plan.messages[i]};
      if (send && s.check.defined()) {
        if (i + 1 < plan.messages.size()) {
          if (!options.deferred)
            crc = checksum(one[0].data_ptr(), static_cast<size_t>(one[0].numel()), crc);
        } else if (!options.deferred) {
          write_check(s.check.data_ptr<uint8_t>(), crc, s.bytes);
        } else {  // the payload is posted: a CRC computed now overlaps its transfer
          write_check(
              s.check.data_ptr<uint8_t>(),
              options.crc ? *options.crc : checksum(bytes.data_ptr(), static_cast<size_t>(s.bytes)),
              s.bytes);
        }
      }
      c10d::Backend& over = connection(plan.streams[i]);
      s.works.push_back(send ? over.send(one, s.peer, s.tag) : over.recv(one, s.peer, s.tag));
    }
  } catch (const std::exception& e) {
    s.done = true;
    fail(s.dir, s.peer, s.tag, s.bytes, 0.0, e.what());
  }
  track(s);
}

}  // namespace dtrain::comm
