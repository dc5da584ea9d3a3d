// The HTML report's benchmark sections: collectives, p2p, codecs, scaling, throughput.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "dtrain/metrics/keys.h"
#include "dtrain/report/sections.h"

namespace dtrain::report::sections {

namespace key = metrics::key;
namespace {

using chart::Axis;
using chart::Scale;
using chart::TickFormat;
using NameOf = std::function<std::string(const RowRef&)>;

// One series per name, in order of first appearance, with (x_key, y_key) points.
std::vector<chart::Series> series_by(const std::vector<RowRef>& refs, const NameOf& name_of,
                                     const char* x_key, const char* y_key) {
  std::vector<chart::Series> out;
  std::map<std::string, size_t> index;
  for (const auto& r : refs) {
    const std::string name = name_of(r);
    auto [it, added] = index.emplace(name, out.size());
    if (added) out.push_back({name, {}, false});
    out[it->second].points.push_back({number_at(*r.row, x_key), number_at(*r.row, y_key)});
  }
  return out;
}

Figure line_figure(std::string title, Axis x, Axis y, std::vector<chart::Series> series,
                   bool connect = true) {
  chart::LineChart c{std::move(x), std::move(y), std::move(series), connect};
  return {std::move(title), chart::render(c)};
}

const Axis kSizeAxis{"message size (bytes)", Scale::kLog, TickFormat::kBytes};

std::string with_suffix(const std::string& base, const std::string& label) {
  return label.empty() ? base : base + " " + label;
}

// Rows grouped by the value of a string key, in order of first appearance.
std::vector<std::pair<std::string, std::vector<RowRef>>> group_by(const std::vector<RowRef>& refs,
                                                                  const char* k) {
  std::vector<std::pair<std::string, std::vector<RowRef>>> out;
  for (const auto& r : refs) {
    const std::string v = r.row->value(k, std::string("?"));
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == v; });
    if (it == out.end()) it = out.insert(out.end(), {v, {}});
    it->second.push_back(r);
  }
  return out;
}

}  // namespace

std::vector<Section> collective_sections(const std::vector<RowRef>& refs, bool with_source) {
  std::vector<Section> out;
  for (const auto& [op, rows] : group_by(refs, key::kOp)) {
    const NameOf name = [with_source](const RowRef& r) {
      return with_suffix(
          r.row->value("algo", std::string("?")) + " n=" + std::to_string(r.row->value("world", 0)),
          label(r, Kind::kCollective, with_source));
    };
    Section s{"Collective: " + op, caption(rows), {}, ""};
    s.figures.push_back(line_figure("time per " + op + " (lower is better)", kSizeAxis,
                                    {"time (us)", Scale::kLog},
                                    series_by(rows, name, key::kBytes, key::kTimeUs)));
    s.figures.push_back(line_figure("bus bandwidth (nccl-tests definition; higher is better)",
                                    kSizeAxis, {"busbw (GB/s)", Scale::kLog},
                                    series_by(rows, name, key::kBytes, key::kBusbwGbps)));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Section> p2p_sections(const std::vector<RowRef>& refs, bool with_source) {
  const NameOf name = [with_source](const RowRef& r) {
    return with_suffix("n=" + std::to_string(r.row->value("world", 0)),
                       label(r, Kind::kP2p, with_source));
  };
  Section s{"Point to point", caption(refs), {}, ""};
  s.figures.push_back(line_figure("one-way latency", kSizeAxis, {"latency (us)", Scale::kLog},
                                  series_by(refs, name, key::kBytes, key::kLatencyUs)));
  s.figures.push_back(line_figure("bandwidth", kSizeAxis, {"bandwidth (GB/s)", Scale::kLog},
                                  series_by(refs, name, key::kBytes, key::kBandwidthGbps)));
  return {s};
}

std::vector<Section> codec_sections(const std::vector<RowRef>& refs, bool with_source) {
  const NameOf by_dist = [with_source](const RowRef& r) {
    return with_suffix(r.row->value("dist", std::string("?")), label(r, Kind::kCodec, with_source));
  };
  auto quality = series_by(refs, by_dist, key::kRatio, key::kMseOverVar);
  chart::Series bound{"Lloyd-Max bound (gaussian)", {}, true};
  for (const auto& r : refs) {
    const double b = number_at(*r.row, key::kLloydMaxBound);
    if (!std::isnan(b)) bound.points.push_back({number_at(*r.row, key::kRatio), b});
  }
  if (!bound.points.empty()) quality.push_back(bound);
  Section s{"Codecs", caption(refs), {}, ""};
  s.figures.push_back(line_figure("compression against error (each point a codec)",
                                  {"compressed size / original size", Scale::kLinear},
                                  {"MSE / variance", Scale::kLog}, quality, false));
  chart::BarChart speed{"codec / input", {"throughput (GB/s of float32 input)"}, {}, {}, false};
  speed.series = {{"encode", {}}, {"decode", {}}};
  for (const auto& r : refs) {
    speed.categories.push_back(r.row->value("codec", std::string("?")) + " / " + by_dist(r));
    speed.series[0].values.push_back(number_at(*r.row, key::kEncodeGbps));
    speed.series[1].values.push_back(number_at(*r.row, key::kDecodeGbps));
  }
  s.figures.push_back({"encode and decode throughput", chart::render(speed)});
  return {s};
}

std::vector<Section> scaling_sections(const std::vector<RowRef>& refs, bool with_source) {
  const NameOf name = [with_source](const RowRef& r) {
    return label(r, Kind::kScaling, with_source);
  };
  const Axis ranks{"ranks (N)", Scale::kLinear, TickFormat::kNumber, true, true};
  std::vector<chart::Series> speedup;
  const auto add = [&](const char* k, const std::string& what, const char* batch_key) {
    const NameOf by_batch = [&](const RowRef& r) {
      return with_suffix(what + std::to_string(r.row->value(batch_key, 0)), name(r));
    };
    for (auto& s : series_by(refs, by_batch, key::kRanks, k))
      speedup.push_back(std::move(s));
  };
  add(key::kSpeedupWeak, "weak scaling (fixed batch per rank) b=", key::kBatchPerRank);
  add(key::kSpeedupStrong, "strong scaling (fixed global batch) G=", key::kGlobalBatch);
  chart::Series ideal{"ideal (N)", {}, true};
  for (const auto& r : refs) {
    const double n = number_at(*r.row, key::kRanks);
    ideal.points.push_back({n, n});
  }
  speedup.push_back(ideal);
  Section s{"Scaling", caption(refs), {}, ""};
  s.figures.push_back(line_figure("speed-up against ranks", ranks,
                                  {"speed-up (x)", Scale::kLinear, TickFormat::kNumber, true},
                                  speedup));
  chart::BarChart split{"ranks", {"time per epoch (s)"}, {}, {}, true};
  split.series = {{"compute", {}}, {"exposed communication", {}}};
  for (const auto& r : refs) {
    split.categories.push_back(
        with_suffix("N=" + std::to_string(r.row->value(key::kRanks, 0)) +
                        " b=" + std::to_string(r.row->value("batch_per_rank", 0)),
                    name(r)));
    split.series[0].values.push_back(number_at(*r.row, key::kComputeS));
    split.series[1].values.push_back(number_at(*r.row, key::kCommExposedS));
  }
  s.figures.push_back({"compute against communication per epoch", chart::render(split)});
  return {s};
}

std::vector<Section> throughput_sections(const std::vector<RowRef>& refs, bool with_source) {
  chart::BarChart bars;
  bars.x_title = "run";
  bars.y.title = "samples/s";
  bars.series = {{"samples/s", {}}};
  for (const auto& r : refs) {
    bars.categories.push_back(label(r, Kind::kThroughput, with_source));
    bars.series[0].values.push_back(number_at(*r.row, key::kSamplesPerS));
  }
  Section s{"Throughput", caption(refs), {}, ""};
  s.figures.push_back({"samples per second (higher is better)", chart::render(bars)});
  return {s};
}

}  // namespace dtrain::report::sections
