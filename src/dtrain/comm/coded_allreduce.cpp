#include "dtrain/comm/coded_allreduce.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "dtrain/comm/algorithms.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/layout.h"

namespace dtrain::comm {
namespace {

void check_length(const Group& group, const at::Tensor& part, int64_t expected, int from,
                  const char* what) {
  if (part.numel() == expected) return;
  throw std::runtime_error(group.describe() + ": " + what + " from rank " + std::to_string(from) +
                           " has " + std::to_string(part.numel()) + " values, expected " +
                           std::to_string(expected) + " (models differ?)");
}

at::Tensor bytes_view(const std::vector<uint8_t>& bytes) {
  // from_blob does not own: the vectors outlive the messages (waited for below).
  return at::from_blob(const_cast<uint8_t*>(bytes.data()), {static_cast<int64_t>(bytes.size())},
                       at::kByte);
}

// Every rank sends to and receives from every other: `out[i]` to `peers[i]`, returning what
// each sent here. With sizes known at both ends, one message each, posted in the order
// detail::receive_first() gives; otherwise byte messages (Group::exchange_bytes).
std::vector<std::vector<uint8_t>> exchange(Group& group, const std::vector<int>& peers,
                                           const std::vector<const std::vector<uint8_t>*>& out,
                                           const std::vector<int64_t>& out_bytes,
                                           const std::vector<int64_t>& in_bytes, int tag) {
  if (out_bytes.empty()) return group.exchange_bytes(peers, out, tag);
  std::vector<std::vector<uint8_t>> in(peers.size());
  std::vector<Request> recvs, sends;
  auto post_recvs = [&] {
    for (size_t i = 0; i < peers.size(); ++i) {
      in[i].resize(static_cast<size_t>(in_bytes[i]));
      at::Tensor target = bytes_view(in[i]);
      if (!in[i].empty()) recvs.push_back(group.irecv(target, peers[i], tag));
    }
  };
  const bool recv_first =
      detail::receive_first(*std::max_element(out_bytes.begin(), out_bytes.end()));
  if (recv_first) post_recvs();
  for (size_t i = 0; i < peers.size(); ++i) {
    if (static_cast<int64_t>(out[i]->size()) != out_bytes[i]) {
      throw std::logic_error(group.describe() + ": a coded piece of " +
                             std::to_string(out[i]->size()) + " bytes where its codec makes " +
                             std::to_string(out_bytes[i]));
    }
    if (!out[i]->empty()) sends.push_back(group.isend(bytes_view(*out[i]), peers[i], tag));
  }
  if (!recv_first) post_recvs();
  for (auto& r : recvs)
    r.wait();
  for (auto& r : sends)
    r.wait();
  return in;
}

}  // namespace

int64_t coded_all_reduce_mean(Group& group, at::Tensor& flat, const PieceCoding& coding,
                              int scatter_tag, int gather_tag) {
  const int p = group.size(), me = group.rank();
  const BlockLayout layout{flat.numel(), p};
  auto piece = [&](int i) { return slice(flat, layout.begin(i), layout.size(i)); };
  int64_t sent = 0;
  // Both phases are exchanges (every rank sends to and receives from every other), so they
  // go through exchange_bytes: every receive posted before this rank's data goes out.
  std::vector<int> peers;
  for (int j = 0; j < p; ++j)
    if (j != me) peers.push_back(j);
  std::vector<std::vector<uint8_t>> out(peers.size());
  std::vector<const std::vector<uint8_t>*> out_ptrs;
  at::Tensor unused;
  for (size_t i = 0; i < peers.size(); ++i) {
    out[i] = coding.encode(CodedPhase::kScatter, peers[i], piece(peers[i]), unused);
    sent += static_cast<int64_t>(out[i].size());
    out_ptrs.push_back(&out[i]);
  }
  // Packet sizes, where the coding knows them: each peer's piece going out, and this rank's
  // piece (scatter) or each peer's own (gather) coming in.
  std::vector<int64_t> to_peers, mine_from_peers, theirs_from_peers;
  if (coding.packet_bytes) {
    const int64_t mine_bytes = coding.packet_bytes(layout.size(me));
    for (const int j : peers) {
      to_peers.push_back(coding.packet_bytes(layout.size(j)));
      mine_from_peers.push_back(mine_bytes);
    }
    theirs_from_peers = to_peers;
  }
  at::Tensor sum = piece(me).clone();
  const auto scattered = exchange(group, peers, out_ptrs, to_peers, mine_from_peers, scatter_tag);
  for (size_t i = 0; i < peers.size(); ++i) {
    const at::Tensor part = coding.decode(scattered[i]);
    check_length(group, part, sum.numel(), peers[i], "gradient piece");
    sum.add_(part.reshape({-1}));
  }
  sum.div_(p);
  at::Tensor decoded;
  const std::vector<uint8_t> mine = coding.encode(CodedPhase::kGather, me, sum, decoded);
  sent += static_cast<int64_t>(mine.size() * peers.size());
  piece(me).copy_(decoded.reshape({-1}));
  const auto gathered =
      exchange(group, peers, std::vector<const std::vector<uint8_t>*>(peers.size(), &mine),
               mine_from_peers, theirs_from_peers, gather_tag);
  for (size_t i = 0; i < peers.size(); ++i) {
    const at::Tensor part = coding.decode(gathered[i]);
    at::Tensor target = piece(peers[i]);
    check_length(group, part, target.numel(), peers[i], "reduced gradient piece");
    target.copy_(part.reshape({-1}));
  }
  return sent;
}

}  // namespace dtrain::comm
