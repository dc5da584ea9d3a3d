// The HTML report's charts and row reading, as pure functions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "dtrain/report/chart.h"
#include "dtrain/report/html_report.h"
#include "dtrain/report/pipeline_timeline.h"

namespace dtrain::report {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

TEST(ChartTest, LogBytesAxisTicksArePowersOfTwoAndBadPointsAreDropped) {
  chart::LineChart c;
  c.x = {"message size (bytes)", chart::Scale::kLog, chart::TickFormat::kBytes};
  c.y = {"time (us)", chart::Scale::kLog};
  c.series = {{"ring", {{4096, 10}, {1 << 20, 100}, {1 << 24, NAN}, {0, 5}}, false}};
  const auto r = chart::render(c);
  EXPECT_EQ(r.points, 2);
  EXPECT_EQ(r.dropped_points, 2);  // NaN, and 0 on a log axis
  EXPECT_EQ(count(r.svg, "class=\"pt\""), 2);
  EXPECT_NE(r.svg.find(">4 KiB<"), std::string::npos) << r.svg;
  EXPECT_NE(r.svg.find(">1 MiB<"), std::string::npos);
  EXPECT_NE(r.svg.find("message size (bytes)"), std::string::npos);
  EXPECT_NE(r.svg.find("time (us)"), std::string::npos);
}

TEST(ChartTest, StackedBarsSumAndEscapeNames) {
  chart::BarChart c;
  c.x_title = "run";
  c.y.title = "time (s)";
  c.categories = {"a<b", "c"};
  c.series = {{"forward", {1, 2}}, {"backward", {3, NAN}}};
  c.stacked = true;
  const auto r = chart::render(c);
  EXPECT_EQ(r.points, 3);
  EXPECT_EQ(r.dropped_points, 0);  // NaN means "no bar", not a bad value
  EXPECT_NE(r.svg.find("a&lt;b"), std::string::npos);
  EXPECT_EQ(r.svg.find("a<b"), std::string::npos);
  // The stack reaches 4: the axis goes at least that far.
  EXPECT_NE(r.svg.find(">4<"), std::string::npos) << r.svg;
}

TEST(ChartTest, TimelineDrawsASpanPerRectOnItsLaneAndCountsBadSpans) {
  chart::Timeline t;
  t.x = {"time in the step (ms)"};
  t.lane_title = "rank";
  t.lanes = {"rank 0", "rank 1"};
  t.spans = {{0, 0, 2, "forward", "micro-batch 0"},
             {1, 2, 5, "forward", "micro-batch 0"},
             {0, 5, 6, "receive wait", ""},
             {2, 0, 1, "forward", ""},    // no such lane
             {1, 3, 2, "backward", ""}};  // ends before it begins
  const auto r = chart::render(t);
  EXPECT_EQ(r.points, 3);
  EXPECT_EQ(r.dropped_points, 2);
  EXPECT_EQ(count(r.svg, "class=\"bar\""), 3);
  EXPECT_NE(r.svg.find("forward, micro-batch 0: 2 .. 5"), std::string::npos) << r.svg;
  EXPECT_NE(r.svg.find(">receive wait<"), std::string::npos);  // in the legend
  EXPECT_NE(r.svg.find(">rank 1<"), std::string::npos);
}

// A trace's events ("X" spans, pid = rank) into one step per rank: rank 0's second-to-last
// train step is the window; spans are clipped to it and timed from its start.
TEST(PipelineTimelineTest, TheSecondToLastStepOfRankZeroWithEveryRanksSpansInIt) {
  const auto span = [](int pid, const char* cat, const char* name, double ts, double dur) {
    return nlohmann::json{{"ph", "X"},    {"pid", pid}, {"tid", 0},  {"cat", cat},
                          {"name", name}, {"ts", ts},   {"dur", dur}};
  };
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"pid", 0}, {"name", "thread_name"}});
  for (const double start : {0.0, 1000.0, 2000.0})
    events.push_back(span(0, "step", "train step", start, 900));
  nlohmann::json forward = span(0, "compute", "forward", 1100, 200);
  forward["args"] = {{"micro-batch", 2}};
  events.push_back(forward);
  events.push_back(span(1, "communication", "receive wait", 950, 200));  // clipped at 1000
  events.push_back(span(1, "compute", "backward", 2100, 100));           // the last step: out
  events.push_back(span(1, "step", "train step", 1000, 900));            // not a drawn kind
  const auto row = report::pipeline_step_timeline(events);
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ((*row)["timeline_step"], 2);
  const auto& spans = (*row)["timeline"];
  ASSERT_EQ(spans.size(), 2u) << spans.dump();
  EXPECT_EQ(spans[0]["kind"], "forward");
  EXPECT_EQ(spans[0]["label"], "micro-batch 2");
  EXPECT_DOUBLE_EQ(spans[0]["begin_ms"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(spans[0]["end_ms"].get<double>(), 0.3);
  EXPECT_EQ(spans[1]["rank"], 1);
  EXPECT_DOUBLE_EQ(spans[1]["begin_ms"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(spans[1]["end_ms"].get<double>(), 0.15);
  // One step of rank 0, or spans of one rank only: nothing to draw.
  nlohmann::json one_step = nlohmann::json::array(
      {span(0, "step", "train step", 0, 900), span(1, "compute", "forward", 10, 5)});
  EXPECT_FALSE(report::pipeline_step_timeline(one_step).has_value());
  nlohmann::json one_rank = nlohmann::json::array({span(0, "step", "train step", 0, 900),
                                                   span(0, "step", "train step", 1000, 900),
                                                   span(0, "compute", "forward", 10, 5)});
  EXPECT_FALSE(report::pipeline_step_timeline(one_rank).has_value());
  EXPECT_FALSE(report::pipeline_step_timeline(nlohmann::json::object()).has_value());
}

// A run's own report: the step log's curves, an epoch table instead of one-bar charts, the
// pipeline step, and the command once per section, not under every chart.
TEST(HtmlReportTest, ARunsReportDrawsItsCurvesItsStepAndNoOneBarCharts) {
  std::vector<Row> rows;
  for (int step = 1; step <= 4; ++step)
    rows.push_back(Row{{"step", step * 10},
                       {"epoch_progress", step * 0.25},
                       {"elapsed_s", step * 1.5},
                       {"train_loss", 2.0 / step},
                       {"train_acc", 0.2 * step},
                       {"samples_per_s", 900},
                       {"command", "dtrain train --the-command"}});
  rows.push_back(Row{{"epoch", 1},
                     {"train_loss", 1.0},
                     {"test_acc", 0.8},
                     {"samples_per_s", 900},
                     {"epoch_s", 6.0},
                     {"command", "dtrain train --the-command"}});
  rows.push_back(
      Row{{"timeline",
           {{{"rank", 0}, {"kind", "forward"}, {"begin_ms", 0}, {"end_ms", 1}, {"label", ""}},
            {{"rank", 1}, {"kind", "forward"}, {"begin_ms", 1}, {"end_ms", 2}, {"label", ""}}}},
          {"timeline_step", 3},
          {"command", "dtrain train --the-command"}});
  const ReportResult r = render_report({{"this run", rows, {}}}, {});
  EXPECT_TRUE(r.problems.empty()) << r.problems[0].what;
  for (const char* title :
       {"training loss over steps", "training accuracy over steps", "training loss over time",
        "throughput over time", "training step 3: what each rank did"})
    EXPECT_NE(r.html.find(title), std::string::npos) << title;
  EXPECT_EQ(r.html.find("samples per second, last epoch"), std::string::npos);
  EXPECT_EQ(r.html.find("test accuracy, last epoch"), std::string::npos);
  EXPECT_NE(r.html.find("<th>test acc</th>"), std::string::npos);  // the epoch table
  EXPECT_EQ(count(r.html, "<h2>"), 3);
  EXPECT_EQ(count(r.html, "dtrain train --the-command"), 3) << "once per section";
}

std::string write_temp(const std::string& text) {
  char name[] = "/tmp/dtrain-report-test-XXXXXX";
  const int fd = mkstemp(name);
  close(fd);
  std::ofstream(name) << text;
  return name;
}

TEST(HtmlReportTest, MalformedAndUnknownLinesAreReportedWithTheirLineNumbers) {
  const std::string path = write_temp(
      "{\"bench\":\"p2p\",\"world\":2,\"bytes\":4,\"latency_us\":30,\"bandwidth_gbps\":0.1,"
      "\"command\":\"dtrain bench p2p -n 2\"}\n"
      "{not json\n"
      "\n"
      "[1,2]\n"
      "{\"something\":1}\n"
      "{\"bench\":\"p2p\",\"world\":2,\"bytes\":4096,\"latency_us\":40,\"bandwidth_gbps\":0.2}\n");
  std::vector<ReportProblem> problems;
  const ReportSource source = read_report_source(path, problems);
  unlink(path.c_str());
  ASSERT_EQ(source.rows.size(), 3u);
  EXPECT_EQ(source.lines, (std::vector<int>{1, 5, 6}));
  const ReportResult r = render_report({source}, {}, problems);
  ASSERT_EQ(r.problems.size(), 3u);
  EXPECT_EQ(r.problems[0].line, 2);
  EXPECT_EQ(r.problems[1].line, 4);
  EXPECT_EQ(r.problems[2].line, 5);
  EXPECT_EQ(r.charts, 2);  // latency and bandwidth
  EXPECT_EQ(r.points, 4);
  EXPECT_NE(r.html.find("dtrain bench p2p -n 2"), std::string::npos);  // the caption
  EXPECT_NE(r.html.find("lines 1, 6"), std::string::npos);
  EXPECT_EQ(r.html.find("<script"), std::string::npos);
  // Nothing fetched: the only URL is the SVG namespace name.
  EXPECT_EQ(count(r.html, "http://"), count(r.html, "http://www.w3.org/2000/svg"));
  EXPECT_EQ(count(r.html, "https://"), 0);
}

TEST(HtmlReportTest, RunsSplitByLabelAndEpochAndSourcesOverlay) {
  const auto epoch = [](const std::string& run, int e, double loss) {
    return Row{{"run", run},      {"epoch", e},           {"train_loss", loss},
               {"test_acc", 0.5}, {"samples_per_s", 100}, {"epoch_s", 1.0}};
  };
  const ReportSource a{
      "a.jsonl",
      {epoch("none", 1, 2.0), epoch("none", 2, 1.0), epoch("fp16", 1, 2.1), epoch("fp16", 2, 1.1)},
      {1, 2, 3, 4}};
  const ReportSource b{"b.jsonl", {epoch("none", 1, 2.2), epoch("none", 2, 1.2)}, {1, 2}};
  const ReportResult r = render_report({a, b}, {});
  EXPECT_TRUE(r.problems.empty());
  // Three runs: the loss chart has three series named with their source.
  const std::string loss = r.html.substr(r.html.find("training loss per epoch"));
  EXPECT_NE(loss.find("data-series=\"none [a]\""), std::string::npos);
  EXPECT_NE(loss.find("data-series=\"fp16 [a]\""), std::string::npos);
  EXPECT_NE(loss.find("data-series=\"none [b]\""), std::string::npos);
  const ReportResult separate = render_report({a, b}, {"t", "", true});
  EXPECT_EQ(separate.html.find("[a]"), std::string::npos);
  EXPECT_NE(separate.html.find("a.jsonl: Training"), std::string::npos);
}

}  // namespace
}  // namespace dtrain::report
