// Internal to the charts (chart.cpp, timeline_chart.cpp): the frame every chart is drawn
// in, its axes, legend and colours, as SVG text.
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/report/chart.h"

namespace dtrain::report::chart::svg {

constexpr int kWidth = 720;
constexpr int kPlotHeight = 300;
constexpr int kLeft = 78;
constexpr int kRight = 24;
constexpr int kTop = 16;
constexpr int kLegendColumn = 230;
constexpr int kLegendLine = 18;
constexpr int kMaxLabel = 30;

std::string colour(size_t i);  // the i-th colour of the palette (cycling)
std::string number(double v);  // one decimal, for coordinates
bool drawable(double v, Scale scale);

// An axis' data range made into a drawable domain with its tick values.
struct Domain {
  double lo = 0;
  double hi = 1;
  Scale scale = Scale::kLinear;
  std::vector<double> ticks;

  double t(double v) const { return scale == Scale::kLog ? std::log10(v) : v; }
  double fraction(double v) const { return (t(v) - t(lo)) / (t(hi) - t(lo)); }
};
Domain make_domain(const std::vector<double>& values, const Axis& axis);
std::string tick_label(double v, TickFormat format);
std::string truncated(const std::string& text);  // at most kMaxLabel characters

// The frame, grid and tick labels of both axes; x ticks are numbers or category names.
struct Frame {
  int plot_width = kWidth - kLeft - kRight;
  int bottom = kTop + kPlotHeight;  // y pixel of the x axis
  int height = 0;                   // whole SVG

  double px(const Domain& d, double v) const { return kLeft + d.fraction(v) * plot_width; }
  double py(const Domain& d, double v) const { return bottom - d.fraction(v) * kPlotHeight; }
};

void x_axis(std::ostringstream& s, const Frame& f, const Domain& d, const Axis& axis);
void y_axis(std::ostringstream& s, const Frame& f, const Domain& d, const Axis& axis);
void frame_box(std::ostringstream& s, const Frame& f);
// Legend entries below the plot from `top`, a line of each series' colour (dashed or not).
void legend(std::ostringstream& s, int top, const std::vector<std::string>& names,
            const std::vector<bool>& dashed);
int legend_height(size_t entries);
// `pad_left`: room left of the usual frame (slanted category labels reaching past it).
std::string open_svg(int height, int pad_left = 0);
void no_data_note(std::ostringstream& s, const Frame& f, int points);

}  // namespace dtrain::report::chart::svg
