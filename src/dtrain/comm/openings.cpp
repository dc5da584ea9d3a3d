// Openings: messages whose receives the group posted ahead (group.h, "Openings"; the
// framing in openings.h).
#include "dtrain/comm/openings.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "dtrain/comm/backend.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/request_state.h"
#include "dtrain/comm/tags.h"

namespace dtrain::comm {

std::vector<OpeningPiece> opening_pieces(int64_t n, int connections) {
  const int64_t count =
      std::clamp<int64_t>((n + kFrameGrain - 1) / kFrameGrain, 1, std::max(1, connections));
  const int64_t piece = round_up((n + count - 1) / count, kFrameGrain);
  std::vector<OpeningPiece> out;
  int stream = 0;
  for (int64_t begin = 0; begin < n; begin += piece, ++stream)
    out.push_back({begin, std::min(piece, n - begin), stream});
  return out;
}

int64_t opening_share(int64_t capacity, int connections) {
  return round_up((capacity + connections - 1) / std::max(1, connections), kFrameGrain);
}

int64_t Group::opening_capacity(int peer) const {
  check_peer(peer, "opening_capacity");
  const std::lock_guard<std::mutex> lock(openings_->mutex);
  return openings_->capacity[static_cast<size_t>(peer)];
}

bool Group::fits_opening(const at::Tensor& tensor, int peer, int tag) const {
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return tensor.device().is_cpu() && bytes > 0 && has_opening_tags(tag) &&
         bytes <= opening_capacity(peer);
}

Request Group::isend_opening_if_fits(const at::Tensor& tensor, int peer, int tag) {
  return fits_opening(tensor, peer, tag) ? isend_opening(tensor, peer, tag)
                                         : isend(tensor, peer, tag);
}

Request Group::irecv_opening_if_fits(at::Tensor& tensor, int peer, int tag) {
  return fits_opening(tensor, peer, tag) ? irecv_opening(tensor, peer, tag)
                                         : irecv(tensor, peer, tag);
}

int64_t Group::opening_head(const at::Tensor& tensor, int peer, int tag) const {
  const auto size = static_cast<int64_t>(tensor.element_size());
  const int64_t capacity = opening_capacity(peer);
  if (!tensor.device().is_cpu() || !tensor.is_contiguous() || !has_opening_tags(tag) ||
      capacity < size || tensor.numel() * size <= capacity)
    return 0;
  return capacity / size;
}

void Group::isend_opening_first(const at::Tensor& tensor, int peer, int tag,
                                std::vector<Request>& requests) {
  const int64_t head = opening_head(tensor, peer, tag);
  if (head == 0) {
    requests.push_back(isend_opening_if_fits(tensor, peer, tag));
    return;
  }
  const at::Tensor flat = tensor.view({-1});
  requests.push_back(isend_opening(flat.narrow(0, 0, head), peer, tag));
  requests.push_back(isend(flat.narrow(0, head, flat.numel() - head), peer, tag));
}

void Group::irecv_opening_first(at::Tensor& tensor, int peer, int tag,
                                std::vector<Request>& requests) {
  const int64_t head = opening_head(tensor, peer, tag);
  if (head == 0) {
    requests.push_back(irecv_opening_if_fits(tensor, peer, tag));
    return;
  }
  const at::Tensor flat = tensor.view({-1});
  at::Tensor first = flat.narrow(0, 0, head);
  at::Tensor rest = flat.narrow(0, head, flat.numel() - head);
  requests.push_back(irecv_opening(first, peer, tag));
  requests.push_back(irecv(rest, peer, tag));
}

void Group::set_opening_capacity(int peer, int64_t bytes) {
  check_peer(peer, "set_opening_capacity");
  if (bytes < 0) throw std::invalid_argument(describe() + ": negative opening capacity");
  const std::lock_guard<std::mutex> lock(openings_->mutex);
  const auto fixed = openings_->armed_with.find(peer);
  if (bytes > 0 && fixed != openings_->armed_with.end() && fixed->second != bytes)
    throw std::invalid_argument(
        describe() + ": the openings of the link to rank " + std::to_string(peer) +
        " are in use with " + std::to_string(fixed->second) +
        " bytes; they can be switched off (0) and on, not resized to " + std::to_string(bytes));
  openings_->capacity[static_cast<size_t>(peer)] = bytes;
}

at::Tensor Group::opening_bytes(const at::Tensor& tensor, int peer, int tag,
                                const char* what) const {
  check_peer(peer, what);
  opening_tags(tag);  // throws for a tag that has none
  if (!tensor.device().is_cpu() || !tensor.is_contiguous())
    throw std::invalid_argument(describe() + ": " + what + " takes contiguous CPU tensors");
  const int64_t n = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  const int64_t capacity = openings_->capacity[static_cast<size_t>(peer)];
  if (n > capacity)
    throw std::invalid_argument(describe() + ": " + what + " of " + std::to_string(n) +
                                " bytes on the link to rank " + std::to_string(peer) +
                                ", whose openings carry " + std::to_string(capacity));
  return tensor.view({-1}).view(at::kByte);
}

Request Group::isend_opening(const at::Tensor& tensor, int peer, int tag) {
  const std::lock_guard<std::mutex> lock(openings_->mutex);
  const at::Tensor bytes = opening_bytes(tensor, peer, tag, "isend_opening");
  throw_if_aborted();
  Request req = new_request(tensor, peer, tag, Direction::kSend);
  auto& s = *req.state_;
  if (s.bytes == 0) {  // both ends know: nothing crosses, no sequence number is spent
    s.done = true;
    return req;
  }
  openings_->armed_with.emplace(peer, openings_->capacity[static_cast<size_t>(peer)]);
  const uint32_t sequence = openings_->sending[{peer, tag}]++;
  const OpeningTags tags = opening_tags(tag);
  at::Tensor trailer = at::empty({kOpeningTrailerBytes}, at::kByte);
  try {
    for (const OpeningPiece& p : opening_pieces(s.bytes, stream_capacity())) {
      std::vector<at::Tensor> one{bytes.narrow(0, p.begin, p.bytes)};
      s.works.push_back(connection(p.stream).send(one, peer, tags.payload));
      s.keep_alive.push_back(one[0]);
    }
    // The pieces are posted: a CRC computed now overlaps their transfer.
    const uint32_t words[4] = {
        wire_check_ ? checksum(bytes.data_ptr(), static_cast<size_t>(s.bytes)) : 0,
        static_cast<uint32_t>(s.bytes), sequence, kOpeningMagic};
    std::memcpy(trailer.data_ptr(), words, sizeof(words));
    std::vector<at::Tensor> one{trailer};
    s.works.push_back(connection(0).send(one, peer, tags.trailer));
  } catch (const std::exception& e) {
    s.done = true;
    fail(Direction::kSend, peer, tag, s.bytes, 0.0, e.what());
  }
  s.keep_alive.push_back(trailer);
  track(s);
  return req;
}

Request Group::irecv_opening(at::Tensor& tensor, int peer, int tag) {
  const std::lock_guard<std::mutex> lock(openings_->mutex);
  const at::Tensor bytes = opening_bytes(tensor, peer, tag, "irecv_opening");
  throw_if_aborted();
  Request req = new_request(tensor, peer, tag, Direction::kRecv);
  auto& s = *req.state_;
  if (s.bytes == 0) {
    s.done = true;
    return req;
  }
  const int connections = stream_capacity();
  const int64_t capacity = openings_->capacity[static_cast<size_t>(peer)];
  openings_->armed_with.emplace(peer, capacity);
  auto& standing = openings_->receiving[{peer, tag}];
  if (standing.taken)
    throw std::logic_error(describe() + ": a second opening from rank " + std::to_string(peer) +
                           " (" + describe_tag(tag) + ") before the first was waited for");
  if (standing.pieces.empty()) {  // the first opening of this link and tag posts them now
    const int64_t share = opening_share(capacity, connections);
    standing.pieces.resize(static_cast<size_t>(connections));
    for (int d = 0; d < Openings::kDepth; ++d) {
      for (auto& queue : standing.pieces)
        queue.push_back({at::empty({share}, at::kByte), nullptr});
      standing.trailers.push_back({at::empty({kOpeningTrailerBytes}, at::kByte), nullptr});
    }
  }
  try {
    post_standing(peer, tag);
  } catch (const std::exception& e) {
    s.done = true;
    fail(Direction::kRecv, peer, tag, s.bytes, 0.0, e.what());
  }
  const std::vector<OpeningPiece> pieces = opening_pieces(s.bytes, connections);
  for (const OpeningPiece& p : pieces)
    s.works.push_back(std::move(standing.pieces[static_cast<size_t>(p.stream)].front().work));
  s.works.push_back(std::move(standing.trailers.front().work));
  standing.taken = true;
  s.keep_alive.push_back(bytes);
  s.finish = [this, peer, tag, bytes, pieces](Request::State&) {
    take_opening(bytes, pieces, peer, tag);
  };
  track(s);
  return req;
}

void Group::post_standing(int peer, int tag) {
  auto& standing = openings_->receiving.at({peer, tag});
  const OpeningTags tags = opening_tags(tag);
  for (size_t i = 0; i < standing.pieces.size(); ++i) {
    for (auto& posted : standing.pieces[i]) {
      if (posted.work) continue;
      std::vector<at::Tensor> one{posted.into};
      posted.work = connection(static_cast<int>(i)).recv(one, peer, tags.payload);
    }
  }
  for (auto& posted : standing.trailers) {
    if (posted.work) continue;
    std::vector<at::Tensor> one{posted.into};
    posted.work = connection(0).recv(one, peer, tags.trailer);
  }
}

// Runs in the receive's wait(), its messages arrived: the trailer read, the pieces copied
// out (checksummed in the same pass), their receives posted again behind the others.
void Group::take_opening(const at::Tensor& bytes, const std::vector<OpeningPiece>& pieces, int peer,
                         int tag) {
  const std::lock_guard<std::mutex> lock(openings_->mutex);
  auto& standing = openings_->receiving.at({peer, tag});
  uint32_t words[4];
  std::memcpy(words, standing.trailers.front().into.data_ptr(), sizeof(words));
  const int64_t n = bytes.numel();
  if (words[3] != kOpeningMagic || words[2] != standing.next ||
      words[1] != static_cast<uint32_t>(n)) {
    char found[96];
    std::snprintf(found, sizeof(found), "opening %u of %u bytes (marker 0x%08x)", words[2],
                  words[1], words[3]);
    const std::string msg = describe() + ": opening " + std::to_string(standing.next) + " (" +
                            describe_tag(tag) + ", " + std::to_string(n) + " bytes) from rank " +
                            std::to_string(peer) + " arrived as " + found +
                            ": the ranks disagree on their openings, or the link corrupted it";
    publish_failure(msg);
    throw CorruptMessage(msg);
  }
  auto* out = bytes.data_ptr<uint8_t>();
  uint32_t crc = 0;
  for (const OpeningPiece& p : pieces) {
    const auto* from = standing.pieces[static_cast<size_t>(p.stream)].front().into.data_ptr();
    const auto len = static_cast<size_t>(p.bytes);
    if (wire_check_) {
      crc = checksum_copy(out + p.begin, from, len, crc);
    } else {
      std::memcpy(out + p.begin, from, len);
    }
  }
  if (wire_check_) verify(crc, words[0], words[1], n, peer, tag);
  ++standing.next;
  standing.taken = false;
  const auto requeue = [](std::deque<Openings::Posted>& queue) {
    queue.push_back(std::move(queue.front()));
    queue.pop_front();
  };
  for (const OpeningPiece& p : pieces)
    requeue(standing.pieces[static_cast<size_t>(p.stream)]);
  requeue(standing.trailers);
  try {
    post_standing(peer, tag);
  } catch (const std::exception& e) {
    fail(Direction::kRecv, peer, tag, n, 0.0, e.what());
  }
}

}  // namespace dtrain::comm
