#include "dtrain/report/pipeline_timeline.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "dtrain/metrics/keys.h"

namespace dtrain::report {
namespace {

namespace key = metrics::key;

bool is_span(const nlohmann::json& e) {
  return e.is_object() && e.value("ph", std::string()) == "X" && e.contains("ts") &&
         e.contains("dur") && e["ts"].is_number() && e["dur"].is_number();
}

// "micro-batch 3" from the span's arguments, or "".
std::string label_of(const nlohmann::json& e) {
  if (!e.contains("args") || !e["args"].is_object()) return "";
  for (const auto& [name, value] : e["args"].items())
    if (value.is_number_integer()) return name + " " + std::to_string(value.get<int64_t>());
  return "";
}

}  // namespace

std::optional<metrics::Row> pipeline_step_timeline(const nlohmann::json& events) {
  if (!events.is_array()) return std::nullopt;
  std::vector<std::pair<double, double>> steps;  // rank 0's train steps, [begin, end) in us
  for (const auto& e : events) {
    if (is_span(e) && e.value("pid", -1) == 0 && e.value("name", std::string()) == "train step") {
      const double ts = e["ts"].get<double>();
      steps.emplace_back(ts, ts + e["dur"].get<double>());
    }
  }
  if (steps.size() < 2) return std::nullopt;
  std::sort(steps.begin(), steps.end());
  const auto [begin, end] = steps[steps.size() - 2];
  static const std::set<std::string> kCategories = {"compute", "codec", "communication", "data"};
  nlohmann::json spans = nlohmann::json::array();
  std::set<int> ranks;
  for (const auto& e : events) {
    if (!is_span(e) || !kCategories.count(e.value("cat", std::string()))) continue;
    const double from = std::max(begin, e["ts"].get<double>());
    const double to = std::min(end, e["ts"].get<double>() + e["dur"].get<double>());
    if (to <= from) continue;
    const int rank = e.value("pid", 0);
    ranks.insert(rank);
    spans.push_back({{key::kRank, rank},
                     {key::kKind, e.value("name", std::string("?"))},
                     {key::kBeginMs, (from - begin) / 1e3},
                     {key::kEndMs, (to - begin) / 1e3},
                     {key::kLabel, label_of(e)}});
  }
  if (ranks.size() < 2) return std::nullopt;
  metrics::Row row;
  row[key::kTimeline] = std::move(spans);
  row[key::kTimelineStep] = static_cast<int64_t>(steps.size() - 1);
  return row;
}

}  // namespace dtrain::report
