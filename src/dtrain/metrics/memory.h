// The process as the OS sees it: its memory, its age.
#pragma once

#include <cstdint>

namespace dtrain::metrics {

// Peak resident set size of this process, in bytes (getrusage ru_maxrss).
int64_t peak_rss_bytes();

// Current resident set size in bytes (/proc/self/statm); 0 if unavailable.
int64_t current_rss_bytes();

// Seconds since this process started (/proc: its start in clock ticks since boot, against
// the uptime; 10 ms resolution), loading its libraries included; -1 if unavailable.
double process_age_s();

}  // namespace dtrain::metrics
