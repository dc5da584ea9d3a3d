#include "dtrain/comm/coded_allreduce.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

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

}  // namespace

int64_t coded_all_reduce_mean(Group& group, at::Tensor& flat, const PieceCoding& coding,
                              int scatter_tag, int gather_tag) {
  const int p = group.size(), me = group.rank();
  const BlockLayout layout{flat.numel(), p};
  auto piece = [&](int i) { return slice(flat, layout.begin(i), layout.size(i)); };
  int64_t sent = 0;
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(p));
  std::vector<Request> sends;
  at::Tensor unused;
  for (int j = 0; j < p; ++j) {
    if (j == me) continue;
    auto& bytes = out[static_cast<size_t>(j)];
    bytes = coding.encode(CodedPhase::kScatter, j, piece(j), unused);
    sent += static_cast<int64_t>(bytes.size());
    sends.push_back(group.isend_bytes(bytes, j, scatter_tag));
  }
  at::Tensor sum = piece(me).clone();
  for (int j = 0; j < p; ++j) {
    if (j == me) continue;
    const at::Tensor part = coding.decode(group.recv_bytes(j, scatter_tag));
    check_length(group, part, sum.numel(), j, "gradient piece");
    sum.add_(part.reshape({-1}));
  }
  for (auto& r : sends)
    r.wait();
  sum.div_(p);
  at::Tensor decoded;
  const std::vector<uint8_t> mine = coding.encode(CodedPhase::kGather, me, sum, decoded);
  sends.clear();
  for (int j = 0; j < p; ++j) {
    if (j == me) continue;
    sent += static_cast<int64_t>(mine.size());
    sends.push_back(group.isend_bytes(mine, j, gather_tag));
  }
  piece(me).copy_(decoded.reshape({-1}));
  for (int j = 0; j < p; ++j) {
    if (j == me) continue;
    const at::Tensor part = coding.decode(group.recv_bytes(j, gather_tag));
    at::Tensor target = piece(j);
    check_length(group, part, target.numel(), j, "reduced gradient piece");
    target.copy_(part.reshape({-1}));
  }
  for (auto& r : sends)
    r.wait();
  return sent;
}

}  // namespace dtrain::comm
