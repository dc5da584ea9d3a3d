// What the userspace impairer (impairer.h) does to each packet, without the sockets: every
// packet is either dropped at once, with probability loss, or held for exactly `delay` and
// then let through, in arrival order (a constant delay keeps that order). Pure, so tests can
// drive it with made-up clocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <vector>

namespace dtrain::netlab {

class DelayLine {
 public:
  using Clock = std::chrono::steady_clock;

  // delay_ms >= 0, loss_percent in [0, 100); `seed` fixes the loss pattern.
  DelayLine(double delay_ms, double loss_percent, uint64_t seed);

  // Packet `id` (the kernel's, for its verdict) arrived at `now`. Returns false when it is to be
  // dropped (nothing is held); true when it is held until now + delay.
  bool arrive(uint32_t id, Clock::time_point now);
  // The held packets whose time has come by `now`, oldest first; removed from the line.
  std::vector<uint32_t> release(Clock::time_point now);
  // When the oldest held packet is due; empty when none is held.
  std::optional<Clock::time_point> next_due() const;
  size_t held() const { return held_.size(); }

 private:
  struct Held {
    uint32_t id;
    Clock::time_point due;
  };
  Clock::duration delay_;
  double loss_;  // probability
  std::mt19937_64 random_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  std::deque<Held> held_;
};

}  // namespace dtrain::netlab
