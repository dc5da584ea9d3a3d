// `dtrain train --parallel diloco --elastic`'s flags and start (docs/elastic.md): with -n,
// the launcher's elastic mode (a coordinator and replicas started again where they fail);
// as a replica, train::train_elastic with the coordinator named by --join or MASTER_*.
#pragma once

#include <CLI/CLI.hpp>

#include "dtrain/cli/common.h"
#include "dtrain/train/config.h"

namespace dtrain::cli {

struct ElasticFlags {
  double restart_delay_s = 1.0;  // -n: seconds before a failed replica is started again
  // --trace: each process writes its own timeline (elastic_trace_path), the membership
  // changing under a run-wide merge.
  std::string trace_path;
};

// PATH.json -> PATH.TAG.json (or PATH.TAG without the extension): a process's own trace.
std::string elastic_trace_path(const std::string& path, const std::string& tag);

void add_elastic_options(CLI::App* sub, train::ElasticOptions& e, ElasticFlags& flags);
// Throws std::invalid_argument where an elastic flag is given without --elastic.
void check_elastic_flags(const train::ElasticOptions& e);

// Runs an elastic replica, or (with -n N, outside a launched job) launches N of them with a
// coordinator. Returns the exit status. `config` is complete (command, progress, threads).
int run_elastic(const train::TrainConfig& config, const RankFlags& ranks, const ElasticFlags& flags,
                int n);

}  // namespace dtrain::cli
