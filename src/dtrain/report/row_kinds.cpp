// The HTML report's reading of rows: kinds by keys, labels, captions.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "dtrain/metrics/keys.h"
#include "dtrain/report/sections.h"

namespace dtrain::report::sections {

namespace key = metrics::key;
namespace {

// Fields of each kind that say what was measured rather than which run it was.
const std::set<std::string>& own_fields(Kind kind) {
  static const std::map<Kind, std::set<std::string>> fields = {
      {Kind::kCollective, {key::kBench, key::kOp, key::kAlgo, key::kReduce, key::kDtype}},
      {Kind::kP2p, {key::kBench}},
      {Kind::kCodec, {key::kBench, key::kCodec, key::kDist}},
      {Kind::kEpoch, {key::kModel, key::kDataset, key::kParallel}},
      {Kind::kSummary, {key::kModel, key::kDataset, key::kParallel}},
      {Kind::kScaling, {key::kStatus}},
      {Kind::kThroughput, {}},
      {Kind::kStep, {}},
      {Kind::kTimeline, {}},
      {Kind::kUnknown, {}},
  };
  return fields.at(kind);
}

std::string string_at(const Row& row, const char* k) {
  const auto it = row.find(k);
  return it != row.end() && it->is_string() ? it->get<std::string>() : "";
}

// "1-4, 9" from sorted line numbers.
std::string line_ranges(std::vector<int> lines) {
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (size_t i = 0; i < lines.size();) {
    size_t j = i;
    while (j + 1 < lines.size() && lines[j + 1] <= lines[j] + 1)
      ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(lines[i]);
    if (lines[j] != lines[i]) out += "-" + std::to_string(lines[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

Kind classify(const Row& row) {
  if (!row.is_object()) return Kind::kUnknown;
  const std::string bench = string_at(row, key::kBench);
  if (bench == "collective" && row.contains(key::kBytes) && row.contains(key::kTimeUs))
    return Kind::kCollective;
  if (bench == "p2p" && row.contains(key::kBytes) && row.contains(key::kLatencyUs))
    return Kind::kP2p;
  if (bench == "codec" && row.contains(key::kRatio)) return Kind::kCodec;
  if (row.value(key::kSummary, false)) return Kind::kSummary;
  if (row.contains(key::kTimeline) && row[key::kTimeline].is_array()) return Kind::kTimeline;
  if (row.contains(key::kStep) && row.contains(key::kElapsedS) && row.contains(key::kTrainLoss))
    return Kind::kStep;
  if (row.contains(key::kEpoch) &&
      (row.contains(key::kTrainLoss) || row.contains(key::kSamplesPerS)))
    return Kind::kEpoch;
  if (row.contains(key::kRanks) && row.contains(key::kSpeedupEpoch)) return Kind::kScaling;
  if (row.contains(key::kSamplesPerS)) return Kind::kThroughput;
  return Kind::kUnknown;
}

double number_at(const Row& row, const char* k) {
  const auto it = row.find(k);
  return it != row.end() && it->is_number() ? it->get<double>() : NAN;
}

std::string label(const RowRef& ref, Kind kind, bool with_source) {
  const auto& own = own_fields(kind);
  std::string out;
  for (const auto& [k, v] : ref.row->items()) {
    if (own.count(k) || k == key::kCommand || k == "torch") continue;
    std::string text;
    if (v.is_string()) {
      text = v.get<std::string>();
    } else if (v.is_boolean() && k != key::kSummary) {
      text = k + "=" + (v.get<bool>() ? "true" : "false");
    }
    if (!text.empty()) out += (out.empty() ? "" : " ") + text;
  }
  if (with_source) {  // the file's stem: "ddp-compress" for docs/data/ddp-compress.jsonl
    std::string stem = ref.source.substr(ref.source.find_last_of('/') + 1);
    stem = stem.substr(0, stem.rfind(".json"));
    out += (out.empty() ? "[" : " [") + stem + "]";
  }
  return out;
}

std::string caption(const std::vector<RowRef>& refs) {
  std::map<std::string, std::vector<int>> lines;
  std::vector<std::string> commands;
  for (const auto& r : refs) {
    lines[r.source].push_back(r.line);
    const std::string c = string_at(*r.row, key::kCommand);
    if (!c.empty() && std::find(commands.begin(), commands.end(), c) == commands.end())
      commands.push_back(c);
  }
  std::string out = "data: ";
  bool first = true;
  for (const auto& [source, at] : lines) {
    out += (first ? "" : "; ") + source;
    if (!at.empty() && at.front() > 0) out += " lines " + line_ranges(at);
    first = false;
  }
  out += commands.size() > 1 ? ". commands: " : ". command: ";
  if (commands.empty()) out += "not recorded in these rows";
  constexpr size_t kShown = 3;
  for (size_t i = 0; i < commands.size() && i < kShown; ++i)
    out += (i ? " | " : "") + commands[i];
  if (commands.size() > kShown)
    out += " (and " + std::to_string(commands.size() - kShown) + " more)";
  return out;
}

}  // namespace dtrain::report::sections
