// Delta coding of pipeline activations (parallel/pipeline/delta_cache.h) over real Gloo/TCP
// between rank threads: both ends' caches equal bit for bit, evaluation leaves them alone,
// the warm-up and delta codecs go where they should, and, with the model held still, the
// receiver's cached activations converge on the sender's true ones (the point of coding
// the change) far below what coding the activation itself at the same width gives.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <mutex>

#include "../support/models.h"
#include "../support/pipeline_follower.h"
#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/compress/codec.h"
#include "dtrain/parallel/pipeline/pipeline.h"

namespace dtrain::parallel::pipeline {
namespace {

constexpr int64_t kSamples = 128, kDeltaBatch = 64, kDepth = 3;  // blocks fc1..fc3, head

torch::nn::Sequential make_model() {
  return testing::tiny_mlp(5, kDepth);
}

struct Data {
  at::Tensor x, y;
};
Data dataset() {
  at::Generator g = at::detail::createCPUGenerator(9);
  return {at::randn({kSamples, 1, 6, 6}, g), at::randint(0, 5, {kSamples}, g)};
}

// The U-shape over 2 ranks; activations delta-coded with `codec` after a sortquant:8 warm-up.
PipelineConfig delta_config(const std::string& codec, at::ScalarType dtype) {
  PipelineConfig c;
  c.partition = make_partition(Placement::kUShape, 2, kDepth + 1, {}, {});
  c.micro_batches = 4;
  c.codecs.activations = compress::parse_codec(codec);
  c.codecs.gradients = compress::parse_codec("sortquant:8");
  DeltaOptions d;
  d.warmup = compress::parse_codec("sortquant:8");
  d.sample_input = at::zeros({1, 1, 6, 6});
  d.samples = kSamples;
  d.dtype = dtype;
  c.delta = d;
  return c;
}

double forward_ratio(const std::vector<RankReport>& reports) {
  for (const auto& r : reports)
    for (const auto& l : r.links)
      if (l.src == 0 && l.dst == 1 && l.direction == "forward")
        return static_cast<double>(l.bytes) / static_cast<double>(l.fp32_bytes);
  ADD_FAILURE() << "no forward link 0 -> 1";
  return 0;
}

double packet_ratio(const std::string& codec, std::vector<int64_t> shape) {
  const at::Tensor t = at::zeros(shape);
  return static_cast<double>(compress::encode(*compress::make_codec(codec), t).size()) /
         (4.0 * static_cast<double>(t.numel()));
}

struct DeltaRun {
  std::map<int, std::map<int, at::Tensor>> caches;  // rank -> boundary -> values
  std::vector<std::vector<RankReport>> reports;     // per epoch
  bool eval_kept_caches = false;
};

// `epochs` passes over the data in a new order each, an evaluation batch after each.
DeltaRun train(const PipelineConfig& config, int epochs, double lr) {
  std::vector<torch::nn::Sequential> models{make_model(), make_model()};
  const Data data = dataset();
  DeltaRun run;
  std::mutex mu;
  testing::run_ranks(2, [&](comm::Group& g) {
    Pipeline p(g, models[static_cast<size_t>(g.rank())], config);
    torch::optim::SGD opt(p.parameters(), torch::optim::SGDOptions(lr));
    if (p.is_driver()) {
      at::Generator gen = at::detail::createCPUGenerator(1);
      run.eval_kept_caches = true;
      for (int e = 0; e < epochs; ++e) {
        const at::Tensor order = at::randperm(kSamples, gen);
        for (int64_t b = 0; b < kSamples; b += kDeltaBatch) {
          const at::Tensor ids = order.narrow(0, b, kDeltaBatch);
          opt.zero_grad();
          p.train_batch(data.x.index_select(0, ids), data.y.index_select(0, ids), {}, lr, ids);
          opt.step();
        }
        run.reports.push_back(p.collect_reports());
        const at::Tensor before = p.delta_caches().at(1).values().clone();
        p.eval_batch(data.x.narrow(0, 0, kDeltaBatch), data.y.narrow(0, 0, kDeltaBatch), {});
        run.eval_kept_caches &= at::equal(before, p.delta_caches().at(1).values());
      }
      p.stop();
    } else {
      testing::follow(p, opt);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [boundary, cache] : p.delta_caches())
      run.caches[g.rank()][boundary] = cache.values().clone();
  });
  return run;
}

TEST(PipelineDelta, BothEndsKeepTheSameCachesBitForBit) {
  for (const auto dtype : {at::kBFloat16, at::kFloat}) {
    SCOPED_TRACE(c10::toString(dtype));
    const DeltaRun run = train(delta_config("rot:tile:2", dtype), 3, 0.05);
    ASSERT_EQ(run.caches.size(), 2u);
    // The U-shape: boundary 1 (rank 0 -> 1) and 2 (rank 1 -> 0), each cached at both ends.
    for (const int boundary : {1, 2}) {
      const at::Tensor& a = run.caches.at(0).at(boundary);
      const at::Tensor& b = run.caches.at(1).at(boundary);
      EXPECT_EQ(a.scalar_type(), dtype);
      EXPECT_TRUE(at::equal(a, b)) << "boundary " << boundary;
      EXPECT_GT(a.abs().sum().item<double>(), 0) << "every sample was stored";
    }
    EXPECT_TRUE(run.eval_kept_caches);
    // Epoch 1 warms up with sortquant:8; later epochs send 2-bit deltas.
    ASSERT_EQ(run.reports.size(), 3u);
    const std::vector<int64_t> micro{kDeltaBatch / 4, 32};
    EXPECT_DOUBLE_EQ(forward_ratio(run.reports[0]), packet_ratio("sortquant:8", micro));
    EXPECT_DOUBLE_EQ(forward_ratio(run.reports[1]), packet_ratio("rot:tile:2", micro));
    EXPECT_DOUBLE_EQ(forward_ratio(run.reports[2]), packet_ratio("rot:tile:2", micro));
  }
}

// With lr = 0 every sample's activation stays the same, so each epoch's delta codes what
// the previous one left: the receiver's cache converges on the truth. Coding the
// activation itself at 2 bits, every epoch, never gets closer than the first time.
TEST(PipelineDelta, CachesConvergeOnTheSendersActivations) {
  PipelineConfig config = delta_config("uniform:2", at::kFloat);
  config.delta->warmup = config.codecs.activations;  // the warm-up as coarse as the deltas
  const DeltaRun run = train(config, 6, 0.0);
  auto model = make_model();
  torch::NoGradGuard no_grad;
  // The first block's output: what rank 0 sends over boundary 1, sample by sample.
  const at::Tensor x = model->begin()->forward(dataset().x);
  const auto relative_mse = [&](const at::Tensor& approx) {
    return (approx.view_as(x) - x).pow(2).mean().item<double>() / x.pow(2).mean().item<double>();
  };
  const auto codec = compress::make_codec(config.codecs.activations);
  const double direct = relative_mse(compress::decode(compress::encode(*codec, x)));
  const double delta = relative_mse(run.caches.at(1).at(1));
  EXPECT_GT(direct, 1e-3);
  EXPECT_LT(delta, direct / 100) << "delta " << delta << " direct " << direct;
}

TEST(PipelineDelta, CachesOverTheLimitFailOnEveryRankBeforeTraining) {
  std::vector<torch::nn::Sequential> models{make_model(), make_model()};
  std::atomic<int> failures{0};
  PipelineConfig c = delta_config("uniform:4", at::kFloat);
  c.delta->limit_bytes = kSamples * 32 * 4;  // one boundary fits, two do not
  testing::run_ranks(2, [&](comm::Group& g) {
    try {
      Pipeline p(g, models[static_cast<size_t>(g.rank())], c);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--delta-cache-mb"), std::string::npos) << e.what();
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

TEST(PipelineDelta, ABatchWithoutSampleIndicesIsRefusedBeforeItStarts) {
  std::vector<torch::nn::Sequential> models{make_model(), make_model()};
  const Data data = dataset();
  testing::run_ranks(2, [&](comm::Group& g) {
    Pipeline p(g, models[static_cast<size_t>(g.rank())], delta_config("uniform:4", at::kFloat));
    torch::optim::SGD opt(p.parameters(), torch::optim::SGDOptions(0.1));
    if (!p.is_driver()) return testing::follow(p, opt);
    const at::Tensor x = data.x.narrow(0, 0, kDeltaBatch), y = data.y.narrow(0, 0, kDeltaBatch);
    EXPECT_THROW(p.train_batch(x, y, {}, 0.1), std::invalid_argument);
    EXPECT_THROW(p.train_batch(x, y, {}, 0.1, at::arange(kDeltaBatch) + kSamples),
                 std::invalid_argument);
    p.train_batch(x, y, {}, 0.1, at::arange(kDeltaBatch));  // the followers are still in step
    p.stop();
  });
}

TEST(DeltaCache, StoresAtItsPrecisionAndRejectsUnknownSamples) {
  DeltaCache cache(10, {2, 3}, at::kBFloat16);
  const at::Tensor ids = at::tensor({7, 2}, at::kLong);
  EXPECT_FALSE(cache.all_seen(ids));
  const at::Tensor v = at::randn({2, 2, 3});
  cache.store(ids, v);
  EXPECT_TRUE(cache.all_seen(ids));
  EXPECT_FALSE(cache.all_seen(at::tensor({7, 3}, at::kLong)));
  EXPECT_TRUE(at::equal(cache.gather(ids, at::kCPU), v.to(at::kBFloat16).to(at::kFloat)));
  EXPECT_THROW(cache.all_seen(at::tensor({10}, at::kLong)), std::out_of_range);
  EXPECT_THROW(cache.gather(at::tensor({-1}, at::kLong), at::kCPU), std::out_of_range);
  EXPECT_THROW(cache.store(ids, at::randn({2, 5})), std::invalid_argument);
  EXPECT_THROW(DeltaCache(4, {3}, at::kDouble), std::invalid_argument);
  EXPECT_EQ(DeltaCache::bytes_for(1000, 6272, at::kBFloat16), 1000 * 6272 * 2);
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
