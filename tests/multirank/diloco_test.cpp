// DiLoCo's outer steps (parallel/diloco.h) over real Gloo/TCP between rank threads, against
// a single-process reference that runs the replicas one after another and writes the
// outer Nesterov step out by hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

#include "../support/models.h"
#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/parallel/diloco.h"

namespace dtrain::parallel {
namespace {

constexpr int kReplicas = 2;
constexpr int64_t kSteps = 7, kSyncEvery = 3, kBatch = 16;
constexpr double kInnerLr = 0.05, kOuterLr = 0.7, kMomentum = 0.9;

torch::nn::Sequential make_model() {
  return testing::tiny_mlp(3, 2);
}

// Replica r's batch at inner step k: its own data.
std::pair<at::Tensor, at::Tensor> batch(int replica, int64_t step) {
  at::Generator g = at::detail::createCPUGenerator(static_cast<uint64_t>(100 * replica + step));
  return {at::randn({kBatch, 1, 6, 6}, g), at::randint(0, 5, {kBatch}, g)};
}

void inner_step(torch::nn::Sequential& model, torch::optim::Optimizer& opt, int replica,
                int64_t step) {
  const auto [x, y] = batch(replica, step);
  opt.zero_grad();
  torch::nn::functional::cross_entropy(model->forward(x), y).backward();
  opt.step();
}

std::vector<at::Tensor> flat_state(torch::nn::Sequential& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model->parameters())
    out.push_back(p.detach().clone());
  return out;
}

// The replicas one after another; every kSyncEvery steps (and after the last) the mean of
// (anchor - parameters) is the outer gradient: m = mu m + g, anchor -= lr (g + mu m).
std::vector<at::Tensor> reference() {
  std::vector<torch::nn::Sequential> models;
  std::vector<std::unique_ptr<torch::optim::SGD>> opts;
  for (int r = 0; r < kReplicas; ++r) {
    models.push_back(make_model());
    opts.push_back(std::make_unique<torch::optim::SGD>(models.back()->parameters(),
                                                       torch::optim::SGDOptions(kInnerLr)));
  }
  std::vector<at::Tensor> anchor = flat_state(models[0]), momentum;
  for (const auto& a : anchor)
    momentum.push_back(at::zeros_like(a));
  const auto outer = [&] {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < anchor.size(); ++i) {
      at::Tensor g = at::zeros_like(anchor[i], at::kDouble);
      for (auto& m : models)
        g += (anchor[i] - m->parameters()[i]).to(at::kDouble);
      g = (g / kReplicas).to(at::kFloat);
      momentum[i] = momentum[i] * kMomentum + g;
      anchor[i] = anchor[i] - kOuterLr * (g + kMomentum * momentum[i]);
      for (auto& m : models)
        m->parameters()[i].copy_(anchor[i]);
    }
  };
  for (int64_t k = 0; k < kSteps; ++k) {
    for (int r = 0; r < kReplicas; ++r)
      inner_step(models[static_cast<size_t>(r)], *opts[static_cast<size_t>(r)], r, k);
    if ((k + 1) % kSyncEvery == 0) outer();
  }
  outer();
  return anchor;
}

struct Result {
  std::map<int, std::vector<at::Tensor>> params;
  std::map<int, DilocoStats> stats;
};

Result run(const compress::CodecSpec& codec) {
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < kReplicas; ++r)
    models.push_back(make_model());
  // A replica that starts elsewhere is brought to rank 0's parameters.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : models[1]->parameters())
      p.add_(1.0);
  }
  Result result;
  std::mutex mu;
  testing::run_ranks(kReplicas, [&](comm::Group& g) {
    auto& model = models[static_cast<size_t>(g.rank())];
    DilocoConfig config;
    config.sync_every = kSyncEvery;
    config.outer_lr = kOuterLr;
    config.outer_momentum = kMomentum;
    config.codec = codec;
    Diloco diloco(g, model->parameters(), model->buffers(), config);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kInnerLr));
    for (int64_t k = 0; k < kSteps; ++k) {
      inner_step(model, opt, g.rank(), k);
      EXPECT_EQ(diloco.after_inner_step(), (k + 1) % kSyncEvery == 0);
    }
    EXPECT_TRUE(diloco.sync());
    EXPECT_FALSE(diloco.sync()) << "nothing to average right after an outer step";
    std::lock_guard<std::mutex> lock(mu);
    result.params[g.rank()] = flat_state(model);
    result.stats[g.rank()] = diloco.take_stats();
  });
  return result;
}

TEST(Diloco, OuterStepsEqualTheSingleProcessReference) {
  const auto expected = reference();
  const Result r = run({});
  for (int rank = 0; rank < kReplicas; ++rank) {
    const auto& got = r.params.at(rank);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE((got[i] - expected[i]).abs().max().item<double>(), 1e-5) << rank << " " << i;
    const DilocoStats& s = r.stats.at(rank);
    EXPECT_EQ(s.outer_steps, 3);  // after steps 3 and 6, and the last
    EXPECT_EQ(s.inner_steps, kSteps);
    EXPECT_EQ(s.wire_bytes, s.fp32_bytes);
  }
}

TEST(Diloco, CodedOuterStepsKeepTheReplicasIdenticalAndSendLess) {
  const auto expected = reference();
  const Result r = run(compress::parse_codec("rot:tile:4"));
  double worst = 0, scale = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(at::equal(r.params.at(0)[i], r.params.at(1)[i])) << "parameter " << i;
    worst = std::max(worst, (r.params.at(0)[i] - expected[i]).abs().max().item<double>());
    scale = std::max(scale, expected[i].abs().max().item<double>());
  }
  EXPECT_GT(worst, 0) << "4-bit codes are lossy";
  EXPECT_LT(worst, 0.05 * scale);
  const DilocoStats& s = r.stats.at(0);
  EXPECT_LT(s.wire_bytes, s.fp32_bytes / 5);
}

// BatchNorm's running statistics are averaged exactly at an outer step; its step counter
// (an integer buffer) is left alone.
TEST(Diloco, OuterStepsAverageTheBatchNormStatistics) {
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < kReplicas; ++r) {
    torch::manual_seed(4);
    models.push_back(torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(36, 8),
                                           torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 5)));
  }
  std::map<int, at::Tensor> before, after;
  std::mutex mu;
  testing::run_ranks(kReplicas, [&](comm::Group& g) {
    auto& model = models[static_cast<size_t>(g.rank())];
    DilocoConfig config;
    config.sync_every = 1;
    Diloco diloco(g, model->parameters(), model->buffers(), config);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kInnerLr));
    inner_step(model, opt, g.rank(), 0);
    const auto mean_of = [&] { return model->named_buffers()["2.running_mean"].clone(); };
    {
      std::lock_guard<std::mutex> lock(mu);
      before[g.rank()] = mean_of();
    }
    g.barrier();
    EXPECT_TRUE(diloco.after_inner_step());
    std::lock_guard<std::mutex> lock(mu);
    after[g.rank()] = mean_of();
    EXPECT_EQ(model->named_buffers()["2.num_batches_tracked"].item<int64_t>(), 1);
  });
  EXPECT_FALSE(at::equal(before[0], before[1])) << "the replicas saw different data";
  EXPECT_TRUE(at::equal(after[0], after[1]));
  EXPECT_TRUE(at::allclose(after[0], (before[0] + before[1]) / 2, 1e-6, 1e-7));
}

TEST(Diloco, RejectsSettingsThatCannotWork) {
  testing::run_ranks(1, [&](comm::Group& g) {
    auto model = make_model();
    DilocoConfig c;
    c.sync_every = 0;
    EXPECT_THROW(Diloco(g, model->parameters(), model->buffers(), c), std::invalid_argument);
    c = DilocoConfig{};
    c.outer_momentum = 1.0;
    EXPECT_THROW(Diloco(g, model->parameters(), model->buffers(), c), std::invalid_argument);
  });
}

}  // namespace
}  // namespace dtrain::parallel
