// A key-value store shared by the processes of a job: what an elastic run's membership lives
// in (elastic/), and what the groups of its views meet through (connect_members, world.h).
// c10d's TCPStore underneath: one process hosts it (the launcher, `dtrain coordinator`),
// the others are its clients; or an etcd cluster, which outlives any one host; an in-memory
// one serves tests.
//
// Contracts:
// - Every call goes to the store's host and back (one round trip); get() and wait() block
//   up to the store's timeout for a key that is not there yet and throw CommError after it.
//   A store that does not answer (its host gone) fails a call with a CommError naming the
//   store, the call and the key.
// - A client is not for several threads at once: a thread that needs the store beside
//   another takes its own connection (another_client()).
// - A value once set is seen by every later call of every client (the host is one process;
//   etcd's reads are linearizable).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
}

namespace dtrain::comm {

class KeyValueStore {
 public:
  // Hosts the store on `address`:`port` (port 0: a free port, see port()) in this process,
  // and returns a client of it. Throws CommError when the port is taken.
  static std::unique_ptr<KeyValueStore> host(const std::string& address, int port,
                                             std::chrono::milliseconds timeout);
  // A client of the store at `address`:`port`. Throws CommError naming both when it does not
  // answer within the timeout.
  static std::unique_ptr<KeyValueStore> connect(const std::string& address, int port,
                                                std::chrono::milliseconds timeout);
  // A client of an etcd cluster (etcd://HOST:PORT[,HOST:PORT...][/PREFIX], etcd_client.h):
  // the store outlives any one host and any one of its members. Throws std::invalid_argument
  // on a malformed address, CommError when no member answers within the timeout.
  static std::unique_ptr<KeyValueStore> etcd(const std::string& address,
                                             std::chrono::milliseconds timeout);
  // A store in this process only, for tests: its clients share it.
  static std::unique_ptr<KeyValueStore> in_memory(std::chrono::milliseconds timeout);
  // A store torch made (the one torch.distributed hands a backend: a prefix of its TCPStore
  // or FileStore), used as it is: c10d's stores serve several threads, so another_client()
  // shares it too.
  static std::unique_ptr<KeyValueStore> adopt(const c10::intrusive_ptr<c10d::Store>& store,
                                              std::chrono::milliseconds timeout);
  ~KeyValueStore();
  KeyValueStore(const KeyValueStore&) = delete;
  KeyValueStore& operator=(const KeyValueStore&) = delete;

  // Another connection to the same store (for another thread).
  std::unique_ptr<KeyValueStore> another_client() const;
  // HOST of a TCP store (port() its port), etcd://... of an etcd cluster (port() 0).
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key);
  // The value, or nothing when the key is not set (no waiting, one round trip). A value of
  // the 18 bytes "\0dtrain: no value\0" reads as unset.
  std::optional<std::string> try_get(const std::string& key);
  // Adds `delta` to the integer at `key` (0 where unset) and returns the sum.
  int64_t add(const std::string& key, int64_t delta);
  // Sets `key` to `desired` if it holds `expected` ("" for unset) and returns what it holds
  // afterwards.
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  // Waits until every key is set, up to `timeout`; false when it ran out.
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  bool erase(const std::string& key);

  struct Impl;  // internal: the c10d store (kv_store.cpp, world.cpp)
  Impl& impl() const { return *impl_; }

 private:
  KeyValueStore(std::unique_ptr<Impl> impl, std::string address, int port,
                std::chrono::milliseconds timeout);
  // call(), its failure rethrown as a CommError of one line.
  template <typename Call>
  auto answer(const char* op, const std::string& key, Call&& call);
  std::unique_ptr<Impl> impl_;
  std::string address_;
  int port_ = 0;
  std::chrono::milliseconds timeout_;
};

}  // namespace dtrain::comm
