#include <torch/torch.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <thread>

#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/etcd_client.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/data/loader.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/progress.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/parallel/diloco_auto.h"
#include "dtrain/train/elastic.h"
#include "dtrain/train/elastic_ranks.h"
#include "dtrain/train/elastic_replica.h"
#include "dtrain/train/elastic_round_data.h"
#include "dtrain/train/elastic_run.h"
#include "dtrain/train/engine.h"
#include "dtrain/train/epoch_loop.h"
#include "dtrain/train/inner_state.h"
#include "dtrain/train/optimizer.h"
#include "dtrain/train/run_setup.h"
#include "dtrain/train/share_of_group.h"

namespace dtrain::train {

using elastic::FaultPhase;

ElasticReplica::Settings ElasticRun::settings(const comm::WorldConfig& world, int slot,
                                              int restart) const {
  const ElasticOptions& e = c_.parallel.elastic;
  ElasticReplica::Settings s;
  s.plan = elastic::parse_fault_plan(e.fault_plan);
  s.min_replicas = e.min_replicas;
  s.membership.address = world.master_addr;
  s.membership.port = world.master_port;
  if (comm::EtcdAddress::names_etcd(e.join)) s.membership.etcd = e.join;
  s.membership.world = world;
  s.membership.heartbeat_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(e.heartbeat_timeout_s * 1000));
  s.membership.connect_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(e.connect_timeout_s * 1000));
  s.enter_timeout = world.timeout;
  // A fault plan's rejoins land at set boundaries (its runs repeat bit for bit); under a sync
  // delay every joiner does (the round's exchange starts before its end, over its members).
  s.mid_round = e.mid_round_entry && s.plan.rejoins.empty() && c_.parallel.diloco.sync_delay == 0;
  // A round is H / F steps (F fragments: one exchanged a round); a replica of several ranks
  // trains each rank's batch a step.
  const parallel::DilocoConfig& d = c_.parallel.diloco;
  s.per_replica = d.sync_every / d.fragments * c_.batch_size * (ranks_ ? ranks_->size() : 1);
  s.epoch_size = in_.train_set.size();
  s.epochs = c_.epochs;
  if (slot >= 0 && restart >= 0) {
    if (!s.plan.empty())
      s.membership.replica_id = slot + elastic::kRestartStride * restart;
    else if (restart == 0)
      s.membership.replica_id = slot;  // a founder: its slot
  }
  return s;
}

ElasticRun::ElasticRun(const TrainConfig& c, const comm::WorldConfig& world, int slot, int restart,
                       ReplicaRanks* ranks)
    : c_(c), ranks_(ranks), progress_(c.progress && slot <= 0) {
  parallel::check_elastic_config(c.parallel.diloco);
  torch::manual_seed(c.seed);
  in_ = load(c, nullptr, true);
  torch::manual_seed(c.seed);
  engine_ = ranks ? make_ddp_engine(ranks->group(), models::make_model(in_.model), c)
                  : make_local_engine(models::make_model(in_.model), models::make_loss(c.loss),
                                      c.device, c.memory_format);
  optimizer_ = make_optimizer(c.optim, engine_->parameters());
  batchnorm_ = std::make_unique<BatchNormStatistics>(engine_->checkpoint_module());
  outer_ = std::make_unique<parallel::ElasticOuter>(engine_->checkpoint_module()->parameters(),
                                                    engine_->checkpoint_module()->buffers(),
                                                    c.parallel.diloco);
  data_ = std::make_unique<RoundData>(in_.train_set, in_.norm, default_augment(c, in_),
                                      c.batch_size, c.seed);
  ElasticReplica::Settings s = settings(world, slot, restart);
  // A fault plan's replacement registers only once the round before its entry is under
  // way, so the members take it in exactly before its round.
  if (const auto due = s.plan.rejoin_round(s.membership.replica_id.value_or(-1)))
    s.membership.register_after_round = *due - 1;
  ElasticReplica::InnerOptimizer inner;
  inner.pack = [this] { return pack_inner_state(*optimizer_); };
  inner.values = [this] { return inner_state_values(*optimizer_); };
  inner.unpack = [this](const at::Tensor& state) {
    optimizer_ = make_optimizer(c_.optim, engine_->parameters());
    unpack_inner_state(*optimizer_, state);
    ++resets_;
  };
  inner.steps = [this] { return inner_state_steps(*optimizer_); };
  replica_ = std::make_unique<ElasticReplica>(std::move(s), *outer_, std::move(inner));
}

data::EpochLoader ElasticRun::round_loader(const std::vector<int64_t>& positions, int64_t epoch,
                                           double lr) {
  const int64_t round = replica_->round();
  const int64_t share = replica_->share_index();
  if (ranks_) {
    RoundPlan plan;
    plan.epoch = epoch;
    plan.round = round;
    plan.share_index = share;
    plan.resets = resets_;
    plan.lr = lr;
    plan.positions = positions;
    ranks_->share_plan(plan);
    if (shared_resets_ != resets_) ranks_->share_inner(*optimizer_);
    shared_resets_ = resets_;
    ranks_->share_state(*engine_->checkpoint_module());
  }
  // The first rank's part always has a position a step (rank_slice: never a filler).
  const std::vector<int64_t> mine =
      ranks_ ? rank_slice(positions, 0, ranks_->size(), c_.batch_size).positions : positions;
  return data_->loader(mine, epoch, round, share, 0);
}

bool ElasticRun::next_step(bool go) {
  const uint64_t before = outer_->writes();
  if (go) replica_->between_inner_steps();
  if (!ranks_) return go;
  const ReplicaRanks::Vote vote = ranks_->vote(go, outer_->writes() != before);
  if (vote.refresh) ranks_->share_state(*engine_->checkpoint_module());
  return vote.go;
}

void ElasticRun::release_followers() {
  if (!ranks_) return;
  RoundPlan over;
  over.finished = true;
  ranks_->share_plan(over);
}

int64_t ElasticRun::train_round(const std::vector<int64_t>& positions, int64_t epoch,
                                EpochStats& s) {
  const int64_t round = replica_->round();
  const double at = static_cast<double>(epoch) +
                    static_cast<double>(replica_->queue().cursor) /
                        static_cast<double>(std::max<int64_t>(1, in_.train_set.size()));
  const double lr =
      learning_rate(c_.optim, std::min(at, static_cast<double>(epoch + 1)), c_.epochs);
  data::EpochLoader loader = round_loader(positions, epoch, lr);
  const int k = ranks_ ? ranks_->size() : 1;
  const int64_t steps = loader.batches();  // the replica's (rank_slice)
  const int64_t half = steps / 2;
  set_learning_rate(*optimizer_, lr);
  s.lr = lr;
  int64_t step = 0;
  const bool dies = replica_->plan().kills_at(replica_->id(), round, FaultPhase::kInner);
  if (dies && steps == 0) elastic::die_now(replica_->membership());
  const int64_t early_at = replica_->exchange_starts_at(steps);  // --sync-delay
  parallel::InnerStepTimes step_times;  // auto's step time: the engine's work, not data waits
  RoundTally tally;
  for (;;) {
    std::optional<data::Batch> batch = loader.next();
    if (batch && dies && step == half) elastic::die_now(replica_->membership());
    // Entered mid-round: the members reached the round's end (after one step at least).
    const bool go = batch.has_value() && !(step > 0 && replica_->round_closing());
    if (!next_step(go)) break;
    if (step + 1 == steps) replica_->seal_soon();
    if (step == early_at) replica_->start_exchange(static_cast<int64_t>(positions.size()));
    step_times.step_started();
    batchnorm_->remember(batch->inputs);
    const BatchResult r = inner_step(*engine_, *optimizer_, *batch, lr, StepPlan{}, s);
    step_times.step_ended();
    check_finite(r, round);
    tally.add(r);
    ++step;
  }
  s.time_data_s += loader.wait_s();
  if (!step_times.empty()) outer_->note_step_s(step_times.median_s());
  if (ranks_) ranks_->sum(tally.totals);  // the replica's: every rank's batches
  tally_ += tally;
  return std::min(static_cast<int64_t>(positions.size()), step * k * c_.batch_size);
}

std::vector<EpochStats> ElasticRun::run() {
  start_epoch_progress();  // a founder's: the first founder's reaches every member
  {
    const metrics::trace::Span entering("elastic", "entering the run");
    replica_->enter();
  }
  const bool founder =
      replica_->view().id == 1 && replica_->round() == 0 && !replica_->entered_mid_round();
  // Under auto the founders probe their link beside the first round's inner steps.
  if (founder) outer_->start_probe(replica_->group());
  // A founder's first epoch starts once it is in, as plain DiLoCo's starts once its ranks
  // connected: the wait for the others to start is no part of the epoch's time.
  if (founder) replica_->carried().at(kEpochStartUs) = wall_microseconds();
  const int64_t n = in_.train_set.size();
  std::vector<EpochStats> history;
  EpochStats s;
  int64_t epoch = replica_->queue().epoch;
  while (replica_->queue().epoch < c_.epochs) {
    if (replica_->queue().epoch != epoch) {  // entered later: the members' epoch
      epoch = replica_->queue().epoch;
      s = {};
    }
    const auto t0 = metrics::Clock::now();
    const std::vector<std::vector<int64_t>> assignment = replica_->assign();
    const int64_t round = replica_->round();
    const std::vector<int64_t> mine = replica_->positions(assignment);
    const int64_t trained = train_round(mine, epoch, s);
    const ElasticReplica::Outcome outcome = [&] {
      const metrics::trace::Span end("elastic", "round's end: exchange, records, outer step", round,
                                     "round");
      return replica_->finish_round(trained, assignment);
    }();
    const elastic::View& trained_in = outcome.trained_in;
    auto events = replica_->take_events();
    events_ += static_cast<int64_t>(events.size());
    for (auto& e : events)
      e = stamped(std::move(e), c_);
    append_rows(c_.metrics_path, events);
    if (!outcome.counted) continue;  // it entered again: with the members' state and queue
    settle_row(false);
    s.time_comm_s += outcome.waited_s;  // the exchange's wait, not the part steps ran beside
    std::vector<int64_t>& progress = replica_->carried();
    progress.at(kEpochCommitted) += outcome.samples;
    progress.at(kEpochRedone) += outcome.members != trained_in.members ? 1 : 0;
    for (size_t r = 0; r < trained_in.members.size(); ++r)
      if (std::find(outcome.lost.begin(), outcome.lost.end(), trained_in.members[r]) !=
          outcome.lost.end())
        progress.at(kEpochLost) += static_cast<int64_t>(outcome.assignment[r].size());
    if (views_.empty() || views_.back() != trained_in.id) views_.push_back(trained_in.id);
    log_round(epoch, round, metrics::since(t0), outcome, {mine.begin(), mine.begin() + trained});
    progress_.update([&] {
      return "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(c_.epochs) + " round " +
             std::to_string(round) + ": " + std::to_string(replica_->size()) + " replicas, " +
             std::to_string(std::min(replica_->queue().cursor, n)) + "/" + std::to_string(n) +
             " samples";
    });
    if (data::epoch_done(replica_->queue(), n)) {
      history.push_back(end_epoch(s, epoch, round));
      data::next_epoch(replica_->queue(), n);  // before begin_round hands it to joiners
      s = {};
      start_epoch_progress();
    }
    if (replica_->queue().epoch < c_.epochs) {
      const metrics::trace::Span next("elastic", "next round's view: connect, transfers");
      replica_->begin_round();
    }
  }
  leave();
  return history;
}

void ElasticRun::leave() {
  release_followers();
  try {
    settle_row(true);
    replica_->finish();
  } catch (const comm::CommError& e) {
    // Every epoch is trained: the store may be gone with the coordinator once the group's
    // first member marked the run done, while this replica still waited on a pending row
    // (whose writer wrote it, or went too) or left.
    std::cerr << "elastic: replica " << replica_->id()
              << ": the run is done; its store went as this replica finished (" << e.what() << ")"
              << std::endl;
  }
}

std::vector<EpochStats> train_elastic(const TrainConfig& config, const comm::WorldConfig& world,
                                      int slot, int restart, comm::Group* replica_ranks) {
  validate(config, true);
  std::unique_ptr<ReplicaRanks> ranks;
  if (replica_ranks != nullptr && replica_ranks->size() > 1)
    ranks = std::make_unique<ReplicaRanks>(*replica_ranks);
  if (ranks && !ranks->leader()) {
    follow_leader(config, *ranks);
    return {};
  }
  ElasticRun run(config, world, slot, restart, ranks.get());
  try {
    return run.run();
  } catch (const elastic::RunFinished& e) {
    std::cerr << "elastic: " << e.what() << std::endl;
    run.release_followers();
    return {};
  }
}

}  // namespace dtrain::train
