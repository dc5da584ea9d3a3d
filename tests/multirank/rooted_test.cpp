// gather, scatter, all_to_all and the bitwise all-reduces (the torch.distributed backend's
// operations in comm), against values computed here, on 3 ranks as threads over real Gloo.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "../support/ranks.h"
#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {
namespace {

at::Tensor of_rank(int rank, int64_t count, at::ScalarType dtype) {
  return ((at::arange(count, at::kLong) * 3 + rank * 7) % 11).to(dtype);
}

TEST(RootedTest, GatherAndScatterMoveEveryRanksPartThroughEveryRoot) {
  testing::run_ranks(3, [](Group& g) {
    for (int root = 0; root < 3; ++root) {
      std::vector<at::Tensor> parts;
      if (g.rank() == root)
        for (int r = 0; r < 3; ++r)
          parts.push_back(at::full({5}, -1, at::kShort));
      gather(g, of_rank(g.rank(), 5, at::kShort), parts, root);
      for (int r = 0; r < static_cast<int>(parts.size()); ++r)
        EXPECT_TRUE(at::equal(parts[static_cast<size_t>(r)], of_rank(r, 5, at::kShort)));
      std::vector<at::Tensor> out;
      if (g.rank() == root)
        for (int r = 0; r < 3; ++r)
          out.push_back(of_rank(10 + r, 4, at::kDouble));
      at::Tensor mine = at::zeros({4}, at::kDouble);
      scatter(g, out, mine, root);
      EXPECT_TRUE(at::equal(mine, of_rank(10 + g.rank(), 4, at::kDouble)));
    }
  });
}

TEST(RootedTest, AllToAllDeliversUnevenPartsAndSkipsEmptyOnes) {
  testing::run_ranks(3, [](Group& g) {
    // Rank i sends j + i values to rank j (none from rank 0 to itself).
    std::vector<at::Tensor> out, in;
    for (int j = 0; j < 3; ++j) {
      out.push_back(at::full({j + g.rank()}, 100 * g.rank() + j, at::kInt));
      in.push_back(at::full({g.rank() + j}, -1, at::kInt));
    }
    all_to_all(g, out, in);
    for (int j = 0; j < 3; ++j)
      EXPECT_TRUE(at::equal(in[static_cast<size_t>(j)],
                            at::full({g.rank() + j}, 100 * j + g.rank(), at::kInt)));
    std::vector<at::Tensor> wrong(2);
    EXPECT_THROW(all_to_all(g, wrong, in), std::invalid_argument);
  });
}

TEST(RootedTest, BitwiseAllReducesAreExactAndRefuseFloats) {
  testing::run_ranks(3, [](Group& g) {
    for (const auto op : {ReduceOp::kBitwiseAnd, ReduceOp::kBitwiseOr, ReduceOp::kBitwiseXor}) {
      for (const auto algo : {Algorithm::kRing, Algorithm::kButterfly, Algorithm::kNative}) {
        at::Tensor x = of_rank(g.rank(), 1001, at::kLong);
        AllReduceOptions o;
        o.op = op;
        o.algorithm = algo;
        all_reduce(g, x, o);
        at::Tensor want = of_rank(0, 1001, at::kLong);
        for (int r = 1; r < 3; ++r)
          want = op == ReduceOp::kBitwiseAnd  ? want.bitwise_and(of_rank(r, 1001, at::kLong))
                 : op == ReduceOp::kBitwiseOr ? want.bitwise_or(of_rank(r, 1001, at::kLong))
                                              : want.bitwise_xor(of_rank(r, 1001, at::kLong));
        EXPECT_TRUE(at::equal(x, want)) << to_string(op) << " " << to_string(algo);
      }
    }
    at::Tensor f = at::ones({3});
    AllReduceOptions o;
    o.op = ReduceOp::kBitwiseOr;
    EXPECT_THROW(all_reduce(g, f, o), std::invalid_argument);
  });
}

}  // namespace
}  // namespace dtrain::comm
