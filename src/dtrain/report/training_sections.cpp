// The HTML report's training sections: runs (epochs closed by a summary) drawn as curves per
// epoch, bars per run, time splits, and the pipeline's per-rank and per-link reports.
#include <cmath>
#include <map>

#include "dtrain/metrics/keys.h"
#include "dtrain/report/sections.h"

namespace dtrain::report::sections {

namespace key = metrics::key;
namespace {

using chart::Axis;
using chart::Scale;

struct Run {
  std::string name;
  std::vector<RowRef> epochs;
  const RowRef* summary = nullptr;
  const Row& last() const { return *epochs.back().row; }
};

// A run goes on while the label stays and the epoch grows; a summary closes the latest run
// of its label. Runs of the same name are numbered.
std::vector<Run> split_runs(const std::vector<RowRef>& refs, bool with_source) {
  std::vector<Run> runs;
  for (const auto& r : refs) {
    const std::string name = label(r, Kind::kEpoch, with_source);
    if (classify(*r.row) == Kind::kSummary) {
      for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
        if (it->name == name && !it->summary) {
          it->summary = &r;
          break;
        }
      }
      continue;
    }
    const double epoch = number_at(*r.row, key::kEpoch);
    if (runs.empty() || runs.back().name != name || runs.back().summary ||
        !(epoch > number_at(runs.back().last(), key::kEpoch))) {
      runs.push_back({name, {}, nullptr});
    }
    runs.back().epochs.push_back(r);
  }
  std::map<std::string, int> seen;
  for (auto& run : runs) {
    const int n = ++seen[run.name];
    if (run.name.empty()) run.name = "run";
    if (n > 1) run.name += " #" + std::to_string(n);
  }
  return runs;
}

chart::Series per_epoch(const Run& run, const char* k) {
  chart::Series s{run.name, {}, false};
  for (const auto& e : run.epochs)
    s.points.push_back({number_at(*e.row, key::kEpoch), number_at(*e.row, k)});
  return s;
}

Figure per_epoch_figure(const std::vector<Run>& runs, const char* title, const char* k,
                        const char* y_title) {
  chart::LineChart c{{"epoch"}, {y_title}, {}, true};
  c.x.integers = true;
  for (const auto& run : runs)
    c.series.push_back(per_epoch(run, k));
  return {title, chart::render(c)};
}

// Bars: one category per item, one series per (key, name).
Figure bars(const std::string& title, const std::string& x_title, const Axis& y,
            const std::vector<std::string>& categories, const std::vector<const Row*>& rows,
            const std::vector<std::pair<const char*, const char*>>& series, bool stacked) {
  chart::BarChart c{x_title, y, categories, {}, stacked};
  for (const auto& [k, name] : series) {
    chart::BarSeries s{name, {}};
    for (const Row* row : rows)
      s.values.push_back(number_at(*row, k));
    c.series.push_back(std::move(s));
  }
  return {title, chart::render(c)};
}

void epoch_figures(const std::vector<Run>& runs, Section& s) {
  bool curves = false;
  for (const auto& run : runs)
    curves = curves || run.epochs.size() > 1;
  if (curves) {
    s.figures.push_back(
        per_epoch_figure(runs, "training loss per epoch", key::kTrainLoss, "train loss"));
    s.figures.push_back(per_epoch_figure(runs, "test accuracy per epoch", key::kTestAcc,
                                         "test accuracy (fraction)"));
  }
  std::vector<std::string> names;
  std::vector<const Row*> last;
  size_t epochs = 0;
  for (const auto& run : runs) {
    names.push_back(run.name);
    last.push_back(&run.last());
    epochs += run.epochs.size();
  }
  if (runs.size() > 1) {  // a comparison; one run's numbers are in its table
    s.figures.push_back(bars("samples per second, last epoch (higher is better)", "run",
                             {"samples/s"}, names, last, {{key::kSamplesPerS, "samples/s"}},
                             false));
    s.figures.push_back(bars("test accuracy, last epoch", "run", {"test accuracy (fraction)"},
                             names, last, {{key::kTestAcc, "test accuracy"}}, false));
  }
  std::vector<std::string> split_names = names;
  std::vector<const Row*> split_rows = last;
  if (epochs <= 24 && curves) {
    split_names.clear();
    split_rows.clear();
    for (const auto& run : runs) {
      for (const auto& e : run.epochs) {
        split_names.push_back(run.name + " e" + std::to_string(e.row->value(key::kEpoch, 0)));
        split_rows.push_back(e.row);
      }
    }
  }
  s.figures.push_back(
      bars(curves && epochs <= 24 ? "time split per epoch" : "time split, last epoch", "run",
           {"time (s)"}, split_names, split_rows,
           {{key::kTimeDataS, "data wait"},
            {key::kTimeForwardS, "forward"},
            {key::kTimeBackwardS, "backward"},
            {key::kTimeOptimizerS, "optimizer"},
            {key::kTimeCommS, "communication (exposed)"}},
           true));
}

// The pipeline's per-rank rows, per-link rows and bubble, from each run's last epoch.
void pipeline_figures(const std::vector<Run>& runs, Section& s) {
  std::vector<std::string> run_names, rank_names, link_names;
  std::vector<const Row*> run_rows, rank_rows, link_rows;
  std::vector<Row> effective;  // links' bytes over the epoch's wall time
  for (const auto& run : runs) {
    const Row& last = run.last();
    if (!last.contains(key::kStages) || !last[key::kStages].is_array()) continue;
    run_names.push_back(run.name);
    run_rows.push_back(&last);
    for (const auto& stage : last[key::kStages]) {
      rank_names.push_back(run.name + " r" + std::to_string(stage.value(key::kRank, 0)));
      rank_rows.push_back(&stage);
    }
    if (!last.contains(key::kLinks) || !last[key::kLinks].is_array()) continue;
    for (const auto& link : last[key::kLinks]) {
      link_names.push_back(run.name + " " + std::to_string(link.value(key::kSrc, 0)) + "->" +
                           std::to_string(link.value(key::kDst, 0)) + " " +
                           link.value(key::kDirection, std::string()));
      link_rows.push_back(&link);
      Row e = link;
      e["effective_gbps"] = number_at(link, key::kBytes) / number_at(last, key::kEpochS) / 1e9;
      effective.push_back(std::move(e));
    }
  }
  if (run_rows.empty()) return;
  s.figures.push_back(bars("pipeline bubble: measured against ideal (S-1)/(M+S-1)", "run",
                           {"bubble (fraction of the step)"}, run_names, run_rows,
                           {{key::kBubbleMeasured, "measured"}, {key::kBubbleIdeal, "ideal"}},
                           false));
  s.figures.push_back(bars("per-rank time split, last epoch", "run / rank", {"time (s)"},
                           rank_names, rank_rows,
                           {{key::kForwardS, "forward"},
                            {key::kBackwardS, "backward"},
                            {key::kEncodeS, "encode"},
                            {key::kDecodeS, "decode"},
                            {key::kRecvWaitS, "receive wait"},
                            {key::kSendWaitS, "send wait"},
                            {key::kIdleS, "idle"}},
                           true));
  if (link_rows.empty()) return;
  s.figures.push_back(bars("per-link traffic, last epoch", "run / link (seen by the receiver)",
                           {"bytes", Scale::kLog, chart::TickFormat::kBytes}, link_names, link_rows,
                           {{key::kBytes, "bytes"}}, false));
  std::vector<const Row*> effective_rows;
  for (const auto& e : effective)
    effective_rows.push_back(&e);
  s.figures.push_back(bars("per-link bandwidth, last epoch", "run / link", {"GB/s", Scale::kLog},
                           link_names, effective_rows,
                           {{key::kBandwidthGbps, "link: bytes / time on the wire"},
                            {"effective_gbps", "effective: bytes / epoch time"}},
                           false));
}

void ddp_figures(const std::vector<Run>& runs, Section& s) {
  std::vector<std::string> names;
  std::vector<const Row*> rows;
  for (const auto& run : runs) {
    if (!run.last().contains(key::kCommTotalS)) continue;
    names.push_back(run.name);
    rows.push_back(&run.last());
  }
  if (rows.empty()) return;
  s.figures.push_back(bars("data parallel: gradient communication, last epoch", "run", {"time (s)"},
                           names, rows,
                           {{key::kCommTotalS, "all-reduce time (total)"},
                            {key::kCommExposedS, "exposed (not hidden by backward)"}},
                           false));
}

// One run's epochs as a table (a run's own report: the numbers a chart of one point would
// hide).
std::string epoch_table(const Run& run) {
  std::string html =
      "<table><tr><th>epoch</th><th>train loss</th><th>train acc</th><th>test loss</th>"
      "<th>test acc</th><th>samples/s</th><th>time (s)</th></tr>";
  for (const auto& e : run.epochs) {
    html += "<tr>";
    for (const char* k : {key::kEpoch, key::kTrainLoss, key::kTrainAcc, key::kTestLoss,
                          key::kTestAcc, key::kSamplesPerS, key::kEpochS})
      html += "<td>" + chart::short_number(number_at(*e.row, k)) + "</td>";
    html += "</tr>";
  }
  return html + "</table>";
}

std::string summary_table(const std::vector<Run>& runs) {
  std::string html =
      "<table><tr><th>run</th><th>model</th><th>dataset</th><th>parallel</th><th>ranks</th>"
      "<th>epochs</th><th>final test acc</th><th>samples/s</th><th>total (s)</th></tr>";
  int rows = 0;
  for (const auto& run : runs) {
    if (!run.summary) continue;
    const Row& r = *run.summary->row;
    const auto text = [&](const char* k) {
      const auto it = r.find(k);
      if (it == r.end() || it->is_null()) return std::string("-");
      return it->is_string()         ? it->get<std::string>()
             : it->is_number_float() ? chart::short_number(it->get<double>())
                                     : it->dump();
    };
    html += "<tr><td>" + chart::escape_xml(run.name) + "</td>";
    for (const char* k : {key::kModel, key::kDataset, key::kParallel, key::kRanks, key::kEpochs,
                          key::kFinalTestAcc, key::kSamplesPerS, key::kTotalS})
      html += "<td>" + chart::escape_xml(text(k)) + "</td>";
    html += "</tr>";
    ++rows;
  }
  return rows ? html + "</table>" : "";
}

}  // namespace

std::vector<Section> training_sections(const std::vector<RowRef>& refs, bool with_source) {
  const auto runs = split_runs(refs, with_source);
  std::vector<Run> with_epochs;
  for (const auto& run : runs) {
    if (!run.epochs.empty()) with_epochs.push_back(run);
  }
  Section s{"Training", caption(refs), {}, summary_table(runs)};
  if (runs.size() == 1 && !runs[0].epochs.empty()) s.table_html += epoch_table(runs[0]);
  if (!with_epochs.empty()) {
    epoch_figures(with_epochs, s);
    pipeline_figures(with_epochs, s);
    ddp_figures(with_epochs, s);
  }
  return {s};
}

}  // namespace dtrain::report::sections
