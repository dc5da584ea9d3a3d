#include "dtrain/comm/group.h"

#include <ATen/ATen.h>

#include <sstream>

#include "dtrain/comm/backend.h"
#include "dtrain/comm/error.h"

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
  bool done = false;
};

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
  try {
    for (auto& work : s.works)
      work->wait(s.group->timeout());
  } catch (const std::exception& e) {
    s.done = true;
    s.group->fail(s.dir, s.peer, s.tag, s.bytes,
                  std::chrono::duration<double>(Clock::now() - s.posted).count(), e.what());
  }
  const auto end = Clock::now();
  s.done = true;
  s.group->record(s.peer, s.dir, s.bytes, s.posted, end,
                  std::chrono::duration<double>(end - wait_start).count());
  s.works.clear();
  s.keep_alive.clear();
}

Group::Group(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)),
      rank_(backend_->pg->getRank()),
      size_(backend_->pg->getSize()),
      timeout_(backend_->timeout),
      accounts_(static_cast<size_t>(size_)) {}

Group::~Group() = default;

void Group::fail(Direction dir, int peer, int tag, int64_t bytes, double waited_s,
                 const std::string& what) const {
  std::ostringstream msg;
  msg << describe() << ": " << (dir == Direction::kSend ? "send to" : "recv from") << " rank "
      << peer << " (tag " << tag << ", " << bytes << " bytes) failed after " << waited_s
      << " s: " << what.substr(0, what.find('\n'));
  publish_failure(msg.str());
  const std::string cause = failure_of(peer);
  if (!cause.empty()) {
    msg << " -- rank " << peer << " had already failed: " << cause;
  } else {
    msg << " -- rank " << peer << " exited, crashed or stopped responding (timeout "
        << timeout_.count() << " ms); see its output";
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

Request Group::post(const at::Tensor& tensor, int peer, int tag, Direction dir) {
  check_peer(peer, dir == Direction::kSend ? "send" : "recv");
  if (!tensor.is_contiguous() || !tensor.device().is_cpu()) {
    throw std::invalid_argument(describe() + ": point-to-point tensors must be contiguous CPU");
  }
  if (tag < 0) throw std::invalid_argument(describe() + ": negative tag");
  Request req;
  req.state_ = std::make_unique<Request::State>();
  auto& s = *req.state_;
  s.group = this;
  s.peer = peer;
  s.tag = tag;
  s.dir = dir;
  s.bytes = static_cast<int64_t>(tensor.numel()) * static_cast<int64_t>(tensor.element_size());
  s.posted = Clock::now();
  if (s.bytes == 0) {  // nothing crosses the wire; both sides agree on sizes
    s.done = true;
    return req;
  }
  // c10d wants a byte-typed view: its Gloo backend rejects some dtypes (bfloat16) for p2p.
  std::vector<at::Tensor> bufs{tensor.view({-1}).view(at::kByte)};
  try {  // posting already fails when the connection to the peer is gone
    s.works.push_back(dir == Direction::kSend ? backend_->pg->send(bufs, peer, tag)
                                              : backend_->pg->recv(bufs, peer, tag));
  } catch (const std::exception& e) {
    s.done = true;
    fail(dir, peer, tag, s.bytes, 0.0, e.what());
  }
  s.keep_alive.push_back(bufs[0]);
  return req;
}

Request Group::isend(const at::Tensor& tensor, int peer, int tag) {
  return post(tensor, peer, tag, Direction::kSend);
}

Request Group::irecv(at::Tensor& tensor, int peer, int tag) {
  return post(tensor, peer, tag, Direction::kRecv);
}

Request Group::isend_bytes(const std::vector<uint8_t>& bytes, int peer, int tag) {
  auto length = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  Request req = post(length, peer, tag, Direction::kSend);
  req.state_->keep_alive.push_back(length);
  if (!bytes.empty()) {
    // from_blob does not own: the caller keeps `bytes` alive (see contract).
    auto payload = at::from_blob(const_cast<uint8_t*>(bytes.data()),
                                 {static_cast<int64_t>(bytes.size())}, at::kByte);
    Request body = post(payload, peer, tag, Direction::kSend);
    for (auto& w : body.state_->works)
      req.state_->works.push_back(std::move(w));
    body.state_->works.clear();
    body.state_->done = true;
    req.state_->bytes += static_cast<int64_t>(bytes.size());
  }
  return req;
}

std::vector<uint8_t> Group::recv_bytes(int peer, int tag, int64_t max_bytes) {
  auto length = at::empty({1}, at::kLong);
  recv(length, peer, tag);
  const int64_t n = length.item<int64_t>();
  if (n < 0 || n > max_bytes) {
    throw CommError(describe() + ": byte message from rank " + std::to_string(peer) + " (tag " +
                    std::to_string(tag) + ") announces " + std::to_string(n) + " bytes, limit is " +
                    std::to_string(max_bytes) + ": corrupt or mismatched");
  }
  std::vector<uint8_t> out(static_cast<size_t>(n));
  if (n > 0) {
    auto payload = at::from_blob(out.data(), {n}, at::kByte);
    recv(payload, peer, tag);
  }
  return out;
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

void Group::native_all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (size_ == 1 || tensor.numel() == 0) {
    return;
  }
  // bfloat16 is reduced in float32 and rounded once: summing p values in bfloat16 would round
  // at every step (and Gloo in older LibTorch had no bfloat16 reduction at all).
  const bool upcast = tensor.scalar_type() == at::kBFloat16;
  std::vector<at::Tensor> bufs{upcast ? tensor.to(at::kFloat) : tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = timeout_;
  try {
    backend_->pg->allreduce(bufs, opts)->wait(timeout_);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const std::string msg = describe() +
                            ": native all_reduce failed: " + what.substr(0, what.find('\n')) +
                            " -- a peer may have exited or crashed; see the other ranks' output";
    publish_failure(msg);
    throw CommError(msg);
  }
  finalize_reduction(bufs[0], op, size_);
  if (upcast) tensor.copy_(bufs[0]);
}

void Group::native_broadcast(at::Tensor& tensor, int root) {
  if (size_ == 1 || tensor.numel() == 0) return;
  const bool upcast = tensor.scalar_type() == at::kBFloat16;
  std::vector<at::Tensor> bufs{upcast ? tensor.to(at::kFloat) : tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = timeout_;
  try {
    backend_->pg->broadcast(bufs, opts)->wait(timeout_);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const std::string msg = describe() +
                            ": native broadcast failed: " + what.substr(0, what.find('\n')) +
                            " -- a peer may have exited or crashed; see the other ranks' output";
    publish_failure(msg);
    throw CommError(msg);
  }
  if (upcast) tensor.copy_(bufs[0]);
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

std::string Group::failure_of(int peer) const {
  try {
    if (!backend_->store->check({failure_key(peer)})) return "";
    const auto value = backend_->store->get(failure_key(peer));
    return std::string(value.begin(), value.end());
  } catch (const std::exception&) {
    return "";
  }
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
