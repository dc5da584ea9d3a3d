// render(Timeline): lanes of spans against time, each kind of span in its colour.
#include <map>

#include "dtrain/report/chart.h"
#include "dtrain/report/svg_frame.h"

namespace dtrain::report::chart {

Rendered render(const Timeline& chart) {
  using namespace svg;  // NOLINT: the drawing kit of the charts
  std::vector<double> xs;
  for (const auto& span : chart.spans) {
    xs.push_back(span.begin);
    xs.push_back(span.end);
  }
  Axis x = chart.x;
  x.scale = Scale::kLinear;
  const Domain dx = make_domain(xs, x);
  const int lanes = std::max<int>(1, static_cast<int>(chart.lanes.size()));
  const double lane_height = static_cast<double>(kPlotHeight) / lanes;
  std::vector<std::string> kinds;
  std::map<std::string, size_t> kind_index;
  for (const auto& span : chart.spans) {
    if (kind_index.emplace(span.kind, kinds.size()).second) kinds.push_back(span.kind);
  }
  Frame f;
  const int legend_top = f.bottom + 52;
  f.height = legend_top + legend_height(kinds.size()) + 4;
  std::ostringstream s;
  s << open_svg(f.height);
  x_axis(s, f, dx, x);
  for (int lane = 0; lane < lanes; ++lane) {
    const double middle = kTop + lane_height * (lane + 0.5);
    const std::string name = lane < static_cast<int>(chart.lanes.size())
                                 ? chart.lanes[static_cast<size_t>(lane)]
                                 : std::string();
    s << "<text class=\"tick\" x=\"" << kLeft - 6 << "\" y=\"" << number(middle)
      << "\" text-anchor=\"end\" dominant-baseline=\"middle\">" << escape_xml(truncated(name))
      << "</text>";
  }
  s << "<text class=\"axis-title\" transform=\"translate(16," << kTop + kPlotHeight / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << escape_xml(chart.lane_title) << "</text>";
  frame_box(s, f);
  Rendered out;
  for (const auto& span : chart.spans) {
    if (!drawable(span.begin, Scale::kLinear) || !drawable(span.end, Scale::kLinear) ||
        span.lane < 0 || span.lane >= lanes || span.end < span.begin) {
      ++out.dropped_points;
      continue;
    }
    const double left = f.px(dx, span.begin);
    const double top = kTop + lane_height * (span.lane + 0.15);
    s << "<rect class=\"bar\" x=\"" << number(left) << "\" y=\"" << number(top) << "\" width=\""
      << number(std::max(f.px(dx, span.end) - left, 0.6)) << "\" height=\""
      << number(lane_height * 0.7) << "\" fill=\"" << colour(kind_index[span.kind]) << "\"><title>"
      << escape_xml(span.kind + (span.label.empty() ? "" : ", " + span.label)) << ": "
      << short_number(span.begin) << " .. " << short_number(span.end) << "</title></rect>";
    ++out.points;
  }
  no_data_note(s, f, out.points);
  legend(s, legend_top, kinds, std::vector<bool>(kinds.size(), false));
  s << "</svg>";
  out.svg = s.str();
  return out;
}

}  // namespace dtrain::report::chart
