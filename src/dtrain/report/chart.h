// Charts as inline SVG, for the HTML report: line/point charts on linear or log axes,
// grouped or stacked bar charts, and timelines of spans on lanes. Pure functions of their data: no
// fonts, scripts or files are referenced, so a page embedding the result is self-contained.
//
// Contract
// - Every data point is one element with class "pt" (a circle) or "bar" (a rect) carrying a
//   <title> with its series and values, so a reader (or a test) can find and hover them.
// - Points that cannot be drawn (NaN, or <= 0 on a log axis) are left out and counted in
//   dropped_points(); a chart with no drawable point still renders, saying so.
// - Every axis shows its title (with the unit, given by the caller).
#pragma once

#include <string>
#include <vector>

namespace dtrain::report::chart {

enum class Scale { kLinear, kLog };
enum class TickFormat { kNumber, kBytes };  // kBytes: 4 KiB, 16 MiB (log ticks at powers of 2)

struct Axis {
  std::string title;  // with its unit, e.g. "message size (bytes)"
  Scale scale = Scale::kLinear;
  TickFormat format = TickFormat::kNumber;
  bool from_zero = false;  // linear axes: include 0
  bool integers = false;   // linear axes: ticks at whole numbers only (epochs, ranks)
};

struct Point {
  double x = 0;
  double y = 0;
};

struct Series {
  std::string name;
  std::vector<Point> points;
  bool dashed = false;  // a reference (an ideal, a bound) rather than a measurement
};

struct LineChart {
  Axis x;
  Axis y;
  std::vector<Series> series;
  bool connect = true;  // false: points only (a scatter plot)
};

struct BarSeries {
  std::string name;
  std::vector<double> values;  // one per category; NaN: no bar
};

struct BarChart {
  std::string x_title;  // what the categories are
  Axis y;               // linear or log; bars start at the axis' lower end
  std::vector<std::string> categories;
  std::vector<BarSeries> series;
  bool stacked = false;
};

// Spans on lanes against time (a pipeline step, one lane per rank): each span one rect of
// class "bar" with a <title>, coloured by its kind, the kinds named in the legend in order
// of first appearance.
struct TimelineSpan {
  int lane = 0;
  double begin = 0, end = 0;  // on the x axis' scale
  std::string kind;           // colour and legend ("forward", "receive wait")
  std::string label;          // its tooltip beside the kind ("micro-batch 3")
};

struct Timeline {
  Axis x;                          // linear: time
  std::string lane_title;          // what a lane is ("rank")
  std::vector<std::string> lanes;  // top to bottom
  std::vector<TimelineSpan> spans;
};

struct Rendered {
  std::string svg;
  int points = 0;          // data elements drawn
  int dropped_points = 0;  // values that could not be drawn
};

Rendered render(const LineChart& chart);
Rendered render(const BarChart& chart);
Rendered render(const Timeline& chart);  // timeline_chart.cpp

// Short number for labels and tooltips: 3 significant digits, "1.2e+06" beyond 1e6.
std::string short_number(double v);
// Escapes &, <, >, " for HTML and SVG text.
std::string escape_xml(const std::string& text);

}  // namespace dtrain::report::chart
