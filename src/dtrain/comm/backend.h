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
#include <vector>

#include "dtrain/comm/gloo_connections.h"

namespace dtrain::comm {

class Backend {
 public:
  // `connections`: one Gloo group per stream (comm/gloo_connections.h); the first also
  // runs the collectives.
  Backend(std::vector<c10::intrusive_ptr<c10d::Backend>> connections,
          c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout, bool wire_check)
      : pg(connections.at(0)),
        connections(std::move(connections)),
        store(std::move(store)),
        timeout(timeout),
        wire_check(wire_check) {}
  ~Backend() {
    try {
      if (device_pg) device_pg->shutdown();  // NCCL warns at exit about a group left open
    } catch (...) {  // a failed job's communicator may refuse: it ends with the process
    }
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  c10::intrusive_ptr<c10d::Backend> pg;
  // Streams (group.h): stream s of every link is a connection of connections[s], a Gloo
  // group of one device of its own (connections[0] is pg). One group of several devices
  // would pick a message's connection by its tag, but c10d connects a group's devices one
  // after another, a handful of round trips each: 16 streams took 23 s to connect on a
  // 100 ms link. Groups of their own connect at once.
  std::vector<c10::intrusive_ptr<c10d::Backend>> connections;
  // The rendezvous store, also where a failing rank leaves its error for the others.
  c10::intrusive_ptr<c10d::Store> store;
  std::chrono::milliseconds timeout;
  // This process serves `store` (rank 0 of the world): its failure keeps it serving a moment
  // (failure_readers.h).
  bool hosts_store = false;
  bool wire_check;                  // comm/group.h, Integrity
  bool streams_everywhere = false;  // --streams given: every link, not only long ones
  bool openings = true;             // long links get openings (DTRAIN_OPENINGS)
  // A subgroup's name and its members as ranks of the world (connect_subgroup): its messages
  // say both, and a failure is published under the world rank, where a rank of every group
  // reads it (the subgroup's own rank would name another process there). Empty in a world.
  std::string subgroup;
  std::vector<int> world_ranks;
  // How this rank's Gloo devices were made, so a subgroup connects the same way.
  GlooSettings gloo;
  // NCCL's, running the collectives of tensors on `device`; null where Gloo runs them all.
  c10::intrusive_ptr<c10d::Backend> device_pg;
  c10::Device device{c10::kCPU};
};

}  // namespace dtrain::comm
