// `dtrain report FILE.jsonl... -o report.html`: the results of any dtrain command (and of the
// bench/ comparisons) as one self-contained HTML page of charts (metrics/html_report.h).
#include <iostream>
#include <memory>

#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/report/html_report.h"

namespace dtrain::cli {
namespace {

struct ReportOptions {
  std::vector<std::string> files;
  std::string out = "report.html";
  std::string title = "dtrain report";
  bool per_file = false;
};

int run_report(const ReportOptions& o) {
  std::vector<report::ReportProblem> problems;
  std::vector<report::ReportSource> sources;
  for (const auto& f : o.files)
    sources.push_back(report::read_report_source(f, problems));
  report::ReportOptions options;
  options.title = o.title;
  options.generated_by = command_line();
  options.per_source = o.per_file;
  const auto result = report::write_report(o.out, sources, options, std::move(problems));
  for (const auto& p : result.problems)
    std::cerr << "report: skipped " << p.source << (p.line > 0 ? ":" + std::to_string(p.line) : "")
              << ": " << p.what << std::endl;
  std::cerr << "report: " << o.out << ": " << result.charts << " charts, " << result.points
            << " data points from " << sources.size() << " file(s); " << result.problems.size()
            << " line(s) skipped" << std::endl;
  if (result.charts == 0) {
    std::cerr << "dtrain: error: nothing to draw: no rows of a kind the report knows (bench "
                 "collective/p2p/codec, train --metrics, scale)"
              << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace

void register_report(CLI::App& parent, int& exit_code) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* sub = parent.add_subcommand(
      "report",
      "draw result files (JSON lines of train --metrics, bench ... --format jsonl, scale) as one "
      "self-contained HTML page of charts; several files overlay their runs");
  sub->add_option("files", o->files, "JSON-lines result files")->required();
  sub->add_option("-o,--out", o->out, "the HTML page to write")->capture_default_str();
  sub->add_option("--title", o->title, "the page's title")->capture_default_str();
  sub->add_flag("--per-file", o->per_file,
                "a section per file instead of overlaying the files' runs in shared charts");
  sub->callback([o, &exit_code] { exit_code = run_report(*o); });
}

}  // namespace dtrain::cli
