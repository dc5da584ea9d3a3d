// Internal: the c10d objects behind a Group. Only comm/group.cpp and comm/world.cpp include
// this header, so the rest of the code base never sees c10d (and builds against LibTorch
// 1.13 and 2.x alike).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>

namespace dtrain::comm {

class Backend {
 public:
  Backend(c10::intrusive_ptr<c10d::ProcessGroup> pg, std::chrono::milliseconds timeout)
      : pg(std::move(pg)), timeout(timeout) {}
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  std::chrono::milliseconds timeout;
};

}  // namespace dtrain::comm
