#include "dtrain/comm/group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

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

void Request::wait() {
  if (!pending()) return;
  State& s = *state_;
  const auto wait_start = Clock::now();
  uint32_t crc = 0;  // of the pieces received so far
  try {
    for (size_t i = 0; i < s.works.size(); ++i) {
      s.works[i]->wait(s.group->timeout());
      if (i < s.pieces.size())
        crc = s.group->checksum(s.pieces[i].data_ptr(), static_cast<size_t>(s.pieces[i].numel()),
                                crc);
    }
  } catch (const std::exception& e) {
    s.done = true;
    s.group->fail(s.dir, s.peer, s.tag, s.bytes,
                  std::chrono::duration<double>(Clock::now() - s.posted).count(), e.what());
  }
  const auto end = Clock::now();
  s.done = true;
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

Group::Group(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)),
      rank_(backend_->pg->getRank()),
      size_(backend_->pg->getSize()),
      timeout_(backend_->timeout),
      wire_check_(backend_->wire_check),
      accounts_(static_cast<size_t>(size_)) {}

Group::~Group() = default;

std::string Group::describe() const {
  return "rank " + std::to_string(rank_) + "/" + std::to_string(size_);
}

void Group::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw std::invalid_argument(describe() + ": " + what + " with invalid peer " +
                                std::to_string(peer));
  }
}

Request Group::post(const at::Tensor& tensor, int peer, int tag, Direction dir, bool checked,
                    Room room) {
  check_peer(peer, dir == Direction::kSend ? "send" : "recv");
  if (!tensor.is_contiguous()) {
    throw std::invalid_argument(describe() + ": point-to-point tensors must be contiguous");
  }
  if (tag < 0) throw std::invalid_argument(describe() + ": negative tag");
  if (!tensor.device().is_cpu()) return post_off_cpu(tensor, peer, tag, dir, checked);
  Request req = new_request(tensor, peer, tag, dir);
  auto& s = *req.state_;
  if (s.bytes == 0) {  // nothing crosses the wire; both sides agree on sizes
    s.done = true;
    return req;
  }
  // c10d wants a byte-typed view: its Gloo backend rejects some dtypes (bfloat16) for p2p.
  const at::Tensor bytes = tensor.view({-1}).view(at::kByte);
  const bool send = dir == Direction::kSend;
  std::vector<at::Tensor> messages;  // to Gloo, in this order, on one tag (paired FIFO)
  if (!checked || !wire_check_) {
    messages.push_back(bytes);
  } else if (s.bytes <= kInlineCheckBytes) {
    at::Tensor framed;  // payload and check, one message
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
    messages.push_back(framed);
  } else {
    const int64_t piece = piece_bytes(s.bytes);
    for (int64_t begin = 0; begin < s.bytes; begin += piece)
      messages.push_back(bytes.narrow(0, begin, std::min(piece, s.bytes - begin)));
    s.check = at::empty({kCheckBytes}, at::kByte);
    if (!send) s.pieces = messages;
    messages.push_back(s.check);
  }
  try {  // posting already fails when the connection to the peer is gone
    auto& pg = *backend_->pg;
    uint32_t crc = 0;
    for (size_t i = 0; i < messages.size(); ++i) {
      std::vector<at::Tensor> one{messages[i]};
      if (send && s.check.defined()) {  // checksum each piece just before it goes
        if (i + 1 < messages.size())
          crc = checksum(one[0].data_ptr(), static_cast<size_t>(one[0].numel()), crc);
        else
          write_check(s.check.data_ptr<uint8_t>(), crc, s.bytes);
      }
      s.works.push_back(send ? pg.send(one, peer, tag) : pg.recv(one, peer, tag));
    }
  } catch (const std::exception& e) {
    s.done = true;
    fail(dir, peer, tag, s.bytes, 0.0, e.what());
  }
  for (const auto& m : messages)  // views of the caller's storage, or our framed copy
    s.keep_alive.push_back(m);
  if (send) s.check = at::Tensor();  // only a receive verifies in wait()
  return req;
}

Request Group::new_request(const at::Tensor& tensor, int peer, int tag, Direction dir) {
  Request req;
  req.state_ = std::make_unique<Request::State>();
  auto& s = *req.state_;
  s.group = this;
  s.peer = peer;
  s.tag = tag;
  s.dir = dir;
  s.bytes = static_cast<int64_t>(tensor.numel()) * static_cast<int64_t>(tensor.element_size());
  s.posted = Clock::now();
  return req;
}

Request Group::post_off_cpu(const at::Tensor& tensor, int peer, int tag, Direction dir,
                            bool checked) {
  const bool send = dir == Direction::kSend;
  if (!reduces_on_device(tensor)) {  // through host memory, on the Gloo path above
    const at::Tensor host =
        send ? tensor.to(at::kCPU) : at::empty(tensor.sizes(), tensor.options().device(at::kCPU));
    Request req = post(host, peer, tag, dir, checked);
    if (!send && req.pending()) {
      req.state_->staged = host;
      req.state_->stage_to = tensor;
    }
    return req;
  }
  Request req = new_request(tensor, peer, tag, dir);
  auto& s = *req.state_;
  if (s.bytes == 0) {
    s.done = true;
    return req;
  }
  std::vector<at::Tensor> one{tensor.view({-1}).view(at::kByte)};
  try {
    auto& pg = *backend_->device_pg;
    s.works.push_back(send ? pg.send(one, peer, tag) : pg.recv(one, peer, tag));
  } catch (const std::exception& e) {
    s.done = true;
    fail(dir, peer, tag, s.bytes, 0.0, e.what());
  }
  s.keep_alive.push_back(one[0]);
  return req;
}

Request Group::isend(const at::Tensor& tensor, int peer, int tag, Room room) {
  return post(tensor, peer, tag, Direction::kSend, true, room);
}

Request Group::irecv(at::Tensor& tensor, int peer, int tag, Room room) {
  return post(tensor, peer, tag, Direction::kRecv, true, room);
}

// Two messages: [length, CRC32C of the payload (0 with the wire check off)], then the payload.
Request Group::isend_bytes(const std::vector<uint8_t>& bytes, int peer, int tag) {
  const at::Tensor length = length_message(bytes);
  Request req = post(length, peer, tag, Direction::kSend, false);
  keep_alive(req, length);
  if (!bytes.empty()) {
    Request body = post(payload_view(bytes), peer, tag, Direction::kSend, false);
    for (auto& w : body.state_->works)
      req.state_->works.push_back(std::move(w));
    body.state_->works.clear();
    body.state_->done = true;
    req.state_->bytes += static_cast<int64_t>(bytes.size());
  }
  return req;
}

void Group::keep_alive(Request& request, const at::Tensor& tensor) {
  request.state_->keep_alive.push_back(tensor);
}

void Group::record(int peer, Direction dir, int64_t bytes, Clock::time_point posted,
                   Clock::time_point done, double waited_s) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  auto& account = accounts_[static_cast<size_t>(peer)];
  auto& counters = dir == Direction::kSend ? account.stats.send : account.stats.recv;
  auto& last_end = account.last_end[dir == Direction::kSend ? 0 : 1];
  counters.bytes += bytes;
  counters.messages += 1;
  counters.wait_s += waited_s;
  // Union of intervals: overlapping in-flight messages count once.
  const auto start = std::max(posted, last_end);
  if (done > start) counters.active_s += std::chrono::duration<double>(done - start).count();
  last_end = std::max(last_end, done);
}

LinkStats Group::link_stats(int peer) const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return accounts_.at(static_cast<size_t>(peer)).stats;
}

void Group::reset_link_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  for (auto& a : accounts_)
    a = PeerAccount{};
}

}  // namespace dtrain::comm
