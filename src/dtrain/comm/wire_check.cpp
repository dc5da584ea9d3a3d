// The wire check (group.h, Integrity): checksums and their cost, the pooled frames of the
// inline framing, and the verdict on a received message.
#include <ATen/ATen.h>

#include <cstdio>
#include <mutex>

#include "dtrain/base/crc32c.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/request_state.h"
#include "dtrain/comm/tags.h"

namespace dtrain::comm {

using Clock = std::chrono::steady_clock;

void Group::verify(uint32_t computed, uint32_t crc, uint32_t announced_bytes, int64_t bytes,
                   int peer, int tag) const {
  if (computed == crc && announced_bytes == static_cast<uint32_t>(bytes)) return;
  char hex[96];
  std::snprintf(hex, sizeof(hex), "CRC32C 0x%08x of %lld bytes, the sender's is 0x%08x of %u",
                computed, static_cast<long long>(bytes), crc, announced_bytes);
  const std::string link = " on the link rank " + std::to_string(peer) + " -> rank " +
                           std::to_string(rank_) + ": " + hex + "; not used";
  const std::string what = describe() + ": " + describe_tag(tag) + " from rank " +
                           std::to_string(peer) + " (" + std::to_string(bytes) + " bytes)";
  // A check that names another size most often means the two ranks disagree on the
  // message's size (a rank of another configuration or version): the sender's check then
  // lies elsewhere in the stream, and this rank read other bytes as it.
  const std::string msg =
      announced_bytes == static_cast<uint32_t>(bytes)
          ? what + " arrived corrupted" + link + " (a faulty NIC, cable or middlebox?)"
          : what + " did not arrive as this rank expected it" + link +
                " (the ranks disagree on the message's size, as ranks of another configuration "
                "or version would, or the check itself was damaged on the wire)";
  publish_failure(msg);
  throw CorruptMessage(msg);
}

void Group::verify_deferred(const Request& request, uint32_t computed) const {
  if (!wire_check_ || !request.state_ || request.state_->dir != Direction::kRecv) return;
  const auto& s = *request.state_;
  if (!s.done) throw std::logic_error(describe() + ": verify_deferred before wait()");
  verify(computed, s.sender_check.crc, s.sender_check.bytes, s.bytes, s.peer, s.tag);
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
  return at::empty({round_up(bytes, kFrameGrain)}, at::kByte);
}

at::Tensor Group::take_scratch(int64_t bytes) {
  return take_frame(bytes);
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

uint32_t Group::checksum_copy(void* out, const void* data, size_t n, uint32_t crc) {
  const auto start = Clock::now();
  crc = crc32c_copy(out, data, n, crc);
  count_check_time(start);
  return crc;
}

void Group::count_check_time(Clock::time_point start) {
  check_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

}  // namespace dtrain::comm
