#include "dtrain/comm/group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "dtrain/base/crc32c.h"
#include "dtrain/comm/backend.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/tags.h"

namespace dtrain::comm {

using Clock = std::chrono::steady_clock;

struct Request::State {
  Group* group = nullptr;
  int peer = -1;
  int tag = 0;
  Direction dir = Direction::kSend;
  int64_t bytes = 0;
  Clock::time_point posted;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<at::Tensor> keep_alive;
  // A checked receive (see the framing in post()): the caller's bytes, and either the framed
  // message holding them and their check (small), or the pieces and the check message.
  at::Tensor payload, framed, check;
  at::Tensor frame;  // the pooled buffer `framed` views, given back when done
  std::vector<at::Tensor> pieces;
  // A receive staged through host memory for a tensor off the CPU: copied there in wait().
  at::Tensor staged, stage_to;
  bool done = false;
};

namespace {

// The wire check's framing (docs/wire-format.md). Payloads up to kInlineCheckBytes travel
// with their check appended (one message: a copy, fused with the checksum, costs less than
// the extra messages of pieces); larger ones go in pieces and then an 8-byte check message,
// so each end checksums one piece while the next crosses: a quarter of the payload (rounded
// up to 64 KiB), within 1 .. 4 MiB. Measured inside one pipeline run (--measure-wire-check),
// a 256 KiB limit, which sent the cnn's 400 KB activations in pieces, cost about 2.5
// points of step time more than carrying them inline (docs/results.md).
constexpr int64_t kInlineCheckBytes = int64_t{1} << 20;
constexpr int64_t kFrameGrain = int64_t{64} << 10;
int64_t piece_bytes(int64_t payload) {
  const int64_t quarter = (payload / 4 + kFrameGrain - 1) / kFrameGrain * kFrameGrain;
  return std::clamp(quarter, kInlineCheckBytes, int64_t{4} << 20);
}
constexpr int64_t kCheckBytes = Group::kCheckRoom;  // [CRC32C, payload bytes mod 2^32], LE uint32

void write_check(uint8_t* at, uint32_t crc, int64_t bytes) {
  const uint32_t words[2] = {crc, static_cast<uint32_t>(bytes)};
  std::memcpy(at, words, sizeof(words));
}

std::pair<uint32_t, uint32_t> read_check(const uint8_t* at) {
  uint32_t words[2];
  std::memcpy(words, at, sizeof(words));
  return {words[0], words[1]};
}

}  // namespace

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

void Group::fail(Direction dir, int peer, int tag, int64_t bytes, double waited_s,
                 const std::string& what) const {
  std::ostringstream msg;
  msg << describe() << ": " << (dir == Direction::kSend ? "send to" : "recv from") << " rank "
      << peer << " (tag " << tag << ", " << bytes << " bytes) failed after " << waited_s
      << " s: " << what.substr(0, what.find('\n'));
  std::ostringstream silent;
  silent << " -- rank " << peer << " exited, crashed or stopped responding (timeout "
         << timeout_.count() << " ms); see its output";
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
  throw CommError(msg.str());
}

std::string Group::describe() const {
  return "rank " + std::to_string(rank_) + "/" + std::to_string(size_);
}

void Group::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw std::invalid_argument(describe() + ": " + what + " with invalid peer " +
                                std::to_string(peer));
  }
}

void Group::verify(uint32_t computed, uint32_t crc, uint32_t announced_bytes, int64_t bytes,
                   int peer, int tag) const {
  if (computed == crc && announced_bytes == static_cast<uint32_t>(bytes)) return;
  char hex[96];
  std::snprintf(hex, sizeof(hex), "CRC32C 0x%08x of %lld bytes, the sender's is 0x%08x of %u",
                computed, static_cast<long long>(bytes), crc, announced_bytes);
  const std::string msg = describe() + ": " + describe_tag(tag) + " from rank " +
                          std::to_string(peer) + " (" + std::to_string(bytes) +
                          " bytes) arrived corrupted on the link rank " + std::to_string(peer) +
                          " -> rank " + std::to_string(rank_) + ": " + hex +
                          "; not used (a faulty NIC, cable or middlebox?)";
  publish_failure(msg);
  throw CorruptMessage(msg);
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

at::Tensor Group::buffer_with_room(int64_t bytes) {
  return at::empty({bytes + kCheckRoom}, at::kByte).narrow(0, 0, bytes);
}

at::Tensor Group::take_frame(int64_t bytes) {
  {
    const std::lock_guard<std::mutex> lock(frames_mutex_);
    // The smallest spare frame that fits: a small message does not take a large one.
    auto best = frames_.end();
    for (auto it = frames_.begin(); it != frames_.end(); ++it) {
      if (it->numel() >= bytes && (best == frames_.end() || it->numel() < best->numel())) best = it;
    }
    if (best != frames_.end()) {
      at::Tensor frame = std::move(*best);
      frames_.erase(best);
      return frame;
    }
  }
  return at::empty({(bytes + kFrameGrain - 1) / kFrameGrain * kFrameGrain}, at::kByte);
}

void Group::give_back_frame(at::Tensor frame) {
  constexpr size_t kMaxSpareFrames = 32;  // more than a pipeline keeps in flight
  const std::lock_guard<std::mutex> lock(frames_mutex_);
  if (frames_.size() < kMaxSpareFrames) frames_.push_back(std::move(frame));
}

uint32_t Group::checksum(const void* data, size_t n, uint32_t crc) {
  const auto start = Clock::now();
  crc = crc32c(data, n, crc);
  count_check_time(start);
  return crc;
}

uint32_t Group::checksum_copy(void* out, const void* data, size_t n) {
  const auto start = Clock::now();
  const uint32_t crc = crc32c_copy(out, data, n);
  count_check_time(start);
  return crc;
}

void Group::count_check_time(Clock::time_point start) {
  check_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
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

void Group::barrier() {
  // A tiny all-reduce is a barrier that honours our timeout and error wording.
  auto t = at::zeros({1}, at::kInt);
  native_all_reduce(t, ReduceOp::kSum);
}

namespace {
c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}
}  // namespace

bool Group::reduces_on_device(const at::Tensor& tensor) const {
  return backend_->device_pg && tensor.device() == backend_->device;
}

namespace {
// What a native collective runs on: the tensor itself where the backend reads it (host
// memory for Gloo, its GPU for NCCL; any dense layout, channels-last included, since every
// rank has the same), else a copy there, which the caller copies back.
at::Tensor collective_buffer(const at::Tensor& tensor, bool on_device) {
  const at::Tensor there = on_device ? tensor : tensor.to(at::kCPU);
  return tensor.scalar_type() == at::kBFloat16 ? there.to(at::kFloat) : there;
}
}  // namespace

template <typename Collective>
void Group::run_native(const char* what, Collective&& collective) {
  try {
    collective();
  } catch (const std::exception& e) {
    const std::string error = e.what();
    const std::string msg = describe() + ": native " + what +
                            " failed: " + error.substr(0, error.find('\n')) +
                            " -- a peer may have exited or crashed; see the other ranks' output";
    publish_failure(msg);
    throw CommError(msg);
  }
}

void Group::native_all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (size_ == 1 || tensor.numel() == 0) {
    return;
  }
  const bool on_device = reduces_on_device(tensor);
  // Gloo reduces host memory: a tensor elsewhere (CUDA) goes through a host copy. bfloat16
  // is reduced in float32 and rounded once: summing p values in bfloat16 would round at
  // every step (and Gloo in older LibTorch had no bfloat16 reduction at all).
  std::vector<at::Tensor> bufs{collective_buffer(tensor, on_device)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = timeout_;
  auto& pg = on_device ? backend_->device_pg : backend_->pg;
  run_native("all_reduce", [&] { pg->allreduce(bufs, opts)->wait(timeout_); });
  finalize_reduction(bufs[0], op, size_);
  if (!bufs[0].is_same(tensor)) tensor.copy_(bufs[0]);
}

void Group::native_broadcast(at::Tensor& tensor, int root) {
  if (size_ == 1 || tensor.numel() == 0) return;
  const bool on_device = reduces_on_device(tensor);
  std::vector<at::Tensor> bufs{collective_buffer(tensor, on_device)};  // as native_all_reduce
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = timeout_;
  auto& pg = on_device ? backend_->device_pg : backend_->pg;
  run_native("broadcast", [&] { pg->broadcast(bufs, opts)->wait(timeout_); });
  if (!bufs[0].is_same(tensor)) tensor.copy_(bufs[0]);
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

namespace {
std::string failure_key(int rank) {
  return "dtrain/failed/" + std::to_string(rank);
}
}  // namespace

void Group::publish_failure(const std::string& message) const {
  try {  // best effort: the store's host may be the rank that died
    backend_->store->set(failure_key(rank_), std::vector<uint8_t>(message.begin(), message.end()));
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
    backend_->store->wait({failure_key(peer)}, kGrace);
    const auto value = backend_->store->get(failure_key(peer));
    failure.error.assign(value.begin(), value.end());
  } catch (const std::exception&) {
    // No answer at all, well before the grace ran out: the connection to the store broke
    // (a timeout and a broken socket are the same exception type in c10d).
    failure.store_gone = Clock::now() - start < kGrace / 2;
  }
  return failure;
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
