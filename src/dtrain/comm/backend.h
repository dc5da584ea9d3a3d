// Internal: the c10d objects behind a Group. Only comm/group.cpp and comm/world.cpp include
// this header, so the rest of the code base never sees c10d. A Group talks to one c10d
// Backend (ProcessGroupGloo today) directly: the ProcessGroup wrapper of LibTorch 2.x only
// dispatches by device to such backends, which a Group, bound to one device, does not need.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace dtrain::comm {

class Backend {
 public:
  Backend(c10::intrusive_ptr<c10d::Backend> pg, c10::intrusive_ptr<c10d::Store> store,
          std::chrono::milliseconds timeout, bool wire_check)
      : pg(std::move(pg)), store(std::move(store)), timeout(timeout), wire_check(wire_check) {}
  c10::intrusive_ptr<c10d::Backend> pg;
  // The rendezvous store, also where a failing rank leaves its error for the others.
  c10::intrusive_ptr<c10d::Store> store;
  std::chrono::milliseconds timeout;
  bool wire_check;  // comm/group.h, Integrity
};

}  // namespace dtrain::comm
