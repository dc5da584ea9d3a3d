#include "dtrain/report/svg_frame.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "dtrain/metrics/rows.h"

namespace dtrain::report::chart::svg {

std::string colour(size_t i) {
  static const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6"};
  return kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

bool drawable(double v, Scale scale) {
  return std::isfinite(v) && (scale == Scale::kLinear || v > 0);
}

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
std::string open_svg(int height, int pad_left) {
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

void x_axis(std::ostringstream& s, const Frame& f, const Domain& d, const Axis& axis) {
  for (const double v : d.ticks) {
    const std::string x = number(f.px(d, v));
    s << "<line class=\"grid\" x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << kTop << "\" y2=\""
      << f.bottom << "\"/><text class=\"tick\" x=\"" << x << "\" y=\"" << f.bottom + 16
      << "\" text-anchor=\"middle\">" << escape_xml(tick_label(v, axis.format)) << "</text>";
  }
  s << "<text class=\"axis-title\" x=\"" << kLeft + f.plot_width / 2 << "\" y=\"" << f.bottom + 38
    << "\" text-anchor=\"middle\">" << escape_xml(axis.title) << "</text>";
}

}  // namespace dtrain::report::chart::svg
