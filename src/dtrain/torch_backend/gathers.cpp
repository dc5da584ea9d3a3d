// allgather, gather, scatter, reduce_scatter and alltoall of the dtrain backend
// (process_group.h), and their coalesced and single-tensor forms: comm's all_gather,
// reduce_scatter, gather, scatter and all_to_all on host tensors. The list forms go through
// one flat host buffer of every rank's equal part.
#include <ATen/ATen.h>

#include <memory>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/group.h"
#include "dtrain/torch_backend/process_group.h"
#include "dtrain/torch_backend/staged.h"

namespace dtrain::torch_backend {
namespace {

// Every part of a list form as large as `part` and of its dtype: the equal blocks of the
// flat buffer comm's collectives take.
void check_parts(const std::vector<at::Tensor>& parts, const at::Tensor& part, size_t count,
                 const char* operation) {
  if (parts.size() != count)
    throw std::invalid_argument(std::string("dtrain backend: ") + operation + " takes " +
                                std::to_string(count) + " tensors, not " +
                                std::to_string(parts.size()));
  for (const auto& p : parts)
    if (p.numel() != part.numel() || p.scalar_type() != part.scalar_type())
      throw std::invalid_argument(std::string("dtrain backend: ") + operation +
                                  ": every tensor must have the size and dtype of the input (" +
                                  std::to_string(part.numel()) + " " +
                                  c10::toString(part.scalar_type()) + ")");
}

// The parts' values, one after another in a host buffer.
at::Tensor joined(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat;
  for (const auto& p : parts)
    flat.push_back(p.reshape({-1}).to(at::kCPU));
  return at::cat(flat);
}

// Copies `flat`'s equal blocks back into `parts`.
void split_into(const at::Tensor& flat, std::vector<at::Tensor>& parts) {
  int64_t at = 0;
  for (auto& p : parts) {
    p.copy_(flat.narrow(0, at, p.numel()).view(p.sizes()));
    at += p.numel();
  }
}

// Equal splits where none are given (alltoall_base): the first dimension over the ranks.
std::vector<int64_t> splits_or_even(const std::vector<int64_t>& splits, const at::Tensor& t,
                                    int ranks, const char* which) {
  if (!splits.empty()) {
    int64_t total = 0;
    for (const int64_t s : splits)
      total += s;
    if (static_cast<int>(splits.size()) != ranks || total != t.size(0))
      throw std::invalid_argument(std::string("dtrain backend: alltoall_base's ") + which +
                                  " splits must be one per rank and add up to dimension 0");
    return splits;
  }
  if (t.dim() == 0 || t.size(0) % ranks != 0)
    throw std::invalid_argument(std::string("dtrain backend: alltoall_base's ") + which +
                                " dimension 0 does not divide among the ranks");
  return std::vector<int64_t>(static_cast<size_t>(ranks), t.size(0) / ranks);
}

}  // namespace

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) {
  if (output.numel() != input.numel() * getSize() || output.scalar_type() != input.scalar_type())
    throw std::invalid_argument(
        "dtrain backend: _allgather_base's output must hold the size of "
        "the input per rank, of its dtype");
  auto in = std::make_shared<Staged>(input, /*read=*/true, "allgather");
  auto out = std::make_shared<Staged>(output, /*read=*/false, "allgather");
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {output}, [this, in, out] {
    at::Tensor flat = out->host().view({-1});
    comm::all_gather(*group_, in->host().view({-1}), flat);
    out->write_back();
  });
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::allgather(std::vector<Tensors>& outputs,
                                                          Tensors& inputs,
                                                          const c10d::AllgatherOptions& /*opts*/) {
  const at::Tensor& input = single(inputs, "allgather");
  if (outputs.size() != 1)
    throw std::invalid_argument("dtrain backend: allgather takes one list of outputs");
  check_parts(outputs[0], input, static_cast<size_t>(getSize()), "allgather");
  auto in = std::make_shared<Staged>(input, /*read=*/true, "allgather");
  return enqueue(c10d::OpType::ALLGATHER, outputs[0], [this, in, parts = outputs[0]]() mutable {
    at::Tensor flat = at::empty({in->host().numel() * getSize()}, in->host().options());
    comm::all_gather(*group_, in->host().view({-1}), flat);
    split_into(flat, parts);
  });
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::allgather_coalesced(
    std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions& /*opts*/) {
  if (outputs.size() != static_cast<size_t>(getSize()))
    throw std::invalid_argument("dtrain backend: allgather_coalesced takes a list per rank");
  for (const auto& list : outputs)
    if (list.size() != inputs.size())
      throw std::invalid_argument(
          "dtrain backend: allgather_coalesced: a list of outputs per "
          "rank with one tensor per input");
  std::vector<std::shared_ptr<Staged>> in;
  Tensors all;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in.push_back(std::make_shared<Staged>(inputs[i], /*read=*/true, "allgather_coalesced"));
    for (const auto& list : outputs) {
      check_parts({list[i]}, inputs[i], 1, "allgather_coalesced");
      all.push_back(list[i]);
    }
  }
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, all, [this, in, outputs]() mutable {
    for (size_t i = 0; i < in.size(); ++i) {
      at::Tensor flat = at::empty({in[i]->host().numel() * getSize()}, in[i]->host().options());
      comm::all_gather(*group_, in[i]->host().view({-1}), flat);
      Tensors parts;
      for (auto& list : outputs)
        parts.push_back(list[i]);
      split_into(flat, parts);
    }
  });
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  if (outputs.size() != inputs.size())
    throw std::invalid_argument(
        "dtrain backend: allgather_into_tensor_coalesced takes an "
        "output per input");
  std::vector<WorkPtr> works;
  for (size_t i = 0; i < inputs.size(); ++i)
    works.push_back(_allgather_base(outputs[i], inputs[i], opts));
  return after_all(outputs, std::move(works));
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::gather(std::vector<Tensors>& outputs,
                                                       Tensors& inputs,
                                                       const c10d::GatherOptions& opts) {
  const at::Tensor& input = single(inputs, "gather");
  check_rank(opts.rootRank, "gather to");
  const bool root = opts.rootRank == getRank();
  if (root) {
    if (outputs.size() != 1)
      throw std::invalid_argument("dtrain backend: gather takes one list of outputs at the root");
    check_parts(outputs[0], input, static_cast<size_t>(getSize()), "gather");
  } else if (!outputs.empty()) {
    throw std::invalid_argument("dtrain backend: gather's outputs are the root's only");
  }
  auto in = std::make_shared<Staged>(input, /*read=*/true, "gather");
  Tensors parts = root ? outputs[0] : Tensors{};
  return enqueue(c10d::OpType::GATHER, parts,
                 [this, in, parts, root_rank = opts.rootRank]() mutable {
                   std::vector<std::shared_ptr<Staged>> staged;
                   Tensors hosts;
                   for (const auto& p : parts) {
                     staged.push_back(std::make_shared<Staged>(p, /*read=*/false, "gather"));
                     hosts.push_back(staged.back()->host().view({-1}));
                   }
                   comm::gather(*group_, in->host().view({-1}), hosts, static_cast<int>(root_rank));
                   for (auto& s : staged)
                     s->write_back();
                 });
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::scatter(Tensors& outputs,
                                                        std::vector<Tensors>& inputs,
                                                        const c10d::ScatterOptions& opts) {
  const at::Tensor& output = single(outputs, "scatter");
  check_rank(opts.rootRank, "scatter from");
  const bool root = opts.rootRank == getRank();
  Tensors parts;
  if (root) {
    if (inputs.size() != 1)
      throw std::invalid_argument("dtrain backend: scatter takes one list of inputs at the root");
    check_parts(inputs[0], output, static_cast<size_t>(getSize()), "scatter");
    for (const auto& p : inputs[0])
      parts.push_back(p.reshape({-1}).to(at::kCPU).contiguous());
  } else if (!inputs.empty()) {
    throw std::invalid_argument("dtrain backend: scatter's inputs are the root's only");
  }
  auto out = std::make_shared<Staged>(output, /*read=*/false, "scatter");
  return enqueue(c10d::OpType::SCATTER, outputs, [this, out, parts, root_rank = opts.rootRank] {
    at::Tensor flat = out->host().view({-1});
    comm::scatter(*group_, parts, flat, static_cast<int>(root_rank));
    out->write_back();
  });
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  if (input.numel() != output.numel() * getSize() || output.scalar_type() != input.scalar_type())
    throw std::invalid_argument(
        "dtrain backend: reduce_scatter's input must hold the size of "
        "the output per rank, of its dtype");
  comm::check_reduce_op(comm_op(opts.reduceOp), input.scalar_type());
  // The input is the collective's scratch: always a copy.
  auto in = std::make_shared<at::Tensor>(input.reshape({-1}).to(at::kCPU, false, true));
  auto out = std::make_shared<Staged>(output, /*read=*/false, "reduce_scatter");
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, [this, in, out, op = opts.reduceOp] {
    premultiply(*in, op);
    at::Tensor flat = out->host().view({-1});
    comm::reduce_scatter(*group_, *in, flat, comm_op(op));
    out->write_back();
  });
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::reduce_scatter(
    Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = single(outputs, "reduce_scatter");
  if (inputs.size() != 1)
    throw std::invalid_argument("dtrain backend: reduce_scatter takes one list of inputs");
  check_parts(inputs[0], output, static_cast<size_t>(getSize()), "reduce_scatter");
  at::Tensor whole = joined(inputs[0]);
  return _reduce_scatter_base(outputs[0], whole, opts);
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  if (outputs.size() != inputs.size())
    throw std::invalid_argument(
        "dtrain backend: reduce_scatter_tensor_coalesced takes an "
        "output per input");
  std::vector<WorkPtr> works;
  for (size_t i = 0; i < inputs.size(); ++i)
    works.push_back(_reduce_scatter_base(outputs[i], inputs[i], opts));
  return after_all(outputs, std::move(works));
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& /*opts*/) {
  if (output.scalar_type() != input.scalar_type())
    throw std::invalid_argument("dtrain backend: alltoall_base's tensors must share a dtype");
  const auto out_rows = splits_or_even(output_splits, output, getSize(), "output");
  const auto in_rows = splits_or_even(input_splits, input, getSize(), "input");
  auto in = std::make_shared<Staged>(input, /*read=*/true, "alltoall_base");
  auto out = std::make_shared<Staged>(output, /*read=*/false, "alltoall_base");
  return enqueue(c10d::OpType::ALLTOALL_BASE, {output}, [this, in, out, out_rows, in_rows] {
    Tensors sends, receives;
    int64_t a = 0, b = 0;
    for (int r = 0; r < getSize(); ++r) {
      sends.push_back(in->host().narrow(0, a, in_rows[static_cast<size_t>(r)]));
      receives.push_back(out->host().narrow(0, b, out_rows[static_cast<size_t>(r)]));
      a += in_rows[static_cast<size_t>(r)];
      b += out_rows[static_cast<size_t>(r)];
    }
    comm::all_to_all(*group_, sends, receives);
    out->write_back();
  });
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::alltoall(Tensors& outputs, Tensors& inputs,
                                                         const c10d::AllToAllOptions& /*opts*/) {
  if (outputs.size() != static_cast<size_t>(getSize()) ||
      inputs.size() != static_cast<size_t>(getSize()))
    throw std::invalid_argument("dtrain backend: alltoall takes a tensor per rank each way");
  std::vector<std::shared_ptr<Staged>> in, out;
  for (int r = 0; r < getSize(); ++r) {
    in.push_back(std::make_shared<Staged>(inputs[static_cast<size_t>(r)], true, "alltoall"));
    out.push_back(std::make_shared<Staged>(outputs[static_cast<size_t>(r)], false, "alltoall"));
  }
  return enqueue(c10d::OpType::ALLTOALL, outputs, [this, in, out] {
    Tensors sends, receives;
    for (size_t r = 0; r < in.size(); ++r) {
      sends.push_back(in[r]->host());
      receives.push_back(out[r]->host());
    }
    comm::all_to_all(*group_, sends, receives);
    for (auto& o : out)
      o->write_back();
  });
}

}  // namespace dtrain::torch_backend
