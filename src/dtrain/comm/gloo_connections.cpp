#include "dtrain/comm/gloo_connections.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <future>
#include <optional>

#include "dtrain/comm/core_binding.h"
#include "dtrain/comm/tcp_congestion.h"

namespace dtrain::comm {
namespace {

std::shared_ptr<::gloo::transport::Device> make_device(const GlooSettings& s) {
  if (!s.iface.empty()) return c10d::ProcessGroupGloo::createDeviceForInterface(s.iface);
  if (!s.hostname.empty()) return c10d::ProcessGroupGloo::createDeviceForHostname(s.hostname);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

std::vector<c10::intrusive_ptr<c10d::Backend>> connect_gloo(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const GlooSettings& settings, int streams) {
  const std::vector<int> before = settings.io_thread_batch ? thread_ids() : std::vector<int>{};
  // Scanned only where asked: the host's congestion control needs no list of sockets.
  std::optional<SocketsOpened> opened;
  if (!settings.tcp_congestion.empty()) opened.emplace();
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  for (int stream = 0; stream < streams; ++stream)
    devices.push_back(make_device(settings));
  if (settings.io_thread_batch) {  // the devices' I/O threads, started just now
    std::vector<int> started;
    for (const int id : thread_ids())
      if (std::find(before.begin(), before.end(), id) == before.end()) started.push_back(id);
    run_as_batch(started);
  }
  const auto connect = [&](int stream) {
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices = {devices[static_cast<size_t>(stream)]};
    // The first group runs the collectives; the others carry point-to-point messages only,
    // which need none of the group's worker threads.
    opts->threads = stream == 0 ? 2 : 1;
    c10::intrusive_ptr<c10d::Store> over = store;
    if (stream > 0)
      over =
          c10::make_intrusive<c10d::PrefixStore>("stream" + std::to_string(stream), store->clone());
    return c10::intrusive_ptr<c10d::Backend>(
        c10::make_intrusive<c10d::ProcessGroupGloo>(over, rank, size, opts));
  };
  std::vector<std::future<c10::intrusive_ptr<c10d::Backend>>> others;
  for (int stream = 1; stream < streams; ++stream)
    others.push_back(std::async(std::launch::async, connect, stream));
  // Should the first fail, the others' futures wait for theirs to end (each fails within
  // the timeout, as this one did, where a peer is missing).
  std::vector<c10::intrusive_ptr<c10d::Backend>> groups{connect(0)};
  for (auto& other : others)
    groups.push_back(other.get());
  // The barriers are called from this thread, one group after another, and waited for after:
  // a group's first operation adds it to c10d's flight recorder, which PyTorch 2.11 does
  // outside its lock (FlightRecorder::recordWithResetEnabled), and barriers of several groups
  // called at once from their own threads corrupted that map: a rank spun there forever.
  std::vector<c10::intrusive_ptr<c10d::Work>> barriers;
  for (auto& group : groups)
    barriers.push_back(group->barrier());
  for (auto& barrier : barriers)
    barrier->wait(timeout);
  if (opened) opened->set_congestion(settings.tcp_congestion);
  return groups;
}

}  // namespace dtrain::comm
