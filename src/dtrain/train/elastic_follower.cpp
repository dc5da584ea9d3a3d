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
  RoundData data(in.train_set, in.norm, default_augment(c, in), c.batch_size, c.seed);
  int64_t resets = 0;
  for (;;) {
    const RoundPlan plan = [&] {
      const metrics::trace::Span wait("elastic", "waiting for the leader's plan");
      return ranks.share_plan({});
    }();
    if (plan.finished) return;
    if (plan.resets != resets) {  // the leader's inner optimizer took a donor's state
      optimizer = make_optimizer(c.optim, engine->parameters());
      ranks.share_inner(*optimizer);
      resets = plan.resets;
    }
    ranks.share_state(*engine->checkpoint_module());
    const RankSlice mine = rank_slice(plan.positions, ranks.place(), ranks.size(), c.batch_size);
    data::EpochLoader loader =
        data.loader(mine.positions, plan.epoch, plan.round, plan.share_index, ranks.place());
    set_learning_rate(*optimizer, plan.lr);
    RoundTally tally;  // summed with the leader's
    EpochStats s;
    for (int64_t step = 0;; ++step) {
      std::optional<data::Batch> batch = loader.next();
      const ReplicaRanks::Vote vote = ranks.vote(batch.has_value(), false);
      if (vote.refresh) ranks.share_state(*engine->checkpoint_module());
      if (!vote.go) break;
      StepPlan weight;
      const bool filler = mine.filler && step + 1 == mine.steps;
      if (filler) weight.loss_scale = 0;  // a copy to take part in the step's exchange
      const BatchResult r = inner_step(*engine, *optimizer, *batch, plan.lr, weight, s);
      if (filler) continue;
      check_finite(r, plan.round);
      tally.add(r);
    }
    ranks.sum(tally.totals);
  }
}

}  // namespace dtrain::train
