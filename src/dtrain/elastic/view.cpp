#include "dtrain/elastic/view.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>

namespace dtrain::elastic {

int View::rank_of(int64_t replica) const {
  const auto it = std::find(members.begin(), members.end(), replica);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

std::string View::to_json() const {
  nlohmann::json silent = nlohmann::json::object();
  for (const auto& [r, s] : silent_s)
    silent[std::to_string(r)] = s;
  return nlohmann::json{{"view", id},
                        {"members", members},
                        {"reason", reason},
                        {"published_at", published_at},
                        {"silent_s", silent}}
      .dump();
}

View View::from_json(const std::string& text) {
  View v;
  try {
    const auto j = nlohmann::json::parse(text);
    v.id = j.at("view").get<int64_t>();
    v.members = j.at("members").get<std::vector<int64_t>>();
    v.reason = j.value("reason", "");
    v.published_at = j.value("published_at", 0.0);
    if (j.contains("silent_s"))
      for (const auto& [r, s] : j.at("silent_s").items())
        v.silent_s[std::stoll(r)] = s.get<double>();
  } catch (const std::exception& e) {
    throw std::invalid_argument("a malformed view in the store ('" + text.substr(0, 80) +
                                "'): " + e.what());
  }
  if (v.id < 1) throw std::invalid_argument("a view with id " + std::to_string(v.id));
  std::vector<int64_t> sorted = v.members;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw std::invalid_argument("view " + std::to_string(v.id) + " names a replica twice");
  return v;
}

std::vector<int64_t> arrived(const View& before, const View& now) {
  std::vector<int64_t> out;
  for (const int64_t r : now.members)
    if (!before.has(r)) out.push_back(r);
  return out;
}

std::vector<int64_t> departed(const View& before, const View& now) {
  return arrived(now, before);
}

std::string describe(const std::vector<int64_t>& replicas) {
  std::string out = "[";
  for (size_t i = 0; i < replicas.size(); ++i)
    out += (i ? ", " : "") + std::to_string(replicas[i]);
  return out + "]";
}

namespace key {
namespace {
const std::string kRoot = "elastic/";
}
std::string next_id() {
  return kRoot + "next_id";
}
std::string join_count() {
  return kRoot + "join_count";
}
std::string join(int64_t seq) {
  return kRoot + "join/" + std::to_string(seq);
}
std::string heartbeat(int64_t replica) {
  return kRoot + "hb/" + std::to_string(replica);
}
std::string left(int64_t replica) {
  return kRoot + "left/" + std::to_string(replica);
}
std::string killed_at(int64_t replica) {
  return kRoot + "killed_at/" + std::to_string(replica);
}
std::string view(int64_t id) {
  return kRoot + "view/" + std::to_string(id);
}
std::string latest_view() {
  return kRoot + "latest_view";
}
std::string adopted(int64_t view) {
  return kRoot + "adopted/" + std::to_string(view);
}
std::string mid_round(int64_t round) {
  return kRoot + "mid/" + std::to_string(round);
}
std::string mid_round_sealed(int64_t round) {
  return kRoot + "mid-sealed/" + std::to_string(round);
}
std::string deferred(int64_t replica) {
  return kRoot + "deferred/" + std::to_string(replica);
}
std::string holds(int64_t replica) {
  return kRoot + "holds/" + std::to_string(replica);
}
std::string notices() {
  return kRoot + "notices";
}
std::string status(const std::string& group, int64_t round, int64_t replica) {
  return kRoot + "status/" + group + "/" + std::to_string(round) + "/" + std::to_string(replica);
}
std::string redo(const std::string& group, int64_t round) {
  return kRoot + "redo/" + group + "/" + std::to_string(round);
}
std::string boundary(int64_t round) {
  return kRoot + "boundary/" + std::to_string(round);
}
std::string round() {
  return kRoot + "round";
}
std::string done() {
  return kRoot + "done";
}
std::string epoch_row(int64_t epoch) {
  return kRoot + "epoch_row/" + std::to_string(epoch);
}
std::string run_config() {
  return kRoot + "run_config";
}
std::string challenge() {
  return kRoot + "challenge";
}
std::string proof(int64_t replica) {
  return kRoot + "proof/" + std::to_string(replica);
}
std::string refused(int64_t replica) {
  return kRoot + "refused/" + std::to_string(replica);
}
std::string coordinator() {
  return kRoot + "coordinator";
}
std::string policy() {
  return kRoot + "policy";
}
std::string group_prefix(const std::string& group) {
  return kRoot + "group/" + group + "/";
}
}  // namespace key

}  // namespace dtrain::elastic
