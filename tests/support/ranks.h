// Test support: run a function on p ranks, each a thread with its own Group, all joined
// through an in-memory store over real Gloo/TCP on loopback.
#pragma once

#include <ATen/Parallel.h>

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "dtrain/comm/group.h"
#include "dtrain/comm/world.h"

namespace dtrain::testing {

// `streams` > 1: that many connections per peer, every link striped over them.
inline void run_ranks(int world_size, const std::function<void(comm::Group&)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60),
                      int streams = 1) {
  at::set_num_threads(1);
  comm::InProcessRendezvous rendezvous;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto group = rendezvous.join(r, world_size, timeout, streams);
        body(*group);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads)
    t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace dtrain::testing
