// DDP against single-process training on the concatenated batch, gradient accumulation
// against one larger batch, compressed gradients with error feedback, mismatched models.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>

#include "../support/models.h"
#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/compress/codec.h"
#include "dtrain/models/memory_format.h"
#include "dtrain/models/registry.h"
#include "dtrain/parallel/ddp.h"

namespace dtrain::parallel {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kPerRank = 8;

torch::nn::Sequential make_mlp(uint64_t seed, int64_t depth = 3) {
  return testing::tiny_mlp(seed, depth);
}

// Global batches for every step: [world * per_rank * micro, ...].
std::vector<std::pair<at::Tensor, at::Tensor>> global_batches(int64_t rows, int steps = kSteps) {
  at::Generator g = at::detail::createCPUGenerator(5);
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  for (int k = 0; k < steps; ++k)
    out.emplace_back(at::randn({rows, 1, 6, 6}, g), at::randint(0, 5, {rows}, g));
  return out;
}

torch::optim::SGD make_sgd(const std::vector<at::Tensor>& params) {
  return torch::optim::SGD(params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

std::vector<at::Tensor> reference(int64_t rows) {
  auto model = make_mlp(1);
  auto opt = make_sgd(model->parameters());
  for (const auto& [x, y] : global_batches(rows)) {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    opt.step();
  }
  std::vector<at::Tensor> out;
  for (const auto& p : model->parameters())
    out.push_back(p.detach().clone());
  return out;
}

// Called on every rank after each synchronized backward, with the model.
using AfterSync = std::function<void(const torch::nn::Module&)>;

// Each rank trains on its rows of every global batch, in `micro` accumulation steps;
// zero_grad() either drops the gradients (PyTorch's default) or zeroes them in place.
std::map<int, std::vector<at::Tensor>> run_ddp(int world, DdpConfig config, int micro,
                                               std::vector<DdpStats>* stats = nullptr,
                                               bool zero_to_none = true,
                                               const AfterSync& after_sync = nullptr) {
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < world; ++r)
    models.push_back(make_mlp(1 + static_cast<uint64_t>(r)));  // DDP must copy rank 0's
  const auto batches = global_batches(world * kPerRank * micro);
  std::map<int, std::vector<at::Tensor>> out;
  std::mutex mu;
  if (stats) stats->assign(static_cast<size_t>(world), {});
  testing::run_ranks(world, [&](comm::Group& g) {
    auto model = models[static_cast<size_t>(g.rank())];
    DistributedDataParallel ddp(g, model.ptr(), config);
    auto opt = make_sgd(model->parameters());
    for (const auto& [x, y] : batches) {
      opt.zero_grad(zero_to_none);
      const int64_t rows = kPerRank * micro;
      const at::Tensor xs = x.narrow(0, g.rank() * rows, rows),
                       ys = y.narrow(0, g.rank() * rows, rows);
      for (int m = 0; m < micro; ++m) {
        ddp.set_sync(m == micro - 1);
        ddp.before_forward();
        const at::Tensor loss = torch::nn::functional::cross_entropy(
            model->forward(xs.narrow(0, m * kPerRank, kPerRank)),
            ys.narrow(0, m * kPerRank, kPerRank));
        (loss / static_cast<double>(micro)).backward();
        ddp.finish_backward();
      }
      if (after_sync) after_sync(*model);
      opt.step();
    }
    std::vector<at::Tensor> params;
    for (const auto& p : model->parameters())
      params.push_back(p.detach().clone());
    std::lock_guard<std::mutex> lock(mu);
    out[g.rank()] = params;
    if (stats) (*stats)[static_cast<size_t>(g.rank())] = ddp.take_stats();
  });
  return out;
}

void expect_close(const std::map<int, std::vector<at::Tensor>>& got,
                  const std::vector<at::Tensor>& ref) {
  for (const auto& [rank, params] : got) {
    ASSERT_EQ(params.size(), ref.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_LE((params[i] - ref[i]).abs().max().item<double>(), 1e-5)
          << "rank " << rank << " param " << i;
  }
}

class DdpEquivalence : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(DdpEquivalence, EqualsSingleProcessOnTheConcatenatedBatch) {
  const auto [world, algo] = GetParam();
  DdpConfig c;
  // "armed": auto scheduled for a long link, where exact buckets post their receives when
  // backward starts and start as they complete (comm/armed_all_reduce.h).
  c.algorithm = comm::parse_algorithm(algo == "armed" ? "auto" : algo);
  c.link = algo == "armed" ? LinkSchedule::kLong : LinkSchedule::kShort;
  c.bucket_mb = 0.002;  // ~500 floats: many buckets, reduced while backward goes on
  c.first_bucket_mb = 0.0005;
  std::vector<DdpStats> stats;
  const auto got = run_ddp(world, c, 1, &stats);
  expect_close(got, reference(world * kPerRank));
  for (const auto& s : stats) {
    EXPECT_GE(s.reductions, kSteps * 3);  // several buckets a step (long links: 3)
    // fc1 36x32+32, fc2 and fc3 32x32+32, head 32x5+5
    EXPECT_EQ(s.grad_bytes, kSteps * 4 * (1184 + 1056 + 1056 + 165));
  }
}

INSTANTIATE_TEST_SUITE_P(WorldsAndAlgorithms, DdpEquivalence,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values("ring", "butterfly", "direct",
                                                              "exchange", "native", "auto",
                                                              "armed")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  std::get<1>(info.param);
                         });

// Channels-last convolutions (models/memory_format.h): the gradients are bucket views with
// the weights' own strides, and DDP still equals contiguous single-process training.
TEST(Ddp, ChannelsLastConvolutionsEqualTheContiguousReference) {
  const auto make_conv = [](uint64_t seed) {
    torch::manual_seed(seed);
    return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)),
                                 torch::nn::ReLU(), torch::nn::Flatten(),
                                 torch::nn::Linear(4 * 6 * 6, 5));
  };
  constexpr int kWorld = 2;
  at::Generator gen = at::detail::createCPUGenerator(9);
  std::vector<std::pair<at::Tensor, at::Tensor>> batches;
  for (int k = 0; k < kSteps; ++k)
    batches.emplace_back(at::randn({kWorld * kPerRank, 3, 6, 6}, gen),
                         at::randint(0, 5, {kWorld * kPerRank}, gen));
  const auto train = [&](torch::nn::Sequential& model, DistributedDataParallel* ddp, int rank,
                         int world) {
    auto opt = make_sgd(model->parameters());
    for (const auto& [x, y] : batches) {
      opt.zero_grad();
      if (ddp != nullptr) ddp->before_forward();
      const int64_t rows = x.size(0) / world;
      torch::nn::functional::cross_entropy(model->forward(x.narrow(0, rank * rows, rows)),
                                           y.narrow(0, rank * rows, rows))
          .backward();
      if (ddp != nullptr) ddp->finish_backward();
      opt.step();
    }
  };
  auto reference = make_conv(11);
  train(reference, nullptr, 0, 1);
  // Built here, not on the rank threads, which would share LibTorch's global generator.
  std::vector<torch::nn::Sequential> rank_models;
  for (int r = 0; r < kWorld; ++r)
    rank_models.push_back(make_conv(11 + static_cast<uint64_t>(r)));  // DDP must copy rank 0's
  std::map<int, std::vector<at::Tensor>> trained;
  std::mutex mu;
  testing::run_ranks(kWorld, [&](comm::Group& g) {
    auto model = rank_models[static_cast<size_t>(g.rank())];
    models::place(*model, c10::Device(c10::kCPU), models::MemoryFormat::kChannelsLast);
    DdpConfig c;
    c.bucket_mb = 0.0002;  // the conv weight (108 floats) in a bucket of its own
    c.first_bucket_mb = 0.0002;
    DistributedDataParallel ddp(g, model.ptr(), c);
    train(model, &ddp, g.rank(), kWorld);
    const at::Tensor weight = model->parameters()[0];
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(weight.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_FALSE(weight.is_contiguous());
    EXPECT_TRUE(weight.grad().is_contiguous(at::MemoryFormat::ChannelsLast));
    for (const auto& p : model->parameters())
      trained[g.rank()].push_back(p.detach().clone());
  });
  expect_close(trained, reference->parameters());
}

TEST(Ddp, BucketsCloseOnceTheyReachTheirCap) {
  // Reverse order: head (5+160 floats), fc3 (32+1024), fc2 (32+1024), fc1 (32+1152).
  testing::run_ranks(1, [&](comm::Group& g) {
    auto model = make_mlp(1);
    DdpConfig c;
    c.first_bucket_mb = 500.0 / (1024 * 1024);  // 500 bytes: the head crosses it
    c.bucket_mb = 4096.0 / (1024 * 1024);       // each fc layer crosses 4 KiB with its weight
    DistributedDataParallel ddp(g, model.ptr(), c);
    EXPECT_EQ(ddp.bucket_sizes(), (std::vector<int64_t>{165, 1056, 1056, 1184}));
  });
}

TEST(Ddp, AccumulationEqualsOneLargerBatchAndSkipsCommunication) {
  DdpConfig c;
  c.bucket_mb = 0.002;
  c.first_bucket_mb = 0.0005;
  std::vector<DdpStats> one, two;
  const auto got = run_ddp(2, c, 2, &two);
  expect_close(got, reference(2 * kPerRank * 2));
  run_ddp(2, c, 1, &one);
  // Reductions happen on synchronized micro-steps only: as many as without accumulation.
  EXPECT_EQ(two[0].reductions, one[0].reductions);
  // Scheduled for a long link: receives are armed only for synchronized backwards.
  c.link = LinkSchedule::kLong;
  std::vector<DdpStats> armed, armed_one;
  expect_close(run_ddp(2, c, 2, &armed), reference(2 * kPerRank * 2));
  run_ddp(2, c, 1, &armed_one);
  EXPECT_EQ(armed[0].reductions, armed_one[0].reductions);
}

// BatchNorm's running statistics: broadcast before each forward (short links) or sent when
// the previous synchronized backward starts (long links, buffer_broadcast.h). Every forward
// starts from rank 0's buffers either way, so the two schedules end with the same
// parameters and the same statistics on every rank, bit for bit.
TEST(Ddp, TheEarlyBufferBroadcastTrainsWhatTheBroadcastAtTheForwardDoes) {
  constexpr int kWorld = 3;
  const auto batches = global_batches(kWorld * kPerRank, 4);
  using State = std::map<int, std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>>;
  auto train = [&](LinkSchedule link) {
    std::vector<torch::nn::Sequential> models;
    for (int r = 0; r < kWorld; ++r) {
      torch::manual_seed(11 + static_cast<uint64_t>(r));
      models.push_back(torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(36, 16),
                                             torch::nn::BatchNorm1d(16), torch::nn::ReLU(),
                                             torch::nn::Linear(16, 5)));
    }
    State out;
    std::mutex mu;
    testing::run_ranks(kWorld, [&](comm::Group& g) {
      auto model = models[static_cast<size_t>(g.rank())];
      DdpConfig c;
      c.link = link;
      // The long link arms its buckets (--algo auto); the short one reduces them by the same
      // exchange per call (rank-order sums: the same bits). auto there would choose by timing,
      // and another algorithm sums in another order.
      c.algorithm =
          link == LinkSchedule::kLong ? comm::Algorithm::kAuto : comm::Algorithm::kExchange;
      DistributedDataParallel ddp(g, model.ptr(), c);
      auto opt = make_sgd(model->parameters());
      for (size_t step = 0; step < batches.size(); ++step) {
        const auto& [x, y] = batches[step];
        opt.zero_grad();
        ddp.set_sync(step != 1);  // one no_sync step: the next forward broadcasts itself
        ddp.before_forward();
        const at::Tensor xs = x.narrow(0, g.rank() * kPerRank, kPerRank);
        torch::nn::functional::cross_entropy(model->forward(xs),
                                             y.narrow(0, g.rank() * kPerRank, kPerRank))
            .backward();
        ddp.finish_backward();
        opt.step();
      }
      std::vector<at::Tensor> params, buffers;
      for (const auto& p : model->parameters())
        params.push_back(p.detach().clone());
      for (const auto& b : model->buffers())
        buffers.push_back(b.clone());
      std::lock_guard<std::mutex> lock(mu);
      out[g.rank()] = {params, buffers};
    });
    return out;
  };
  const State at_forward = train(LinkSchedule::kShort);
  const State early = train(LinkSchedule::kLong);
  for (int r = 0; r < kWorld; ++r) {
    const auto& [p_short, b_short] = at_forward.at(r);
    const auto& [p_long, b_long] = early.at(r);
    for (size_t i = 0; i < p_short.size(); ++i)
      EXPECT_TRUE(at::equal(p_short[i], p_long[i])) << "rank " << r << " parameter " << i;
    ASSERT_EQ(b_short.size(), b_long.size());
    for (size_t i = 0; i < b_long.size(); ++i)
      EXPECT_TRUE(at::equal(b_long[i], b_short[i])) << "rank " << r << " buffer " << i;
  }
  // Each rank's last forward updated its own statistics from its own rows: different
  // buffers, so a broadcast that never happened (or came at the wrong forward) would show.
  EXPECT_FALSE(at::equal(at_forward.at(1).second[0], at_forward.at(0).second[0]));
}

TEST(Ddp, GradientsAreViewsIntoTheBucketWhicheverWayTheyAreZeroed) {
  for (const bool to_none : {true, false}) {
    for (const int micro : {1, 2}) {
      SCOPED_TRACE(std::string(to_none ? "zero_grad(set_to_none)" : "zero_grad in place") +
                   ", micro-steps " + std::to_string(micro));
      DdpConfig c;  // default caps: the whole tiny model is the first bucket
      std::atomic<int> checked{0};
      const auto got = run_ddp(2, c, micro, nullptr, to_none, [&](const torch::nn::Module& m) {
        const auto params = m.parameters();
        for (const auto& p : params) {
          ASSERT_TRUE(p.grad().defined());
          EXPECT_EQ(p.grad().sizes(), p.sizes());
          // One bucket: every gradient lies in the same flat buffer, none is a copy.
          EXPECT_TRUE(p.grad().is_alias_of(params.front().grad()));
        }
        ++checked;
      });
      expect_close(got, reference(2 * kPerRank * micro));
      EXPECT_EQ(checked.load(), 2 * kSteps);
    }
  }
}

// A parameter with no part in the forward: what its .grad holds is averaged (zero if
// nothing), as for the others, and it lands in the bucket too.
TEST(Ddp, ParametersOutsideTheGraphAverageWhatTheirGradientsHold) {
  testing::run_ranks(2, [&](comm::Group& g) {
    auto model = std::make_shared<torch::nn::Module>();
    auto used = model->register_module("used", torch::nn::Linear(4, 2));
    auto idle = model->register_module("idle", torch::nn::Linear(3, 3));
    DistributedDataParallel ddp(g, model, {});
    for (const bool set_by_hand : {true, false}) {
      for (auto& p : model->parameters())
        p.mutable_grad() = at::Tensor();
      if (set_by_hand) idle->weight.mutable_grad() = at::full({3, 3}, 1.0 + g.rank());
      used->forward(at::ones({1, 4})).sum().backward();
      ddp.finish_backward();
      EXPECT_TRUE(at::allclose(idle->weight.grad(), at::full({3, 3}, set_by_hand ? 1.5 : 0.0)));
      EXPECT_TRUE(at::equal(idle->bias.grad(), at::zeros({3})));
      // d(sum)/d(bias) is one per output on both ranks: the average is one too.
      EXPECT_TRUE(at::equal(used->bias.grad(), at::ones({2})));
      EXPECT_TRUE(idle->weight.grad().is_alias_of(used->weight.grad()));
    }
  });
}

TEST(Ddp, CompressedGradientsWithErrorFeedbackConvergeAndStayIdentical) {
  for (const std::string codec : {"fp16", "uniform:8", "sortquant:8"}) {
    std::vector<torch::nn::Sequential> models{make_mlp(1), make_mlp(2)};
    const auto batches = global_batches(2 * kPerRank * 4, 60);
    std::vector<double> first(2), last(2);
    std::vector<std::vector<at::Tensor>> finals(2);
    std::vector<DdpStats> stats(2);
    testing::run_ranks(2, [&](comm::Group& g) {
      auto model = models[static_cast<size_t>(g.rank())];
      DdpConfig c;
      c.gradient_codec = compress::parse_codec(codec);
      c.bucket_mb = 0.002;
      DistributedDataParallel ddp(g, model.ptr(), c);
      auto opt = make_sgd(model->parameters());
      const auto& [x0, y0] = batches[0];  // a fixed task: fit 64 samples
      const int64_t rows = kPerRank * 4;
      const at::Tensor xs = x0.narrow(0, g.rank() * rows, rows),
                       ys = y0.narrow(0, g.rank() * rows, rows);
      for (int step = 0; step < 60; ++step) {
        opt.zero_grad();
        const at::Tensor loss = torch::nn::functional::cross_entropy(model->forward(xs), ys);
        if (step == 0) first[static_cast<size_t>(g.rank())] = loss.item<double>();
        last[static_cast<size_t>(g.rank())] = loss.item<double>();
        loss.backward();
        ddp.finish_backward();
        opt.step();
      }
      for (const auto& p : model->parameters())
        finals[static_cast<size_t>(g.rank())].push_back(p.detach().clone());
      stats[static_cast<size_t>(g.rank())] = ddp.take_stats();
    });
    SCOPED_TRACE(codec);
    EXPECT_LT(last[0] + last[1], 0.3 * (first[0] + first[1]));
    for (size_t i = 0; i < finals[0].size(); ++i)
      EXPECT_TRUE(at::equal(finals[0][i], finals[1][i])) << "param " << i;
    // Sent bytes follow the codec: fp16 halves the exact path's 2(p-1)/p traffic.
    const double ratio =
        static_cast<double>(stats[0].wire_bytes) / static_cast<double>(stats[0].grad_bytes);
    EXPECT_LT(ratio, codec == "fp16" ? 0.6 : 0.35);
  }
}

TEST(Ddp, MismatchedModelsFailOnEveryRank) {
  for (int64_t other_depth : {4, 3}) {
    std::vector<torch::nn::Sequential> models{make_mlp(1, 3), make_mlp(1, other_depth)};
    if (other_depth == 3) models[1] = testing::tiny_mlp(1, 3, 40);  // same count, other shapes
    std::atomic<int> failures{0};
    testing::run_ranks(2, [&](comm::Group& g) {
      try {
        DistributedDataParallel ddp(g, models[static_cast<size_t>(g.rank())].ptr(), {});
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("models differ"), std::string::npos) << e.what();
        if (other_depth == 3) {
          EXPECT_NE(std::string(e.what()).find("fc1.linear.weight"), std::string::npos) << e.what();
        }
        ++failures;
      }
    });
    EXPECT_EQ(failures.load(), 2);
  }
}

}  // namespace
}  // namespace dtrain::parallel
