// BatchNorm statistics recomputed under the current weights and averaged over the ranks
// (train/batchnorm_statistics.h), against the definition written out here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/train/batchnorm_statistics.h"

namespace dtrain::train {
namespace {

at::Tensor inputs(int rank, int batch) {
  at::Generator g = at::detail::createCPUGenerator(static_cast<uint64_t>(10 * rank + batch));
  return at::randn({16, 4}, g) * (1 + rank) + batch;
}

TEST(BatchNormStatisticsTest, TheLastBatchesUnderTheCurrentWeightsAveragedOverRanks) {
  constexpr int kRanks = 2, kSeen = 11;  // more batches than it keeps
  const int keep = static_cast<int>(BatchNormStatistics::kBatches);
  std::map<int, std::pair<at::Tensor, at::Tensor>> got;
  std::mutex mu;
  testing::run_ranks(kRanks, [&](comm::Group& g) {
    torch::nn::Sequential model(torch::nn::BatchNorm1d(4));
    auto bn = model->ptr(0)->as<torch::nn::BatchNorm1dImpl>();
    BatchNormStatistics stats(model);
    ASSERT_TRUE(stats.active());
    for (int b = 0; b < kSeen; ++b)
      stats.remember(inputs(g.rank(), b));
    {
      torch::NoGradGuard no_grad;
      bn->running_mean.fill_(100);  // stale: must not survive
    }
    model->eval();
    stats.recompute(g);
    EXPECT_FALSE(model->is_training()) << "the mode is given back";
    EXPECT_EQ(bn->options.momentum(), 0.1) << "the momentum is given back";
    std::lock_guard<std::mutex> lock(mu);
    got[g.rank()] = {bn->running_mean.clone(), bn->running_var.clone()};
  });
  // Per rank the cumulative average over its last `keep` batches of each batch's mean and
  // unbiased variance; then the mean over ranks.
  at::Tensor mean = at::zeros({4}, at::kDouble), var = at::zeros({4}, at::kDouble);
  for (int r = 0; r < kRanks; ++r) {
    for (int b = kSeen - keep; b < kSeen; ++b) {
      const at::Tensor x = inputs(r, b).to(at::kDouble);
      mean += x.mean(0) / (keep * kRanks);
      var += x.var(0, /*unbiased=*/true) / (keep * kRanks);
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(at::allclose(got[r].first.to(at::kDouble), mean, 1e-5, 1e-5)) << r;
    EXPECT_TRUE(at::allclose(got[r].second.to(at::kDouble), var, 1e-4, 1e-5)) << r;
    EXPECT_TRUE(at::equal(got[r].first, got[0].first));
  }
}

// A rank that kept no batch (an elastic replica that entered with nothing left to train)
// still takes part: the mean of the other's recomputed statistics and its own as they are.
TEST(BatchNormStatisticsTest, ARankWithoutBatchesStillTakesPartWithTheStatisticsItHas) {
  std::map<int, at::Tensor> got;
  std::mutex mu;
  testing::run_ranks(2, [&](comm::Group& g) {
    torch::nn::Sequential model(torch::nn::BatchNorm1d(4));
    auto bn = model->ptr(0)->as<torch::nn::BatchNorm1dImpl>();
    BatchNormStatistics stats(model);
    if (g.rank() == 0) stats.remember(inputs(0, 0));
    {
      torch::NoGradGuard no_grad;
      bn->running_mean.fill_(g.rank() == 0 ? 100 : 6);  // rank 0's is recomputed, 1's kept
    }
    stats.recompute(g);
    std::lock_guard<std::mutex> lock(mu);
    got[g.rank()] = bn->running_mean.clone();
  });
  const at::Tensor recomputed = inputs(0, 0).to(at::kDouble).mean(0);
  const at::Tensor want = (recomputed + 6.0) / 2;
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(at::allclose(got[r].to(at::kDouble), want, 1e-5, 1e-5)) << r << got[r];
}

TEST(BatchNormStatisticsTest, AModelWithoutBatchNormKeepsNothing) {
  torch::nn::Sequential model(torch::nn::Linear(4, 2));
  BatchNormStatistics stats(model);
  EXPECT_FALSE(stats.active());
  stats.remember(at::ones({2, 4}));
  EXPECT_TRUE(stats.state().empty());
}

}  // namespace
}  // namespace dtrain::train
