// Where this process sits among the ranks, and how to connect to them.
//
// world_from_env reads torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), then Open MPI's (OMPI_COMM_WORLD_RANK/SIZE/
// LOCAL_RANK/LOCAL_SIZE), then Slurm's (SLURM_PROCID/NTASKS/LOCALID); with none of them it is
// a single rank. DTRAIN_GLOO_HOST names the address Gloo binds to (the launcher sets it for
// ranks on a network lab's hosts) and DTRAIN_TIMEOUT the timeout in seconds,
// DTRAIN_TOKEN the job's shared secret and DTRAIN_WIRE_CHECK (1 or 0) the messages'
// checksums (comm/group.h). Explicit overrides win over the environment.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::comm {

class Group;

struct WorldConfig {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Address or hostname Gloo binds to and advertises; empty: the loopback address when the
  // master is local, else this host's name. `interface` (e.g. eth0) wins when set.
  std::string gloo_hostname;
  std::string gloo_interface;
  std::chrono::milliseconds timeout{300'000};
  // A secret every rank of the job must hold: the rendezvous refuses a process that proves
  // another (or none). Empty: every rank must have none.
  std::string token;
  bool wire_check = true;
  // --bind cores: connect() pins this rank to its share of the host's cores (cores_per_rank
  // of them, 0: threads_per_rank) and, where that succeeded, runs Gloo's I/O thread
  // SCHED_BATCH (core_binding.h).
  bool bind_cores = false;
  int cores_per_rank = 0;
  // >= 0: NCCL runs the collectives of CUDA tensors on this GPU, beside Gloo
  // (comm/collective_backend.h); every rank must agree, which connect() checks.
  int nccl_device = -1;
  // Connections per peer (Group::set_streams): 0, auto: where a rank's round trip to rank 0
  // is kLongRtt or longer (a link whose bandwidth-delay product one TCP connection's buffers
  // may not fill), connect() makes auto_streams(that round trip), else one; then each link
  // whose own round trip is that long stripes its large messages over them. N: N
  // connections, every link striped over them (--streams, DTRAIN_STREAMS).
  int streams = 0;
  // Openings on the links connect() finds long (Group::set_opening_capacity; off with
  // DTRAIN_OPENINGS=0, which every rank must agree on).
  bool openings = true;
  // The TCP congestion control of the group's connections (comm/tcp_congestion.h;
  // --tcp-congestion, DTRAIN_TCP_CONGESTION); empty: the host's default. Each rank's own:
  // it governs what that rank sends.
  std::string tcp_congestion;
  std::string source = "default";  // which variables it came from, for messages
};

constexpr int kMaxStreams = 16;
constexpr double kLongRttSeconds = 0.005;
// Collective over `group` (one small all-reduce): whether some rank has a link whose round
// trip, as measured at connect, is kLongRttSeconds or more; every rank gets the same answer.
bool on_a_long_link(Group& group);
// One connection per 12.5 ms of round trip, at least 2 and at most kMaxStreams: with the
// kernel's default socket buffers (4 MiB of send window), 4 connections filled 89 % of a
// 1 Gbit/s link with a 50 ms round trip (docs/results.md), and a 200 ms one needs 16.
int auto_streams(double round_trip_s);

struct WorldOverrides {
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> gloo_hostname;
  std::optional<std::string> gloo_interface;
  std::optional<double> timeout_s;
  std::optional<std::string> token;
  std::optional<bool> bind_cores;
  std::optional<int> cores_per_rank;
  std::optional<int> nccl_device;
  std::optional<int> streams;
  std::optional<std::string> tcp_congestion;
};

// Throws std::invalid_argument with the variable's name on malformed or inconsistent values.
WorldConfig world_from_env(const WorldOverrides& overrides = {});

// True when the environment says this process is one rank of a launched job.
bool launched_by_environment();

// Connects to the other ranks through a TCPStore at master_addr:master_port and a Gloo
// process group. Rank 0 hosts the store on that address only (not on every interface) and
// fails with a clear error when the port is taken. Before Gloo connects, every rank proves
// the token by challenge and response (SHA-256 of the token, rank 0's random challenge and
// the rank; the token never crosses the network): a rank whose proof differs is refused,
// and every rank fails naming it. Then all ranks check they agree on the world size, the
// wire check and the backend of GPU collectives, and where that is NCCL, its communicator
// is made (comm/nccl_backend.h).
std::unique_ptr<Group> connect(const WorldConfig& config);

// A group of some of `parent`'s ranks (`members`, by parent rank; a member's rank in the
// new group is its index there), connected like the parent (store, timeout, wire check,
// interface, streams) under its own `name`. Collective over the members only: each calls
// it with the same members and name; groups of other names may connect at the same time.
std::unique_ptr<Group> connect_subgroup(Group& parent, const std::vector<int>& members,
                                        const std::string& name);

// A group of `size` processes that meet through `store` under `name` (an elastic view's
// members: elastic/membership.h), this process being `rank`: connected as connect() connects
// (the config's timeout, wire check, interface, streams, openings), Gloo's rendezvous waiting
// at most `connect_timeout` for every member, and abortable (Group::make_abortable). No rank
// hosts anything and no token is proved here: the store's host admitted every member.
// Collective over the members.
class KeyValueStore;
std::unique_ptr<Group> connect_members(KeyValueStore& store, const std::string& name, int rank,
                                       int size, const WorldConfig& config,
                                       std::chrono::milliseconds connect_timeout);

// max(1, cores / local ranks): intra-op threads per rank so local ranks do not oversubscribe;
// the cores this process may use (under taskset, those it left), not all the host has.
int threads_per_rank(int local_world_size);

// Ranks as threads in one process (tests, benchmarks of the algorithms without process
// start-up): all ranks join the same in-memory store. Construct it before starting the
// rank threads: it turns off c10d's process-wide flight recorder (TORCH_FR_BUFFER_SIZE=0),
// which LibTorch 2.11 does not guard against several process groups being created and
// used at once in one process (a rare crash inside FlightRecorder::recordWithResetEnabled).
class InProcessRendezvous {
 public:
  InProcessRendezvous();
  ~InProcessRendezvous();
  // `streams` > 1: that many connections per peer, every link striped over them.
  std::unique_ptr<Group> join(int rank, int world_size,
                              std::chrono::milliseconds timeout = std::chrono::seconds(60),
                              int streams = 1);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::comm
