// A follower rank of an elastic replica of several ranks (elastic_ranks.h): it trains its
// slice of each round's positions in step with the replica's leader, through the replica's
// DDP, and takes the leader's model at every round's start. It holds no membership: the
// replica is its leader in the run.
#include <torch/torch.h>

#include <cmath>

#include "dtrain/data/loader.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/models/registry.h"
#include "dtrain/train/elastic_ranks.h"
#include "dtrain/train/elastic_round_data.h"
#include "dtrain/train/engine.h"
#include "dtrain/train/optimizer.h"
#include "dtrain/train/run_setup.h"

namespace dtrain::train {

void follow_leader(const TrainConfig& c, ReplicaRanks& ranks) {
  torch::manual_seed(c.seed);
  const Loaded in = load(c, nullptr, true);
  torch::manual_seed(c.seed);
  const std::unique_ptr<Engine> engine =
      make_ddp_engine(ranks.group(), models::make_model(in.model), c);
  std::unique_ptr<torch::optim::Optimizer> optimizer =
      make_optimizer(c.optim, engine->parameters());
  const data::Augment augment = default_augment(c, in);
  RoundData data(in.train_set.size(), c.seed);
  int64_t resets = 0;
  for (;;) {
    const RoundPlan plan = [&] {
      const metrics::trace::Span wait("elastic", "waiting for the leader's plan");
      return ranks.share_plan({});
    }();
    if (plan.finished) return;
    if (plan.resets != resets) {  // the leader's inner optimizer started afresh: so does this
      optimizer = make_optimizer(c.optim, engine->parameters());
      resets = plan.resets;
    }
    ranks.share_state(*engine->checkpoint_module());
    const RankSlice mine = rank_slice(plan.positions, ranks.place(), ranks.size(), c.batch_size);
    data::EpochLoader loader(in.train_set, data.indices(mine.positions, plan.epoch), c.batch_size,
                             in.norm, augment,
                             data.augment_seed(plan.round, plan.share_index, ranks.place()), 2);
    set_learning_rate(*optimizer, plan.lr);
    std::vector<double> tally(3, 0.0);  // loss sum, correct, seen: summed with the leader's
    EpochStats s;
    for (int64_t step = 0;; ++step) {
      std::optional<data::Batch> batch = loader.next();
      const ReplicaRanks::Vote vote = ranks.vote(batch.has_value(), false);
      if (vote.refresh) ranks.share_state(*engine->checkpoint_module());
      if (!vote.go) break;
      StepPlan weight;
      const bool filler = mine.filler && step + 1 == mine.steps;
      if (filler) weight.loss_scale = 0;  // a copy to take part in the step's exchange
      optimizer->zero_grad();
      const BatchResult r = engine->train_batch(*batch, plan.lr, weight, s);
      optimizer->step();
      if (filler) continue;
      if (!std::isfinite(r.loss_sum))
        throw std::runtime_error("training diverged: loss is " + std::to_string(r.loss_sum) +
                                 " in round " + std::to_string(plan.round) + " (lower --lr?)");
      tally[0] += r.loss_sum;
      tally[1] += static_cast<double>(r.correct);
      tally[2] += static_cast<double>(r.samples);
    }
    ranks.sum(tally);
  }
}

}  // namespace dtrain::train
