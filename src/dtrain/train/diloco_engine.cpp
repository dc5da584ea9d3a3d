// DiLoCo mode: each replica trains its own data shard with the run's optimizer (one rank: a
// local engine; --ranks-per-replica K: a DDP engine over the replica's K ranks), and every
// --sync-every steps an outer step over all replicas (parallel/diloco.h), between the i-th
// ranks of the replicas. Each epoch's last step ends with an outer step, so evaluation sees
// the shared parameters, the same on every replica.
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <numeric>
#include <stdexcept>

#include "dtrain/comm/group.h"
#include "dtrain/comm/world.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/parallel/diloco.h"
#include "dtrain/parallel/diloco_auto.h"
#include "dtrain/train/batchnorm_statistics.h"
#include "dtrain/train/engine.h"

namespace dtrain::train {
namespace {

// Replica r holds ranks [r K, (r + 1) K); the outer exchange runs between the ranks with
// the same place i in their replicas: i, K + i, 2 K + i, ...
struct ReplicaGroups {
  std::unique_ptr<comm::Group> replica, across;
};

ReplicaGroups connect_replicas(comm::Group& group, int64_t ranks_per_replica) {
  const int k = static_cast<int>(ranks_per_replica), n = group.size();
  if (k < 1 || n % k != 0)
    throw std::invalid_argument("--ranks-per-replica " + std::to_string(ranks_per_replica) +
                                " must divide -n " + std::to_string(n) + " into replicas");
  ReplicaGroups g;
  if (k == 1) return g;
  const int replica = group.rank() / k, place = group.rank() % k;
  std::vector<int> members(static_cast<size_t>(k)), across;
  std::iota(members.begin(), members.end(), replica * k);
  for (int r = 0; r < n / k; ++r)
    across.push_back(r * k + place);
  g.replica = comm::connect_subgroup(group, members, "diloco/replica/" + std::to_string(replica));
  g.across = comm::connect_subgroup(group, across, "diloco/place/" + std::to_string(place));
  return g;
}

std::unique_ptr<Engine> make_inner_engine(comm::Group* replica, torch::nn::Sequential model,
                                          const TrainConfig& c) {
  if (replica != nullptr) return make_ddp_engine(*replica, std::move(model), c);
  return make_local_engine(std::move(model), models::make_loss(c.loss), c.device, c.memory_format);
}

class DilocoEngine final : public Engine {
 public:
  DilocoEngine(comm::Group& group, torch::nn::Sequential model, const TrainConfig& c)
      : group_(group),
        groups_(connect_replicas(group, c.parallel.diloco.ranks_per_replica)),
        // The replica's DDP engine first: it brings the replica's ranks to the replica's
        // first rank, and the outer step's broadcast then brings every replica to rank 0.
        local_(make_inner_engine(groups_.replica.get(), std::move(model), c)),
        diloco_(groups_.across ? *groups_.across : group, local_->checkpoint_module()->parameters(),
                local_->checkpoint_module()->buffers(), c.parallel.diloco, groups_.replica.get()),
        batchnorm_(local_->checkpoint_module()) {
    extra_.save = [this] {
      auto state = diloco_.state();
      state.merge(batchnorm_.state());
      return state;
    };
    extra_.check = [this](const auto& saved) { diloco_.check_state(saved); };
    extra_.restore = [this](const auto& saved) {
      diloco_.restore_state(saved);
      batchnorm_.restore(saved);
    };
  }

  c10::Device input_device() const override { return local_->input_device(); }
  int rank() const override { return group_.rank(); }
  int world() const override { return group_.size(); }

  void sum_over_ranks(std::vector<double>& values) override { sum_over_group(group_, values); }

  std::vector<at::Tensor> parameters() override { return local_->parameters(); }

  BatchResult train_batch(const data::Batch& batch, double lr, const StepPlan& plan,
                          EpochStats& s) override {
    samples_ += batch.labels.size(0);
    diloco_.set_epoch_position(plan.epoch_step, plan.epoch_steps);
    batchnorm_.remember(batch.inputs);
    return local_->train_batch(batch, lr, plan, s);
  }

  // The epoch's last step ends with every fragment's outer step, inside the epoch's time,
  // and BatchNorm statistics taken anew under the shared weights (batchnorm_statistics.h).
  void after_optimizer_step(EpochStats& s, bool last_in_epoch) override {
    const double before = diloco_.sync_seconds();
    diloco_.after_inner_step();
    if (last_in_epoch) diloco_.sync();
    s.time_comm_s += diloco_.sync_seconds() - before;
    if (last_in_epoch) batchnorm_.recompute(group_);
  }

  // The group is shared with the checkpointer's collectives and whatever follows training.
  void announce_checkpoint(const Position& /*at*/) override { diloco_.settle(); }
  void finish() override { diloco_.settle(); }

  BatchResult eval_batch(const data::Batch& batch) override { return local_->eval_batch(batch); }

  // Once a run, on rank 0: streaming's exchanges outlasted --sync-delay steps, and the delay
  // that would hide them.
  void advise_delay(const parallel::DilocoStats& d, double step_work_s) {
    if (advised_ || group_.rank() != 0 || d.inner_steps < 1) return;
    const parallel::DilocoConfig& c = diloco_.config();
    const double step_s = step_work_s / static_cast<double>(d.inner_steps);
    const auto delay =
        parallel::delay_to_hide(d.exchange_s, d.outer_steps, step_s, c.sync_delay, c.sync_every);
    if (!delay) return;
    advised_ = true;
    const double exchange_ms = 1e3 * d.exchange_s / static_cast<double>(d.outer_steps);
    std::cerr << "diloco: an exchange took " << std::lround(exchange_ms)
              << " ms on average, longer than --sync-delay " << c.sync_delay << " steps of "
              << std::lround(1e3 * step_s) << " ms: --sync-delay " << *delay
              << " would hide it (beyond --sync-every / --fragments, exchanges in flight at once)"
              << std::endl;
  }

  void end_epoch(EpochStats& s) override {
    local_->end_epoch(s);  // a replica's DDP: its own exchange's numbers
    const parallel::DilocoStats d = diloco_.take_stats();
    namespace key = metrics::key;
    s.extra[key::kOuterSteps] = d.outer_steps;
    s.extra[key::kOuterCodec] = d.codec;
    s.extra[key::kOuterSyncS] = d.sync_s;
    s.extra[key::kOuterExchangeS] = d.exchange_s;
    s.extra[key::kOuterHiddenS] = d.hidden_s;
    s.extra[key::kOuterWireBytes] = d.wire_bytes;
    s.extra[key::kOuterFp32Bytes] = d.fp32_bytes;
    // Every replica's samples: this rank's bytes per sample of the whole job's data.
    std::vector<double> totals{static_cast<double>(samples_)};
    sum_over_ranks(totals);
    s.extra[key::kWireBytesPerSample] =
        totals[0] > 0 ? static_cast<double>(d.wire_bytes) / totals[0] : 0.0;
    samples_ = 0;
    const double compute_s = s.time_forward_s + s.time_backward_s + s.time_optimizer_s;
    s.extra[key::kComputeUtilization] = s.epoch_s > 0 ? compute_s / s.epoch_s : 0.0;
    advise_delay(d, s.time_data_s + compute_s);
    auto most = at::tensor({static_cast<double>(metrics::peak_rss_bytes())}, at::kDouble);
    group_.native_all_reduce(most, comm::ReduceOp::kMax);
    s.extra[key::kPeakRssMaxBytes] = static_cast<int64_t>(most[0].item<double>());
  }

  // Each replica saves its own module and inner optimizer (they differ inside a round) and
  // the outer state: a resumed run continues the round where it stopped.
  torch::nn::Sequential& checkpoint_module() override { return local_->checkpoint_module(); }
  const ExtraState* checkpoint_extra() const override { return &extra_; }

  std::string layout() const override {
    const int k = groups_.replica ? groups_.replica->size() : 1;
    return "DiLoCo over " + std::to_string(group_.size() / k) + " replicas" +
           (k > 1 ? " of " + std::to_string(k) + " ranks" : "");
  }

 private:
  comm::Group& group_;
  ReplicaGroups groups_;           // empty with one rank per replica
  std::unique_ptr<Engine> local_;  // the replica's inner training
  parallel::Diloco diloco_;
  BatchNormStatistics batchnorm_;  // after the outer step that ends an epoch
  ExtraState extra_;               // diloco_'s state, for checkpoints
  int64_t samples_ = 0;            // this epoch's, this replica
  bool advised_ = false;           // advise_delay logged its line
};

}  // namespace

std::unique_ptr<Engine> make_diloco_engine(comm::Group& group, torch::nn::Sequential model,
                                           const TrainConfig& config) {
  return std::make_unique<DilocoEngine>(group, std::move(model), config);
}

}  // namespace dtrain::train
