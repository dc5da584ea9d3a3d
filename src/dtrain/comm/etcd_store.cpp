// KeyValueStore::etcd: a c10d store over an etcd cluster (etcd_client.h), so that what meets
// through c10d (Gloo's rendezvous of a group) meets through etcd as well.
#include <torch/csrc/distributed/c10d/exception.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "dtrain/comm/error.h"
#include "dtrain/comm/etcd_client.h"
#include "dtrain/comm/kv_store_impl.h"

namespace dtrain::comm {
namespace etcd_store {

class EtcdStore : public c10d::Store {
 public:
  EtcdStore(const EtcdAddress& address, std::chrono::milliseconds timeout)
      : c10d::Store(timeout), client_(address, timeout) {}

  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<EtcdStore>(client_.address(), timeout_);
  }
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    client_.put(key, {value.begin(), value.end()});
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::string now = client_.compare_set(key, {expected.begin(), expected.end()},
                                                {desired.begin(), desired.end()});
    return {now.begin(), now.end()};
  }
  std::vector<uint8_t> get(const std::string& key) override {
    const auto value = wait_for(key, timeout_);
    if (!value)
      C10_THROW_ERROR(DistStoreError, "etcd: key '" + key + "' was not set within " +
                                          std::to_string(timeout_.count()) + " ms");
    return {value->begin(), value->end()};
  }
  int64_t add(const std::string& key, int64_t delta) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return client_.add(key, delta);
  }
  bool deleteKey(const std::string& key) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return client_.erase(key);
  }
  bool check(const std::vector<std::string>& keys) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return client_.get(k).has_value(); });
  }
  int64_t getNumKeys() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return client_.count_keys();
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const std::string& k : keys) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (!wait_for(k, std::max(left, std::chrono::milliseconds(0))))
        C10_THROW_ERROR(DistStoreError, "etcd: key '" + k + "' was not set within " +
                                            std::to_string(timeout.count()) + " ms");
    }
  }
  void setTimeout(const std::chrono::milliseconds& timeout) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    c10d::Store::setTimeout(timeout);
    client_.set_timeout(timeout);
  }

 private:
  // Polls until the key is set (the gateway has no blocking read): 5 ms at first, slower
  // the longer it waits, at most 50 ms between reads.
  std::optional<std::string> wait_for(const std::string& key, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::milliseconds(5);
    for (;;) {
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (auto v = client_.get(key)) return std::move(v->bytes);
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }

  std::mutex mutex_;
  EtcdClient client_;
};

}  // namespace etcd_store

std::unique_ptr<KeyValueStore> KeyValueStore::etcd(const std::string& address,
                                                   std::chrono::milliseconds timeout) {
  const EtcdAddress parsed = EtcdAddress::parse(address);
  auto impl = std::make_unique<Impl>();
  impl->store = c10::make_intrusive<etcd_store::EtcdStore>(parsed, timeout);
  impl->etcd = parsed.to_string();
  try {
    impl->store->getNumKeys();  // a cluster that does not answer fails here, not later
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw CommError("cannot reach the store at " + parsed.to_string() + ": " +
                    what.substr(0, what.find('\n')));
  }
  return std::unique_ptr<KeyValueStore>(
      new KeyValueStore(std::move(impl), parsed.to_string(), 0, timeout));
}

}  // namespace dtrain::comm
