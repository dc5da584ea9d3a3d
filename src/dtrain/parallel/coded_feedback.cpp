#include "dtrain/parallel/coded_feedback.h"

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
