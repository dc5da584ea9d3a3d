#include "dtrain/metrics/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace dtrain::metrics {

int64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

int64_t current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

double process_age_s() {
  std::ifstream stat_file("/proc/self/stat");
  std::ifstream uptime_file("/proc/uptime");
  std::string stat;
  double uptime = 0;
  if (!std::getline(stat_file, stat) || !(uptime_file >> uptime)) return -1;
  // The command may hold spaces and parentheses: the fields go on after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int f = 3; f < 22; ++f)  // state (field 3) .. field 21
    if (!(fields >> field)) return -1;
  long long start_ticks = 0;
  if (!(fields >> start_ticks)) return -1;  // field 22: starttime
  return uptime - static_cast<double>(start_ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace dtrain::metrics
