#include "dtrain/cli/collective_buffers.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/exact_oracle.h"

namespace dtrain::cli {
namespace {

at::Tensor pattern(int rank, int64_t begin, int64_t count, comm::ReduceOp op) {
  return comm::exact_input(rank, begin, count, op);
}

// The exact expected result for elements [begin, begin+count), in float64.
at::Tensor expected(Op op, comm::ReduceOp rop, int p, int64_t total, int64_t begin, int64_t count,
                    at::ScalarType dtype) {
  if (op == Op::kBroadcast) return pattern(0, begin, count, rop).to(at::kDouble);
  if (op == Op::kAllGather) {
    at::Tensor out = at::empty({count}, at::kDouble);
    int64_t block_begin = 0;
    for (int j = 0; j < p; ++j) {
      const int64_t n = comm::block_count(total, p, j);
      const int64_t lo = std::max(begin, block_begin),
                    hi = std::min(begin + count, block_begin + n);
      if (lo < hi) out.narrow(0, lo - begin, hi - lo).copy_(pattern(j, lo, hi - lo, rop));
      block_begin += n;
    }
    return out;
  }
  return comm::exact_reduction(p, begin, count, rop, dtype);
}

// pattern(rank, begin, count) written straight into a tensor of `dtype`, a chunk at a
// time: a 1 GiB buffer must not need gigabytes of int64 temporaries.
at::Tensor filled(int rank, int64_t begin, int64_t count, comm::ReduceOp rop,
                  at::ScalarType dtype) {
  at::Tensor out = at::empty({count}, dtype);
  constexpr int64_t kChunk = 1 << 22;
  for (int64_t at = 0; at < count; at += kChunk) {
    const int64_t n = std::min(kChunk, count - at);
    out.narrow(0, at, n).copy_(pattern(rank, begin + at, n, rop));
  }
  return out;
}

}  // namespace

Buffers make_buffers(Op op, comm::ReduceOp rop, const comm::Group& g, int64_t count,
                     at::ScalarType dtype, const c10::Device& device) {
  Buffers b;
  const int p = g.size(), r = g.rank();
  int64_t my_begin = 0;
  for (int j = 0; j < r; ++j)
    my_begin += comm::block_count(count, p, j);
  const int64_t mine = comm::block_count(count, p, r);
  switch (op) {
    case Op::kAllReduce:
    case Op::kReduceScatter:
      b.input = filled(r, 0, count, rop, dtype);
      break;
    case Op::kBroadcast:
      b.input = r == 0 ? filled(0, 0, count, rop, dtype) : at::zeros({count}, dtype);
      break;
    case Op::kAllGather:
      b.input = filled(r, my_begin, mine, rop, dtype);
      break;
  }
  b.input = b.input.to(device);
  b.work = op == Op::kAllGather ? at::empty({count}, b.input.options()) : b.input.clone();
  if (op == Op::kReduceScatter) {
    b.output = at::empty({mine}, b.input.options());
    b.check_begin = my_begin;
  }
  return b;
}

void run_once(Op op, const std::string& algo, comm::Group& g, Buffers& b, comm::ReduceOp rop,
              int64_t segment_bytes) {
  switch (op) {
    case Op::kAllReduce: {
      comm::AllReduceOptions o;
      o.op = rop;
      o.algorithm = comm::parse_algorithm(algo);
      o.segment_bytes = segment_bytes;
      comm::all_reduce(g, b.work, o);
      return;
    }
    case Op::kBroadcast:
      if (algo == "native") {
        g.native_broadcast(b.work, 0);
      } else {
        comm::broadcast(g, b.work, 0,
                        algo == "tree"      ? comm::BroadcastAlgorithm::kBinomialTree
                        : algo == "scatter" ? comm::BroadcastAlgorithm::kScatterAllGather
                                            : comm::BroadcastAlgorithm::kAuto);
      }
      return;
    case Op::kReduceScatter:
      comm::reduce_scatter(g, b.work, b.output, rop);
      return;
    case Op::kAllGather:
      comm::all_gather(g, b.input, b.work);
      return;
  }
}

void restore(Op op, Buffers& b) {
  if (op != Op::kAllGather) b.work.copy_(b.input);
}

// Compares the result with the exact expectation in chunks (bounded memory for 1 GiB runs).
std::pair<int64_t, double> check(Op op, comm::ReduceOp rop, int p, int64_t total, const Buffers& b,
                                 at::ScalarType dtype) {
  const at::Tensor& result = op == Op::kReduceScatter ? b.output : b.work;
  constexpr int64_t kChunk = 1 << 22;
  int64_t wrong = 0;
  double max_diff = 0;
  for (int64_t at = 0; at < result.numel(); at += kChunk) {
    const int64_t n = std::min(kChunk, result.numel() - at);
    const at::Tensor want = expected(op, rop, p, total, b.check_begin + at, n, dtype);
    const at::Tensor got = result.narrow(0, at, n).to(at::kCPU, at::kDouble);
    const at::Tensor diff = (got - want).abs();
    wrong += diff.ne(0).sum().item<int64_t>();
    max_diff = std::max(max_diff, diff.max().item<double>());
  }
  return {wrong, max_diff};
}

}  // namespace dtrain::cli
