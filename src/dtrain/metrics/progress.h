// The live progress line of long work, on stderr: rewritten in place about once a second on
// a terminal, a plain line every 15 seconds in logs and pipes (so logs stay readable).
#pragma once

#include <functional>
#include <string>

#include "dtrain/metrics/timer.h"

namespace dtrain::metrics {

class ProgressLine {
 public:
  explicit ProgressLine(bool enabled);
  // Prints text() when a line is due; text is not built otherwise.
  void update(const std::function<std::string()>& text);
  // Prints a closing line for the item now (replacing the live line on a terminal).
  void finish(const std::string& text);

 private:
  bool enabled_;
  bool tty_;
  Clock::time_point last_;
};

}  // namespace dtrain::metrics
