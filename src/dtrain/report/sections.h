// Internal to the HTML report: what kind of result a row is, by its keys, and the sections
// of charts each kind draws. html_report.cpp assembles the page from these sections.
#pragma once

#include <string>
#include <vector>

#include "dtrain/metrics/rows.h"
#include "dtrain/report/chart.h"

namespace dtrain::report::sections {

using Row = metrics::Row;

enum class Kind {
  kCollective,  // bench collective: time and busbw against size
  kP2p,         // bench p2p: latency and bandwidth against size
  kCodec,       // bench codec: ratio against error, throughput
  kEpoch,       // a training epoch (train --metrics, every mode)
  kSummary,     // the row closing a training run
  kScaling,     // dtrain scale: one row per world size
  kThroughput,  // a labelled samples/s figure without epochs (e.g. bench/pytorch_ddp.py)
  kStep,        // a step-log row (train --step-log, a run's own report)
  kTimeline,    // one pipeline step per rank, from a run's trace (pipeline_timeline.h)
  kUnknown,
};

Kind classify(const Row& row);

// One row and where it came from.
struct RowRef {
  const Row* row = nullptr;
  std::string source;  // the file as given
  int line = 0;        // 1-based line in it (0: not from a file)
};

struct Figure {
  std::string title;
  chart::Rendered chart;
};

struct Section {
  std::string title;
  std::string caption;  // where the data came from and the command that produced it
  std::vector<Figure> figures;
  std::string table_html;  // optional: a table instead of, or beside, the charts
};

// The label of a row: its string and boolean values that are not the kind's own fields
// (e.g. run=..., rate=..., impl=...), joined by spaces; plus "[source]" when `with_source`.
std::string label(const RowRef& ref, Kind kind, bool with_source);

// "data: a.jsonl lines 1-12; command: dtrain bench collective ..." for these rows.
std::string caption(const std::vector<RowRef>& refs);

// Number at `key`, or NaN when absent or not a number.
double number_at(const Row& row, const char* key);

// The sections each kind draws from its rows (all of one kind); empty when none.
std::vector<Section> collective_sections(const std::vector<RowRef>& refs, bool with_source);
std::vector<Section> p2p_sections(const std::vector<RowRef>& refs, bool with_source);
std::vector<Section> codec_sections(const std::vector<RowRef>& refs, bool with_source);
std::vector<Section> scaling_sections(const std::vector<RowRef>& refs, bool with_source);
std::vector<Section> throughput_sections(const std::vector<RowRef>& refs, bool with_source);
// Epoch and summary rows together (a run is its epochs, closed by its summary).
std::vector<Section> training_sections(const std::vector<RowRef>& refs, bool with_source);
// Step-log rows: loss and accuracy over steps and time, samples/s over time.
std::vector<Section> step_sections(const std::vector<RowRef>& refs, bool with_source);
// Timeline rows: a pipeline step drawn per rank.
std::vector<Section> timeline_sections(const std::vector<RowRef>& refs, bool with_source);

}  // namespace dtrain::report::sections
