// Byte messages (group.h): an 8-byte length message [bytes, CRC32C or 0], then the payload,
// unchecked by the framing (the length message carries the check).
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {

at::Tensor Group::payload_view(const std::vector<uint8_t>& bytes) {
  // from_blob does not own: the caller keeps `bytes` alive (see the contract).
  return at::from_blob(const_cast<uint8_t*>(bytes.data()), {static_cast<int64_t>(bytes.size())},
                       at::kByte);
}

at::Tensor Group::length_message(const std::vector<uint8_t>& bytes) {
  auto length = at::empty({2}, at::kLong);
  length[0] = static_cast<int64_t>(bytes.size());
  length[1] = wire_check_ ? static_cast<int64_t>(checksum(bytes.data(), bytes.size())) : 0;
  return length;
}

int64_t Group::announced_bytes(const at::Tensor& length, int peer, int tag,
                               int64_t max_bytes) const {
  const int64_t n = length[0].item<int64_t>();
  if (n < 0 || n > max_bytes) {
    throw CommError(describe() + ": byte message from rank " + std::to_string(peer) + " (tag " +
                    std::to_string(tag) + ") announces " + std::to_string(n) + " bytes, limit is " +
                    std::to_string(max_bytes) + ": corrupt or mismatched");
  }
  return n;
}

void Group::verify_bytes(const std::vector<uint8_t>& bytes, const at::Tensor& length, int peer,
                         int tag) {
  if (!wire_check_) return;
  const auto n = static_cast<int64_t>(bytes.size());
  verify(checksum(bytes.data(), bytes.size()), static_cast<uint32_t>(length[1].item<int64_t>()),
         static_cast<uint32_t>(n), n, peer, tag);
}

std::vector<uint8_t> Group::recv_bytes(int peer, int tag, int64_t max_bytes) {
  auto length = at::empty({2}, at::kLong);
  post(length, peer, tag, Direction::kRecv, false).wait();
  std::vector<uint8_t> out(static_cast<size_t>(announced_bytes(length, peer, tag, max_bytes)));
  if (!out.empty()) {
    auto payload = payload_view(out);
    post(payload, peer, tag, Direction::kRecv, false).wait();
  }
  verify_bytes(out, length, peer, tag);
  return out;
}

std::vector<std::vector<uint8_t>> Group::exchange_bytes(
    const std::vector<int>& peers, const std::vector<const std::vector<uint8_t>*>& out, int tag,
    int64_t max_bytes) {
  const size_t n = peers.size();
  if (out.size() != n) throw std::invalid_argument("exchange_bytes: one message per peer");
  std::vector<at::Tensor> lengths(n);
  std::vector<Request> length_recvs(n), sends;
  for (size_t i = 0; i < n; ++i) {
    lengths[i] = at::empty({2}, at::kLong);
    length_recvs[i] = post(lengths[i], peers[i], tag, Direction::kRecv, false);
  }
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor mine = length_message(*out[i]);
    sends.push_back(post(mine, peers[i], tag, Direction::kSend, false));
    keep_alive(sends.back(), mine);
  }
  // Every payload receive is posted before any payload goes out (see the header).
  std::vector<std::vector<uint8_t>> in(n);
  std::vector<Request> payload_recvs(n);
  for (size_t i = 0; i < n; ++i) {
    length_recvs[i].wait();
    in[i].resize(static_cast<size_t>(announced_bytes(lengths[i], peers[i], tag, max_bytes)));
    if (!in[i].empty())
      payload_recvs[i] = post(payload_view(in[i]), peers[i], tag, Direction::kRecv, false);
  }
  for (size_t i = 0; i < n; ++i) {
    if (!out[i]->empty())
      sends.push_back(post(payload_view(*out[i]), peers[i], tag, Direction::kSend, false));
  }
  for (size_t i = 0; i < n; ++i) {
    payload_recvs[i].wait();
    verify_bytes(in[i], lengths[i], peers[i], tag);
  }
  for (auto& s : sends)
    s.wait();
  return in;
}

}  // namespace dtrain::comm
