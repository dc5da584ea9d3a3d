// An Engine that evaluates this rank's share of a test set among a group's members and sums
// the totals over them (the ring), or the whole set alone where it has no group. Everything
// else is the local engine's. Elastic DiLoCo's epoch end uses it: the members of the view
// split the evaluation, and a member that finds the group failed evaluates alone.
#pragma once

#include <vector>

#include "dtrain/train/engine.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::train {

class ShareOfGroup final : public Engine {
 public:
  // `group`: nullptr to evaluate alone. Both outlive this engine.
  ShareOfGroup(Engine& local, comm::Group* group) : local_(local), group_(group) {}
  int rank() const override;
  int world() const override;
  // Throws comm::CommError where a member fails meanwhile.
  void sum_over_ranks(std::vector<double>& values) override;
  c10::Device input_device() const override { return local_.input_device(); }
  std::vector<at::Tensor> parameters() override { return local_.parameters(); }
  BatchResult train_batch(const data::Batch& b, double lr, const StepPlan& p,
                          EpochStats& s) override {
    return local_.train_batch(b, lr, p, s);
  }
  BatchResult eval_batch(const data::Batch& batch) override { return local_.eval_batch(batch); }
  torch::nn::Sequential& checkpoint_module() override { return local_.checkpoint_module(); }

 private:
  Engine& local_;
  comm::Group* group_;
};

}  // namespace dtrain::train
