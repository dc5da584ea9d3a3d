// The HTML report's charts and row reading, as pure functions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "dtrain/report/chart.h"
#include "dtrain/report/html_report.h"

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
