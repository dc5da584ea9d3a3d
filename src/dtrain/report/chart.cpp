#include "dtrain/report/chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "dtrain/report/svg_frame.h"

namespace dtrain::report::chart {

using namespace svg;  // NOLINT: the drawing kit of this file's charts
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
  x_axis(s, f, dx, chart.x);
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
