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

std::vector<int> other_ranks(int p, int me) {
  std::vector<int> out;
  for (int j = 0; j < p; ++j)
    if (j != me) out.push_back(j);
  return out;
}

// Every rank sends to and receives from every other: `out[i]` to `peers[i]`, returning what
// each sent here. With sizes known at both ends, one message each, posted in the order
// detail::post_exchange() gives, through openings where the link and tag have them (both
// ends know the size, so both decide alike); otherwise byte messages (Group::exchange_bytes). The
// vectors outlive the messages (every one is waited for here).
std::vector<std::vector<uint8_t>> exchange(Group& group, const std::vector<int>& peers,
                                           const std::vector<const std::vector<uint8_t>*>& out,
                                           const std::vector<int64_t>& out_bytes,
                                           const std::vector<int64_t>& in_bytes, int tag) {
  if (out_bytes.empty()) return group.exchange_bytes(peers, out, tag);
  std::vector<std::vector<uint8_t>> in(peers.size());
  std::vector<Request> recvs, sends;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (static_cast<int64_t>(out[i]->size()) != out_bytes[i]) {
      throw std::logic_error(group.describe() + ": a coded piece of " +
                             std::to_string(out[i]->size()) + " bytes where its codec makes " +
                             std::to_string(out_bytes[i]));
    }
  }
  detail::post_exchange(
      *std::max_element(out_bytes.begin(), out_bytes.end()),
      [&] {
        for (size_t i = 0; i < peers.size(); ++i) {
          in[i].resize(static_cast<size_t>(in_bytes[i]));
          at::Tensor target = Group::payload_view(in[i]);
          if (!in[i].empty()) recvs.push_back(group.irecv_opening_if_fits(target, peers[i], tag));
        }
      },
      [&] {
        for (size_t i = 0; i < peers.size(); ++i)
          if (!out[i]->empty())
            sends.push_back(
                group.isend_opening_if_fits(Group::payload_view(*out[i]), peers[i], tag));
      });
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
  // Both phases are exchanges (every rank sends to and receives from every other): see
  // exchange() for the order of posting.
  const std::vector<int> peers = other_ranks(p, me);
  std::vector<std::vector<uint8_t>> out(peers.size());
  std::vector<const std::vector<uint8_t>*> out_ptrs;
  at::Tensor unused;
  for (size_t i = 0; i < peers.size(); ++i) {
    out[i] = coding.encode(CodedPhase::kScatter, peers[i], piece(peers[i]), unused);
    sent += static_cast<int64_t>(out[i].size());
    out_ptrs.push_back(&out[i]);
  }
  // Packet sizes, where the coding knows them: each peer's piece (going out in the scatter,
  // coming in with the gather: one list serves both) and this rank's piece from each peer.
  std::vector<int64_t> peer_pieces, mine_from_peers;
  if (coding.packet_bytes) {
    const int64_t mine_bytes = coding.packet_bytes(layout.size(me));
    for (const int j : peers) {
      peer_pieces.push_back(coding.packet_bytes(layout.size(j)));
      mine_from_peers.push_back(mine_bytes);
    }
  }
  at::Tensor sum = piece(me).clone();
  const auto scattered =
      exchange(group, peers, out_ptrs, peer_pieces, mine_from_peers, scatter_tag);
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
               mine_from_peers, peer_pieces, gather_tag);
  for (size_t i = 0; i < peers.size(); ++i) {
    const at::Tensor part = coding.decode(gathered[i]);
    at::Tensor target = piece(peers[i]);
    check_length(group, part, target.numel(), peers[i], "reduced gradient piece");
    target.copy_(part.reshape({-1}));
  }
  return sent;
}

int64_t coded_all_gather_mean(Group& group, at::Tensor& flat, const PieceCoding& coding, int tag) {
  const int p = group.size(), me = group.rank();
  const std::vector<int> peers = other_ranks(p, me);
  at::Tensor own;
  const std::vector<uint8_t> mine = coding.encode(CodedPhase::kGather, me, flat, own);
  std::vector<int64_t> sizes;
  if (coding.packet_bytes) sizes.assign(peers.size(), coding.packet_bytes(flat.numel()));
  const auto received =
      exchange(group, peers, std::vector<const std::vector<uint8_t>*>(peers.size(), &mine), sizes,
               sizes, tag);
  std::vector<at::Tensor> parts(static_cast<size_t>(p));
  parts[static_cast<size_t>(me)] = own.reshape({-1});
  for (size_t i = 0; i < peers.size(); ++i) {
    const at::Tensor part = coding.decode(received[i]);
    check_length(group, part, flat.numel(), peers[i], "coded vector");
    parts[static_cast<size_t>(peers[i])] = part.reshape({-1});
  }
  at::Tensor sum = parts[0].clone();  // in rank order: the same sum on every rank
  for (size_t j = 1; j < parts.size(); ++j)
    sum.add_(parts[j]);
  sum.div_(p);
  flat.copy_(sum);
  return static_cast<int64_t>(mine.size() * peers.size());
}

}  // namespace dtrain::comm
