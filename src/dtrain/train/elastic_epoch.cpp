// An elastic replica's epochs and logs (elastic_run.h): the epoch's close and evaluation,
// its row (written once, by the first member to claim it), the rounds' sample and step logs.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/data/sample_queue.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/train/elastic_run.h"
#include "dtrain/train/epoch_loop.h"
#include "dtrain/train/share_of_group.h"

namespace dtrain::train {

namespace mkey = metrics::key;

int64_t wall_microseconds() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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
  const metrics::trace::Span span("eval", "epoch's evaluation", epoch + 1, "epoch");
  Evaluation test;
  std::vector<double> totals = tally_.totals;
  try {
    if (group != nullptr) batchnorm_->recompute(*group);  // the members alike
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

EpochStats ElasticRun::end_epoch(const EpochStats& s, int64_t epoch, int64_t round) {
  if (replica_->plan().kills_at(replica_->id(), round, elastic::FaultPhase::kClose))
    elastic::die_now(replica_->membership());
  EpochStats closed = close_epoch(s, epoch);
  progress_.finish(epoch_line(closed, c_.epochs) + ", " + std::to_string(replica_->group().size()) +
                   " replicas");
  // The group's first member writes the row; where a member went during the evaluation
  // (perhaps that one) every member that saw it tries too; the others keep theirs pending.
  metrics::Row row = stamped(closed.to_row(), c_);
  if (replica_->plan().kills_at(replica_->id(), round, elastic::FaultPhase::kRow))
    elastic::die_now(replica_->membership());
  if (replica_->group().rank() == 0 || evaluated_alone_)
    claim_row(epoch, row);
  else
    pending_rows_.push_back({epoch, std::move(row), replica_->membership().group_members().at(0)});
  return closed;
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
    if (c_.parallel.diloco.fragments > 1) row["fragments"] = outcome.averaged.fragments;
    row["members"] = outcome.members;
    row["lost"] = outcome.lost;
    row["samples"] = outcome.samples;
    row["round_s"] = round_s;
    row["exchange_s"] = outcome.averaged.seconds;
    row["exchange_waited_s"] = outcome.waited_s;
    append_rows(c_.step_log_path, {stamped(std::move(row), c_)});
  }
}

}  // namespace dtrain::train
