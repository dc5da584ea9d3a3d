#include "dtrain/parallel/diloco_auto.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <sstream>
#include <stdexcept>

#include "dtrain/comm/group.h"
#include "dtrain/comm/link_probe.h"
#include "dtrain/parallel/auto_codec.h"
#include "dtrain/parallel/coded_feedback.h"

namespace dtrain::parallel {

OuterChoice choose_outer_codec(const std::vector<compress::CodecSpec>& candidates,
                               const OuterSetting& s, size_t first) {
  if (first >= candidates.size())
    throw std::invalid_argument("--compress-outer auto: no candidates");
  if (!(s.rate_bytes_per_s > 0) || s.replicas < 2 || s.values < 1)
    throw std::invalid_argument("--compress-outer auto: no link to choose for");
  const int p = s.replicas;
  const double messages = 2.0 * (p - 1);
  const double delays = exchange_delays(p);
  OuterChoice out;
  out.budget_s = kExposedShare * static_cast<double>(s.sync_every) /
                 static_cast<double>(s.fragments) * s.step_s;
  for (const auto& c : candidates) {
    double bytes;
    if (c == compress::CodecSpec{}) {
      bytes = messages / p * 4.0 * static_cast<double>(s.values);
    } else {
      const bool whole = codes_whole_vectors(p);
      const int64_t piece = whole ? s.values : (s.values + p - 1) / p;
      bytes = (whole ? 1.0 : messages) *
              static_cast<double>(compress::packet_size(*compress::make_codec(c), {piece}));
    }
    const double exchange = bytes / s.rate_bytes_per_s + delays * s.latency_s;
    out.exchange_s.push_back(exchange);
    double exposed = std::max(0.0, exchange - static_cast<double>(s.sync_delay) * s.step_s);
    if ((s.fragments > 1 || s.sync_delay > 0) && s.epoch_steps > 0)
      exposed += exchange * static_cast<double>(s.sync_every) / static_cast<double>(s.epoch_steps);
    out.exposed_s.push_back(exposed);
  }
  for (size_t i = first; i < candidates.size(); ++i) {
    if (out.exposed_s[i] <= out.budget_s) {
      out.chosen = i;
      return out;
    }
  }
  // An earlier (less lossy) candidate also wins where the least exposed one would save it
  // less than the budget: where latency, which no codec shortens, is what exceeds the
  // budget (a loaded machine's loopback read 3.9 ms one way: every candidate over a 7.5 ms
  // budget, fp16 0.6 ms ahead of the exact exchange), coding loses accuracy for nothing.
  const double least = *std::min_element(out.exposed_s.begin() + static_cast<std::ptrdiff_t>(first),
                                         out.exposed_s.end());
  for (size_t i = first; i < candidates.size(); ++i) {
    if (out.exposed_s[i] <= least * (1 + kPreferenceMargin) ||
        out.exposed_s[i] - least <= out.budget_s) {
      out.chosen = i;
      break;
    }
  }
  return out;
}

double exchange_delays(int replicas) {
  return replicas == 2 ? 1.0 : 2.0;
}

double rate_from_exchanges(const OuterSetting& s, double exchange_s, double bytes) {
  const double on_the_wire = exchange_s - exchange_delays(s.replicas) * s.latency_s;
  if (!(on_the_wire > 0) || !(bytes > 0)) return s.rate_bytes_per_s;
  return std::min(s.rate_bytes_per_s, bytes / on_the_wire);
}

std::optional<int64_t> delay_to_hide(double exchange_s, int64_t exchanges, double step_s,
                                     int64_t delay, int64_t sync_every) {
  if (delay < 1 || delay >= sync_every || exchanges < 1 || !(step_s > 0) || !(exchange_s > 0))
    return std::nullopt;
  const double mean = exchange_s / static_cast<double>(exchanges);
  if (mean <= 1.1 * static_cast<double>(delay) * step_s) return std::nullopt;
  const auto covering = static_cast<int64_t>(std::ceil(1.1 * mean / step_s));
  return std::min(sync_every, std::max(delay + 1, covering));
}

void InnerStepTimes::step_ended() {
  if (since_) spans_.push_back(metrics::since(*since_));
  since_.reset();
}

void InnerStepTimes::step_started() {
  since_ = metrics::Clock::now();
}

void InnerStepTimes::pause() {
  since_.reset();
}

void InnerStepTimes::clear() {
  spans_.clear();
}

double InnerStepTimes::median_s() const {
  if (spans_.empty()) return 0;
  std::vector<double> sorted = spans_;
  const auto middle = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), middle, sorted.end());
  return *middle;
}

std::future<std::pair<double, double>> start_outer_probe(comm::Group& group, int ping_tag,
                                                         int data_tag) {
  try {
    comm::refresh_short_round_trips_from_rank0(group, ping_tag);
  } catch (...) {
    std::promise<std::pair<double, double>> failed;
    failed.set_exception(std::current_exception());
    return failed.get_future();
  }
  return std::async(std::launch::async, [&group, ping_tag, data_tag] {
    const comm::SlowestLink slowest =
        comm::probe_slowest_from_rank0(group, ping_tag, data_tag, comm::RoundTrip::kFromGroup);
    // Rank 0's numbers to every rank.
    at::Tensor numbers =
        at::tensor({slowest.rate_bytes_per_s, slowest.longest_latency_s}, at::kDouble);
    group.native_broadcast(numbers, 0);
    return std::make_pair(numbers[0].item<double>(), numbers[1].item<double>());
  });
}

std::string describe(const OuterChoice& choice, const std::vector<compress::CodecSpec>& candidates,
                     const OuterSetting& s, size_t first) {
  std::ostringstream line;
  char buffer[96];
  std::snprintf(buffer, sizeof buffer, "%.1f Mbit/s, %.1f ms one way, %.1f ms a step",
                s.rate_bytes_per_s * 8 / 1e6, s.latency_s * 1e3, s.step_s * 1e3);
  line << "--compress-outer auto chose " << compress::to_string(candidates[choice.chosen]) << " ("
       << buffer << "; waits per exchange:";
  for (size_t i = first; i < candidates.size(); ++i) {
    std::snprintf(buffer, sizeof buffer, " %s %.0f ms", compress::to_string(candidates[i]).c_str(),
                  choice.exposed_s[i] * 1e3);
    line << buffer << (i + 1 < candidates.size() ? "," : "");
  }
  std::snprintf(buffer, sizeof buffer, "; budget %.0f ms)", choice.budget_s * 1e3);
  line << buffer;
  return line.str();
}

}  // namespace dtrain::parallel
