// DiLoCo's outer steps (parallel/diloco.h) over real Gloo/TCP between rank threads, against
// a single-process reference that runs the replicas one after another and writes the
// outer Nesterov step out by hand.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "../support/models.h"
#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/world.h"
#include "dtrain/parallel/ddp.h"
#include "dtrain/parallel/diloco.h"

namespace dtrain::parallel {
namespace {

constexpr int kReplicas = 2;
constexpr int64_t kInnerSteps = 7, kSyncEvery = 3, kBatch = 16;
constexpr double kInnerLr = 0.05, kOuterLr = 0.7, kMomentum = 0.9;

torch::nn::Sequential make_model() {
  return testing::tiny_mlp(3, 2);
}

// Replica r's batch at inner step k: its own data.
std::pair<at::Tensor, at::Tensor> batch(int replica, int64_t step) {
  at::Generator g = at::detail::createCPUGenerator(static_cast<uint64_t>(100 * replica + step));
  return {at::randn({kBatch, 1, 6, 6}, g), at::randint(0, 5, {kBatch}, g)};
}

// Replica r of K ranks: its ranks' batches together (what DDP over them averages).
std::pair<at::Tensor, at::Tensor> replica_batch(int replica, int ranks, int64_t step) {
  std::vector<at::Tensor> xs, ys;
  for (int j = 0; j < ranks; ++j) {
    auto [x, y] = batch(replica * ranks + j, step);
    xs.push_back(x);
    ys.push_back(y);
  }
  return {at::cat(xs), at::cat(ys)};
}

void inner_step(torch::nn::Sequential& model, torch::optim::Optimizer& opt, int replica,
                int64_t step, int ranks_per_replica = 1) {
  const auto [x, y] = replica_batch(replica, ranks_per_replica, step);
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

struct Schedule {
  int64_t fragments = 1, delay = 0;
  double alpha = 0.5;
  bool one_epoch = false;  // the steps are an epoch's (Diloco::set_epoch_position)
};

// An outer step due fewer than H/2 steps before the epoch's end waits for it.
bool waits_for_the_epochs_end(const Schedule& schedule, int64_t done, int64_t steps) {
  return schedule.one_epoch && done < steps && 2 * (steps - done) < kSyncEvery;
}

// Whether after_inner_step starts an exchange after `done` steps (one fragment): on the
// schedule, but for an epoch's last steps, whose exchanges sync() runs.
bool exchanges_after(const Schedule& schedule, int64_t done, int64_t steps) {
  if (schedule.one_epoch && done == steps) return false;
  return done % kSyncEvery == 0 && !waits_for_the_epochs_end(schedule, done, steps);
}

at::Tensor flat(torch::nn::Sequential& model) {
  return torch::nn::utils::parameters_to_vector(model->parameters()).detach().clone();
}

// The replicas one after another, on flat parameter vectors cut into `fragments` equal
// ranges. Fragment f's exchange starts at the steps t with t % kSyncEvery == its offset
// f kSyncEvery / F (t > 0): the mean g of (anchor - parameters) over its range, then
// m = mu m + g, anchor -= lr (g + mu m), applied at once or `delay` steps later with
// parameters = alpha parameters + (1 - alpha) anchor. After the last step the exchange in
// flight lands whole and every fragment with steps since its last exchange has one more.
std::vector<at::Tensor> reference(const Schedule& schedule = {}, int64_t steps = kInnerSteps,
                                  int ranks_per_replica = 1) {
  std::vector<torch::nn::Sequential> models;
  std::vector<std::unique_ptr<torch::optim::SGD>> opts;
  for (int r = 0; r < kReplicas; ++r) {
    models.push_back(make_model());
    opts.push_back(std::make_unique<torch::optim::SGD>(models.back()->parameters(),
                                                       torch::optim::SGDOptions(kInnerLr)));
  }
  torch::NoGradGuard no_grad;
  at::Tensor anchor = flat(models[0]), momentum = at::zeros_like(anchor);
  const int64_t n = anchor.numel(), f_count = schedule.fragments;
  const auto range = [&](int64_t f) {
    return std::pair<int64_t, int64_t>{n * f / f_count, n * (f + 1) / f_count - n * f / f_count};
  };
  const auto mean_pseudo_gradient = [&](int64_t f) {
    const auto [begin, size] = range(f);
    at::Tensor g = at::zeros({size}, at::kDouble);
    for (auto& m : models)
      g += (anchor.narrow(0, begin, size) - flat(m).narrow(0, begin, size)).to(at::kDouble);
    return (g / kReplicas).to(at::kFloat);
  };
  const auto land = [&](int64_t f, const at::Tensor& g, double alpha) {
    const auto [begin, size] = range(f);
    at::Tensor m = momentum.narrow(0, begin, size), a = anchor.narrow(0, begin, size);
    m.copy_(m * kMomentum + g);
    a.copy_(a - kOuterLr * (g + kMomentum * m));
    for (auto& model : models) {
      at::Tensor v = flat(model);
      v.narrow(0, begin, size).copy_(alpha * v.narrow(0, begin, size) + (1 - alpha) * a);
      torch::nn::utils::vector_to_parameters(v, model->parameters());
    }
  };
  struct Pending {
    int64_t fragment, due;
    at::Tensor g;
  };
  std::deque<Pending> pending;  // in the order they started, which is the order they land
  std::vector<int64_t> since(static_cast<size_t>(f_count), 0);
  for (int64_t k = 0; k < steps; ++k) {
    {
      torch::AutoGradMode grad(true);
      for (int r = 0; r < kReplicas; ++r)
        inner_step(models[static_cast<size_t>(r)], *opts[static_cast<size_t>(r)], r, k,
                   ranks_per_replica);
    }
    const int64_t t = k + 1;
    for (auto& s : since)
      ++s;
    while (!pending.empty() && pending.front().due == t) {
      land(pending.front().fragment, pending.front().g, schedule.alpha);
      pending.pop_front();
    }
    for (int64_t f = 0; f < f_count; ++f) {
      if (t % kSyncEvery != kSyncEvery * f / f_count) continue;
      if (waits_for_the_epochs_end(schedule, t, steps)) continue;
      since[static_cast<size_t>(f)] = 0;
      if (schedule.delay == 0)
        land(f, mean_pseudo_gradient(f), 0);
      else
        pending.push_back(Pending{f, t + schedule.delay, mean_pseudo_gradient(f)});
    }
  }
  for (const auto& p : pending)
    land(p.fragment, p.g, 0);
  for (int64_t f = 0; f < f_count; ++f)
    if (since[static_cast<size_t>(f)] > 0) land(f, mean_pseudo_gradient(f), 0);
  return flat_state(models[0]);
}

struct Result {
  std::map<int, std::vector<at::Tensor>> params;
  std::map<int, DilocoStats> stats;
};

Result run(const compress::CodecSpec& codec, const Schedule& schedule = {}) {
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
    config.fragments = schedule.fragments;
    config.sync_delay = schedule.delay;
    config.merge_alpha = schedule.alpha;
    Diloco diloco(g, model->parameters(), model->buffers(), config);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kInnerLr));
    for (int64_t k = 0; k < kInnerSteps; ++k) {
      inner_step(model, opt, g.rank(), k);
      if (schedule.one_epoch) diloco.set_epoch_position(k, kInnerSteps);
      const bool started = diloco.after_inner_step();
      if (schedule.fragments == 1) {
        EXPECT_EQ(started, exchanges_after(schedule, k + 1, kInnerSteps));
      }
    }
    EXPECT_EQ(diloco.sync(), !exchanges_after(schedule, kInnerSteps, kInnerSteps));
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
    EXPECT_EQ(s.inner_steps, kInnerSteps);
    EXPECT_EQ(s.wire_bytes, s.fp32_bytes);
  }
}

// 7 steps of H = 3 as one epoch: the outer step due after step 6, one step before the end,
// waits for it (rounds of 3 and 4 steps, not 3, 3 and 1).
TEST(Diloco, AnOuterStepDueInAnEpochsLastStepsWaitsForItsEnd) {
  Schedule epoch;
  epoch.one_epoch = true;
  const auto expected = reference(epoch);
  const auto every_three = reference();
  double apart = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    apart = std::max(apart, (expected[i] - every_three[i]).abs().max().item<double>());
  ASSERT_GT(apart, 1e-4) << "the two schedules must differ for the test to tell them apart";
  const Result r = run({}, epoch);
  for (int rank = 0; rank < kReplicas; ++rank) {
    const auto& got = r.params.at(rank);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE((got[i] - expected[i]).abs().max().item<double>(), 1e-5) << rank << " " << i;
    EXPECT_EQ(r.stats.at(rank).outer_steps, 2);  // after step 3, and at the epoch's end
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

// Streaming DiLoCo: fragments at staggered offsets, exchanges applied at once or a fixed
// number of steps later (from background threads) and merged with the replica's own; with a
// delay beyond H/F several in flight at once (3 fragments, delay 2 and 3: two and three;
// 2 fragments, delay 2: two).
TEST(Diloco, StreamingFragmentsEqualTheSingleProcessReference) {
  for (const Schedule schedule :
       {Schedule{2, 0}, Schedule{2, 1, 0.5}, Schedule{1, 3, 0.25}, Schedule{3, 1, 0.0},
        Schedule{3, 2, 0.5}, Schedule{3, 3, 0.25}, Schedule{2, 2, 0.5}}) {
    SCOPED_TRACE(::testing::Message() << schedule.fragments << " fragments, delay "
                                      << schedule.delay << ", alpha " << schedule.alpha);
    const auto expected = reference(schedule);
    const Result r = run({}, schedule);
    for (int rank = 0; rank < kReplicas; ++rank) {
      const auto& got = r.params.at(rank);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LE((got[i] - expected[i]).abs().max().item<double>(), 1e-5) << rank << " " << i;
      const DilocoStats& s = r.stats.at(rank);
      EXPECT_GE(s.outer_steps, kInnerSteps / kSyncEvery * schedule.fragments);
      EXPECT_GE(s.hidden_s, 0);
      EXPECT_LE(s.hidden_s, s.exchange_s);
      if (schedule.delay == 0) {
        EXPECT_EQ(s.hidden_s, 0);
      }
    }
  }
  // The schedule matters: a delayed, merged exchange is not the blocking one.
  const auto blocking = reference({2, 0}), delayed = reference({2, 1, 0.5});
  double apart = 0;
  for (size_t i = 0; i < blocking.size(); ++i)
    apart = std::max(apart, (blocking[i] - delayed[i]).abs().max().item<double>());
  EXPECT_GT(apart, 1e-4);
}

// A checkpoint taken while exchanges are in flight, restored into fresh objects, continues
// to the same bits as the run that never stopped (coded, so residuals matter too): one in
// flight (2 fragments, delay 1: fragment 1 starts an exchange at step 4) and two (3
// fragments, delay 2: fragment 0's from step 3 and fragment 1's from step 4).
class DilocoInFlight : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(DilocoInFlight, StateTakenInFlightResumesExactly) {
  const auto codec = compress::parse_codec("sortquant:4");
  DilocoConfig config;
  config.sync_every = kSyncEvery;
  config.codec = codec;
  std::tie(config.fragments, config.sync_delay) = GetParam();
  const bool two = config.sync_delay > 1;
  constexpr int64_t kStop = 4;
  const auto train = [&](torch::nn::Sequential& model, torch::optim::SGD& opt, Diloco& d, int rank,
                         int64_t from, int64_t to) {
    for (int64_t k = from; k < to; ++k) {
      inner_step(model, opt, rank, k);
      d.after_inner_step();
    }
  };
  std::map<int, std::vector<at::Tensor>> whole, resumed;
  std::mutex mu;
  testing::run_ranks(kReplicas, [&](comm::Group& g) {
    std::vector<at::Tensor> saved_params;
    std::map<std::string, at::Tensor> saved_state;
    {
      auto model = make_model();
      Diloco d(g, model->parameters(), model->buffers(), config);
      torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kInnerLr));
      train(model, opt, d, g.rank(), 0, kStop);
      saved_state = d.state();
      EXPECT_TRUE(saved_state.count("pending/pseudo_gradient")) << "an exchange was in flight";
      EXPECT_EQ(saved_state.count("pending/1/pseudo_gradient"), two ? 1u : 0u);
      for (auto& [name, t] : saved_state)
        t = t.clone();
      saved_params = flat_state(model);
      train(model, opt, d, g.rank(), kStop, kInnerSteps);
      d.sync();
      std::lock_guard<std::mutex> lock(mu);
      whole[g.rank()] = flat_state(model);
    }
    auto model = make_model();
    Diloco d(g, model->parameters(), model->buffers(), config);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < saved_params.size(); ++i)
        model->parameters()[i].copy_(saved_params[i]);
    }
    d.restore_state(saved_state);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kInnerLr));
    train(model, opt, d, g.rank(), kStop, kInnerSteps);
    d.sync();
    std::lock_guard<std::mutex> lock(mu);
    resumed[g.rank()] = flat_state(model);
  });
  for (int rank = 0; rank < kReplicas; ++rank)
    for (size_t i = 0; i < whole[rank].size(); ++i)
      EXPECT_TRUE(at::equal(whole[rank][i], resumed[rank][i])) << rank << " " << i;
}

INSTANTIATE_TEST_SUITE_P(Delays, DilocoInFlight,
                         ::testing::Values(std::pair<int64_t, int64_t>{2, 1},
                                           std::pair<int64_t, int64_t>{3, 2}));

// Replicas of two ranks (4 ranks): DDP inside each replica, the outer exchange between the
// replicas' first ranks and between their second ranks, each on its block of the
// pseudo-gradient, then gathered inside the replica.
TEST(Diloco, ReplicasOfTwoRanksEqualTheReference) {
  constexpr int kRanksPerReplica = 2;
  for (const auto& codec : {compress::CodecSpec{}, compress::parse_codec("rot:tile:4")}) {
    const bool exact = codec == compress::CodecSpec{};
    const auto expected = reference({2, 1, 0.5}, kInnerSteps, kRanksPerReplica);
    std::map<int, std::vector<at::Tensor>> got;
    std::map<int, DilocoStats> stats;
    std::mutex mu;
    // Made here, one after another: the models seed torch's one global generator.
    std::vector<torch::nn::Sequential> models;
    for (int r = 0; r < kReplicas * kRanksPerReplica; ++r)
      models.push_back(make_model());
    testing::run_ranks(kReplicas * kRanksPerReplica, [&](comm::Group& g) {
      const int replica = g.rank() / kRanksPerReplica, place = g.rank() % kRanksPerReplica;
      auto inside =
          comm::connect_subgroup(g, {replica * kRanksPerReplica, replica * kRanksPerReplica + 1},
                                 "r" + std::to_string(replica));
      auto across =
          comm::connect_subgroup(g, {place, kRanksPerReplica + place}, "p" + std::to_string(place));
      auto& model = models[static_cast<size_t>(g.rank())];
      if (g.rank() != 0) {
        torch::NoGradGuard no_grad;
        for (auto& p : model->parameters())
          p.add_(static_cast<double>(g.rank()));  // brought to rank 0's by DDP, then DiLoCo
      }
      DistributedDataParallel ddp(*inside, model.ptr(), {});
      DilocoConfig config;
      config.sync_every = kSyncEvery;
      config.outer_lr = kOuterLr;
      config.outer_momentum = kMomentum;
      config.codec = codec;
      config.fragments = 2;
      config.sync_delay = 1;
      Diloco diloco(*across, model->parameters(), model->buffers(), config, inside.get());
      torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kInnerLr));
      for (int64_t k = 0; k < kInnerSteps; ++k) {
        const auto [x, y] = batch(g.rank(), k);
        opt.zero_grad();
        ddp.before_forward();
        torch::nn::functional::cross_entropy(model->forward(x), y).backward();
        ddp.finish_backward();
        opt.step();
        diloco.after_inner_step();
      }
      diloco.sync();
      std::lock_guard<std::mutex> lock(mu);
      got[g.rank()] = flat_state(model);
      stats[g.rank()] = diloco.take_stats();
    });
    double worst = 0, scale = 0;
    for (int rank = 0; rank < kReplicas * kRanksPerReplica; ++rank) {
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_TRUE(at::equal(got[rank][i], got[0][i])) << "rank " << rank << " parameter " << i;
        worst = std::max(worst, (got[rank][i] - expected[i]).abs().max().item<double>());
        scale = std::max(scale, expected[i].abs().max().item<double>());
      }
      // Each rank's exchanges carry a quarter of the values (its half of each half-model
      // fragment) both ways: about n bytes of float32 per exchange, not 2 n.
      const auto n = static_cast<double>(flat(models[0]).numel());
      const DilocoStats& s = stats[rank];
      EXPECT_NEAR(static_cast<double>(s.fp32_bytes), n * static_cast<double>(s.outer_steps),
                  8.0 * static_cast<double>(s.outer_steps));
      if (exact) {
        EXPECT_EQ(s.wire_bytes, s.fp32_bytes);
      }
    }
    if (exact) {
      EXPECT_LE(worst, 1e-5);
    } else {
      EXPECT_GT(worst, 0);
      EXPECT_LT(worst, 0.05 * scale);
    }
  }
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
    c = DilocoConfig{};
    c.sync_every = 4;
    c.fragments = 5;  // two fragments would share an offset
    EXPECT_THROW(Diloco(g, model->parameters(), model->buffers(), c), std::invalid_argument);
    c.fragments = 2;
    c.sync_delay = 5;  // a fragment's next exchange would start before its last lands
    EXPECT_THROW(Diloco(g, model->parameters(), model->buffers(), c), std::invalid_argument);
    c.sync_every = 40;
    c.fragments = 40;
    c.sync_delay = 17;  // 17 exchanges in flight at once
    EXPECT_THROW(Diloco(g, model->parameters(), model->buffers(), c), std::invalid_argument);
    c.sync_every = 4;
    c.fragments = 2;
    c.sync_delay = 2;
    c.merge_alpha = 1.5;
    EXPECT_THROW(Diloco(g, model->parameters(), model->buffers(), c), std::invalid_argument);
  });
}

}  // namespace
}  // namespace dtrain::parallel
