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
#include "dtrain/data/sampler.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/progress.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/parallel/diloco_auto.h"
#include "dtrain/train/elastic.h"
#include "dtrain/train/elastic_replica.h"
#include "dtrain/train/engine.h"
#include "dtrain/train/epoch_loop.h"
#include "dtrain/train/optimizer.h"
#include "dtrain/train/run_setup.h"
#include "dtrain/train/share_of_group.h"

namespace dtrain::train {
namespace {

namespace mkey = metrics::key;
using elastic::FaultPhase;

// The words of ElasticReplica::carried(): the epoch's progress as the members share it.
enum EpochWord : size_t { kEpochStartUs, kEpochCommitted, kEpochLost, kEpochRedone, kEpochWords };

int64_t wall_microseconds() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Appends whole lines to a file several replicas share (O_APPEND: one write a line).
void append_rows(const std::string& path, const std::vector<metrics::Row>& rows) {
  if (path.empty() || rows.empty()) return;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot append to " + path);
  for (const auto& row : rows) {
    const std::string line = row.dump() + "\n";
    if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      close(fd);
      throw std::runtime_error("cannot append to " + path);
    }
  }
  close(fd);
}

struct RoundTally {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
};

class ElasticRun {
 public:
  ElasticRun(const TrainConfig& c, const comm::WorldConfig& world, int slot, int restart);
  // Auto's probe, if it still runs, ends before the group it runs over goes with replica_.
  ~ElasticRun() {
    if (outer_) outer_->settle_probe();
  }
  std::vector<EpochStats> run();

 private:
  ElasticReplica::Settings settings(const comm::WorldConfig& world, int slot, int restart) const;
  // This replica's share of the round: its inner steps. Returns the samples it trained.
  int64_t train_round(const std::vector<int64_t>& positions, int64_t epoch, EpochStats& s);
  EpochStats close_epoch(EpochStats s, int64_t epoch);
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
  const std::vector<int64_t>& permutation(int64_t epoch);

  const TrainConfig& c_;
  Loaded in_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<parallel::ElasticOuter> outer_;
  std::unique_ptr<ElasticReplica> replica_;
  data::Augment augment_;
  std::map<int64_t, std::vector<int64_t>> permutations_;
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
  s.membership.heartbeat_interval =
      std::chrono::milliseconds(static_cast<int64_t>(e.heartbeat_interval_s * 1000));
  s.membership.heartbeat_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(e.heartbeat_timeout_s * 1000));
  s.membership.connect_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(e.connect_timeout_s * 1000));
  s.enter_timeout = world.timeout;
  // A fault plan's rejoins land at set boundaries (its runs repeat bit for bit).
  s.mid_round = e.mid_round_entry && s.plan.rejoins.empty();
  s.per_replica = c_.parallel.diloco.sync_every * c_.batch_size;
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

ElasticRun::ElasticRun(const TrainConfig& c, const comm::WorldConfig& world, int slot, int restart)
    : c_(c), progress_(c.progress && slot <= 0) {
  parallel::check_elastic_config(c.parallel.diloco);
  torch::manual_seed(c.seed);
  in_ = load(c, nullptr, true);
  torch::manual_seed(c.seed);
  engine_ = make_local_engine(models::make_model(in_.model), models::make_loss(c.loss), c.device,
                              c.memory_format);
  optimizer_ = make_optimizer(c.optim, engine_->parameters());
  outer_ = std::make_unique<parallel::ElasticOuter>(engine_->checkpoint_module()->parameters(),
                                                    engine_->checkpoint_module()->buffers(),
                                                    c.parallel.diloco);
  augment_ = default_augment(c, in_);
  ElasticReplica::Settings s = settings(world, slot, restart);
  // A fault plan's replacement registers only once the round before its entry is under
  // way, so the members take it in exactly before its round.
  if (const auto due = s.plan.rejoin_round(s.membership.replica_id.value_or(-1)))
    s.membership.register_after_round = *due - 1;
  replica_ = std::make_unique<ElasticReplica>(std::move(s), *outer_, [this] {
    optimizer_ = make_optimizer(c_.optim, engine_->parameters());
  });
}

const std::vector<int64_t>& ElasticRun::permutation(int64_t epoch) {
  auto it = permutations_.find(epoch);
  if (it != permutations_.end()) return it->second;
  permutations_.clear();
  data::SamplerConfig sc;
  sc.dataset_size = in_.train_set.size();
  sc.seed = c_.seed;
  return permutations_.emplace(epoch, data::shard_indices(sc, epoch)).first->second;
}

int64_t ElasticRun::train_round(const std::vector<int64_t>& positions, int64_t epoch,
                                EpochStats& s) {
  const int64_t n = in_.train_set.size();
  std::vector<int64_t> indices;
  for (const int64_t p : positions) {  // n + i: the next epoch's i (data::assign_joiner)
    const data::EpochPosition at = data::locate(epoch, p, n);
    indices.push_back(permutation(at.epoch)[static_cast<size_t>(at.index)]);
  }
  const int64_t round = replica_->round();
  const uint64_t seed = c_.seed * 7777 + static_cast<uint64_t>(round) * 1000003ull +
                        static_cast<uint64_t>(replica_->share_index());
  data::EpochLoader loader(in_.train_set, indices, c_.batch_size, in_.norm, augment_, seed, 2);
  const int64_t half = loader.batches() / 2;
  const double at = static_cast<double>(epoch) +
                    static_cast<double>(replica_->queue().cursor) /
                        static_cast<double>(std::max<int64_t>(1, in_.train_set.size()));
  const double lr =
      learning_rate(c_.optim, std::min(at, static_cast<double>(epoch + 1)), c_.epochs);
  set_learning_rate(*optimizer_, lr);
  s.lr = lr;
  int64_t step = 0;
  const bool dies = replica_->plan().kills_at(replica_->id(), round, FaultPhase::kInner);
  if (dies && loader.batches() == 0) elastic::die_now(replica_->membership());
  parallel::InnerStepTimes step_times;  // auto's step time: the engine's work, not data waits
  while (auto batch = loader.next()) {
    if (dies && step == half) elastic::die_now(replica_->membership());
    // Entered mid-round: the members reached the round's end (after one step at least).
    if (step > 0 && replica_->round_closing()) break;
    replica_->between_inner_steps();
    if (step + 1 == loader.batches()) replica_->seal_soon();
    step_times.step_started();
    optimizer_->zero_grad();
    const BatchResult r = engine_->train_batch(*batch, lr, StepPlan{}, s);
    const auto t = metrics::Clock::now();
    optimizer_->step();
    s.time_optimizer_s += metrics::trace::span_since("compute", "optimizer step", t);
    step_times.step_ended();
    if (!std::isfinite(r.loss_sum))
      throw std::runtime_error("training diverged: loss is " + std::to_string(r.loss_sum) +
                               " in round " + std::to_string(round) + " (lower --lr?)");
    tally_.loss_sum += r.loss_sum;
    tally_.correct += r.correct;
    tally_.seen += r.samples;
    ++step;
  }
  s.time_data_s += loader.wait_s();
  if (!step_times.empty()) outer_->note_step_s(step_times.median_s());
  return std::min(static_cast<int64_t>(indices.size()), step * c_.batch_size);
}

void ElasticRun::start_epoch_progress() {
  std::vector<int64_t>& words = replica_->carried();
  words.assign(kEpochWords, 0);
  words[kEpochStartUs] = wall_microseconds();
}

void ElasticRun::claim_row(int64_t epoch, const metrics::Row& row) {
  const std::string me = std::to_string(replica_->id());
  if (replica_->membership().store().compare_set(elastic::key::epoch_row(epoch), "", me) == me)
    append_rows(c_.metrics_path, {row});
}

void ElasticRun::settle_row(bool at_end) {
  elastic::Membership& membership = replica_->membership();
  const auto until = metrics::Clock::now() + 2 * membership.config().heartbeat_timeout;
  const auto settled = [&](const PendingRow& pending) {
    while (!membership.store().try_get(elastic::key::epoch_row(pending.epoch))) {
      if (!membership.view(membership.latest_seen()).has(pending.writer)) {
        std::cerr << "elastic: replica " << replica_->id() << " writes epoch " << pending.epoch + 1
                  << "'s row: replica " << pending.writer << " went before it did" << std::endl;
        claim_row(pending.epoch, pending.row);
        return true;
      }
      if (!at_end || metrics::Clock::now() >= until) return false;  // still the writer's
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return true;
  };
  std::vector<PendingRow> kept;
  for (PendingRow& pending : pending_rows_)
    if (!settled(pending)) kept.push_back(std::move(pending));
  pending_rows_ = std::move(kept);
}

EpochStats ElasticRun::close_epoch(EpochStats s, int64_t epoch) {
  const std::vector<int64_t>& progress = replica_->carried();
  const int64_t committed = progress.at(kEpochCommitted);
  s.epoch = epoch + 1;
  s.epoch_s = static_cast<double>(wall_microseconds() - progress.at(kEpochStartUs)) * 1e-6;
  comm::Group* group = replica_->membership().group();
  Evaluation test;
  std::vector<double> totals{tally_.loss_sum, static_cast<double>(tally_.correct),
                             static_cast<double>(tally_.seen)};
  try {
    ShareOfGroup shared(*engine_, group);
    test = evaluate(shared, in_.test_set, in_.norm, c_.test_batch_size);
    shared.sum_over_ranks(totals);
    evaluated_alone_ = false;
  } catch (const comm::CommError&) {  // a member went meanwhile: the whole test set here
    evaluated_alone_ = true;
    ShareOfGroup alone(*engine_, nullptr);
    test = evaluate(alone, in_.test_set, in_.norm, c_.test_batch_size);
  }
  s.test_loss = test.loss;
  s.test_acc = test.accuracy;
  s.train_loss = totals[0] / std::max(1.0, totals[2]);
  s.train_acc = totals[1] / std::max(1.0, totals[2]);
  s.samples_per_s = static_cast<double>(committed) / std::max(1e-9, s.epoch_s);
  s.peak_rss_bytes = metrics::peak_rss_bytes();
  s.extra[mkey::kElasticMembers] = replica_->group().size();
  s.extra[mkey::kElasticViews] = views_.size();
  s.extra[mkey::kElasticRedone] = progress.at(kEpochRedone);
  s.extra[mkey::kCommittedSamples] = committed;
  s.extra[mkey::kCommittedSamplesPerS] = s.samples_per_s;
  s.extra[mkey::kLostSamples] = progress.at(kEpochLost);
  s.extra[mkey::kElasticEvents] = events_;
  s.extra[mkey::kOuterCodec] = outer_->codec_name();
  const double compute_s = s.time_forward_s + s.time_backward_s + s.time_optimizer_s;
  s.extra[mkey::kComputeUtilization] = s.epoch_s > 0 ? compute_s / s.epoch_s : 0.0;
  tally_ = {};
  events_ = 0;
  views_.clear();
  return s;
}

void ElasticRun::log_round(int64_t epoch, int64_t round, double round_s,
                           const ElasticReplica::Outcome& outcome,
                           const std::vector<int64_t>& trained) {
  const elastic::View& trained_in = outcome.trained_in;
  if (!c_.parallel.elastic.sample_log.empty()) {
    const int64_t n = in_.train_set.size();
    // A row per epoch its positions are of (ahead: the next); this one's if none at all.
    std::map<int64_t, std::vector<int64_t>> by_epoch{{epoch, {}}};
    for (const int64_t p : trained) {
      const data::EpochPosition at = data::locate(epoch, p, n);
      by_epoch[at.epoch].push_back(at.index);
    }
    std::vector<metrics::Row> rows;
    for (const auto& [e, positions] : by_epoch) {
      if (positions.empty() && by_epoch.size() > 1) continue;
      metrics::Row row{{"replica", replica_->id()}, {"epoch", e}, {"round", round}};
      row["positions"] = positions;
      rows.push_back(std::move(row));
    }
    append_rows(c_.parallel.elastic.sample_log, rows);
  }
  if (replica_->group().rank() == 0) {  // the group the round counted in
    metrics::Row row{{"round", round}, {"epoch", epoch + 1}, {"view", trained_in.id}};
    row["outer_codec"] = outcome.averaged.codec;  // the exchange's (auto may choose again)
    row["members"] = outcome.members;
    row["lost"] = outcome.lost;
    row["samples"] = outcome.samples;
    row["round_s"] = round_s;
    row["exchange_s"] = outcome.averaged.seconds;
    append_rows(c_.step_log_path, {stamped(std::move(row), c_)});
  }
}

std::vector<EpochStats> ElasticRun::run() {
  start_epoch_progress();  // a founder's: the first founder's reaches every member
  replica_->enter();
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
    const ElasticReplica::Outcome outcome = replica_->finish_round(trained, assignment);
    const elastic::View& trained_in = outcome.trained_in;
    auto events = replica_->take_events();
    events_ += static_cast<int64_t>(events.size());
    for (auto& e : events)
      e = stamped(std::move(e), c_);
    append_rows(c_.metrics_path, events);
    if (!outcome.counted) continue;  // it entered again: with the members' state and queue
    settle_row(false);
    s.time_comm_s += outcome.averaged.seconds;
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
      if (replica_->plan().kills_at(replica_->id(), round, FaultPhase::kClose))
        elastic::die_now(replica_->membership());
      EpochStats closed = close_epoch(s, epoch);
      progress_.finish(epoch_line(closed, c_.epochs) + ", " +
                       std::to_string(replica_->group().size()) + " replicas");
      // The group's first member writes the row; where a member went during the evaluation
      // (perhaps that one) every member that saw it tries too; the others keep theirs pending.
      metrics::Row row = stamped(closed.to_row(), c_);
      if (replica_->plan().kills_at(replica_->id(), round, FaultPhase::kRow))
        elastic::die_now(replica_->membership());
      if (replica_->group().rank() == 0 || evaluated_alone_)
        claim_row(epoch, row);
      else
        pending_rows_.push_back(
            {epoch, std::move(row), replica_->membership().group_members().at(0)});
      history.push_back(closed);
      data::next_epoch(replica_->queue(), n);  // before begin_round hands it to joiners
      s = {};
      start_epoch_progress();
    }
    if (replica_->queue().epoch < c_.epochs) replica_->begin_round();
  }
  leave();
  return history;
}

void ElasticRun::leave() {
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

}  // namespace

std::vector<EpochStats> train_elastic(const TrainConfig& config, const comm::WorldConfig& world,
                                      int slot, int restart) {
  validate(config, true);
  try {
    ElasticRun run(config, world, slot, restart);
    return run.run();
  } catch (const elastic::RunFinished& e) {
    std::cerr << "elastic: " << e.what() << std::endl;
    return {};
  }
}

}  // namespace dtrain::train
