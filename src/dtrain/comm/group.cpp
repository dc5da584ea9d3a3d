#include "dtrain/comm/group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "dtrain/comm/allreduce_tuner.h"
#include "dtrain/comm/backend.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/openings.h"
#include "dtrain/comm/peer_watch.h"
#include "dtrain/comm/request_state.h"

namespace dtrain::comm {

using Clock = std::chrono::steady_clock;

Group::Group(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)),
      openings_(std::make_unique<Openings>(backend_->pg->getSize())),
      aborts_(std::make_unique<Aborts>()),
      rank_(backend_->pg->getRank()),
      size_(backend_->pg->getSize()),
      timeout_(backend_->timeout),
      wire_check_(backend_->wire_check),
      streams_(static_cast<size_t>(size_), 1),
      round_trips_(static_cast<size_t>(size_), -1.0),
      tuner_(std::make_unique<AllReduceTuner>()),
      accounts_(static_cast<size_t>(size_)) {
  if (size_ > 1)
    watch_ = std::make_unique<PeerWatch>(
        *backend_->pg, rank_, size_, kLostGrace,
        [this](int peer, const std::string& what) { peer_lost(peer, what); });
}

int Group::stream_capacity() const {
  return static_cast<int>(backend_->connections.size());
}

void Group::set_streams(int peer, int count) {
  check_peer(peer, "set_streams");
  if (count < 1 || count > stream_capacity())
    throw std::invalid_argument(describe() + ": " + std::to_string(count) + " streams to rank " +
                                std::to_string(peer) + ", where " +
                                std::to_string(stream_capacity()) + " were connected");
  streams_[static_cast<size_t>(peer)] = count;
}

c10d::Backend& Group::connection(int stream) const {
  return *backend_->connections.at(static_cast<size_t>(stream));
}

Group::~Group() = default;

std::string Group::describe() const {
  std::string text = "rank " + std::to_string(rank_) + "/" + std::to_string(size_);
  if (backend_->subgroup.empty()) return text;
  text += " of subgroup '" + backend_->subgroup + "' (world ranks";
  constexpr size_t kListed = 16;
  for (size_t i = 0; i < backend_->world_ranks.size() && i < kListed; ++i)
    text += (i ? ", " : " ") + std::to_string(backend_->world_ranks[i]);
  return text + (backend_->world_ranks.size() > kListed ? ", ...)" : ")");
}

int Group::world_rank(int rank) const {
  const auto& ranks = backend_->world_ranks;
  return ranks.empty() ? rank : ranks.at(static_cast<size_t>(rank));
}

void Group::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw std::invalid_argument(describe() + ": " + what + " with invalid peer " +
                                std::to_string(peer));
  }
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
                            const PostOptions& options) {
  const bool send = dir == Direction::kSend;
  if (options.deferred)
    throw std::invalid_argument(describe() + ": caller-checked messages are host memory");
  if (!reduces_on_device(tensor)) {  // through host memory, on the Gloo path above
    const at::Tensor host =
        send ? tensor.to(at::kCPU) : at::empty(tensor.sizes(), tensor.options().device(at::kCPU));
    Request req = post(host, peer, tag, dir, options);
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
  PostOptions o;
  o.room = room;
  return post(tensor, peer, tag, Direction::kSend, o);
}

Request Group::irecv(at::Tensor& tensor, int peer, int tag, Room room) {
  PostOptions o;
  o.room = room;
  return post(tensor, peer, tag, Direction::kRecv, o);
}

Request Group::isend_checked(const at::Tensor& tensor, int peer, int tag,
                             std::optional<uint32_t> crc) {
  PostOptions o;
  o.deferred = true;
  o.crc = crc;
  return post(tensor, peer, tag, Direction::kSend, o);
}

Request Group::irecv_deferred(at::Tensor& tensor, int peer, int tag) {
  PostOptions o;
  o.deferred = true;
  return post(tensor, peer, tag, Direction::kRecv, o);
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

double Group::longest_round_trip() const {
  double longest = 0;
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_) longest = std::max(longest, round_trip(peer));
  return longest;
}

}  // namespace dtrain::comm
