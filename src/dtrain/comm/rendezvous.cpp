#include "dtrain/comm/rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>

#include "dtrain/comm/error.h"
#include "dtrain/comm/token_proof.h"

namespace dtrain::comm {
namespace {

std::string who(int rank, int size) {
  return "rank " + std::to_string(rank) + "/" + std::to_string(size);
}

std::vector<uint8_t> bytes_of(const std::string& text) {
  return {text.begin(), text.end()};
}

void put(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, bytes_of(value));
}

// The values of `keys` once some rank has set each: one wait and one read for all of them
// (on a long link each round trip to the store counts). Throws naming the first one still
// missing (`waiting_for` of its index) on timeout, or saying the store went away (its host,
// rank 0, exited).
std::vector<std::string> await_all(c10d::Store& store, const std::vector<std::string>& keys,
                                   std::chrono::milliseconds timeout, const std::string& me,
                                   const std::function<std::string(size_t)>& waiting_for) {
  try {
    store.wait(keys, timeout);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    size_t missing = 0;
    try {
      while (missing + 1 < keys.size() && store.check({keys[missing]}))
        ++missing;
    } catch (const std::exception&) {  // the store is gone: the first one it names
    }
    if (what.find("imeout") == std::string::npos && what.find("imed out") == std::string::npos)
      throw CommError(
          me + ": lost the rendezvous store while waiting for " + waiting_for(missing) +
          " (rank 0, its host, exited; see its output): " + what.substr(0, what.find('\n')));
    throw CommError(me + ": " + waiting_for(missing) + " did not join within " +
                    std::to_string(timeout.count() / 1000) +
                    " s (is it running, with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT?)");
  }
  std::vector<std::string> out;
  for (const auto& value : store.multiGet(keys))
    out.emplace_back(value.begin(), value.end());
  return out;
}

std::string await(c10d::Store& store, const std::string& key, std::chrono::milliseconds timeout,
                  const std::string& me, const std::string& waiting_for) {
  return await_all(store, {key}, timeout, me, [&](size_t) { return waiting_for; })[0];
}

constexpr const char* kTokenHint = " (--token or DTRAIN_TOKEN must be the same on every rank)";

}  // namespace

int listen_only_on(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(address.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw CommError("rank 0: cannot resolve the rendezvous address " + address + ": " +
                    gai_strerror(rc));
  }
  std::string error = "no usable address";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
      freeaddrinfo(found);
      return fd;
    }
    const int e = errno;
    error = e == EADDRINUSE      ? "the port is already in use (another job? pick another "
                                   "--master-port or MASTER_PORT)"
            : e == EADDRNOTAVAIL ? "it is not an address of this host (MASTER_ADDR must name "
                                   "rank 0's host)"
                                 : std::strerror(e);
    close(fd);
  }
  freeaddrinfo(found);
  throw CommError("rank 0: cannot host the rendezvous store on " + address + ":" + service + ": " +
                  error);
}

void authenticate(c10d::Store& store, int rank, int size, const std::string& token,
                  std::chrono::milliseconds timeout) {
  const std::string me = who(rank, size);
  const auto ack = [](int r) { return "dtrain/auth/ack/" + std::to_string(r); };
  if (rank == 0) {
    const std::string challenge = random_challenge();
    put(store, "dtrain/auth/challenge", challenge);
    put(store, "dtrain/auth/proof/0", token_proof(token, challenge, 0));
    std::string verdict = "ok";
    int proved = 0;  // ranks 1..proved published a proof
    for (int r = 1; r < size && verdict == "ok"; ++r, ++proved) {
      const std::string theirs = await(store, "dtrain/auth/proof/" + std::to_string(r), timeout, me,
                                       "rank " + std::to_string(r));
      if (theirs != token_proof(token, challenge, r))
        verdict = "the process joining as rank " + std::to_string(r) +
                  " presented a different token: refused" + kTokenHint;
    }
    put(store, "dtrain/auth/verdict", verdict);
    if (verdict == "ok") return;
    // This rank hosts the store: it stays until the ranks that joined have read the
    // verdict (briefly), so they learn the reason rather than a lost connection.
    for (int r = 1; r <= proved; ++r) {
      try {
        store.wait({ack(r)}, std::chrono::seconds(3));
      } catch (const std::exception&) {
      }
    }
    throw CommError(me + ": " + verdict);
  }
  // Rank 0 publishes its proof with the challenge, before it reads any: checking it before
  // publishing ours cannot race with rank 0 refusing us and taking its store away.
  const std::vector<std::string> published =
      await_all(store, {"dtrain/auth/challenge", "dtrain/auth/proof/0"}, timeout, me,
                [](size_t) { return std::string("rank 0 (the rendezvous host)"); });
  const std::string& challenge = published[0];
  const std::string& theirs = published[1];
  put(store, "dtrain/auth/proof/" + std::to_string(rank), token_proof(token, challenge, rank));
  if (theirs != token_proof(token, challenge, 0)) {
    put(store, ack(rank), "refused");
    throw CommError(me + ": rank 0 holds a different token: refusing to join" + kTokenHint);
  }
  const std::string verdict = await(store, "dtrain/auth/verdict", timeout, me, "every rank");
  put(store, ack(rank), "read");
  if (verdict != "ok") throw CommError(me + ": rank 0 stopped the job: " + verdict);
}

double longest_rtt_to_rank0(c10d::Store& store, int rank, int size,
                            std::chrono::milliseconds timeout) {
  const std::string me = who(rank, size);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    store.check({"dtrain/rtt/ping"});  // one request, one answer
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  put(store, "dtrain/rtt/" + std::to_string(rank), std::to_string(best));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r)
    keys.push_back("dtrain/rtt/" + std::to_string(r));
  double longest = 0;
  for (const std::string& value :
       await_all(store, keys, timeout, me, [](size_t r) { return "rank " + std::to_string(r); }))
    longest = std::max(longest, std::stod(value));
  return longest;
}

void agree_on_settings(c10d::Store& store, int rank, int size, const std::vector<Setting>& settings,
                       std::chrono::milliseconds timeout) {
  const std::string me = who(rank, size);
  // This rank's values in one request, the others' in two waits and reads (rank 0's, then
  // the rest): waited for key by key and rank by rank they took two round trips each (4 s
  // of a 100 ms link's connect).
  std::vector<std::string> mine{"dtrain/world_size/" + std::to_string(rank)};
  std::vector<std::vector<uint8_t>> values_of_mine{bytes_of(std::to_string(size))};
  for (const auto& s : settings) {
    mine.push_back("dtrain/" + s.key + "/" + std::to_string(rank));
    values_of_mine.push_back(bytes_of(s.value));
  }
  store.multiSet(mine, values_of_mine);
  const size_t per_rank = settings.size() + 1;
  const auto keys_of = [&](int from, int to) {
    std::vector<std::string> keys;
    for (int r = from; r < to; ++r) {
      keys.push_back("dtrain/world_size/" + std::to_string(r));
      for (const auto& s : settings)
        keys.push_back("dtrain/" + s.key + "/" + std::to_string(r));
    }
    return keys;
  };
  const auto check = [&](int r, const std::vector<std::string>& values, size_t at) {
    if (values[at] != std::to_string(size)) {
      throw CommError("rank " + std::to_string(rank) + ": world size mismatch: this rank has " +
                      std::to_string(size) + ", rank " + std::to_string(r) + " has " + values[at]);
    }
    for (size_t k = 0; k < settings.size(); ++k) {
      const Setting& s = settings[k];
      const std::string& value = values[at + 1 + k];
      if (value != s.value) {
        throw CommError(me + ": " + s.what + " is " + s.value + " here and " + value + " on rank " +
                        std::to_string(r) + " (" + s.hint + ")");
      }
    }
  };
  // Rank 0's first: a rank whose world size is not rank 0's says so at once, rather than
  // wait for a rank that will never come.
  check(0, await_all(store, keys_of(0, 1), timeout, me, [](size_t) { return "rank 0"; }), 0);
  const std::vector<std::string> values =
      await_all(store, keys_of(1, size), timeout, me,
                [&](size_t i) { return "rank " + std::to_string(1 + i / per_rank); });
  for (int r = 1; r < size; ++r)
    check(r, values, static_cast<size_t>(r - 1) * per_rank);
}

}  // namespace dtrain::comm
