// Internal to the elastic trainer (elastic_trainer.cpp: the run's loop and a round's inner
// steps; elastic_epoch.cpp: an epoch's close, its rows and the rounds' logs): one replica's
// run of elastic DiLoCo (elastic.h), over ElasticReplica's membership and outer steps.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/world.h"
#include "dtrain/data/loader.h"
#include "dtrain/metrics/progress.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/parallel/elastic_outer.h"
#include "dtrain/train/batchnorm_statistics.h"
#include "dtrain/train/config.h"
#include "dtrain/train/elastic_ranks.h"
#include "dtrain/train/elastic_replica.h"
#include "dtrain/train/elastic_round_data.h"
#include "dtrain/train/engine.h"
#include "dtrain/train/epoch_stats.h"
#include "dtrain/train/run_setup.h"

namespace dtrain::train {

// The words of ElasticReplica::carried(): the epoch's progress as the members share it.
enum EpochWord : size_t { kEpochStartUs, kEpochCommitted, kEpochLost, kEpochRedone, kEpochWords };

int64_t wall_microseconds();
// Appends whole lines to a file several replicas share (O_APPEND: one write a line).
void append_rows(const std::string& path, const std::vector<metrics::Row>& rows);

class ElasticRun {
 public:
  // `ranks`: the replica's ranks, this one their leader (null: a replica of one rank).
  ElasticRun(const TrainConfig& c, const comm::WorldConfig& world, int slot, int restart,
             ReplicaRanks* ranks);
  // Auto's probe, if it still runs, ends before the group it runs over goes with replica_.
  ~ElasticRun() {
    if (outer_) outer_->settle_probe();
  }
  std::vector<EpochStats> run();
  // The replica's other ranks return (the run is over for this replica).
  void release_followers();

 private:
  ElasticReplica::Settings settings(const comm::WorldConfig& world, int slot, int restart) const;
  // This replica's share of the round: its inner steps. Returns the samples it trained.
  int64_t train_round(const std::vector<int64_t>& positions, int64_t epoch, EpochStats& s);
  EpochStats close_epoch(EpochStats s, int64_t epoch);
  // The epoch's end after round `round`: closed, its line printed and its row written (or
  // kept pending, claim_row). Under a fault plan a replica may die at its close or its row.
  EpochStats end_epoch(const EpochStats& s, int64_t epoch, int64_t round);
  // A counted round's rows: the sample log's (every member) and the step log's (the first).
  // `trained`: the positions this replica trained.
  void log_round(int64_t epoch, int64_t round, double round_s,
                 const ElasticReplica::Outcome& outcome, const std::vector<int64_t>& trained);
  // The epoch's progress the members share (EpochWord), from now.
  void start_epoch_progress();
  // An epoch's row: the group's first member writes it (the first to claim it in the store).
  // Where that member went after the evaluation, before it claimed the row, no other member
  // knew: each keeps its own row pending and, at its next round's end (at the run's end
  // after a heartbeat timeout or two), writes it unless the row was claimed or its writer
  // is still in the views.
  void claim_row(int64_t epoch, const metrics::Row& row);
  void settle_row(bool at_end);
  // Every epoch trained: the pending rows, and the replica leaves the run.
  void leave();
  // The inner steps' loader of `positions` (a replica of several ranks: after sharing the
  // round's plan and the model with them, this rank's slice).
  data::EpochLoader round_loader(const std::vector<int64_t>& positions, int64_t epoch, double lr);
  // Before inner step `step`: whether the replica goes on to it (`go`: this rank would).
  bool next_step(bool go);

  const TrainConfig& c_;
  ReplicaRanks* ranks_;
  int64_t resets_ = 0;  // the inner optimizer's state replaced (a donor's; the followers' too)
  int64_t shared_resets_ = 0;  // as the followers last took it
  Loaded in_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<parallel::ElasticOuter> outer_;
  // The epoch's statistics under the shared weights before its evaluation, as DiLoCo's.
  std::unique_ptr<BatchNormStatistics> batchnorm_;
  std::unique_ptr<ElasticReplica> replica_;
  std::unique_ptr<RoundData> data_;
  RoundTally tally_;
  // This replica's own view since it entered (the epoch's start, committed and lost samples
  // and redone steps are the members', in ElasticReplica::carried()).
  int64_t events_ = 0;
  std::vector<int64_t> views_;
  bool evaluated_alone_ = false;  // close_epoch's: a member went during the evaluation
  struct PendingRow {
    int64_t epoch;
    metrics::Row row;
    int64_t writer;  // the replica expected to write it
  };
  std::vector<PendingRow> pending_rows_;  // oldest first (an epoch may be a round or two)
  metrics::ProgressLine progress_;
};

}  // namespace dtrain::train
