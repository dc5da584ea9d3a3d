#include "dtrain/cli/elastic_run.h"

#include <unistd.h>

#include <ATen/Parallel.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "dtrain/base/parse.h"
#include "dtrain/cli/tracing.h"
#include "dtrain/comm/etcd_client.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/comm/launch.h"
#include "dtrain/parallel/elastic_outer.h"
#include "dtrain/train/elastic.h"

namespace dtrain::cli {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  const auto parsed = parse_integer(v, 0, 1 << 20);
  if (!parsed) throw std::invalid_argument(std::string(name) + "='" + v + "' is not an integer");
  return static_cast<int>(*parsed);
}

// HOST:PORT of --join into the world's master address and port.
void join_address(const std::string& text, comm::WorldConfig& world) {
  const size_t colon = text.rfind(':');
  const auto port =
      colon == std::string::npos ? std::nullopt : parse_integer(text.substr(colon + 1), 1, 65535);
  if (colon == 0 || !port) throw std::invalid_argument("--join '" + text + "' is not HOST:PORT");
  world.master_addr = text.substr(0, colon);
  world.master_port = static_cast<int>(*port);
}

std::string seconds(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

// A replica's own group where it is several ranks (train/elastic_ranks.h), and the store
// its ranks met through (it outlives the group).
struct ReplicaGroup {
  std::unique_ptr<comm::KeyValueStore> store;
  std::unique_ptr<comm::Group> group;
};

// Launched by dtrain's elastic launcher: ranks [s K, (s + 1) K) are slot s's replica; they
// meet through the coordinator's store under a name of their slot and start.
ReplicaGroup connect_in_slot(const comm::WorldConfig& world, int k, int restart,
                             double connect_timeout_s) {
  ReplicaGroup r;
  r.store = comm::KeyValueStore::connect(world.master_addr, world.master_port, world.timeout);
  const std::string name =
      "replica-ranks/" + std::to_string(world.rank / k) + "/" + std::to_string(restart);
  r.group = comm::connect_members(
      *r.store, name, world.rank % k, k, world,
      std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_s * 1000)));
  return r;
}

// Joining (--join) as a job of its own (torchrun, Slurm, `dtrain launch`): the job's ranks
// are the replica's, meeting at its own MASTER_ADDR:MASTER_PORT.
ReplicaGroup connect_job(const comm::WorldConfig& world, int k) {
  if (!comm::launched_by_environment() || world.world_size != k)
    throw std::invalid_argument(
        "--elastic --join with --ranks-per-replica " + std::to_string(k) +
        ": start the replica's ranks as a job of " + std::to_string(k) +
        " (torchrun, dtrain launch) whose MASTER_ADDR/MASTER_PORT they meet at; this job has " +
        std::to_string(world.world_size));
  ReplicaGroup r;
  r.group = comm::connect(world);
  return r;
}

}  // namespace

std::string elastic_trace_path(const std::string& path, const std::string& tag) {
  const std::string ext = ".json";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
    return path.substr(0, path.size() - ext.size()) + "." + tag + ext;
  return path + "." + tag;
}

void add_elastic_options(CLI::App* sub, train::ElasticOptions& e, ElasticFlags& flags) {
  sub->add_flag("--elastic", e.enabled,
                "diloco: replicas may die and join while the run goes on (docs/elastic.md); "
                "with -n, a coordinator hosts the membership and a failed replica is started "
                "again (--max-restarts) and joins");
  sub->add_option("--min-replicas", e.min_replicas,
                  "elastic: with fewer live replicas the run waits for joiners at the next "
                  "outer step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--join", e.join,
                  "elastic: HOST:PORT of a `dtrain coordinator` to join (default MASTER_ADDR/"
                  "MASTER_PORT), or etcd://HOST:PORT[,HOST:PORT...][/PREFIX] of the etcd "
                  "cluster the membership lives in (`dtrain coordinator --store`)");
  sub->add_option("--heartbeat-timeout", e.heartbeat_timeout_s,
                  "elastic: seconds without a heartbeat before a replica is declared lost")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  sub->add_flag("--mid-round-entry", e.mid_round_entry,
                "elastic: a joiner enters while a round goes on, handed the round's start state "
                "by a member (the default; every replica of the run gives it alike)");
  sub->add_flag_callback(
      "--no-mid-round-entry", [&e] { e.mid_round_entry = false; },
      "elastic: a joiner enters at the next outer boundary");
  sub->add_option("--restart-delay", flags.restart_delay_s,
                  "elastic, -n: seconds before a failed replica is started again")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--fault-plan", e.fault_plan)->group("");  // tests (elastic/fault_plan.h)
  sub->add_option("--sample-log", e.sample_log)->group("");  // tests: committed positions
}

void check_elastic_flags(const train::ElasticOptions& e) {
  const train::ElasticOptions defaults;
  if (e.enabled) return;
  if (e.min_replicas != defaults.min_replicas || !e.join.empty() ||
      e.heartbeat_timeout_s != defaults.heartbeat_timeout_s || !e.fault_plan.empty() ||
      !e.sample_log.empty() || e.mid_round_entry != defaults.mid_round_entry)
    throw std::invalid_argument(
        "--min-replicas, --join, --heartbeat-timeout and --no-mid-round-entry are for --elastic");
}

int run_elastic(const train::TrainConfig& config, const RankFlags& ranks, const ElasticFlags& flags,
                int n) {
  const auto& e = config.parallel.elastic;
  if (config.parallel.mode != train::ParallelMode::kDiloco)
    throw std::invalid_argument("--elastic is for --parallel diloco");
  parallel::check_elastic_config(config.parallel.diloco);  // before any replica starts
  if (!config.checkpoint_dir.empty() || config.resume)
    throw std::invalid_argument(
        "--elastic keeps its state in the live replicas: no "
        "--checkpoint-dir or --resume");
  const int k = static_cast<int>(config.parallel.diloco.ranks_per_replica);
  const bool launching = !comm::launched_by_environment() && e.join.empty();
  if (launching && std::max(1, n) % k != 0)
    throw std::invalid_argument("--ranks-per-replica " + std::to_string(k) + " must divide -n " +
                                std::to_string(std::max(1, n)) + " into replicas");
  const int replicas = std::max(1, n) / k;
  if (e.min_replicas > replicas && launching)
    throw std::invalid_argument("--min-replicas " + std::to_string(e.min_replicas) +
                                " is more than the " + std::to_string(replicas) +
                                " replicas started");
  if (launching) {
    // The launcher's elastic mode: a coordinator and N replicas. Its files start empty.
    for (const auto& path : {config.metrics_path, config.step_log_path, e.sample_log})
      if (!path.empty()) std::ofstream(path, std::ios::trunc);
    // The coordinator checks the replicas' token: it takes it from the environment too.
    if (ranks.token) setenv("DTRAIN_TOKEN", ranks.token->c_str(), 1);
    comm::LaunchOptions o = relaunch_options(ranks, std::max(1, n));
    o.elastic = true;
    o.restart_delay_s = flags.restart_delay_s;
    o.replica_ranks = k;
    o.coordinator_command = {self_executable(),
                             "coordinator",
                             "--expect",
                             std::to_string(replicas),
                             "--min-replicas",
                             std::to_string(e.min_replicas),
                             "--heartbeat-timeout",
                             seconds(e.heartbeat_timeout_s),
                             "--timeout",
                             seconds(ranks.timeout_s)};
    return comm::launch(o);
  }
  comm::WorldOverrides wo;
  wo.gloo_hostname = ranks.gloo_hostname;
  wo.gloo_interface = ranks.gloo_interface;
  wo.timeout_s = ranks.timeout_s;
  wo.token = ranks.token;
  wo.streams = ranks.streams;
  wo.tcp_congestion = ranks.tcp_congestion;
  wo.master_addr = ranks.master_addr;
  wo.master_port = ranks.master_port;
  const comm::WorldOverrides own = wo;  // a replica's job of several ranks meets there
  if (comm::EtcdAddress::names_etcd(e.join) && !wo.master_addr) {
    // Gloo binds to loopback only where the store is there too: here etcd's first member.
    wo.master_addr = comm::EtcdAddress::parse(e.join).members.front().first;
  }
  const bool launched = comm::launched_by_environment() && e.join.empty();
  const int restart = launched ? env_int("DTRAIN_RESTART", 0) : -1;
  ReplicaGroup replica;
  if (k > 1 && !e.join.empty()) replica = connect_job(comm::world_from_env(own), k);
  comm::WorldConfig world = comm::world_from_env(wo);
  if (!e.join.empty() && !comm::EtcdAddress::names_etcd(e.join)) join_address(e.join, world);
  at::set_num_threads(comm::threads_per_rank(world.local_world_size));
  if (k > 1 && launched)
    replica = connect_in_slot(world, k, restart, config.parallel.elastic.connect_timeout_s);
  const int slot = launched ? world.rank / k : -1;
  // A trace per process: under the launcher named by its slot, place and start, else by pid.
  const std::string tag = launched ? "replica" + std::to_string(slot) + "-rank" +
                                         std::to_string(world.rank % k) + "-start" +
                                         std::to_string(restart)
                                   : "pid" + std::to_string(getpid());
  TraceSession trace(flags.trace_path.empty() ? "" : elastic_trace_path(flags.trace_path, tag),
                     nullptr);
  const auto history = train::train_elastic(config, world, slot, restart, replica.group.get());
  (void)history;
  trace.finish();
  return 0;
}

}  // namespace dtrain::cli
