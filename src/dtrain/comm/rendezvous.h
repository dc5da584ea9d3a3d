// Internal to comm/world.cpp: the steps of joining a job through its rendezvous store, each
// failing with a CommError that names the rank and the cause.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace dtrain::comm {

// A TCP socket listening on `address`:`port` only (the rendezvous host's), for TCPStore to
// take over. Throws CommError when the port is in use or the address is not this host's.
int listen_only_on(const std::string& address, int port);

// Challenge and response over the store: rank 0 publishes a random challenge; every rank
// publishes SHA-256(token, challenge, rank); rank 0 checks each and publishes the verdict,
// which every rank waits for. A rank also checks rank 0's proof, so a process holding the
// wrong token learns it at once. Throws CommError on every rank when any proof is wrong.
void authenticate(c10d::Store& store, int rank, int size, const std::string& token,
                  std::chrono::milliseconds timeout);

// A setting every rank must share: its store key, its value here, and for the message what
// it is ("the wire check") and how to make the ranks agree.
struct Setting {
  std::string key;
  std::string value;
  std::string what;
  std::string hint;
};

// Every rank publishes its world size and `settings` and checks that all agree (Gloo itself
// would wait for a rank that never comes, or silently pair wrong ranks; a rank without the
// NCCL group would leave the others waiting in their first collective).
void agree_on_settings(c10d::Store& store, int rank, int size, const std::vector<Setting>& settings,
                       std::chrono::milliseconds timeout);

// The longest round trip of any rank to the store (rank 0's host), in seconds, the same on
// every rank: each times a few store requests and publishes its best. What connect() decides
// the streams of a run from before any other connection exists.
double longest_rtt_to_rank0(c10d::Store& store, int rank, int size,
                            std::chrono::milliseconds timeout);

}  // namespace dtrain::comm
