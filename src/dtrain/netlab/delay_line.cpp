#include "dtrain/netlab/delay_line.h"

#include <cmath>
#include <stdexcept>

namespace dtrain::netlab {

DelayLine::DelayLine(double delay_ms, double loss_percent, uint64_t seed)
    : delay_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double, std::milli>(delay_ms))),
      loss_(loss_percent / 100.0),
      random_(seed) {
  if (!(delay_ms >= 0) || !std::isfinite(delay_ms)) {
    throw std::invalid_argument("delay line: the delay must be a finite number >= 0");
  }
  if (!(loss_percent >= 0 && loss_percent < 100)) {
    throw std::invalid_argument("delay line: the loss must be in [0, 100) percent");
  }
}

bool DelayLine::arrive(uint32_t id, Clock::time_point now) {
  // Draw for every packet, lost or not, so the pattern depends on the packet count only.
  const bool lost = uniform_(random_) < loss_;
  if (lost) return false;
  held_.push_back({id, now + delay_});
  return true;
}

std::vector<uint32_t> DelayLine::release(Clock::time_point now) {
  std::vector<uint32_t> out;
  while (!held_.empty() && held_.front().due <= now) {
    out.push_back(held_.front().id);
    held_.pop_front();
  }
  return out;
}

std::optional<DelayLine::Clock::time_point> DelayLine::next_due() const {
  if (held_.empty()) return std::nullopt;
  return held_.front().due;
}

}  // namespace dtrain::netlab
