// Delay and loss where the kernel has no netem: a small process of dtrain's own (the
// "impairer") takes every packet the lab's switch forwards (an iptables NFQUEUE rule in the
// switch namespace, plan.h) and lets it go after the delay, or drops it with the loss
// probability (delay_line.h). The kernel keeps the packet meanwhile; the process only sees
// its id.
//
// The impairer runs detached from whoever started it (it outlives `dtrain netlab up`), under
// the name kImpairerName. It ends on SIGTERM, or by itself once its namespace is removed (so
// a lab removed by hand leaves no process behind).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::netlab {

constexpr const char* kImpairerName = "dtrain-impair";
constexpr uint16_t kImpairQueue = 0;

struct ImpairerSpec {
  std::string namespace_name;  // the `ip netns` name the queue lives in
  double delay_ms = 0;
  double loss_percent = 0;
  uint64_t seed = 0;
  std::string log_path;  // where the process writes its errors and, at exit, its counts
};

// Starts the impairer and returns its pid once every queue is bound; throws
// std::runtime_error with the impairer's own reason when it cannot start.
pid_t start_impairer(const ImpairerSpec& spec);
// Ends it (SIGTERM, then SIGKILL after 3 s) and returns once it is gone. Does nothing when
// no process of that pid carries kImpairerName (already gone, or the pid was reused).
void stop_impairer(pid_t pid);

}  // namespace dtrain::netlab
