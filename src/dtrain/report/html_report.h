// The HTML report (`dtrain report`, and --report on train, scale and the benches): one
// self-contained page of inline SVG charts drawn from result rows. Each row's kind is
// recognized from its keys (a collective sweep, p2p, codecs, training epochs and summaries,
// a scaling study, a labelled throughput); several sources overlay their runs in one chart
// with a legend, or get sections of their own (per_source).
//
// Contract
// - The page references nothing outside itself: no scripts, fonts, styles or images.
// - Every chart has axis titles with units and a caption naming the data (source and lines)
//   and the command that produced it (the rows' "command" key, which dtrain writes).
// - Malformed lines and rows of no known kind are listed on the page and in
//   ReportResult::problems (source and line) and skipped; nothing throws for bad data.
#pragma once

#include <string>
#include <vector>

#include "dtrain/metrics/rows.h"

namespace dtrain::report {

using Row = metrics::Row;

struct ReportSource {
  std::string name;        // shown in captions: the file as given, or "this run"
  std::vector<Row> rows;   // in order
  std::vector<int> lines;  // the 1-based line of each row (empty: not from a file)
};

struct ReportProblem {
  std::string source;
  int line = 0;
  std::string what;
};

// Reads JSON lines; a line that is not a JSON object becomes a problem and is skipped.
// Throws std::runtime_error only when the file cannot be opened.
ReportSource read_report_source(const std::string& path, std::vector<ReportProblem>& problems);

struct ReportOptions {
  std::string title = "dtrain report";
  std::string generated_by;  // the command that made the page, shown at its top
  bool per_source = false;   // a section per source instead of overlaying them
};

struct ReportResult {
  std::string html;
  int charts = 0;
  int points = 0;  // data points and bars drawn, over all charts
  std::vector<ReportProblem> problems;
};

// `problems` found while reading are passed in so the page lists them too.
ReportResult render_report(const std::vector<ReportSource>& sources, const ReportOptions& options,
                           std::vector<ReportProblem> problems = {});

// Renders and writes `path` (throws std::runtime_error when it cannot be written).
ReportResult write_report(const std::string& path, const std::vector<ReportSource>& sources,
                          const ReportOptions& options, std::vector<ReportProblem> problems = {});

}  // namespace dtrain::report
