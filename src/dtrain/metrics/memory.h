// Process memory as the OS sees it.
#pragma once

#include <cstdint>

namespace dtrain::metrics {

// Peak resident set size of this process, in bytes (getrusage ru_maxrss).
int64_t peak_rss_bytes();

// Current resident set size in bytes (/proc/self/statm); 0 if unavailable.
int64_t current_rss_bytes();

}  // namespace dtrain::metrics
