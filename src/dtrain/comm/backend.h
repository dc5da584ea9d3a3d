// Internal: the c10d objects behind a Group. Only comm/group.cpp and comm/world.cpp include
// this header, so the rest of the code base never sees c10d. A Group talks to c10d Backends
// directly: ProcessGroupGloo always, and NCCL's beside it for the collectives of CUDA tensors
// where chosen (comm/collective_backend.h). The ProcessGroup wrapper of LibTorch 2.x would
// only dispatch by device to the same two.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace dtrain::comm {

class Backend {
 public:
  Backend(c10::intrusive_ptr<c10d::Backend> pg, c10::intrusive_ptr<c10d::Store> store,
          std::chrono::milliseconds timeout, bool wire_check)
      : pg(std::move(pg)), store(std::move(store)), timeout(timeout), wire_check(wire_check) {}
  ~Backend() {
    try {
      if (device_pg) device_pg->shutdown();  // NCCL warns at exit about a group left open
    } catch (...) {  // a failed job's communicator may refuse: it ends with the process
    }
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  c10::intrusive_ptr<c10d::Backend> pg;
  // The rendezvous store, also where a failing rank leaves its error for the others.
  c10::intrusive_ptr<c10d::Store> store;
  std::chrono::milliseconds timeout;
  bool wire_check;  // comm/group.h, Integrity
  int streams = 1;  // Gloo contexts (devices) connected: connections per peer (group.h)
  bool streams_everywhere = false;  // --streams given: every link, not only long ones
  bool openings = true;             // long links get openings (DTRAIN_OPENINGS)
  // How this rank's Gloo devices were made, so a subgroup connects the same way.
  std::string gloo_hostname, gloo_interface;
  // NCCL's, running the collectives of tensors on `device`; null where Gloo runs them all.
  c10::intrusive_ptr<c10d::Backend> device_pg;
  c10::Device device{c10::kCPU};
};

}  // namespace dtrain::comm
