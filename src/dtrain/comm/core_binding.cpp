#include "dtrain/comm/core_binding.h"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>

namespace dtrain::comm {

std::vector<int> thread_ids() {
  std::vector<int> ids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", error))
    ids.push_back(std::stoi(entry.path().filename().string()));
  return ids;
}

std::vector<int> allowed_cores() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  }
  if (cores.empty()) {
    const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int c = 0; c < all; ++c)
      cores.push_back(c);
  }
  return cores;
}

bool bind_rank_to_cores(int local_rank, int local_world_size, int width) {
  if (local_world_size <= 1 || width < 1 || local_rank < 0 || local_rank >= local_world_size)
    return false;
  const std::vector<int> cores = allowed_cores();
  if (static_cast<size_t>(local_world_size) * static_cast<size_t>(width) > cores.size())
    return false;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int i = 0; i < width; ++i)
    CPU_SET(cores[static_cast<size_t>(local_rank * width + i)], &mine);
  bool all = true;
  for (const int tid : thread_ids())
    all = sched_setaffinity(tid, sizeof(mine), &mine) == 0 && all;
  return all;
}

void run_as_batch(const std::vector<int>& ids) {
  const sched_param none{};
  for (const int tid : ids)
    sched_setscheduler(tid, SCHED_BATCH, &none);
}

}  // namespace dtrain::comm
