#include "dtrain/parallel/coded_feedback.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "dtrain/comm/coded_allreduce.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/layout.h"

namespace dtrain::parallel {

ResidualLengths residual_lengths(int64_t count, int world, int rank) {
  ResidualLengths out;
  out.scatter.assign(static_cast<size_t>(world), -1);
  if (codes_whole_vectors(world)) {  // coded_all_gather_mean: the whole vector, coded once
    out.gather = count;
    return out;
  }
  const comm::BlockLayout blocks{count, world};  // rank q owns block q
  for (int q = 0; q < world; ++q)
    if (q != rank) out.scatter[static_cast<size_t>(q)] = blocks.size(q);
  out.gather = blocks.size(rank);
  return out;
}

void carry_residuals(FeedbackResiduals& residuals, int64_t count, int from_world, int from_rank,
                     int to_world, int to_rank) {
  if (to_world < 1 || to_rank < 0 || to_rank >= to_world)
    throw std::invalid_argument("carry_residuals: rank " + std::to_string(to_rank) + " of " +
                                std::to_string(to_world));
  at::Tensor owed;
  const auto owe = [&](int64_t begin, const at::Tensor& residual, double scale) {
    if (!residual.defined()) return;
    if (!owed.defined()) owed = at::zeros({count}, residual.options());
    owed.narrow(0, begin, residual.numel()).add_(residual.reshape({-1}), scale);
  };
  if (from_rank >= 0 && codes_whole_vectors(from_world)) {
    owe(0, residuals.gather.residual(), 1.0);
  } else if (from_rank >= 0) {
    const comm::BlockLayout from{count, from_world};
    for (int q = 0; q < from_world; ++q)
      if (q != from_rank)
        owe(from.begin(q), residuals.scatter.at(static_cast<size_t>(q)).residual(), 1.0);
    owe(from.begin(from_rank), residuals.gather.residual(), static_cast<double>(to_world));
  }
  residuals.reset(to_world);
  if (!owed.defined()) return;
  if (codes_whole_vectors(to_world)) {
    residuals.gather.restore(owed);
    return;
  }
  const comm::BlockLayout to{count, to_world};
  for (int q = 0; q < to_world; ++q)
    if (q != to_rank)
      residuals.scatter[static_cast<size_t>(q)].restore(
          owed.narrow(0, to.begin(q), to.size(q)).clone());
  residuals.gather.restore(owed.narrow(0, to.begin(to_rank), to.size(to_rank)) / to_world);
}

int64_t coded_mean_with_feedback(comm::Group& group, at::Tensor& values,
                                 const compress::Codec& codec, FeedbackResiduals& residuals,
                                 int scatter_tag, int gather_tag) {
  comm::PieceCoding coding;
  coding.encode = [&](comm::CodedPhase phase, int peer, const at::Tensor& piece,
                      at::Tensor& decoded) {
    return phase == comm::CodedPhase::kScatter
               ? residuals.scatter.at(static_cast<size_t>(peer)).encode(codec, piece)
               : residuals.gather.encode(codec, piece, decoded);
  };
  coding.decode = [device = values.device()](const std::vector<uint8_t>& bytes) {
    return compress::decode(bytes.data(), bytes.size(), 1, device);
  };
  coding.packet_bytes = [&](int64_t count) {
    return static_cast<int64_t>(compress::packet_size(codec, {count}));
  };
  if (codes_whole_vectors(group.size()))
    return comm::coded_all_gather_mean(group, values, coding, gather_tag);
  return comm::coded_all_reduce_mean(group, values, coding, scatter_tag, gather_tag);
}

}  // namespace dtrain::parallel
