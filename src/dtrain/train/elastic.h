// Elastic DiLoCo (docs/elastic.md): replicas that die and join while the run goes on.
// train_elastic() is train()'s counterpart for `--parallel diloco --elastic`: the same data,
// model, optimizer, evaluation and metrics, with the samples of each outer round handed out
// to whichever replicas are live (data/sample_queue.h) and the outer steps taken by them
// (train/elastic_replica.h), the membership kept by a coordinator (elastic/coordinator.h).
//
// Metrics: the view's first member appends each epoch's row (with the elastic_* keys of
// metrics/keys.h) to --metrics and a row per outer step (its view and members) to
// --step-log; every replica appends its own membership events (entered, redo, joined,
// resync) to --metrics as rows with an "event" key. The files are appended to, never
// truncated here (the launcher empties them when it starts the run).
#pragma once

#include <vector>

#include "dtrain/comm/world.h"
#include "dtrain/train/config.h"
#include "dtrain/train/epoch_stats.h"

namespace dtrain::train {

// `world`: the coordinator's address and port (master_addr, master_port) and how groups
// connect. `slot` and `restart`: this process's launcher slot and restart count (-1 where
// no launcher gave them): founders take their slot as their id, and under a fault plan
// every replica's id is slot + 100 x restart. `replica_ranks`: where a replica is several
// ranks (--ranks-per-replica), its own group, connected (elastic_ranks.h): its rank 0 is
// the replica in the run, the others follow it (null, or a group of one: one rank). Returns
// the epochs' stats as this replica saw them (none on a follower).
std::vector<EpochStats> train_elastic(const TrainConfig& config, const comm::WorldConfig& world,
                                      int slot, int restart, comm::Group* replica_ranks);

}  // namespace dtrain::train
