// One training loop for a single process, data parallelism and pipeline parallelism:
// epochs of mini-batches with timing split into data wait, forward, backward, optimizer and
// communication, evaluation after each epoch, JSON-lines metrics and atomic checkpoints.
//
// train() reads as: validate -> load the data -> build the model and the mode's engine ->
// epochs (train, evaluate, record) -> summary.
//
// Pipeline mode: rank 0 loads the data and drives; the other ranks receive the input shape
// from it, build the same model from the same seed, keep their blocks and follow rank 0's
// commands. Rank 0 returns the epochs' stats (with the per-stage and per-link report in
// EpochStats::extra); the others return nothing.
//
// DDP mode: every rank trains on its shard of each epoch (batch_size per rank) and
// evaluates its share of the test set; losses and accuracies are summed over ranks, so
// every rank returns the same global stats. Rank 0 alone writes metrics and checkpoints.
#pragma once

#include <vector>

#include "dtrain/train/config.h"
#include "dtrain/train/epoch_stats.h"
#include "dtrain/train/optimizer.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::train {

// Validates the config (throws std::invalid_argument), loads the data, builds the model and
// trains; returns the stats of the epochs it ran (after a resume, only the new ones).
// `group` is required for pipeline and DDP mode (every rank of it calls train).
std::vector<EpochStats> train(const TrainConfig& config, comm::Group* group = nullptr);

}  // namespace dtrain::train
