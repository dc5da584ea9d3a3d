// Internal to comm/world.cpp: the Gloo groups behind a Group (comm/backend.h), one per
// stream.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace dtrain::comm {

struct GlooSettings {
  std::string hostname, iface;   // where the devices listen (iface first, then hostname)
  bool io_thread_batch = false;  // their I/O threads run SCHED_BATCH (comm/core_binding.h)
  std::string tcp_congestion;    // their connections' (comm/tcp_congestion.h); empty: the host's
};

// `streams` Gloo groups of `size` ranks over `store`, each of one device (a TCP connection
// to every peer), connected at once: the first over `store`, the others over clones of it
// (a c10d store client serves one call at a time, and each group's rendezvous waits on it)
// under prefixes of their own. Each group's barrier has passed when this returns: Gloo's
// constructor returns once this rank's side of every pair is up, and a rank that exits at
// once could close a pair a slower peer is still handshaking. Throws what c10d threw, or
// std::invalid_argument where the host refuses settings.tcp_congestion.
std::vector<c10::intrusive_ptr<c10d::Backend>> connect_gloo(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const GlooSettings& settings, int streams);

}  // namespace dtrain::comm
