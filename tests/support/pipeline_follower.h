// Tests' pipeline follower: runs the driver's commands, stepping `optimizer` around each
// training step, until the driver stops.
#pragma once

#include <torch/optim/optimizer.h>

#include "dtrain/parallel/pipeline/pipeline.h"

namespace dtrain::testing {

inline void follow(parallel::pipeline::Pipeline& p, torch::optim::Optimizer& optimizer) {
  using parallel::pipeline::CommandKind;
  for (;;) {
    const auto c = p.next_command();
    if (c.kind == CommandKind::kStop) return;
    if (c.kind == CommandKind::kTrain) optimizer.zero_grad();
    p.execute(c);
    if (c.kind == CommandKind::kTrain) optimizer.step();
  }
}

}  // namespace dtrain::testing
