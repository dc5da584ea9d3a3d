#include "dtrain/comm/auto_cache.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "dtrain/comm/allreduce_tuner.h"
#include "dtrain/comm/backend.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {
namespace {

uint64_t fnv1a(const std::string& text, uint64_t h = 1469598103934665603ull) {
  for (const unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string this_host(const Group& group) {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return std::string(name) + "|" + group.backend().gloo.hostname;
}

// The topology's name, the same on every rank (collective).
std::string topology_key(Group& group) {
  const int p = group.size();
  // Each rank's host as a 53-bit number (exact in float64) at its place; the sum gathers.
  at::Tensor hosts = at::zeros({p + 1}, at::kDouble);
  hosts[group.rank()] = static_cast<double>(fnv1a(this_host(group)) >> 11);
  hosts[p] = group.longest_round_trip() / p;  // summed: a mean is enough for a class
  group.native_all_reduce(hosts, ReduceOp::kSum);
  std::ostringstream key;
  key << "world " << p << " wire_check " << group.wire_check() << " streams "
      << group.stream_capacity();
  const double rtt_ms = hosts[p].item<double>() * 1e3;
  key << " rtt_class " << (rtt_ms < 0.125 ? -4 : static_cast<int>(std::floor(std::log2(rtt_ms))));
  for (int r = 0; r < p; ++r)
    key << " " << static_cast<uint64_t>(hosts[r].item<double>());
  return key.str();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) {
      std::cerr << "dtrain: cannot write the auto-choice cache " << tmp << std::endl;
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    std::cerr << "dtrain: cannot replace the auto-choice cache " << path << std::endl;
}

}  // namespace

std::string auto_cache_dir() {
  const char* dir = std::getenv("DTRAIN_AUTO_CACHE");
  return dir ? dir : "";
}

std::string share_auto_cache(Group& group, const std::string& dir) {
  if (dir.empty()) return "";
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(fnv1a(topology_key(group))));
  const std::string path = dir + "/auto-" + hex + ".json";
  // Rank 0's text, checked there: every rank imports the same text or none.
  std::string text;
  if (group.rank() == 0) {
    text = read_file(path);
    if (!text.empty()) {
      try {
        AllReduceTuner probe;
        probe.import_choices(text);
      } catch (const std::exception& e) {
        std::cerr << "dtrain: ignoring " << path << ": " << e.what() << std::endl;
        text.clear();
      }
    }
  }
  at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  group.native_broadcast(length, 0);
  if (length.item<int64_t>() > 0) {
    at::Tensor bytes = at::empty({length.item<int64_t>()}, at::kByte);
    if (group.rank() == 0) std::memcpy(bytes.data_ptr(), text.data(), text.size());
    group.native_broadcast(bytes, 0);
    text.assign(reinterpret_cast<const char*>(bytes.data_ptr()),
                static_cast<size_t>(bytes.numel()));
    group.all_reduce_tuner().import_choices(text);
  }
  if (group.rank() == 0)
    group.all_reduce_tuner().on_calibrated(
        [path](const std::string& choices) { write_file(path, choices); });
  return path;
}

}  // namespace dtrain::comm
