#include "dtrain/metrics/progress.h"

#include <unistd.h>

#include <iostream>

namespace dtrain::metrics {

ProgressLine::ProgressLine(bool enabled)
    : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0), last_(Clock::now()) {}

void ProgressLine::update(const std::function<std::string()>& text) {
  if (!enabled_ || since(last_) <= (tty_ ? 1.0 : 15.0)) return;
  last_ = Clock::now();
  std::cerr << (tty_ ? "\r" : "") << text() << "   " << (tty_ ? "" : "\n") << std::flush;
}

void ProgressLine::finish(const std::string& text) {
  if (!enabled_) return;
  std::cerr << (tty_ ? "\r" : "") << text << "          " << std::endl;
  last_ = Clock::now();
}

}  // namespace dtrain::metrics
