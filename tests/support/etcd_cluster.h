// Test support: a real etcd cluster (Debian's etcd-server) on loopback, its members as child
// processes on free ports with their data in /dev/shm; members can be SIGKILLed to test
// what outlives them.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <ftw.h>
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/http_client.h"
#include "dtrain/comm/launch.h"
#include "process.h"

namespace dtrain::testing {

class EtcdCluster {
 public:
  explicit EtcdCluster(int members) {
    static int count = 0;
    const std::string stem =
        "/dev/shm/dtrain-etcd-" + std::to_string(getpid()) + "-" + std::to_string(count++);
    std::string initial;
    for (int i = 0; i < members; ++i) {
      client_ports_.push_back(comm::pick_free_port());
      peer_ports_.push_back(comm::pick_free_port());
      initial += (i ? "," : "") + name(i) + "=" + url(peer_ports_[i]);
    }
    for (int i = 0; i < members; ++i) {
      dirs_.push_back(stem + "-" + name(i));
      members_.push_back(
          std::make_unique<Process>(std::vector<std::string>{"etcd",
                                                             "--name",
                                                             name(i),
                                                             "--data-dir",
                                                             dirs_.back(),
                                                             "--listen-peer-urls",
                                                             url(peer_ports_[i]),
                                                             "--initial-advertise-peer-urls",
                                                             url(peer_ports_[i]),
                                                             "--listen-client-urls",
                                                             url(client_ports_[i]),
                                                             "--advertise-client-urls",
                                                             url(client_ports_[i]),
                                                             "--initial-cluster",
                                                             initial,
                                                             "--initial-cluster-state",
                                                             "new",
                                                             "--initial-cluster-token",
                                                             stem,
                                                             "--logger",
                                                             "zap",
                                                             "--log-level",
                                                             "error"}));
    }
    ready_ = wait_for_leader(std::chrono::seconds(30));
  }
  ~EtcdCluster() {
    members_.clear();  // SIGKILLs what still runs
    // nftw, not std::filesystem: libtorch exports a remove_all that crashes callers.
    const auto remove = [](const char* path, const struct stat*, int, FTW*) {
      return ::remove(path);
    };
    for (const auto& d : dirs_)
      nftw(d.c_str(), remove, 16, FTW_DEPTH | FTW_PHYS);
  }

  // Whether the members elected a leader (etcd installed and started).
  bool ready() const { return ready_; }
  // etcd://127.0.0.1:P0,127.0.0.1:P1,.../PREFIX
  std::string address(const std::string& prefix) const {
    std::string out = "etcd://";
    for (size_t i = 0; i < client_ports_.size(); ++i)
      out += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(client_ports_[i]);
    return out + "/" + prefix;
  }
  // The member that leads now, -1 where none answers that it does.
  int leader() {
    for (size_t i = 0; i < members_.size(); ++i) {
      if (!members_[i]) continue;
      const auto j = status(static_cast<int>(i));
      if (j.is_object() && j.contains("leader") && j["leader"] == j["header"]["member_id"])
        return static_cast<int>(i);
    }
    return -1;
  }
  void kill_member(int i) { members_.at(static_cast<size_t>(i)).reset(); }
  std::string log(int i) const { return members_.at(static_cast<size_t>(i))->err(); }

  // Waits until some live member leads.
  bool wait_for_leader(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (leader() >= 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  static std::string name(int i) { return "m" + std::to_string(i); }
  static std::string url(int port) { return "http://127.0.0.1:" + std::to_string(port); }
  nlohmann::json status(int i) {
    try {
      comm::HttpClient c("127.0.0.1", client_ports_[static_cast<size_t>(i)]);
      const auto r = c.post("/v3/maintenance/status", "{}", std::chrono::milliseconds(500));
      return r.status == 200 ? nlohmann::json::parse(r.body) : nlohmann::json();
    } catch (const std::exception&) {
      return nlohmann::json();
    }
  }

  std::vector<int> client_ports_, peer_ports_;
  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<Process>> members_;
  bool ready_ = false;
};

}  // namespace dtrain::testing
