#include "dtrain/comm/world.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "dtrain/base/parse.h"
#include "dtrain/comm/auto_cache.h"
#include "dtrain/comm/backend.h"
#include "dtrain/comm/core_binding.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/gloo_connections.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store_impl.h"
#include "dtrain/comm/link_probe.h"
#include "dtrain/comm/nccl_backend.h"
#include "dtrain/comm/rendezvous.h"
#include "dtrain/comm/tcp_congestion.h"

namespace dtrain::comm {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, const std::string& value, int min_value) {
  const auto parsed = parse_integer(value, min_value, 1'000'000);
  if (!parsed) {
    throw std::invalid_argument(std::string("environment variable ") + name + "='" + value +
                                "' is not an integer >= " + std::to_string(min_value));
  }
  return static_cast<int>(*parsed);
}

bool env_switch(const char* name, const std::string& value) {
  if (value != "0" && value != "1" && value != "on" && value != "off")
    throw std::invalid_argument(std::string("environment variable ") + name + "='" + value +
                                "' is not 1, 0, on or off");
  return value == "1" || value == "on";
}

struct Scheme {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  const char* name;
};

constexpr Scheme kSchemes[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun (RANK/WORLD_SIZE)"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI (OMPI_COMM_WORLD_*)"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
     "Slurm (SLURM_PROCID/SLURM_NTASKS)"},
};

std::vector<Setting> settings(bool wire_check, bool nccl, int streams, bool openings) {
  return {{"wire_check", wire_check ? "on" : "off", "the wire check",
           "DTRAIN_WIRE_CHECK must be the same on every rank"},
          {"openings", openings ? "on" : "off", "openings on long links",
           "DTRAIN_OPENINGS must be the same on every rank"},
          {"gpu_collectives", nccl ? "nccl" : "gloo", "the backend of GPU collectives",
           "give every rank the same --backend and --device"},
          {"streams", streams == 0 ? "auto" : std::to_string(streams), "the streams per peer",
           "give every rank the same --streams (or DTRAIN_STREAMS)"}};
}

// How a rank's Gloo devices are made from its settings (`io_thread_batch`: where it bound
// its cores, comm/core_binding.h).
GlooSettings gloo_settings(const WorldConfig& config, bool io_thread_batch) {
  return {config.gloo_hostname, config.gloo_interface, io_thread_batch, config.tcp_congestion};
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

bool launched_by_environment() {
  for (const auto& s : kSchemes) {
    if (env(s.rank) && env(s.size)) return true;
  }
  return false;
}

WorldConfig world_from_env(const WorldOverrides& overrides) {
  WorldConfig c;
  for (const auto& s : kSchemes) {
    const auto rank = env(s.rank);
    const auto size = env(s.size);
    if (!rank || !size) continue;
    c.rank = env_int(s.rank, *rank, 0);
    c.world_size = env_int(s.size, *size, 1);
    c.local_rank = env(s.local_rank) ? env_int(s.local_rank, *env(s.local_rank), 0) : c.rank;
    c.local_world_size =
        env(s.local_size) ? env_int(s.local_size, *env(s.local_size), 1) : c.world_size;
    c.source = s.name;
    if (c.rank >= c.world_size) {
      throw std::invalid_argument(std::string(s.rank) + "=" + *rank + " is not below " + s.size +
                                  "=" + *size);
    }
    break;
  }
  if (auto a = env("MASTER_ADDR")) c.master_addr = *a;
  if (auto p = env("MASTER_PORT")) c.master_port = env_int("MASTER_PORT", *p, 1);
  if (auto h = env("DTRAIN_GLOO_HOST")) c.gloo_hostname = *h;
  if (auto t = env("DTRAIN_TIMEOUT"))
    c.timeout = std::chrono::seconds(env_int("DTRAIN_TIMEOUT", *t, 1));
  if (auto t = env("DTRAIN_TOKEN")) c.token = *t;
  if (auto n = env("DTRAIN_STREAMS"))
    c.streams = *n == "auto" ? 0 : env_int("DTRAIN_STREAMS", *n, 1);
  if (auto w = env("DTRAIN_WIRE_CHECK")) c.wire_check = env_switch("DTRAIN_WIRE_CHECK", *w);
  if (auto o = env("DTRAIN_OPENINGS")) c.openings = env_switch("DTRAIN_OPENINGS", *o);
  if (auto t = env("DTRAIN_TCP_CONGESTION")) c.tcp_congestion = *t;
  if (overrides.master_addr) c.master_addr = *overrides.master_addr;
  if (overrides.master_port) c.master_port = *overrides.master_port;
  if (overrides.gloo_hostname) c.gloo_hostname = *overrides.gloo_hostname;
  if (overrides.gloo_interface) c.gloo_interface = *overrides.gloo_interface;
  if (overrides.token) c.token = *overrides.token;
  if (overrides.bind_cores) c.bind_cores = *overrides.bind_cores;
  if (overrides.cores_per_rank) c.cores_per_rank = *overrides.cores_per_rank;
  if (overrides.nccl_device) c.nccl_device = *overrides.nccl_device;
  if (overrides.streams) c.streams = *overrides.streams;
  if (overrides.tcp_congestion) c.tcp_congestion = *overrides.tcp_congestion;
  check_tcp_congestion(c.tcp_congestion);
  if (c.streams < 0 || c.streams > kMaxStreams)
    throw std::invalid_argument("--streams must be auto or 1.." + std::to_string(kMaxStreams));
  if (overrides.timeout_s) {
    if (!(*overrides.timeout_s > 0)) throw std::invalid_argument("--timeout must be positive");
    c.timeout = std::chrono::milliseconds(static_cast<int64_t>(*overrides.timeout_s * 1000));
  }
  if (c.master_port < 1 || c.master_port > 65535) {
    throw std::invalid_argument("master port " + std::to_string(c.master_port) +
                                " is outside 1..65535");
  }
  if (c.gloo_hostname.empty() && c.gloo_interface.empty() && is_loopback(c.master_addr)) {
    c.gloo_hostname = "127.0.0.1";
  }
  return c;
}

std::unique_ptr<Group> connect(const WorldConfig& config) {
  // Gloo's I/O thread yields only where this rank has cores of its own: sharing cores with
  // other ranks, its late wakeups cost more than they save (docs/results.md).
  const bool bound =
      config.bind_cores &&
      bind_rank_to_cores(config.local_rank, config.local_world_size,
                         config.cores_per_rank > 0 ? config.cores_per_rank
                                                   : threads_per_rank(config.local_world_size));
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(config.master_port);
  opts.isServer = config.rank == 0;
  opts.numWorkers = config.world_size;
  opts.waitWorkers = false;
  opts.timeout = config.timeout;
  // TCPStore alone would listen on every interface; it takes over this socket instead.
  if (opts.isServer) opts.masterListenFd = listen_only_on(config.master_addr, config.master_port);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(config.master_addr, opts);
  } catch (const std::exception& e) {
    if (opts.masterListenFd) close(*opts.masterListenFd);
    const std::string what = e.what();
    throw CommError("rank " + std::to_string(config.rank) + ": cannot " +
                    (config.rank == 0 ? "host" : "reach") + " the rendezvous store at " +
                    config.master_addr + ":" + std::to_string(config.master_port) + ": " +
                    what.substr(0, what.find('\n')));
  }
  authenticate(*store, config.rank, config.world_size, config.token, config.timeout);
  const bool nccl = config.nccl_device >= 0;
  agree_on_settings(*store, config.rank, config.world_size,
                    settings(config.wire_check, nccl, config.streams, config.openings),
                    config.timeout);
  const int streams = config.streams > 0
                          ? config.streams
                          : auto_streams(longest_rtt_to_rank0(*store, config.rank,
                                                              config.world_size, config.timeout));
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("dtrain/gloo", store);
  std::unique_ptr<Backend> backend;
  const char* connecting = "Gloo";
  try {
    const GlooSettings gloo = gloo_settings(config, bound);
    backend = std::make_unique<Backend>(
        connect_gloo(prefixed, config.rank, config.world_size, config.timeout, gloo, streams),
        store, config.timeout, config.wire_check);
    backend->hosts_store = opts.isServer;
    backend->streams_everywhere = config.streams > 0;
    backend->openings = config.openings;
    backend->gloo = gloo;
    if (nccl) {
      connecting = "NCCL";
      backend->device_pg =
          make_nccl(c10::make_intrusive<c10d::PrefixStore>("dtrain/nccl", store), config.rank,
                    config.world_size, config.timeout, config.nccl_device);
      backend->device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(config.nccl_device));
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw CommError("rank " + std::to_string(config.rank) + ": connecting " + connecting +
                    " failed: " + what.substr(0, what.find('\n')));
  }
  auto group = std::make_unique<Group>(std::move(backend));
  if (streams > 1) configure_streams(*group, config.streams > 0, config.openings);
  if (streams > 1 && config.rank == 0) advise_on_idle_restart(config.tcp_congestion);
  share_auto_cache(*group, auto_cache_dir());
  return group;
}

bool on_a_long_link(Group& group) {
  at::Tensor round_trip = at::full({1}, group.longest_round_trip(), at::kDouble);
  group.native_all_reduce(round_trip, ReduceOp::kMax);
  return round_trip.item<double>() >= kLongRttSeconds;
}

int auto_streams(double round_trip_s) {
  if (round_trip_s < kLongRttSeconds) return 1;
  return std::clamp(static_cast<int>(std::ceil(round_trip_s / 0.0125)), 2, kMaxStreams);
}

int threads_per_rank(int local_world_size) {
  const auto cores = static_cast<int>(allowed_cores().size());
  return std::max(1, cores / std::max(1, local_world_size));
}

struct InProcessRendezvous::Impl {
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
};

InProcessRendezvous::InProcessRendezvous() : impl_(std::make_unique<Impl>()) {
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/1);  // read once, at first use
}
InProcessRendezvous::~InProcessRendezvous() = default;

std::unique_ptr<Group> InProcessRendezvous::join(int rank, int world_size,
                                                 std::chrono::milliseconds timeout, int streams) {
  agree_on_settings(*impl_->store, rank, world_size,
                    settings(/*wire_check=*/true, false, streams, true), timeout);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("dtrain/gloo", impl_->store);
  GlooSettings gloo;
  gloo.hostname = "127.0.0.1";
  auto backend =
      std::make_unique<Backend>(connect_gloo(prefixed, rank, world_size, timeout, gloo, streams),
                                impl_->store, timeout, true);
  backend->streams_everywhere = true;
  backend->gloo = gloo;
  auto group = std::make_unique<Group>(std::move(backend));
  if (streams > 1) configure_streams(*group, /*everywhere=*/true, /*openings=*/true);
  return group;
}

std::unique_ptr<Group> connect_members(KeyValueStore& store, const std::string& name, int rank,
                                       int size, const WorldConfig& config,
                                       std::chrono::milliseconds connect_timeout) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store.impl().store);
  std::unique_ptr<Backend> backend;
  const GlooSettings gloo = gloo_settings(config, false);
  int streams = 1;
  try {
    streams = config.streams > 0
                  ? config.streams
                  : auto_streams(longest_rtt_to_rank0(*prefixed, rank, size, connect_timeout));
    backend = std::make_unique<Backend>(
        connect_gloo(prefixed, rank, size, connect_timeout, gloo, streams), prefixed,
        config.timeout, config.wire_check);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw CommError("member " + std::to_string(rank) + "/" + std::to_string(size) +
                    ": connecting '" + name + "' failed: " + what.substr(0, what.find('\n')));
  }
  backend->streams_everywhere = config.streams > 0;
  backend->openings = config.openings;
  backend->gloo = gloo;
  auto group = std::make_unique<Group>(std::move(backend));
  group->make_abortable();
  if (streams > 1) configure_streams(*group, config.streams > 0, config.openings);
  if (streams > 1 && rank == 0) advise_on_idle_restart(config.tcp_congestion);
  return group;
}

std::unique_ptr<Group> connect_subgroup(Group& parent, const std::vector<int>& members,
                                        const std::string& name) {
  const auto me = std::find(members.begin(), members.end(), parent.rank());
  if (me == members.end())
    throw std::invalid_argument(parent.describe() + ": not a member of subgroup '" + name + "'");
  for (const int m : members)
    if (m < 0 || m >= parent.size() || std::count(members.begin(), members.end(), m) != 1)
      throw std::invalid_argument("subgroup '" + name + "': members must be distinct ranks of " +
                                  "the group");
  const Backend& from = parent.backend();
  const auto rank = static_cast<int>(me - members.begin());
  const auto size = static_cast<int>(members.size());
  std::unique_ptr<Backend> backend;
  GlooSettings gloo = from.gloo;
  gloo.io_thread_batch = false;  // the world's connect alone binds cores
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("dtrain/sub/" + name, from.store);
    backend = std::make_unique<Backend>(connect_gloo(prefixed, rank, size, from.timeout, gloo,
                                                     static_cast<int>(from.connections.size())),
                                        from.store, from.timeout, from.wire_check);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw CommError(parent.describe() + ": connecting subgroup '" + name +
                    "' failed: " + what.substr(0, what.find('\n')));
  }
  backend->hosts_store = from.hosts_store;
  backend->subgroup = name;
  for (const int m : members)
    backend->world_ranks.push_back(parent.world_rank(m));
  backend->streams_everywhere = from.streams_everywhere;
  backend->openings = from.openings;
  backend->gloo = gloo;
  auto group = std::make_unique<Group>(std::move(backend));
  if (group->stream_capacity() > 1)
    configure_streams(*group, from.streams_everywhere, from.openings);
  return group;
}

}  // namespace dtrain::comm
