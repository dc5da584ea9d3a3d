#include "dtrain/comm/kv_store.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dtrain/comm/error.h"
#include "dtrain/comm/kv_store_impl.h"
#include "dtrain/comm/rendezvous.h"

namespace dtrain::comm {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

std::string string_of(const std::vector<uint8_t>& v) {
  return {v.begin(), v.end()};
}

int port_of(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

c10::intrusive_ptr<c10d::Store> tcp_client(const std::string& address, int port,
                                           std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(address, opts);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw CommError("cannot reach the store at " + address + ":" + std::to_string(port) + ": " +
                    what.substr(0, what.find('\n')));
  }
}

}  // namespace

KeyValueStore::KeyValueStore(std::unique_ptr<Impl> impl, std::string address, int port,
                             std::chrono::milliseconds timeout)
    : impl_(std::move(impl)), address_(std::move(address)), port_(port), timeout_(timeout) {}

KeyValueStore::~KeyValueStore() = default;

std::unique_ptr<KeyValueStore> KeyValueStore::host(const std::string& address, int port,
                                                   std::chrono::milliseconds timeout) {
  const int fd = listen_only_on(address, port);
  const int bound = port_of(fd);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(bound);
  opts.isServer = true;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  opts.masterListenFd = fd;
  auto impl = std::make_unique<Impl>();
  try {
    impl->store = c10::make_intrusive<c10d::TCPStore>(address, opts);
  } catch (const std::exception& e) {
    close(fd);
    const std::string what = e.what();
    throw CommError("cannot host the store on " + address + ":" + std::to_string(bound) + ": " +
                    what.substr(0, what.find('\n')));
  }
  impl->server = impl->store;
  return std::unique_ptr<KeyValueStore>(
      new KeyValueStore(std::move(impl), address, bound, timeout));
}

std::unique_ptr<KeyValueStore> KeyValueStore::connect(const std::string& address, int port,
                                                      std::chrono::milliseconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->store = tcp_client(address, port, timeout);
  return std::unique_ptr<KeyValueStore>(new KeyValueStore(std::move(impl), address, port, timeout));
}

std::unique_ptr<KeyValueStore> KeyValueStore::in_memory(std::chrono::milliseconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->store = c10::make_intrusive<c10d::HashStore>();
  impl->store->setTimeout(timeout);
  impl->shared = impl->store;
  return std::unique_ptr<KeyValueStore>(new KeyValueStore(std::move(impl), "", 0, timeout));
}

std::unique_ptr<KeyValueStore> KeyValueStore::adopt(const c10::intrusive_ptr<c10d::Store>& store,
                                                    std::chrono::milliseconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->store = impl->shared = store;
  return std::unique_ptr<KeyValueStore>(new KeyValueStore(std::move(impl), "", 0, timeout));
}

std::unique_ptr<KeyValueStore> KeyValueStore::another_client() const {
  auto impl = std::make_unique<Impl>();
  if (impl_->shared) {  // in memory: one store, safe for several threads
    impl->store = impl->shared = impl_->shared;
  } else if (!impl_->etcd.empty()) {
    impl->store = impl_->store->clone();  // its own connections
    impl->etcd = impl_->etcd;
  } else {
    impl->store = tcp_client(address_, port_, timeout_);
  }
  return std::unique_ptr<KeyValueStore>(
      new KeyValueStore(std::move(impl), address_, port_, timeout_));
}

template <typename Call>
auto KeyValueStore::answer(const char* op, const std::string& key, Call&& call) {
  try {
    return call();
  } catch (const std::exception& e) {  // c10d's errors carry a stack trace after one line
    const std::string what = e.what();
    const std::string where = port_ > 0 ? address_ + ":" + std::to_string(port_) : address_;
    throw CommError("store " + where + ": " + op + " '" + key +
                    "' failed: " + what.substr(0, what.find('\n')));
  }
}

void KeyValueStore::set(const std::string& key, const std::string& value) {
  answer("set", key, [&] { impl_->store->set(key, bytes_of(value)); });
}

std::string KeyValueStore::get(const std::string& key) {
  return answer("get", key, [&] { return string_of(impl_->store->get(key)); });
}

std::optional<std::string> KeyValueStore::try_get(const std::string& key) {
  // One round trip where check() and get() take three (get waits, then reads): a
  // compare-and-set that expects a value no caller sets leaves the store as it was and
  // answers with the key's value, or with the expected value where the key is unset.
  static const std::string absent("\0dtrain: no value\0", 18);
  std::string value = answer("read", key, [&] {
    return string_of(impl_->store->compareSet(key, bytes_of(absent), bytes_of(absent)));
  });
  if (value == absent) return std::nullopt;
  return value;
}

int64_t KeyValueStore::add(const std::string& key, int64_t delta) {
  return answer("add", key, [&] { return impl_->store->add(key, delta); });
}

std::string KeyValueStore::compare_set(const std::string& key, const std::string& expected,
                                       const std::string& desired) {
  return answer("compare-and-set", key, [&] {
    return string_of(impl_->store->compareSet(key, bytes_of(expected), bytes_of(desired)));
  });
}

bool KeyValueStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    impl_->store->wait(keys, timeout);
    return true;
  } catch (const std::exception&) {
    // c10d reports a timeout and a broken connection alike; a broken one fails the next call.
    return false;
  }
}

bool KeyValueStore::erase(const std::string& key) {
  return impl_->store->deleteKey(key);
}

}  // namespace dtrain::comm
