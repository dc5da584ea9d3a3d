#include "dtrain/report/html_report.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "dtrain/report/sections.h"

namespace dtrain::report {
namespace {

using sections::Kind;
using sections::RowRef;
using sections::Section;

const char* const kStyle =
    "body{font-family:sans-serif;margin:24px auto;padding:0 16px;max-width:1500px;color:#222;"
    "background:#fff}"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;"
    "margin-top:32px}.meta,.caption,figcaption{color:#555;font-size:13px}"
    "figure{display:inline-block;vertical-align:top;margin:8px 12px 16px 0;max-width:720px}"
    "figcaption{margin-bottom:4px}figcaption b{color:#222;font-size:14px}"
    "svg.chart text{font-size:11px;fill:#333}svg.chart .axis-title{font-size:12px;fill:#111}"
    "svg.chart .grid{stroke:#e6e6e6}svg.chart .frame{stroke:#999}"
    "svg.chart .no-data{font-size:14px;fill:#a00}"
    "table{border-collapse:collapse;font-size:13px;margin:8px 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}nav li{font-size:14px}"
    "code{background:#f4f4f4;padding:1px 3px}";

using Builder = std::function<std::vector<Section>(const std::vector<RowRef>&, bool)>;

// The kinds in page order, each with the sections it draws.
const std::vector<std::pair<std::vector<Kind>, Builder>>& builders() {
  static const std::vector<std::pair<std::vector<Kind>, Builder>> all = {
      {{Kind::kStep}, sections::step_sections},
      {{Kind::kEpoch, Kind::kSummary}, sections::training_sections},
      {{Kind::kTimeline}, sections::timeline_sections},
      {{Kind::kScaling}, sections::scaling_sections},
      {{Kind::kCollective}, sections::collective_sections},
      {{Kind::kP2p}, sections::p2p_sections},
      {{Kind::kCodec}, sections::codec_sections},
      {{Kind::kThroughput}, sections::throughput_sections},
  };
  return all;
}

std::string keys_of(const Row& row) {
  std::string out;
  int n = 0;
  for (const auto& item : row.items()) {
    if (++n > 8) return out + ", ...";
    out += (out.empty() ? "" : ", ") + item.key();
  }
  return out;
}

// Sections for these rows (of any kinds); unknown ones become problems.
std::vector<Section> sections_for(const std::vector<RowRef>& refs, bool overlay,
                                  std::vector<ReportProblem>& problems) {
  std::vector<Section> out;
  std::vector<Kind> kind_of;  // each row classified once
  for (const auto& r : refs) {
    kind_of.push_back(sections::classify(*r.row));
    if (kind_of.back() == Kind::kUnknown) {
      problems.push_back(
          {r.source, r.line, "no chart for this kind of row (keys: " + keys_of(*r.row) + ")"});
    }
  }
  for (const auto& [kinds, build] : builders()) {
    std::vector<RowRef> mine;
    std::set<std::string> sources;
    for (size_t i = 0; i < refs.size(); ++i) {
      if (std::find(kinds.begin(), kinds.end(), kind_of[i]) == kinds.end()) continue;
      mine.push_back(refs[i]);
      sources.insert(refs[i].source);
    }
    if (mine.empty()) continue;
    for (auto& s : build(mine, overlay && sources.size() > 1))
      out.push_back(std::move(s));
  }
  return out;
}

std::string section_html(const Section& s, const std::string& id, ReportResult& result) {
  std::string html = "<section id=\"" + id + "\"><h2>" + chart::escape_xml(s.title) +
                     "</h2><p class=\"caption\">" + chart::escape_xml(s.caption) + "</p>" +
                     s.table_html;
  for (const auto& f : s.figures) {
    // The section's caption (data and command) stands once, under its heading.
    html += "<figure class=\"chart-figure\"><figcaption><b>" + chart::escape_xml(f.title) +
            "</b></figcaption>" + f.chart.svg + "</figure>";
    ++result.charts;
    result.points += f.chart.points;
  }
  return html + "</section>";
}

std::string problems_html(const std::vector<ReportProblem>& problems) {
  if (problems.empty()) return "";
  std::string html = "<section id=\"skipped\"><h2>Skipped lines (" +
                     std::to_string(problems.size()) + ")</h2><details" +
                     (problems.size() <= 12 ? " open" : "") +
                     "><summary>lines left out of the report" + "</summary><ul>";
  for (const auto& p : problems) {
    html += "<li>" + chart::escape_xml(p.source) +
            (p.line > 0 ? ":" + std::to_string(p.line) : "") + ": " + chart::escape_xml(p.what) +
            "</li>";
  }
  return html + "</ul></details></section>";
}

}  // namespace

ReportSource read_report_source(const std::string& path, std::vector<ReportProblem>& problems) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  ReportSource source{path, {}, {}};
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Row row = Row::parse(text, nullptr, false);
    if (row.is_discarded()) {
      problems.push_back({path, line, "not JSON"});
    } else if (!row.is_object()) {
      problems.push_back({path, line, "not a JSON object"});
    } else {
      source.rows.push_back(std::move(row));
      source.lines.push_back(line);
    }
  }
  return source;
}

ReportResult render_report(const std::vector<ReportSource>& sources, const ReportOptions& options,
                           std::vector<ReportProblem> problems) {
  std::vector<std::pair<std::string, std::vector<RowRef>>> groups;  // title prefix, rows
  for (const auto& src : sources) {
    if (groups.empty() || options.per_source)
      groups.push_back({options.per_source ? src.name : "", {}});
    for (size_t i = 0; i < src.rows.size(); ++i) {
      const int line = i < src.lines.size() ? src.lines[i] : 0;
      groups.back().second.push_back({&src.rows[i], src.name, line});
    }
  }
  ReportResult result;
  std::string body, contents;
  int n = 0;
  for (const auto& [prefix, refs] : groups) {
    for (auto& s : sections_for(refs, !options.per_source, problems)) {
      if (!prefix.empty()) s.title = prefix + ": " + s.title;
      const std::string id = "s" + std::to_string(++n);
      contents += "<li><a href=\"#" + id + "\">" + chart::escape_xml(s.title) + "</a> (" +
                  std::to_string(s.figures.size()) + " charts)</li>";
      body += section_html(s, id, result);
    }
  }
  result.html = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
                chart::escape_xml(options.title) + "</title><style>" + kStyle +
                "</style></head><body><h1>" + chart::escape_xml(options.title) +
                "</h1><p class=\"meta\">" +
                (options.generated_by.empty()
                     ? ""
                     : "made by <code>" + chart::escape_xml(options.generated_by) + "</code>; ") +
                std::to_string(sources.size()) + " source(s), " + std::to_string(result.charts) +
                " charts, " + std::to_string(result.points) +
                " data points; hover a point for "
                "its values</p>" +
                (body.empty() ? "<p>No rows of a kind this report draws.</p>" : "") + "<nav><ul>" +
                contents + "</ul></nav>" + body + problems_html(problems) + "</body></html>\n";
  result.problems = std::move(problems);
  return result;
}

ReportResult write_report(const std::string& path, const std::vector<ReportSource>& sources,
                          const ReportOptions& options, std::vector<ReportProblem> problems) {
  ReportResult result = render_report(sources, options, std::move(problems));
  std::ofstream out(path);
  out << result.html;
  if (!out) throw std::runtime_error("cannot write " + path);
  return result;
}

}  // namespace dtrain::report
