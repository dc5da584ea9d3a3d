#include "dtrain/comm/etcd_client.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "dtrain/base/base64.h"
#include "dtrain/base/parse.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/http_client.h"

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
constexpr std::chrono::milliseconds kAttempt{1500};  // one member's chance to answer

int64_t json_int(const json& object, const char* field) {
  if (!object.contains(field)) return 0;  // proto3's JSON leaves zeros out
  const json& v = object.at(field);
  return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
}

std::optional<EtcdClient::Value> first_kv(const json& range) {
  if (!range.contains("kvs") || range.at("kvs").empty()) return std::nullopt;
  const json& kv = range.at("kvs").at(0);
  const auto bytes = base64_decode(kv.value("value", std::string()));
  if (!bytes) throw CommError("etcd answered a value that is not base64");
  return EtcdClient::Value{*bytes, json_int(kv, "mod_revision")};
}

}  // namespace

EtcdAddress EtcdAddress::parse(const std::string& text) {
  if (!names_etcd(text))
    throw std::invalid_argument("'" + text + "' is not etcd://HOST:PORT[,HOST:PORT...][/PREFIX]");
  EtcdAddress a;
  std::string rest = text.substr(7);
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    a.prefix = rest.substr(slash + 1);
    rest.resize(slash);
    if (a.prefix.empty()) throw std::invalid_argument("'" + text + "' has an empty prefix");
    if (a.prefix.back() != '/') a.prefix += '/';
  }
  for (size_t start = 0; start <= rest.size();) {
    const size_t comma = std::min(rest.find(',', start), rest.size());
    const std::string member = rest.substr(start, comma - start);
    const size_t colon = member.rfind(':');
    const auto port = colon == std::string::npos
                          ? std::nullopt
                          : parse_integer(member.substr(colon + 1), 1, 65535);
    if (colon == 0 || !port)
      throw std::invalid_argument("etcd member '" + member + "' of '" + text +
                                  "' is not HOST:PORT");
    a.members.emplace_back(member.substr(0, colon), static_cast<int>(*port));
    start = comma + 1;
  }
  return a;
}

std::string EtcdAddress::to_string() const {
  std::string out = "etcd://";
  for (size_t i = 0; i < members.size(); ++i)
    out += (i ? "," : "") + members[i].first + ":" + std::to_string(members[i].second);
  return out + "/" + prefix;
}

EtcdClient::EtcdClient(EtcdAddress address, std::chrono::milliseconds timeout)
    : address_(std::move(address)), timeout_(timeout) {
  for (const auto& [host, port] : address_.members)
    members_.push_back(std::make_unique<HttpClient>(host, port));
}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::full_key(const std::string& key) const {
  return base64_encode(address_.prefix + key);
}

json EtcdClient::call(const std::string& path, const json& request) {
  const auto deadline = Clock::now() + timeout_;
  const std::string body = request.dump();
  std::vector<std::string> failures(members_.size());
  for (size_t tried = 0;; ++tried) {
    HttpClient& member = *members_[current_];
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      const auto answer = member.post(path, body, std::clamp(left, kAttempt / 10, kAttempt));
      if (answer.status == 200) return json::parse(answer.body);
      const json error = json::parse(answer.body, nullptr, false);
      const std::string said = error.is_object() ? error.value("error", answer.body) : answer.body;
      if (answer.status < 500)
        throw CommError("etcd member " + member.endpoint() + " rejected " + path + ": " + said);
      failures[current_] = said;
    } catch (const HttpFailure& f) {
      failures[current_] = f.what();
    } catch (const json::exception& e) {
      failures[current_] = std::string("its answer is not JSON: ") + e.what();
    }
    current_ = (current_ + 1) % members_.size();
    if (Clock::now() >= deadline) {
      std::string all;
      for (size_t i = 0; i < members_.size(); ++i)
        if (!failures[i].empty()) all += "; " + members_[i]->endpoint() + ": " + failures[i];
      throw CommError("etcd " + address_.to_string() + ": " + path + " got no answer within " +
                      std::to_string(timeout_.count()) + " ms" + all);
    }
    // A full turn without an answer: the cluster is electing a leader or coming back.
    if ((tried + 1) % members_.size() == 0) std::this_thread::sleep_for(kAttempt / 15);
  }
}

std::optional<EtcdClient::Value> EtcdClient::get(const std::string& key) {
  return first_kv(call("/v3/kv/range", {{"key", full_key(key)}}));
}

void EtcdClient::put(const std::string& key, const std::string& value) {
  call("/v3/kv/put", {{"key", full_key(key)}, {"value", base64_encode(value)}});
}

std::pair<bool, std::optional<EtcdClient::Value>> EtcdClient::put_if(const std::string& key,
                                                                     const json& compare,
                                                                     const std::string& value) {
  json request;
  request["compare"] = json::array({compare});
  request["success"] =
      json::array({{{"request_put", {{"key", full_key(key)}, {"value", base64_encode(value)}}}}});
  request["failure"] = json::array({{{"request_range", {{"key", full_key(key)}}}}});
  const json answer = call("/v3/kv/txn", request);
  if (answer.value("succeeded", false)) return {true, std::nullopt};
  const json& responses = answer.at("responses");
  return {false, responses.empty() ? std::nullopt
                                   : first_kv(responses.at(0).value("response_range", json{}))};
}

std::string EtcdClient::compare_set(const std::string& key, const std::string& expected,
                                    const std::string& desired) {
  // etcd fails a value comparison on an unset key: where c10d sets an unset key (expected
  // empty), a second transaction asks for the key's absence.
  const auto [held, now] = put_if(key,
                                  {{"key", full_key(key)},
                                   {"result", "EQUAL"},
                                   {"target", "VALUE"},
                                   {"value", base64_encode(expected)}},
                                  desired);
  if (held) return desired;
  if (now) return now->bytes;
  if (!expected.empty()) return expected;
  const auto [created, current] = put_if(
      key,
      {{"key", full_key(key)}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", 0}},
      desired);
  if (created) return desired;
  return current ? current->bytes : expected;
}

int64_t EtcdClient::add(const std::string& key, int64_t delta) {
  for (;;) {  // until no other client changed the key between the read and the write
    const auto current = get(key);
    int64_t value = 0;
    if (current) {
      const auto parsed = parse_integer(current->bytes, INT64_MIN, INT64_MAX);
      if (!parsed)
        throw CommError("etcd key '" + address_.prefix + key + "' holds '" +
                        current->bytes.substr(0, 40) + "', not a counter");
      value = *parsed;
    }
    const json compare = current ? json{{"key", full_key(key)},
                                        {"result", "EQUAL"},
                                        {"target", "MOD"},
                                        {"mod_revision", current->mod_revision}}
                                 : json{{"key", full_key(key)},
                                        {"result", "EQUAL"},
                                        {"target", "CREATE"},
                                        {"create_revision", 0}};
    if (put_if(key, compare, std::to_string(value + delta)).first) return value + delta;
  }
}

bool EtcdClient::erase(const std::string& key) {
  return json_int(call("/v3/kv/deleterange", {{"key", full_key(key)}}), "deleted") > 0;
}

int64_t EtcdClient::count_keys() {
  // Every key with the prefix: range_end is the prefix with its last byte one higher.
  std::string end = address_.prefix;
  end.back() = static_cast<char>(end.back() + 1);
  return json_int(call("/v3/kv/range", {{"key", base64_encode(address_.prefix)},
                                        {"range_end", base64_encode(end)},
                                        {"count_only", true}}),
                  "count");
}

}  // namespace dtrain::comm
