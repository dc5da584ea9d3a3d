#include "dtrain/report/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "dtrain/metrics/rows.h"

namespace dtrain::report::chart {
namespace {

constexpr int kWidth = 720;
constexpr int kPlotHeight = 300;
constexpr int kLeft = 78;
constexpr int kRight = 24;
constexpr int kTop = 16;
constexpr int kLegendColumn = 230;
constexpr int kLegendLine = 18;
constexpr int kMaxLabel = 30;

const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6"};
constexpr int kColours = 10;

std::string colour(size_t i) {
  return kPalette[i % kColours];
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

bool drawable(double v, Scale scale) {
  return std::isfinite(v) && (scale == Scale::kLinear || v > 0);
}

// An axis' data range made into a drawable domain with its tick values.
struct Domain {
  double lo = 0;
  double hi = 1;
  Scale scale = Scale::kLinear;
  std::vector<double> ticks;

  double t(double v) const { return scale == Scale::kLog ? std::log10(v) : v; }
  double fraction(double v) const { return (t(v) - t(lo)) / (t(hi) - t(lo)); }
};

double nice_step(double range, int target) {
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10 * magnitude;
}

Domain linear_domain(double lo, double hi, bool from_zero, bool integers) {
  if (from_zero) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  Domain d;
  const double step = integers ? std::max(1.0, nice_step(hi - lo, 5)) : nice_step(hi - lo, 5);
  d.lo = std::floor(lo / step) * step;
  d.hi = std::ceil(hi / step) * step;
  for (double v = d.lo; v <= d.hi + step * 1e-9; v += step)
    d.ticks.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return d;
}

Domain log_domain(double lo, double hi, TickFormat format) {
  Domain d;
  d.scale = Scale::kLog;
  if (format == TickFormat::kBytes) {
    const int e_lo = static_cast<int>(std::floor(std::log2(lo)));
    const int e_hi = std::max(e_lo + 1, static_cast<int>(std::ceil(std::log2(hi))));
    int step = 1;
    for (const int s : {1, 2, 4, 5, 10}) {
      step = s;
      if ((e_hi - e_lo) / s <= 8) break;
    }
    const int first = static_cast<int>(std::floor(static_cast<double>(e_lo) / step)) * step;
    const int last = static_cast<int>(std::ceil(static_cast<double>(e_hi) / step)) * step;
    d.lo = std::ldexp(1.0, first);
    d.hi = std::ldexp(1.0, last);
    for (int e = first; e <= last; e += step)
      d.ticks.push_back(std::ldexp(1.0, e));
    return d;
  }
  const int e_lo = static_cast<int>(std::floor(std::log10(lo)));
  const int e_hi = std::max(e_lo + 1, static_cast<int>(std::ceil(std::log10(hi))));
  const int step = std::max(1, (e_hi - e_lo + 7) / 8);
  d.lo = std::pow(10.0, e_lo);
  d.hi = std::pow(10.0, e_hi);
  for (int e = e_lo; e <= e_hi; e += step) {
    d.ticks.push_back(std::pow(10.0, e));
    if (e_hi - e_lo <= 2 && e < e_hi) {
      d.ticks.push_back(2 * std::pow(10.0, e));
      d.ticks.push_back(5 * std::pow(10.0, e));
    }
  }
  std::sort(d.ticks.begin(), d.ticks.end());
  return d;
}

Domain make_domain(const std::vector<double>& values, const Axis& axis) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const double v : values) {
    if (!drawable(v, axis.scale)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) {  // nothing drawable: an empty frame
    lo = axis.scale == Scale::kLog ? 1 : 0;
    hi = axis.scale == Scale::kLog ? 10 : 1;
  }
  return axis.scale == Scale::kLog ? log_domain(lo, hi, axis.format)
                                   : linear_domain(lo, hi, axis.from_zero, axis.integers);
}

std::string tick_label(double v, TickFormat format) {
  return format == TickFormat::kBytes ? metrics::human_bytes(v) : short_number(v);
}

std::string truncated(const std::string& text) {
  return text.size() <= kMaxLabel ? text : text.substr(0, kMaxLabel - 1) + "~";
}

// The frame, grid and tick labels of both axes; x ticks are numbers or category names.
struct Frame {
  int plot_width = kWidth - kLeft - kRight;
  int bottom = kTop + kPlotHeight;  // y pixel of the x axis
  int height = 0;                   // whole SVG

  double px(const Domain& d, double v) const { return kLeft + d.fraction(v) * plot_width; }
  double py(const Domain& d, double v) const { return bottom - d.fraction(v) * kPlotHeight; }
};

void y_axis(std::ostringstream& s, const Frame& f, const Domain& d, const Axis& axis) {
  for (const double v : d.ticks) {
    const std::string y = number(f.py(d, v));
    s << "<line class=\"grid\" x1=\"" << kLeft << "\" x2=\"" << kLeft + f.plot_width << "\" y1=\""
      << y << "\" y2=\"" << y << "\"/><text class=\"tick\" x=\"" << kLeft - 6 << "\" y=\"" << y
      << "\" text-anchor=\"end\" dominant-baseline=\"middle\">"
      << escape_xml(tick_label(v, axis.format)) << "</text>";
  }
  s << "<text class=\"axis-title\" transform=\"translate(16," << kTop + kPlotHeight / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << escape_xml(axis.title) << "</text>";
}

void frame_box(std::ostringstream& s, const Frame& f) {
  s << "<rect class=\"frame\" x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << f.plot_width
    << "\" height=\"" << kPlotHeight << "\" fill=\"none\"/>";
}

void legend(std::ostringstream& s, int top, const std::vector<std::string>& names,
            const std::vector<bool>& dashed) {
  const int per_row = std::max(1, (kWidth - kLeft) / kLegendColumn);
  for (size_t i = 0; i < names.size(); ++i) {
    const int x = kLeft + static_cast<int>(i % per_row) * kLegendColumn;
    const int y = top + static_cast<int>(i / per_row) * kLegendLine;
    s << "<g class=\"legend-entry\"><line x1=\"" << x << "\" x2=\"" << x + 18 << "\" y1=\"" << y
      << "\" y2=\"" << y << "\" stroke=\"" << colour(i) << "\" stroke-width=\"3\""
      << (dashed[i] ? " stroke-dasharray=\"5 3\"" : "") << "/><text x=\"" << x + 24 << "\" y=\""
      << y << "\" dominant-baseline=\"middle\"><title>" << escape_xml(names[i]) << "</title>"
      << escape_xml(truncated(names[i])) << "</text></g>";
  }
}

int legend_height(size_t entries) {
  const int per_row = std::max(1, (kWidth - kLeft) / kLegendColumn);
  return static_cast<int>((entries + per_row - 1) / per_row) * kLegendLine;
}

// `pad_left`: room left of the usual frame (slanted category labels reaching past it).
std::string open_svg(int height, int pad_left = 0) {
  const std::string width = std::to_string(kWidth + pad_left);
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" + width +
         "\" height=\"" + std::to_string(height) + "\" viewBox=\"" + std::to_string(-pad_left) +
         " 0 " + width + " " + std::to_string(height) + "\">";
}

void no_data_note(std::ostringstream& s, const Frame& f, int points) {
  if (points > 0) return;
  s << "<text class=\"no-data\" x=\"" << kLeft + f.plot_width / 2 << "\" y=\""
    << kTop + kPlotHeight / 2 << "\" text-anchor=\"middle\">no drawable data</text>";
}

}  // namespace

std::string short_number(double v) {
  if (v == 0) return "0";
  char buf[32];
  const double a = std::abs(v);
  std::snprintf(buf, sizeof buf, a >= 1e6 || a < 1e-3 ? "%.2g" : "%.3g", v);
  return buf;
}

std::string escape_xml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

Rendered render(const LineChart& chart) {
  std::vector<double> xs, ys;
  for (const auto& series : chart.series) {
    for (const auto& p : series.points) {
      xs.push_back(p.x);
      ys.push_back(p.y);
    }
  }
  const Domain dx = make_domain(xs, chart.x);
  const Domain dy = make_domain(ys, chart.y);
  Frame f;
  const int legend_top = f.bottom + 52;
  f.height = legend_top + legend_height(chart.series.size()) + 4;
  std::ostringstream s;
  s << open_svg(f.height);
  y_axis(s, f, dy, chart.y);
  for (const double v : dx.ticks) {
    const std::string x = number(f.px(dx, v));
    s << "<line class=\"grid\" x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << kTop << "\" y2=\""
      << f.bottom << "\"/><text class=\"tick\" x=\"" << x << "\" y=\"" << f.bottom + 16
      << "\" text-anchor=\"middle\">" << escape_xml(tick_label(v, chart.x.format)) << "</text>";
  }
  s << "<text class=\"axis-title\" x=\"" << kLeft + f.plot_width / 2 << "\" y=\"" << f.bottom + 38
    << "\" text-anchor=\"middle\">" << escape_xml(chart.x.title) << "</text>";
  frame_box(s, f);
  Rendered out;
  std::vector<std::string> names;
  std::vector<bool> dashed;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const Series& series = chart.series[i];
    names.push_back(series.name);
    dashed.push_back(series.dashed);
    std::vector<Point> shown;
    for (const auto& p : series.points) {
      if (drawable(p.x, chart.x.scale) && drawable(p.y, chart.y.scale)) {
        shown.push_back(p);
      } else {
        ++out.dropped_points;
      }
    }
    std::sort(shown.begin(), shown.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
    s << "<g class=\"series\" data-series=\"" << escape_xml(series.name) << "\">";
    if (chart.connect && shown.size() > 1) {
      s << "<polyline fill=\"none\" stroke=\"" << colour(i) << "\" stroke-width=\"2\""
        << (series.dashed ? " stroke-dasharray=\"5 3\"" : "") << " points=\"";
      for (const auto& p : shown)
        s << number(f.px(dx, p.x)) << ',' << number(f.py(dy, p.y)) << ' ';
      s << "\"/>";
    }
    for (const auto& p : shown) {
      s << "<circle class=\"pt\" cx=\"" << number(f.px(dx, p.x)) << "\" cy=\""
        << number(f.py(dy, p.y)) << "\" r=\"3.5\" fill=\"" << colour(i) << "\"><title>"
        << escape_xml(series.name) << ": " << escape_xml(tick_label(p.x, chart.x.format)) << ", "
        << short_number(p.y) << "</title></circle>";
      ++out.points;
    }
    s << "</g>";
  }
  no_data_note(s, f, out.points);
  legend(s, legend_top, names, dashed);
  s << "</svg>";
  out.svg = s.str();
  return out;
}

Rendered render(const BarChart& chart) {
  const size_t n = chart.categories.size();
  std::vector<double> values;  // 0 comes from from_zero; a log axis could not show it
  for (size_t c = 0; c < n; ++c) {
    double sum = 0;
    for (const auto& series : chart.series) {
      const double v = c < series.values.size() ? series.values[c] : NAN;
      if (!drawable(v, chart.y.scale)) continue;
      values.push_back(v);
      sum += v;
    }
    if (chart.stacked) values.push_back(sum);
  }
  Axis y = chart.y;
  y.from_zero = y.scale == Scale::kLinear;
  const Domain dy = make_domain(values, y);
  size_t longest = 0;
  for (const auto& c : chart.categories)
    longest = std::max(longest, std::min<size_t>(c.size(), kMaxLabel));
  const bool rotate = n > 6 || longest > 12;
  Frame f;
  const int label_room = rotate ? 12 + static_cast<int>(longest) * 5 : 22;
  const int legend_top = f.bottom + label_room + 26;
  f.height = legend_top + legend_height(chart.series.size()) + 4;
  const double slot = static_cast<double>(f.plot_width) / std::max<size_t>(n, 1);
  // A label slanted at 35 degrees reaches about 5 px per character left of its bar.
  const int reach = rotate ? static_cast<int>(longest) * 5 - kLeft - static_cast<int>(slot / 2) : 0;
  std::ostringstream s;
  s << open_svg(f.height, std::max(0, reach));
  y_axis(s, f, dy, y);
  frame_box(s, f);
  const size_t per_slot = chart.stacked ? 1 : std::max<size_t>(chart.series.size(), 1);
  const double bar_width = slot * 0.8 / static_cast<double>(per_slot);
  Rendered out;
  for (size_t c = 0; c < n; ++c) {
    const double x0 = kLeft + slot * static_cast<double>(c) + slot * 0.1;
    double base = dy.lo;
    for (size_t i = 0; i < chart.series.size(); ++i) {
      const auto& series = chart.series[i];
      const double v = c < series.values.size() ? series.values[c] : NAN;
      if (!drawable(v, chart.y.scale)) {
        if (!std::isnan(v)) ++out.dropped_points;
        continue;
      }
      const double from = chart.stacked ? base : dy.lo;
      const double to = chart.stacked ? base + v : v;
      base = to;
      const double x = chart.stacked ? x0 : x0 + bar_width * static_cast<double>(i);
      const double top = f.py(dy, to);
      s << "<rect class=\"bar\" x=\"" << number(x) << "\" y=\"" << number(top) << "\" width=\""
        << number(std::max(bar_width - 1, 1.0)) << "\" height=\""
        << number(std::max(f.py(dy, from) - top, 0.5)) << "\" fill=\"" << colour(i) << "\"><title>"
        << escape_xml(chart.categories[c]) << " / " << escape_xml(series.name) << ": "
        << short_number(v) << "</title></rect>";
      ++out.points;
    }
    const double cx = kLeft + slot * (static_cast<double>(c) + 0.5);
    s << "<text class=\"tick\" x=\"" << number(cx) << "\" y=\"" << f.bottom + 14 << "\""
      << (rotate ? " text-anchor=\"end\" transform=\"rotate(-35 " + number(cx) + " " +
                       std::to_string(f.bottom + 14) + ")\""
                 : " text-anchor=\"middle\"")
      << "><title>" << escape_xml(chart.categories[c]) << "</title>"
      << escape_xml(truncated(chart.categories[c])) << "</text>";
  }
  s << "<text class=\"axis-title\" x=\"" << kLeft + f.plot_width / 2 << "\" y=\""
    << f.bottom + label_room + 14 << "\" text-anchor=\"middle\">" << escape_xml(chart.x_title)
    << "</text>";
  no_data_note(s, f, out.points);
  std::vector<std::string> names;
  for (const auto& series : chart.series)
    names.push_back(series.name);
  legend(s, legend_top, names, std::vector<bool>(names.size(), false));
  s << "</svg>";
  out.svg = s.str();
  return out;
}

}  // namespace dtrain::report::chart
