// etcd v3 through its JSON gateway (POST /v3/kv/..., etcd 3.4 and later), over every member
// of a cluster: what an elastic run's membership lives in when it must outlive any one host
// (docs/elastic.md). A request goes to the member that answered last, and on to the next
// when that one fails, does not answer within a second and a half, or answers that it cannot
// serve (no leader yet, stopping), until the client's timeout.
//
// Contracts:
// - Reads are linearizable (etcd's default): a value once set is seen by every later call of
//   every client, through any member.
// - A request whose answer was lost (its member died after taking it) is sent again to
//   another member. put and compare_set then end as if sent once; an add may count twice,
//   since no etcd request can tell whether the lost one was applied.
// - Keys are the run's prefix followed by the caller's key; values are bytes.
// - Not for several threads at once (one connection per member).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dtrain::comm {

class HttpClient;

// etcd://HOST:PORT[,HOST:PORT...][/PREFIX]: the members' client addresses and the prefix of
// the run's keys ("dtrain/" when none is given; several runs share a cluster by prefixes).
struct EtcdAddress {
  std::vector<std::pair<std::string, int>> members;
  std::string prefix = "dtrain/";
  // Throws std::invalid_argument naming what is wrong.
  static EtcdAddress parse(const std::string& text);
  static bool names_etcd(const std::string& text) { return text.rfind("etcd://", 0) == 0; }
  std::string to_string() const;
};

class EtcdClient {
 public:
  EtcdClient(EtcdAddress address, std::chrono::milliseconds timeout);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const EtcdAddress& address() const { return address_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  struct Value {
    std::string bytes;
    int64_t mod_revision = 0;
  };
  std::optional<Value> get(const std::string& key);
  void put(const std::string& key, const std::string& value);
  // c10d's compare-and-set: sets `desired` where the key holds `expected`, or is unset and
  // `expected` is empty; answers what the key holds afterwards (`expected` where it stays
  // unset).
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  // Adds to the decimal integer at `key` (0 where unset) and returns the sum. Throws
  // CommError where the key holds something else.
  int64_t add(const std::string& key, int64_t delta);
  bool erase(const std::string& key);
  int64_t count_keys();  // under the run's prefix

 private:
  // POSTs to the members in turn until one answers 200; its JSON. Throws CommError naming
  // every member's failure once the timeout has passed, or at once for a request etcd
  // rejects (4xx).
  nlohmann::json call(const std::string& path, const nlohmann::json& request);
  // A transaction: if `compare` holds put `value`, else read the key. Whether it held, and
  // the key's value where it did not (nullopt: unset).
  std::pair<bool, std::optional<Value>> put_if(const std::string& key,
                                               const nlohmann::json& compare,
                                               const std::string& value);
  std::string full_key(const std::string& key) const;

  EtcdAddress address_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<HttpClient>> members_;
  size_t current_ = 0;  // the member that answered last
};

}  // namespace dtrain::comm
