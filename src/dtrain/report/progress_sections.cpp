// The HTML report's sections of a run's progress: the step log's curves (loss and accuracy
// over steps and time, samples/s over time) and one pipeline step drawn per rank.
#include <map>

#include "dtrain/metrics/keys.h"
#include "dtrain/report/sections.h"

namespace dtrain::report::sections {

namespace key = metrics::key;
namespace {

using chart::Axis;

// The step rows of each run (by label, in order), as series of (x, y).
std::vector<chart::Series> step_series(const std::vector<RowRef>& refs, bool with_source,
                                       const char* x, const char* y) {
  std::vector<chart::Series> out;
  std::map<std::string, size_t> index;
  for (const auto& r : refs) {
    std::string name = label(r, Kind::kStep, with_source);
    if (name.empty()) name = "run";
    const auto [it, added] = index.emplace(name, out.size());
    if (added) out.push_back({name, {}, false});
    out[it->second].points.push_back({number_at(*r.row, x), number_at(*r.row, y)});
  }
  return out;
}

Figure curve(const std::vector<RowRef>& refs, bool with_source, const char* title, Axis x_axis,
             const char* x, Axis y_axis, const char* y) {
  chart::LineChart c{std::move(x_axis), std::move(y_axis), step_series(refs, with_source, x, y),
                     true};
  return {title, chart::render(c)};
}

}  // namespace

std::vector<Section> step_sections(const std::vector<RowRef>& refs, bool with_source) {
  Section s{"Training curves", caption(refs), {}, ""};
  const Axis steps{"step (mini-batches since the start)", chart::Scale::kLinear,
                   chart::TickFormat::kNumber, false, true};
  const Axis seconds{"time since the start (s)", chart::Scale::kLinear, chart::TickFormat::kNumber,
                     true};
  s.figures.push_back(curve(refs, with_source, "training loss over steps", steps, key::kStep,
                            {"train loss (rank 0's batches)"}, key::kTrainLoss));
  s.figures.push_back(curve(refs, with_source, "training accuracy over steps", steps, key::kStep,
                            {"train accuracy (fraction)"}, key::kTrainAcc));
  s.figures.push_back(curve(refs, with_source, "training loss over time", seconds, key::kElapsedS,
                            {"train loss (rank 0's batches)"}, key::kTrainLoss));
  s.figures.push_back(
      curve(refs, with_source, "throughput over time", seconds, key::kElapsedS,
            {"samples/s (rank 0)", chart::Scale::kLinear, chart::TickFormat::kNumber, true},
            key::kSamplesPerS));
  return {s};
}

std::vector<Section> timeline_sections(const std::vector<RowRef>& refs, bool /*with_source*/) {
  Section s{"A pipeline step, per rank", caption(refs), {}, ""};
  for (const auto& r : refs) {
    chart::Timeline t;
    t.x = {"time in the step (ms)", chart::Scale::kLinear, chart::TickFormat::kNumber, true};
    t.lane_title = "rank";
    int ranks = 0;
    for (const auto& span : (*r.row)[key::kTimeline])
      ranks = std::max(ranks, span.value(key::kRank, 0) + 1);
    for (int rank = 0; rank < ranks; ++rank)
      t.lanes.push_back("rank " + std::to_string(rank));
    for (const auto& span : (*r.row)[key::kTimeline]) {
      t.spans.push_back({span.value(key::kRank, 0), number_at(span, key::kBeginMs),
                         number_at(span, key::kEndMs), span.value(key::kKind, std::string("?")),
                         span.value(key::kLabel, std::string())});
    }
    s.figures.push_back({"training step " + std::to_string(r.row->value(key::kTimelineStep, 0)) +
                             ": what each rank did (from the trace)",
                         chart::render(t)});
  }
  return {s};
}

}  // namespace dtrain::report::sections
