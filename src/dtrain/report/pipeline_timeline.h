// One training step of a pipeline as every rank spent it, taken from a run's trace events
// (metrics/trace.h, gathered by rank 0): the report draws it as a timeline per rank, the
// picture of the GPipe and 1F1B papers, measured.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>

#include "dtrain/metrics/rows.h"

namespace dtrain::report {

// From Chrome trace events ("X" spans with pid = rank): the window of rank 0's
// second-to-last "train step" span (the last may be a short tail), and every rank's compute,
// codec, communication and data spans that overlap it, clipped to it, in milliseconds from
// the window's start. A row with metrics::key::kTimeline (the spans: rank, kind, begin_ms,
// end_ms, label) and kTimelineStep (which step, 1-based). nullopt when rank 0 ran fewer than
// two training steps or the spans come from fewer than two ranks.
std::optional<metrics::Row> pipeline_step_timeline(const nlohmann::json& events);

}  // namespace dtrain::report
