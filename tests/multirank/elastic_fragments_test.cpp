// Elastic DiLoCo's fragments (Streaming DiLoCo without a sync delay) over real Gloo/TCP
// between rank threads: the rounds of H / F steps, one fragment each and every fragment at
// an epoch's end, step the model exactly as plain Streaming DiLoCo's schedule does; an
// exchange of several fragments that fails part way leaves every one's residuals as they
// were.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include "../support/models.h"
#include "../support/ranks.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/parallel/diloco.h"
#include "dtrain/parallel/elastic_outer.h"

namespace dtrain::parallel {
namespace {

constexpr int64_t kSyncEvery = 4, kFragments = 2, kEpochSteps = 10;

DilocoConfig fragments_config(const std::string& codec) {
  DilocoConfig c;
  c.sync_every = kSyncEvery;
  c.fragments = kFragments;
  c.codec = compress::parse_codec(codec);
  return c;
}

// Replica r's inner step k: a deterministic move of its own (what its training would do).
void inner_step(torch::nn::Sequential& model, int replica, int64_t step) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    at::Tensor p = model->parameters()[i];
    at::Generator gen = at::detail::createCPUGenerator(
        static_cast<uint64_t>(1000 * replica + 10 * step + static_cast<int64_t>(i)));
    p.sub_(0.01 * at::randn(p.sizes(), gen));
  }
}

at::Tensor flat(torch::nn::Sequential& model) {
  return torch::nn::utils::parameters_to_vector(model->parameters()).detach().clone();
}

// Three replicas, an epoch of 10 inner steps, H = 4 and 2 fragments: plain DiLoCo exchanges
// fragment 1 after steps 2 and 6, fragment 0 after step 4 and 8, and both at the epoch's end
// (its rule defers fragment 1's, due at step 10). Elastic rounds are 2 steps: fragment 1,
// 0, 1, 0, then both. After every round both models must hold the same bits, exact and coded.
TEST(ElasticFragmentsTest, RoundsStepTheFragmentsAsStreamingDilocoDoes) {
  for (const std::string codec : {"none", "sortquant:8"}) {
    SCOPED_TRACE(codec);
    std::vector<torch::nn::Sequential> plain, elastic;  // made here: seeding is process-wide
    for (int r = 0; r < 3; ++r) {
      plain.push_back(testing::tiny_mlp(3, 2));
      elastic.push_back(testing::tiny_mlp(3, 2));
    }
    std::mutex mutex;
    std::vector<std::string> mismatches;
    std::atomic<int> compared{0};
    testing::run_ranks(3, [&](comm::Group& g) {
      const auto r = static_cast<size_t>(g.rank());
      Diloco reference(g, plain[r]->parameters(), plain[r]->buffers(), fragments_config(codec));
      ElasticOuter outer(elastic[r]->parameters(), elastic[r]->buffers(), fragments_config(codec));
      int64_t since_whole = 0;
      for (int64_t step = 0; step < kEpochSteps; ++step) {
        inner_step(plain[r], g.rank(), step);
        inner_step(elastic[r], g.rank(), step);
        reference.set_epoch_position(step, kEpochSteps);
        reference.after_inner_step();
        if (step % (kSyncEvery / kFragments) == 0) continue;  // a round is 2 steps
        const bool whole = step + 1 == kEpochSteps;
        if (whole) reference.sync();
        const std::vector<size_t> due = outer.due(since_whole, whole);
        EXPECT_EQ(due.size(), whole ? 2u : 1u);
        outer.apply(outer.exchange(g, outer.pseudo_gradient(), due, outer.buffers_now()));
        since_whole = whole ? 0 : since_whole + 1;
        if (!at::equal(flat(plain[r]), flat(elastic[r]))) {
          const std::lock_guard<std::mutex> lock(mutex);
          mismatches.push_back("rank " + std::to_string(r) + " after step " +
                               std::to_string(step + 1));
        }
        ++compared;
      }
    });
    EXPECT_EQ(compared, 3 * 5);
    EXPECT_TRUE(mismatches.empty()) << mismatches.front();
  }
}

// --sync-delay 1, --merge-alpha 0.5: each round's exchange starts before the round's last
// step, on a thread beside it, and lands at the round's end, merged; the epoch's last round
// (every fragment) blocks. Three replicas against a reference computed here in double: the
// pseudo-gradient taken one step before the round's end, Nesterov on the mean, the replica's
// fragment set to alpha own + (1 - alpha) shared.
TEST(ElasticFragmentsTest, ADelayedExchangeLandsAtTheRoundsEndAsTheReferenceDoes) {
  DilocoConfig config = fragments_config("none");
  config.sync_delay = 1;
  config.merge_alpha = 0.5;
  constexpr int64_t kRound = kSyncEvery / kFragments;
  std::vector<torch::nn::Sequential> models, shadows;  // made here: seeding is process-wide
  for (int r = 0; r < 3; ++r) {
    models.push_back(testing::tiny_mlp(3, 2));
    shadows.push_back(testing::tiny_mlp(3, 2));
  }
  // The reference: every replica's parameters (float, moved by the same inner steps) and the
  // shared state in double.
  const int64_t n = flat(shadows[0]).numel();
  at::Tensor anchor = flat(shadows[0]).to(at::kDouble), momentum = at::zeros({n}, at::kDouble);
  std::vector<at::Tensor> snapshot(3);
  int64_t since_whole = 0;
  std::vector<std::vector<at::Tensor>> expected(3);
  const ElasticOuter schedule(shadows[0]->parameters(), shadows[0]->buffers(), config);
  for (int64_t step = 0; step < kEpochSteps; ++step) {
    const bool last_round = step >= kEpochSteps - kRound;
    const int64_t in_round = step % kRound;
    const std::vector<size_t> due = schedule.due(since_whole, last_round);
    const auto range = [&](size_t f) {
      const int64_t begin = n * static_cast<int64_t>(f) / kFragments;
      return std::make_pair(begin, n * static_cast<int64_t>(f + 1) / kFragments - begin);
    };
    if (!last_round && in_round == kRound - 1)
      for (int r = 0; r < 3; ++r)
        snapshot[r] = anchor - flat(shadows[r]).to(at::kDouble);
    for (int r = 0; r < 3; ++r)
      inner_step(shadows[r], r, step);
    if (in_round != kRound - 1) continue;
    if (last_round)
      for (int r = 0; r < 3; ++r)
        snapshot[r] = anchor - flat(shadows[r]).to(at::kDouble);
    const at::Tensor mean = (snapshot[0] + snapshot[1] + snapshot[2]) / 3.0;
    const double own = last_round ? 0.0 : 0.5;
    for (const size_t f : due) {
      const auto [begin, size] = range(f);
      at::Tensor m = momentum.narrow(0, begin, size), a = anchor.narrow(0, begin, size);
      const at::Tensor g = mean.narrow(0, begin, size);
      m.mul_(0.9).add_(g);
      a.sub_(0.7 * (g + 0.9 * m));
      for (int r = 0; r < 3; ++r) {
        torch::NoGradGuard no_grad;
        at::Tensor p = flat(shadows[r]);
        p.narrow(0, begin, size)
            .copy_((own * p.narrow(0, begin, size).to(at::kDouble) + (1 - own) * a).to(at::kFloat));
        torch::nn::utils::vector_to_parameters(p, shadows[r]->parameters());
      }
    }
    since_whole = last_round ? 0 : since_whole + 1;
    for (int r = 0; r < 3; ++r)
      expected[r].push_back(flat(shadows[r]));
  }
  std::mutex mutex;
  std::vector<std::string> apart;
  testing::run_ranks(3, [&](comm::Group& g) {
    const auto r = static_cast<size_t>(g.rank());
    ElasticOuter outer(models[r]->parameters(), models[r]->buffers(), config);
    int64_t since = 0;
    std::future<ElasticOuter::Averaged> running;
    size_t landed = 0;
    for (int64_t step = 0; step < kEpochSteps; ++step) {
      const bool last_round = step >= kEpochSteps - kRound;
      if (!last_round && step % kRound == kRound - 1)
        running = std::async(std::launch::async,
                             [&, due = outer.due(since, false), p = outer.pseudo_gradient(),
                              b = outer.buffers_now()] { return outer.exchange(g, p, due, b); });
      inner_step(models[r], g.rank(), step);
      if (step % kRound != kRound - 1) continue;
      if (running.valid())
        outer.apply(running.get(), 0.5);
      else
        outer.apply(outer.exchange(g, outer.pseudo_gradient(), outer.due(since, true),
                                   outer.buffers_now()));
      since = last_round ? 0 : since + 1;
      const double off = (flat(models[r]) - expected[r][landed++]).abs().max().item<double>();
      if (off > 1e-6) {
        const std::lock_guard<std::mutex> lock(mutex);
        apart.push_back("rank " + std::to_string(r) + " after step " + std::to_string(step + 1) +
                        ": " + std::to_string(off));
      }
    }
  });
  EXPECT_TRUE(apart.empty()) << apart.front();
}

// Fragment 1 due first, fragment 0 after H steps, in turn; every fragment at an epoch's end.
TEST(ElasticFragmentsTest, TheScheduleTurnsAndStartsAgainAfterAWholeExchange) {
  torch::nn::Sequential model = testing::tiny_mlp(3, 2);
  DilocoConfig c = fragments_config("none");
  c.sync_every = 6;
  c.fragments = 3;
  const ElasticOuter outer(model->parameters(), model->buffers(), c);
  EXPECT_EQ(outer.due(0, false), std::vector<size_t>{1});
  EXPECT_EQ(outer.due(1, false), std::vector<size_t>{2});
  EXPECT_EQ(outer.due(2, false), std::vector<size_t>{0});
  EXPECT_EQ(outer.due(3, false), std::vector<size_t>{1});
  EXPECT_EQ(outer.due(4, true), (std::vector<size_t>{0, 1, 2}));
  DilocoConfig odd = c;
  odd.sync_every = 7;
  EXPECT_THROW(check_elastic_config(odd), std::invalid_argument);
  DilocoConfig delayed = c;
  delayed.sync_delay = 1;  // beside the last of a round's 2 steps
  EXPECT_NO_THROW(check_elastic_config(delayed));
  delayed.sync_delay = 2;  // the whole round: its exchange would start before it
  EXPECT_THROW(check_elastic_config(delayed), std::invalid_argument);
}

// Rank 1 takes part in fragment 0's exchange and leaves before fragment 1's: rank 0's
// exchange of both fails in the second. Its redo with a fresh peer must give what a first
// try gives: fragment 0's residuals, moved by its exchange that succeeded, are restored too.
TEST(ElasticFragmentsTest, AnExchangeThatFailsInItsSecondFragmentLeavesBothAsTheyWere) {
  std::vector<torch::nn::Sequential> models{testing::tiny_mlp(3, 2), testing::tiny_mlp(3, 2)};
  const auto make = [&](size_t r) {
    return std::make_unique<ElasticOuter>(models[r]->parameters(), models[r]->buffers(),
                                          fragments_config("sortquant:4"));
  };
  std::vector<std::unique_ptr<ElasticOuter>> outers;
  for (size_t r = 0; r < 2; ++r) {
    outers.push_back(make(r));
    inner_step(models[r], static_cast<int>(r), 0);
  }
  std::vector<at::Tensor> pseudo{outers[0]->pseudo_gradient(), outers[1]->pseudo_gradient()};
  const std::vector<size_t> both{0, 1};
  std::atomic<bool> failed{false};
  testing::run_ranks(2, [&](comm::Group& g) {
    if (g.rank() == 1) {  // a stand-in that goes after fragment 0: its connections close
      make(1)->exchange(g, pseudo[1], {0}, at::Tensor());
      return;
    }
    try {
      outers[0]->exchange(g, pseudo[0], both, at::Tensor());
    } catch (const comm::CommError&) {
      failed = true;
    }
  });
  ASSERT_TRUE(failed);
  std::vector<at::Tensor> redone(2), first(2);
  std::vector<std::unique_ptr<ElasticOuter>> fresh;
  for (size_t r = 0; r < 2; ++r)
    fresh.push_back(make(r));
  testing::run_ranks(2, [&](comm::Group& g) {
    const auto r = static_cast<size_t>(g.rank());
    redone[r] = outers[r]->exchange(g, pseudo[r], both, at::Tensor()).mean;
  });
  testing::run_ranks(2, [&](comm::Group& g) {
    const auto r = static_cast<size_t>(g.rank());
    first[r] = fresh[r]->exchange(g, pseudo[r], both, at::Tensor()).mean;
  });
  for (size_t r = 0; r < 2; ++r)
    EXPECT_TRUE(at::equal(redone[r], first[r])) << r;
}

}  // namespace
}  // namespace dtrain::parallel
